"""gfd run as a process, shared by the e2e files that drive it from the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SNAPSHOTS = Path(__file__).resolve().parents[2] / "examples" / "snapshots"
DGX_A100 = SNAPSHOTS / "dgx-a100.yaml"


def run_gfd(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m gfd ARGS``, its output captured as text; a hung gfd fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "gfd", *args], capture_output=True, text=True, timeout=120
    )


def oneshot_stdout(snapshot: Path = DGX_A100, *args: str) -> str:
    """What ``gfd --oneshot --no-timestamp`` prints for snapshot; it must succeed."""
    done = run_gfd("--oneshot", "--no-timestamp", "--snapshot-file", str(snapshot), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def oneshot_labels(snapshot: Path = DGX_A100, *args: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in oneshot_stdout(snapshot, *args).splitlines())
