"""Per-node configuration in a real ``gfd`` process against the fake API server: relabel
the Node, and the labels follow; a label naming nothing usable changes nothing.

Progress is followed through the node's labels and the daemon's log, never wall-clock time
(the waits are guards against a hung test)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

from gfd.options import DEFAULT_NODE_LABEL
from tests.fakes.fake_apiserver import FakeApiServer
from tests.process import ROOT, Daemon, run_gfd
from tests.test_nodeconfig import MIXED, SINGLE, config_dir

MIG_NODE = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100-mig-mixed.yaml")
STRATEGY = "nvidia.com/mig.strategy"
API_NODE_N1 = {"labels": {DEFAULT_NODE_LABEL: "mig-mixed", "kubernetes.io/hostname": "n1"}}

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def daemon(api: FakeApiServer, kubeconfig: str, tmp_path: Path) -> Iterator[Daemon]:
    root = config_dir(tmp_path, {"mig-mixed": MIXED, "mig-single": SINGLE, "default": SINGLE})
    running = Daemon(
        "--use-node-labels", "--snapshot-file", MIG_NODE, "--sleep-interval", "0.3s",
        "--no-timestamp",
        env={
            "NODE_NAME": "n1",
            "KUBECONFIG": kubeconfig,
            # upstream's config-manager variables (daemonset-gfd.yml:113-122 at v0.20.0)
            "NODE_LABEL": DEFAULT_NODE_LABEL,
            "CONFIG_FILE_SRCDIR": str(root),
            "DEFAULT_CONFIG": "",
            "FALLBACK_STRATEGIES": "named,single",
            # what upstream's gfd container is given: ignored, with a warning
            "CONFIG_FILE": "/config/config.yaml",
        },
        metrics=True,
    )  # fmt: skip
    yield running
    running.kill()


def relabel(api: FakeApiServer, value: str | None) -> None:
    def change(node: dict[str, Any]) -> None:
        labels = node["metadata"]["labels"]
        if value is None:
            labels.pop(DEFAULT_NODE_LABEL, None)
        else:
            labels[DEFAULT_NODE_LABEL] = value

    api.edit("Node", "n1", "", change)


def test_relabelling_the_node_switches_its_config_and_labels(
    api: FakeApiServer, daemon: Daemon
) -> None:
    first = daemon.wait_for("node config chosen")[0]
    assert first["entry"] == "mig-mixed"
    assert first["reason"] == f"node label {DEFAULT_NODE_LABEL}=mig-mixed"
    daemon.wait_until(lambda: api.node_labels("n1").get(STRATEGY) == "mixed", "mixed labels")
    assert "CONFIG_FILE: ignored" in daemon.log()

    relabel(api, "mig-single")
    switched = daemon.wait_for("node config chosen")[0]
    assert (switched["entry"], switched["previous"]) == ("mig-single", "mig-mixed")
    daemon.wait_until(lambda: api.node_labels("n1").get(STRATEGY) == "single", "single labels")
    assert "nvidia.com/mig-1g.5gb.count" not in api.node_labels("n1")

    relabel(api, None)  # no label: fallback named -> the entry "default"
    fallback = daemon.wait_for("node config chosen")[0]
    assert fallback["entry"] == "default"
    assert "fallback named" in fallback["reason"]
    # the label gfd does not own is never touched by its patches
    assert DEFAULT_NODE_LABEL not in api.node_labels("n1")
    assert daemon.stop() == 0


@pytest.mark.parametrize(
    "value", ["no-such-entry", "../../etc/passwd", "y" * 1_000_000], ids=["missing", "path", "huge"]
)
def test_a_label_naming_nothing_usable_keeps_the_config_and_labels(
    api: FakeApiServer, daemon: Daemon, value: str
) -> None:
    """A hostile server (or a label a real one would refuse) selects nothing: the config and
    the labels in force stay, with one error line however many passes see it."""
    daemon.wait_until(lambda: api.node_labels("n1").get(STRATEGY) == "mixed", "mixed labels")
    before = api.node_labels("n1")
    relabel(api, value)
    error = daemon.wait_for("node config not applied; the config in force stays")[0]
    assert error["config"] == "mig-mixed"
    assert len(error["error"]) < 1000
    passes = daemon.passes()
    daemon.wait_until(lambda: daemon.passes() >= passes + 3, "three more passes")
    assert api.node_labels("n1") == {**before, DEFAULT_NODE_LABEL: value}
    assert daemon.log().count("node config not applied") == 1
    relabel(api, "mig-single")
    daemon.wait_until(lambda: api.node_labels("n1").get(STRATEGY) == "single", "single labels")
    assert daemon.stop() == 0


def oneshot_on_entries(
    kubeconfig: str, root: Path, *args: str, fallback: str = "named"
) -> CompletedProcess[str]:
    """A oneshot of the MIG node whose config comes from the entries under ``root``."""
    env = {"NODE_NAME": "n1", "KUBECONFIG": kubeconfig, "CONFIG_FILE_SRCDIR": str(root)}
    env["FALLBACK_STRATEGIES"] = fallback
    return run_gfd("--oneshot", "--snapshot-file", MIG_NODE, *args, env=env)


@pytest.mark.parametrize(("value", "message"), [
    ("no-such-entry", "no such config entry"), ("../../etc/passwd", "not a label value"),
    ("z" * 100_000, "not a label value"),
])  # fmt: skip
def test_at_start_a_label_naming_nothing_usable_is_exit_2_with_one_line(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path, value: str, message: str
) -> None:
    """As a bad config file at start (SPEC §7): nothing published, one line, status 2
    (upstream's config-manager init container fails the pod the same way)."""
    root = config_dir(tmp_path, {"default": MIXED})
    relabel(api, value)
    done = oneshot_on_entries(kubeconfig, root, "--use-node-labels")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert message in line and DEFAULT_NODE_LABEL in line
    assert len(line) < 1000
    assert api.count("PATCH") == 0


def test_an_entry_name_reaches_a_console_log_line_escaped(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    """Whoever fills the directory names its entries: on the console format (a terminal
    reads it) a name is shown escaped, never as a terminal escape."""
    root = config_dir(tmp_path, {"\x1b[2J\u202eevil": SINGLE})
    relabel(api, None)
    done = oneshot_on_entries(
        kubeconfig, root, "--use-node-labels", "--log-format", "console", fallback="single"
    )
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "node config chosen" in line]
    assert "\\x1b[2J\\u202eevil" in line
    assert "\x1b" not in done.stderr and "\u202e" not in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_an_entry_that_is_not_a_regular_file_is_refused_without_waiting(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path, kind: str
) -> None:
    """A ConfigMap directory is files, but a hostPath or a hand-made directory may hold
    anything: the label can select only what the shared reader accepts, and nothing in the
    directory is waited on (a FIFO nobody writes) or read without end (/dev/zero)."""
    root = config_dir(tmp_path, {"default": MIXED})
    entry = Path(root) / "odd"
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "device":
        entry.symlink_to("/dev/zero")
    else:
        entry.mkdir()
    relabel(api, "odd")
    done = oneshot_on_entries(kubeconfig, root, "--use-node-labels")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "odd" in line and "Traceback" not in done.stderr
    assert api.count("PATCH") == 0


def test_at_start_an_unreachable_api_server_is_exit_1(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    root = config_dir(tmp_path, {"default": MIXED})
    api.go_down()
    done = oneshot_on_entries(kubeconfig, root, "--sleep-interval", "1s")
    assert done.returncode == 1
    assert "cannot choose the node's config" in done.stderr


def test_oneshot_reads_the_entry_the_label_names(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    root = config_dir(tmp_path, {"default": SINGLE, "mig-mixed": MIXED})
    done = oneshot_on_entries(kubeconfig, root, "--output-file", "-")
    assert done.returncode == 0, done.stderr
    assert f"{STRATEGY}=mixed" in done.stdout.splitlines()
    assert [(r.method, r.path) for r in api.requests] == [("GET", "/api/v1/nodes/n1")]


def test_the_config_label_is_followed_by_the_watch_with_no_read_per_pass(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """SPEC §6.4: the node's config label is watched; a relabel is followed at once, and
    passes at steady state read nothing (an interval of an hour: only the watch can have
    woken the loop)."""
    root = config_dir(tmp_path, {"mig-mixed": MIXED, "mig-single": SINGLE, "default": SINGLE})
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kube.cfg"))
    daemon = Daemon(
        "--use-node-labels", "--snapshot-file", MIG_NODE, "--sleep-interval", "1h",
        "--no-timestamp", "--node-name", "n1", "--kubeconfig", kubeconfig,
        "--config-file-srcdir", str(root), "--fallback-strategies", "named,single",
    )  # fmt: skip
    try:
        daemon.wait_for("node config chosen")
        daemon.wait_until(lambda: api.open_watches == 1, "one watch of the node")
        daemon.wait_until(lambda: api.node_labels("n1").get(STRATEGY) == "mixed", "mixed")
        before = api.count("GET", "/nodes/n1")
        relabel(api, "mig-single")
        daemon.wait_until(lambda: api.node_labels("n1").get(STRATEGY) == "single", "single")
        # followed through the watch: the label was not read with a GET of the node
        assert api.count("GET", "/nodes/n1") - before <= 1  # the publish's own read
        assert api.watch_requests() == 1  # the node labels and the config label share it
    finally:
        daemon.kill()
