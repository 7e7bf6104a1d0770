"""A SIGHUP reload that moves the output (README "Switching output by reload"): a real daemon
against the fake API server, switched by rewriting its config file; the new output is published
first, then the old one retired exactly as ``--cleanup`` retires it (foreign labels kept).
Every output is chosen explicitly in the config file, whatever the default is.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gfd.outputs.nodelabels import MANAGED_LABELS_ANNOTATION
from tests.fakes.fake_apiserver import FakeApiServer, Fault
from tests.helpers import FOREIGN, FOREIGN_ANNOTATIONS, expected_labels, file_labels
from tests.helpers import SNAPSHOT_A as SNAPSHOT
from tests.process import Daemon, run_gfd_here

pytestmark = pytest.mark.timeout(120)

API_NODE_N1 = {"labels": FOREIGN, "annotations": FOREIGN_ANNOTATIONS}
RETIRED = "removed what the previous settings published"
EXPECTED = expected_labels(SNAPSHOT)


def config_text(output: str, tmp_path: Path) -> str:
    """The config file that selects ``output``: "file", "file-b" (another path),
    "node-labels" or "nodefeature" -- every selecting key set explicitly."""
    feature_api = output == "nodefeature"
    node_labels = output == "node-labels"
    lines = ["version: v1", "flags:", f"  useNodeFeatureAPI: {str(feature_api).lower()}",
             "  gfd:", f"    useNodeLabels: {str(node_labels).lower()}"]  # fmt: skip
    if output.startswith("file"):
        lines.append(f"    outputFile: {features_file(output, tmp_path)}")
    return "\n".join(lines) + "\n"


def features_file(output: str, tmp_path: Path) -> Path:
    return tmp_path / ("features-b" if output == "file-b" else "features-a")


class Node:
    """What the fake server and the features files hold, per output."""

    def __init__(self, api: FakeApiServer, tmp_path: Path) -> None:
        self.api = api
        self.tmp_path = tmp_path
        self.before = api.node("n1")["metadata"]

    def published(self, output: str) -> bool:
        if output.startswith("file"):
            path = features_file(output, self.tmp_path)
            return path.exists() and file_labels(path) == EXPECTED
        if output == "node-labels":
            annotations = self.api.node_annotations("n1")
            return (
                self.api.node_labels("n1") == {**FOREIGN, **EXPECTED}
                and MANAGED_LABELS_ANNOTATION in annotations
            )
        objects = self.api.objects("NodeFeature")
        return len(objects) == 1 and objects[0]["spec"]["labels"] == EXPECTED

    def retired(self, output: str) -> bool:
        """Nothing of ``output`` left, as after ``--cleanup``; all that is foreign kept."""
        if output.startswith("file"):
            return not features_file(output, self.tmp_path).exists()
        if output == "node-labels":
            metadata = self.api.node("n1")["metadata"]
            fields = ("labels", "annotations")
            return [metadata.get(f) for f in fields] == [self.before.get(f) for f in fields]
        return self.api.objects("NodeFeature") == []


@pytest.fixture
def start(kubeconfig: str, tmp_path: Path, daemons: Any) -> Callable[..., Daemon]:
    def start_daemon(output: str, *extra: str) -> Daemon:
        config = tmp_path / "config.yaml"
        config.write_text(config_text(output, tmp_path))
        daemon: Daemon = daemons(
            "--config-file", str(config), "--node-name", "n1", "--kubeconfig", kubeconfig,
            "--snapshot-file", str(SNAPSHOT), "--sleep-interval", "0.2s", "--no-timestamp",
            *extra, metrics=True,
        )  # fmt: skip
        return daemon

    return start_daemon


def switch(daemon: Daemon, output: str, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(config_text(output, tmp_path))
    daemon.process.send_signal(signal.SIGHUP)
    daemon.wait_for("settings reloaded")


PAIRS = [("file", "node-labels"), ("node-labels", "nodefeature"), ("nodefeature", "file"),
         ("file", "file-b"), ("node-labels", "file"), ("nodefeature", "node-labels")]  # fmt: skip
#: between two API outputs, the first write of the new one and of the old one's retirement
ORDER = {
    ("node-labels", "nodefeature"): (("POST", "nodefeatures"), ("PATCH", "/nodes/n1")),
    ("nodefeature", "node-labels"): (("PATCH", "/nodes/n1"), ("DELETE", "nodefeatures")),
}


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
def test_a_reload_that_moves_the_output_retires_the_old_one_as_cleanup_does(
    api: FakeApiServer, start: Callable[..., Daemon], tmp_path: Path, old: str, new: str
) -> None:
    """And the new output is published before the old one is retired."""
    node = Node(api, tmp_path)
    daemon = start(old)
    daemon.wait_until(lambda: node.published(old), f"the {old} output")
    api.clear_requests()
    switch(daemon, new, tmp_path)
    daemon.wait_for(RETIRED)
    assert node.published(new)
    assert node.retired(old)
    if (old, new) in ORDER:
        sent = [(r.method, r.path) for r in api.requests if r.method != "GET"]
        publish, retire = (
            next(i for i, (m, path) in enumerate(sent) if m == method and part in path)
            for method, part in ORDER[old, new]
        )
        assert publish < retire, sent
    assert daemon.metric("gfd_retire_total", result="success") == 1
    assert daemon.stop() == 0
    assert node.published(new) and node.retired(old)  # and nothing came back on exit


def test_the_old_output_stays_until_the_new_one_is_published(
    api: FakeApiServer, start: Callable[..., Daemon], tmp_path: Path
) -> None:
    """No moment with neither: while the new output fails, the old file stays (and is
    kept fresh); it goes after the first pass that published the node labels."""
    node = Node(api, tmp_path)
    daemon = start("file")
    daemon.wait_until(lambda: node.published("file"), "the features file")
    api.inject(Fault(status=403, method="PATCH", count=None))
    switch(daemon, "node-labels", tmp_path)
    daemon.wait_until(lambda: daemon.passes(result="error") >= 2, "two failed passes")
    assert node.published("file")
    assert not node.published("node-labels")
    api.clear_faults()
    daemon.wait_for(RETIRED)
    assert node.published("node-labels") and node.retired("file")
    assert daemon.stop() == 0


def test_a_retirement_that_fails_is_counted_and_tried_again(
    api: FakeApiServer, start: Callable[..., Daemon], tmp_path: Path
) -> None:
    node = Node(api, tmp_path)
    daemon = start("node-labels")
    daemon.wait_until(lambda: node.published("node-labels"), "the node labels")
    api.inject(Fault(status=403, method="PATCH", count=None))
    switch(daemon, "file", tmp_path)
    failed = {"result": "error"}
    daemon.wait_until(lambda: daemon.metric("gfd_retire_total", **failed) >= 2, "two failures")
    assert node.published("file")  # the new output is in force meanwhile
    assert daemon.passes(result="error") == 0  # retiring is not publishing: passes succeed
    api.clear_faults()
    daemon.wait_for(RETIRED)
    assert node.retired("node-labels")
    assert daemon.stop() == 0


def test_switching_back_before_the_old_one_is_retired_keeps_it(
    api: FakeApiServer, start: Callable[..., Daemon], tmp_path: Path
) -> None:
    """file -> node labels (which cannot publish yet) -> file again: the file is the
    output in force again, and the node labels output, which never published, is the one
    retired; the file is never removed."""
    node = Node(api, tmp_path)
    daemon = start("file")
    daemon.wait_until(lambda: node.published("file"), "the features file")
    api.inject(Fault(status=403, method="PATCH", count=None))
    switch(daemon, "node-labels", tmp_path)
    daemon.wait_until(lambda: daemon.passes(result="error") >= 1, "a failed pass")
    api.clear_faults()
    switch(daemon, "file", tmp_path)
    daemon.wait_for(RETIRED)
    daemon.wait_for("pass finished", count=2)
    assert node.published("file")
    assert node.retired("node-labels")
    assert daemon.stop() == 0


def test_a_reload_whose_output_cannot_be_built_keeps_the_old_one(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path, daemons: Any
) -> None:
    """Node labels without a node name: a bad config; one line, the file stays in force."""
    config = tmp_path / "config.yaml"
    config.write_text(config_text("file", tmp_path))
    daemon = daemons(
        "--config-file", str(config), "--kubeconfig", kubeconfig, "--snapshot-file",
        str(SNAPSHOT), "--sleep-interval", "0.2s", "--no-timestamp",
    )  # fmt: skip
    daemon.wait_for("pass finished")
    switch_failed = config_text("node-labels", tmp_path)
    config.write_text(switch_failed)
    daemon.process.send_signal(signal.SIGHUP)
    failure = daemon.wait_for("reload failed; keeping the settings in force")[0]
    assert "--node-name" in failure["error"]
    daemon.wait_for("pass finished", count=2)
    assert Node(api, tmp_path).published("file")
    assert api.count("PATCH") == 0
    assert daemon.stop() == 0
    assert daemon.log().count("reload failed") == 1


def test_retiring_uses_the_cleanup_code(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    """The reload's retirement and ``--cleanup`` leave the node in the same state: what
    ``--cleanup`` leaves after a node-labels publish is what a reload away from node
    labels leaves (asserted by the pair tests above as the node before gfd ran)."""
    node = Node(api, tmp_path)
    args = ("--node-name", "n1", "--kubeconfig", kubeconfig, "--use-node-feature-api=false")
    snapshot = ("--snapshot-file", str(SNAPSHOT), "--no-timestamp")
    published = run_gfd_here("--oneshot", "--use-node-labels", *snapshot, *args)
    assert published.returncode == 0, published.stderr
    assert node.published("node-labels")
    cleaned = run_gfd_here("--cleanup", "--use-node-labels", *args)
    assert cleaned.returncode == 0, cleaned.stderr
    assert node.retired("node-labels")
