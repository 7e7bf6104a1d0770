"""``gfd`` as a real process against the fake API server (SPEC §6.2-6.4, §8).

Progress is followed through the daemon's own ``/metrics`` (pass counters), never through
wall-clock time: "at the next pass" means "by the time two more passes have finished" (the
pass in flight when the file changed may have read the old one).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gfd import labels as labelling
from gfd import snapshot
from gfd.settings import Config
from tests.fakes.fake_apiserver import FakeApiServer
from tests.process import ROOT, clean_env

SNAPSHOTS = Path(ROOT) / "examples" / "snapshots"
SNAPSHOT_A = SNAPSHOTS / "dgx-a100.yaml"
SNAPSHOT_B = SNAPSHOTS / "two-models.yaml"  # fewer labels: some of A's keys disappear
INTERVAL = "0.5s"
FOREIGN = {
    "kubernetes.io/hostname": "n1",
    "nvidia.com/gpu.present": "true",
    "nvidia.com/device-plugin.config": "a100",
}
FOREIGN_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0"}
#: a guard against a hung test, not a timing assertion
PATIENCE_SECONDS = 60.0

pytestmark = pytest.mark.timeout(120)


def expected_labels(path: Path) -> dict[str, str]:
    return labelling.build(snapshot.load(str(path)), "none", Config(), None).labels


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def replace_file(source: Path, target: Path) -> None:
    """Swap the snapshot atomically, so the daemon never reads half a file."""
    staging = target.with_suffix(".tmp")
    shutil.copyfile(source, staging)
    os.replace(staging, target)


class Daemon:
    """One ``gfd`` process with its metrics endpoint and a log file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.port = free_port()
        self.log_path = tmp_path / f"gfd-{self.port}.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gfd",
                *args,
                "--metrics-address",
                f"127.0.0.1:{self.port}",
                "--log-format",
                "json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            env=clean_env(),
            cwd=ROOT,
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        _, text = self.get("/metrics")
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(key) == value for key, value in labels.items()
                ):
                    total += sample.value
        return total

    def passes(self, **labels: str) -> int:
        return int(self.metric("gfd_passes_total", **labels))

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + PATIENCE_SECONDS
        while True:
            if self.process.poll() is not None:
                pytest.fail(
                    f"gfd exited ({self.process.returncode}) waiting for {what}:\n{self.log()}"
                )
            try:
                if condition():
                    return
            except (urllib.error.URLError, ConnectionError):
                pass  # the metrics server is not up yet
            if time.monotonic() > deadline:
                pytest.fail(f"gave up waiting for {what}; gfd log:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def wait_passes(self, count: int) -> None:
        target = self.passes() + count
        self.wait_until(lambda: self.passes() >= target, f"{count} more passes")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=PATIENCE_SECONDS)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node("n1", labels=FOREIGN, annotations=FOREIGN_ANNOTATIONS)
        yield server


@pytest.fixture
def node_snapshot(tmp_path: Path) -> Path:
    target = tmp_path / "node.yaml"
    shutil.copyfile(SNAPSHOT_A, target)
    return target


@pytest.fixture
def start(
    api: FakeApiServer, tmp_path: Path, node_snapshot: Path
) -> Iterator[Callable[..., Daemon]]:
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
    daemons: list[Daemon] = []

    def start_daemon(output_flag: str, *extra: str) -> Daemon:
        daemon = Daemon(
            tmp_path,
            output_flag,
            "--node-name",
            "n1",
            "--kubeconfig",
            kubeconfig,
            "--snapshot-file",
            str(node_snapshot),
            "--sleep-interval",
            INTERVAL,
            "--no-timestamp",
            *extra,
        )
        daemons.append(daemon)
        return daemon

    yield start_daemon
    for daemon in daemons:
        daemon.kill()


