"""Results of slow, deterministic set-up steps (a wheel build) kept on disk under
``.pytest-cache-gfd/`` (gitignored), keyed by a hash of everything the result depends on:
the inputs' bytes and the tool that made it.  (scripts/manifests.py keeps its kustomize
renders there too, by the same rules.)

A changed input is a new key, so a stale entry is never read; a clean clone has no entries
and computes everything (the same code path, only slower).  Entries are written to a
temporary name and renamed into place, so xdist workers filling the same key race safely.
Delete the directory (or set ``GFD_TEST_NO_DISK_CACHE=1``) to compute everything afresh.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".pytest-cache-gfd"


def enabled() -> bool:
    return os.environ.get("GFD_TEST_NO_DISK_CACHE", "") in ("", "0")


def tree_digest(root: Path, *, skip: Iterable[str] = ()) -> str:
    """A hash of every file under ``root``: relative paths and contents."""
    skipped = set(skip)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if not path.is_file() or skipped.intersection(relative.parts):
            continue
        digest.update(str(relative).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def store(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
