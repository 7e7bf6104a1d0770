"""Upstream gpu-feature-discovery v0.20.0 and gfd, run on NVIDIA's mock NVML, for tests
that compare the two (`../shared/nvidia-reference`, its README says what is there).

``reference()`` unpacks the binaries once per test process; where the folder is missing it
skips with one line naming it, and where it exists every test using it must run (an unpack
that fails is a failure, never a skip).  ``run_upstream`` and ``run_gfd_on_mock`` run one
program with the same mock profile, arguments and environment.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.process import GFD, ROOT, clean_env

REFERENCE = Path(ROOT).parent / "shared" / "nvidia-reference"
PROFILES = ("a100", "b200", "gb200", "gb300", "h100", "l40s", "t4")
TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"


@functools.cache
def _unpacked() -> Path:
    dest = Path(tempfile.mkdtemp(prefix="gfd-nvidia-reference-"))
    atexit.register(shutil.rmtree, dest, ignore_errors=True)
    subprocess.run(
        ["sh", str(REFERENCE / "unpack.sh"), str(dest)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=300,
    )
    return dest


def reference() -> Path:
    """The unpacked folder: upstream's binary, the mock library and its profiles."""
    if not (REFERENCE / "unpack.sh").is_file():
        pytest.skip(f"upstream reference binaries missing: no {REFERENCE}/unpack.sh")
    return _unpacked()


def mock_env(profile: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment (no GFD or upstream variable from outside) on the mock's profile."""
    where = reference()
    return clean_env(
        {
            "LD_LIBRARY_PATH": str(where),
            "MOCK_NVML_CONFIG": str(where / f"mock-nvml-config-{profile}.yaml"),
            **(env or {}),
        }
    )


def _run(
    command: list[str], env: dict[str, str], cwd: Path | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or ROOT,
        timeout=timeout,
    )


def run_upstream(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    profile: str = "t4",
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Upstream's binary with ``args`` on the mock ``profile``."""
    binary = str(reference() / "gpu-feature-discovery")
    return _run([binary, *args], mock_env(profile, env), cwd, timeout)


def run_gfd_on_mock(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    profile: str = "t4",
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """gfd (its real NVML path: pynvml into the mock library) with ``args`` on ``profile``."""
    return _run([*GFD, *args], mock_env(profile, env), cwd, timeout)


def labels(text: str) -> dict[str, str]:
    """``key=value`` lines as a mapping, the timestamp label left out."""
    pairs = (line.split("=", 1) for line in text.splitlines() if line.startswith("nvidia.com/"))
    return {key: value for key, value in pairs if key != TIMESTAMP_LABEL}