def run_cleanup(
    api: FakeApiServer, tmp_path: Path, output_flag: str
) -> subprocess.CompletedProcess[str]:
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gfd",
            "--cleanup",
            output_flag,
            "--node-name",
            "n1",
            "--kubeconfig",
            kubeconfig,
            "--namespace",
            "default",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=ROOT,
        timeout=PATIENCE_SECONDS,
        stdin=subprocess.DEVNULL,
    )


def ready(daemon: Daemon) -> bool:
    return daemon.get("/readyz")[0] == 200


# ----------------------------------------------------------------- node labels


def test_node_labels_publish_once_stay_quiet_and_follow_a_change(
    api: FakeApiServer, start: Callable[..., Daemon], node_snapshot: Path
) -> None:
    daemon = start("--use-node-labels")
    daemon.wait_until(lambda: ready(daemon), "the first publish")
    assert api.node_labels("n1") == {**FOREIGN, **expected_labels(SNAPSHOT_A)}
    assert [r.method for r in api.requests] == ["GET", "PATCH"]

    # steady state: no request at all (the verification read is 10 minutes away)
    requests = api.count()
    daemon.wait_passes(3)
    assert api.count() == requests

    replace_file(SNAPSHOT_B, node_snapshot)
    daemon.wait_passes(2)
    assert api.node_labels("n1") == {**FOREIGN, **expected_labels(SNAPSHOT_B)}
    assert [r.method for r in api.requests[requests:]] == ["PATCH"]
    assert api.node_annotations("n1") == {
        **FOREIGN_ANNOTATIONS,
        "nvidia.com/gfd.managed-labels": ",".join(sorted(expected_labels(SNAPSHOT_B))),
    }
    assert daemon.metric("gfd_publish_total", output="node-labels", result="error") == 0
    assert daemon.stop() == 0


def test_node_labels_survive_restart_and_cleanup_restores_the_node(
    api: FakeApiServer, start: Callable[..., Daemon], node_snapshot: Path, tmp_path: Path
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

    result = run_cleanup(api, tmp_path, "--use-node-labels")
    assert result.returncode == 0, result.stderr
    after = api.node("n1")["metadata"]
    assert after["labels"] == before["labels"]
    assert after["annotations"] == before["annotations"]

    again = run_cleanup(api, tmp_path, "--use-node-labels")
    assert again.returncode == 0, again.stderr
    assert api.node("n1")["metadata"]["labels"] == before["labels"]


# ----------------------------------------------------------------- NodeFeature


def test_nodefeature_outage_of_three_passes_is_survived(
    api: FakeApiServer, start: Callable[..., Daemon], node_snapshot: Path
) -> None:
    daemon = start("--use-node-feature-api")
    daemon.wait_until(lambda: ready(daemon), "the first publish")
    assert [obj["spec"]["labels"] for obj in api.objects("NodeFeature")] == [
        expected_labels(SNAPSHOT_A)
    ]
    requests = api.count()
    daemon.wait_passes(3)
    assert api.count() == requests  # steady state: silent

    with api.down():
        replace_file(SNAPSHOT_B, node_snapshot)
        daemon.wait_until(
            lambda: daemon.metric("gfd_publish_total", output="nodefeature", result="error") >= 3,
            "three failed publishes",
        )
        assert daemon.passes(result="error") >= 3
        assert daemon.get("/healthz")[0] == 200  # failing passes are still progress
    daemon.wait_until(
        lambda: (
            [obj["spec"]["labels"] for obj in api.objects("NodeFeature")]
            == [expected_labels(SNAPSHOT_B)]
        ),
        "the labels after the outage",
    )
    assert len(api.objects("NodeFeature")) == 1
    assert daemon.stop() == 0
    assert len(api.objects("NodeFeature")) == 1  # never deleted on exit


def test_nodefeature_readyz_waits_for_a_reachable_api_server(
    api: FakeApiServer, start: Callable[..., Daemon], tmp_path: Path
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

    result = run_cleanup(api, tmp_path, "--use-node-feature-api")
    assert result.returncode == 0, result.stderr
    assert api.objects("NodeFeature") == []
    assert run_cleanup(api, tmp_path, "--use-node-feature-api").returncode == 0
