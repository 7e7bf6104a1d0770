"""gfd's container image, built by scripts/image.sh (`make image`) and run without a container
engine: `buildah run --isolation chroot` (podman run is refused on these machines: setrlimit).

With a Docker engine instead, scripts/image.sh builds with docker; running it here still
needs buildah (the tests skip without it, and fail under `make e2e`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("GFD_E2E", "") == "1"  # under `make e2e`: missing is a failure


def version() -> str:
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


IMAGE = f"localhost/gfd:{version()}"


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def require_buildah() -> None:
    missing = [t for t in ("buildah", "podman", "debootstrap") if shutil.which(t) is None]
    if missing:
        unavailable(
            f"not installed: {', '.join(missing)} (apt-get install buildah podman debootstrap)"
        )
    if os.geteuid() != 0:
        unavailable("building and running the image with buildah (chroot isolation) needs root")


def build() -> str:
    """Build the image (scripts/image.sh; its Python bases are made once and kept)."""
    require_buildah()
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "image.sh"), IMAGE], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return IMAGE


@contextmanager
def container(image: str) -> Iterator[str]:
    name = subprocess.run(
        ["buildah", "from", "--pull=never", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        yield name
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True, check=False)


def run(
    name: str,
    command: Sequence[str],
    *,
    user: str | None = None,
    volumes: Sequence[str] = (),
    network_host: bool = False,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run COMMAND in the container as the image's user (or USER). buildah prints its own
    lines on failure, so the command's exit status and stderr are captured inside the
    container: the result's returncode and stderr are the command's own."""
    args = ["buildah", "run", "--isolation", "chroot"]
    if user:
        args += ["--user", user]
    if network_host:
        args += ["--network", "host"]
    for volume in volumes:
        args += ["-v", volume]
    script = '"$@" 2>/tmp/.stderr; status=$?; cat /tmp/.stderr >&2; exit $status'
    done = subprocess.run(
        [*args, name, "--", "sh", "-c", script, "sh", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    own_stderr = "\n".join(
        line
        for line in done.stderr.splitlines()
        if not line.startswith(
            ("subprocess exited with status", "Error: exit status", "error running")
        )
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, own_stderr)
