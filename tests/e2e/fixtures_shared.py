"""gfd run as a process, shared by the e2e files that drive it from the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.e2e.controlplane import ControlPlane

SNAPSHOTS = Path(__file__).resolve().parents[2] / "examples" / "snapshots"
DGX_A100 = SNAPSHOTS / "dgx-a100.yaml"


def run_gfd(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m gfd ARGS``, its output captured as text; a hung gfd fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "gfd", *args], capture_output=True, text=True, timeout=120
    )


def gfd_as(
    plane: ControlPlane, tmp_path: Path, token: str, namespace: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``gfd ARGS`` on the DGX A100 snapshot, no timestamp, as the holder of ``token``
    (a kubeconfig whose context's namespace is ``namespace``)."""
    kubeconfig = plane.kubeconfig(tmp_path / "gfd.kubeconfig", token, namespace)
    snapshot = ("--snapshot-file", str(DGX_A100), "--no-timestamp")
    return run_gfd("--kubeconfig", str(kubeconfig), *snapshot, *args)


def oneshot_stdout(snapshot: Path = DGX_A100, *args: str) -> str:
    """What ``gfd --oneshot --no-timestamp`` prints for snapshot; it must succeed."""
    done = run_gfd("--oneshot", "--no-timestamp", "--snapshot-file", str(snapshot), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def oneshot_labels(snapshot: Path = DGX_A100, *args: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in oneshot_stdout(snapshot, *args).splitlines())
