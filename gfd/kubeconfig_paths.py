"""Which files a kubeconfig value names, by client-go's loading rules
(k8s.io/client-go/tools/clientcmd/loader.go at commit
32ce75a7d6bc6960fd048d3d1e3b34185418d8c8), checked where the value's origin is known (the
flag or the ``KUBECONFIG`` variable), so the one line names it."""

from __future__ import annotations

import errno
import os

from gfd.echo import clip
from gfd.errors import UsageError


def kubeconfig_files(value: str, origin: str) -> list[str]:
    """The files of ``value`` (one path, or a ``:`` list) that are read, in order.

    loader.go:164-168: a list is split and each name kept once (``deduplicate``,
    loader.go:671-682); loader.go:228-233: a file of a list that does not exist is skipped;
    loader.go:235-237: one that exists but cannot be read (no permission, a looping link,
    a directory) is an error; loader.go:208-211: a single named file must exist."""
    names = list(dict.fromkeys(part for part in value.split(os.pathsep) if part))
    found: list[str] = []
    for name in names:
        path = os.path.expanduser(name)
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ENOENT and len(names) > 1:
                continue
            reason = "does not exist" if exc.errno == errno.ENOENT else _reason(exc)
            raise UsageError(f"{origin} {clip(name)!r}: {reason}") from None
        if not os.access(path, os.R_OK):
            raise UsageError(f"{origin} {clip(name)!r}: cannot be read (permission denied)")
        found.append(path)
    if not found:
        listed = ", ".join(repr(clip(name, 60)) for name in names[:4])
        raise UsageError(f"{origin}: none of the files it lists exists ({listed})")
    return found


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "cannot be read (a loop of symbolic links)"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"
