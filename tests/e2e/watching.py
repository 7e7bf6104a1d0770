"""Repair through the watch on the real server: gfd started with an interval of an hour, so
that only its watch can bring back what another client removed (SPEC §6.4)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.e2e.controlplane import ADMIN_TOKEN, OTHER_TOKEN, ControlPlane
from tests.e2e.gfdrun import SNAPSHOT_A, Agent, api_args, expected_labels

#: how long a repair may take before it counts as missing (a guard: the watch repairs in
#: about a second, the periodic re-read would take ten minutes)
REPAIR_PATIENCE_SECONDS = 20.0
KEY = "nvidia.com/gpu.count"


def _until(condition: object, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def repair_node_label(plane: ControlPlane, node: str, tmp_path: Path) -> str | None:
    """A label removed by another writer is back within moments; None when it is."""
    agent = Agent(*api_args(plane, tmp_path, node), "--sleep-interval", "1h")
    try:
        agent.passes(1)
        want = expected_labels(SNAPSHOT_A)[KEY]
        plane.ok(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": {KEY: None}}},
            token=OTHER_TOKEN,
            content_type="application/merge-patch+json",
        )
        if not _until(lambda: plane.node_labels(node).get(KEY) == want, REPAIR_PATIENCE_SECONDS):
            return "a removed label was not repaired by the watch"
        if agent.stop(signal.SIGTERM) != 0:
            return "exit status not 0"
        return None
    finally:
        agent.kill()


def repair_nodefeature(
    plane: ControlPlane, node: str, tmp_path: Path, args: list[str], path: str
) -> str | None:
    """A NodeFeature deleted by someone else is back within moments; None when it is."""
    agent = Agent(*args, "--sleep-interval", "1h")
    try:
        agent.passes(1)
        plane.delete(path, token=ADMIN_TOKEN)
        if not _until(lambda: plane.get(path) is not None, REPAIR_PATIENCE_SECONDS):
            return "a deleted NodeFeature was not created again by the watch"
        if agent.stop(signal.SIGTERM) != 0:
            return "exit status not 0"
        return None
    finally:
        agent.kill()
