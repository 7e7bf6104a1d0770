"""``gfd`` as a real process against the fake API server (SPEC §6.2-6.4, §8).

Progress is followed through the daemon's own ``/metrics`` (pass counters), never through
wall-clock time: "at the next pass" means "by the time two more passes have finished" (the
pass in flight when the file changed may have read the old one)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.fake_apiserver import FakeApiServer
from tests.helpers import FOREIGN, FOREIGN_ANNOTATIONS, SNAPSHOT_A, SNAPSHOT_B, expected_labels
from tests.process import Daemon, run_gfd_here

INTERVAL = "0.5s"
#: a guard against a hung test, not a timing assertion
PATIENCE_SECONDS = 60.0

pytestmark = pytest.mark.timeout(120)


def replace_file(source: Path, target: Path) -> None:
    """Swap the snapshot atomically, so the daemon never reads half a file."""
    staging = target.with_suffix(".tmp")
    shutil.copyfile(source, staging)
    os.replace(staging, target)


API_NODE_N1 = {"labels": FOREIGN, "annotations": FOREIGN_ANNOTATIONS}


@pytest.fixture
def start(kubeconfig: str, node_snapshot: Path, daemons: Any) -> Callable[..., Daemon]:
    return lambda output_flag, *extra: daemons(
        output_flag, "--node-name", "n1", "--kubeconfig", kubeconfig,
        "--snapshot-file", str(node_snapshot), "--sleep-interval", INTERVAL, "--no-timestamp",
        *extra, metrics=True,
    )  # fmt: skip


def run_cleanup(kubeconfig: str, output_flag: str) -> subprocess.CompletedProcess[str]:
    """``gfd --cleanup`` in-process (tests/process.py run_gfd_here): the command ends by
    itself, so a process adds nothing to what the cleanup leaves on the server."""
    return run_gfd_here("--cleanup", output_flag, "--node-name", "n1", "--kubeconfig", kubeconfig,
                        "--namespace", "default")  # fmt: skip


def ready(daemon: Daemon) -> bool:
    return daemon.get("/readyz")[0] == 200


# ----------------------------------------------------------------- node labels


def test_node_labels_survive_restart_and_cleanup_restores_the_node(
    api: FakeApiServer, start: Callable[..., Daemon], node_snapshot: Path, kubeconfig: str
) -> None:
    before = api.node("n1")["metadata"]
    first = start("--use-node-labels")
    first.wait_until(lambda: ready(first), "the first publish")
    assert first.stop() == 0
    # SIGTERM removes nothing: no flapping during a rolling update
    assert api.node_labels("n1") == {**FOREIGN, **expected_labels(SNAPSHOT_A)}

    replace_file(SNAPSHOT_B, node_snapshot)
    second = start("--use-node-labels")
    second.wait_until(lambda: ready(second), "the first publish after the restart")
    # the new process learnt from the annotation which of A's keys are stale
    assert api.node_labels("n1") == {**FOREIGN, **expected_labels(SNAPSHOT_B)}
    assert second.stop() == 0

    result = run_cleanup(kubeconfig, "--use-node-labels")
    assert result.returncode == 0, result.stderr
    after = api.node("n1")["metadata"]
    assert after["labels"] == before["labels"]
    assert after["annotations"] == before["annotations"]

    again = run_cleanup(kubeconfig, "--use-node-labels")
    assert again.returncode == 0, again.stderr
    assert api.node("n1")["metadata"]["labels"] == before["labels"]


# ----------------------------------------------------------------- NodeFeature


def test_nodefeature_readyz_waits_for_a_reachable_api_server(
    api: FakeApiServer, start: Callable[..., Daemon], kubeconfig: str
) -> None:
    api.go_down()
    daemon = start("--use-node-feature-api")
    daemon.wait_until(lambda: daemon.passes(result="error") >= 1, "a failed first pass")
    assert daemon.get("/readyz")[0] == 503
    assert daemon.get("/healthz")[0] == 200
    api.come_up()
    daemon.wait_until(lambda: ready(daemon), "the first successful publish")
    assert len(api.objects("NodeFeature")) == 1
    assert daemon.stop() == 0

    result = run_cleanup(kubeconfig, "--use-node-feature-api")
    assert result.returncode == 0, result.stderr
    assert api.objects("NodeFeature") == []
    assert run_cleanup(kubeconfig, "--use-node-feature-api").returncode == 0
