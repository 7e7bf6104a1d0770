"""The node-labels output (SPEC §6.3, §6.4) against a real kube-apiserver, gfd authenticated
as the manifests' service account with only the RBAC rendered from manifests/.

What gfd sent is read from the server's audit log, not from gfd's own counters."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import yaml

from tests.e2e.controlplane import OTHER_TOKEN, ControlPlane
from tests.e2e.gfdrun import (
    FOREIGN_ANNOTATIONS,
    FOREIGN_LABELS,
    MANAGED,
    SNAPSHOT_A,
    SNAPSHOT_B,
    Agent,
    api_args,
    expected_labels,
    gfd_requests,
    run,
    run_ok,
    writes,
)

pytestmark = pytest.mark.timeout(180)


def owned(plane: ControlPlane, node: str) -> set[str]:
    value = plane.node_annotations(node).get(MANAGED, "")
    return {key for key in value.split(",") if key}


def assert_published(plane: ControlPlane, node: str, snapshot: Path) -> None:
    want = expected_labels(snapshot)
    assert plane.node_labels(node) == {"kubernetes.io/hostname": node, **FOREIGN_LABELS, **want}
    annotations = plane.node_annotations(node)
    assert annotations[MANAGED] == ",".join(sorted(want))
    for key, value in FOREIGN_ANNOTATIONS.items():
        assert annotations[key] == value


def test_oneshot_labels_the_node_and_touches_nothing_else(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    mark = gfd_rbac.audit_mark()
    run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node))
    assert_published(gfd_rbac, node, SNAPSHOT_A)
    # one read to learn what it owns, one merge patch
    assert gfd_requests(gfd_rbac, mark) == [
        f"get nodes/{node} -> 200",
        f"patch nodes/{node} -> 200",
    ]


def test_oneshot_again_replaces_its_own_labels_only(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node, snapshot_file=SNAPSHOT_A))
    run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node, snapshot_file=SNAPSHOT_B))
    # A's keys that B does not have are gone; the foreign nvidia.com/ labels stay
    assert_published(gfd_rbac, node, SNAPSHOT_B)
    assert set(expected_labels(SNAPSHOT_A)) - set(expected_labels(SNAPSHOT_B))


def test_a_start_on_an_already_labelled_node_writes_nothing(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node))
    mark = gfd_rbac.audit_mark()
    run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node))
    assert writes(gfd_requests(gfd_rbac, mark)) == []
    assert_published(gfd_rbac, node, SNAPSHOT_A)


def test_daemon_publishes_once_then_sends_nothing_at_steady_state(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    agent = Agent(*api_args(gfd_rbac, tmp_path, node), "--sleep-interval", "0.2s")
    try:
        first = agent.passes(1)[0]
        assert first["changed"] is True
        assert_published(gfd_rbac, node, SNAPSHOT_A)
        # the watch of its own node (SPEC §6.4) is open: one long request, not a poll.  A
        # current server audits the watch when it starts; v1.20 only when it ends, so there
        # the list that opens it is the last of its requests the log can show in time.
        opened = "list" if gfd_rbac.version == "v1.20.2" else "watch"
        gfd_rbac.wait_for(
            "the watch",
            lambda: f"{opened} nodes/{node} -> 200" in gfd_requests(gfd_rbac, 0, "nodes"),
        )
        mark = gfd_rbac.audit_mark()
        later = agent.passes(10)
        assert [p["changed"] for p in later] == [False] * 10
        # ten passes at steady state: not one request reached the server
        assert gfd_requests(gfd_rbac, mark) == []
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()


def test_sigterm_exits_cleanly_and_the_labels_stay(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    agent = Agent(*api_args(gfd_rbac, tmp_path, node), "--sleep-interval", "infinite")
    try:
        agent.passes(1)
        mark = gfd_rbac.audit_mark()
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    # no flapping during a rolling update: nothing removed on exit
    assert writes(gfd_requests(gfd_rbac, mark)) == []
    assert_published(gfd_rbac, node, SNAPSHOT_A)


def test_sighup_reloads_the_config_and_republishes(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    args = [*api_args(gfd_rbac, tmp_path, node), "--config-file", str(config)]
    renamed = {"version": "v1", "resources": {"gpus": [{"pattern": "*A100*", "name": "a100"}]}}
    agent = Agent(*args, "--sleep-interval", "infinite")
    try:
        agent.passes(1)
        assert_published(gfd_rbac, node, SNAPSHOT_A)
        config.write_text(yaml.safe_dump(renamed))
        want = run_ok(
            "--oneshot",
            "--output-file",
            "-",
            "--no-timestamp",
            "--snapshot-file",
            str(SNAPSHOT_A),
            "--config-file",
            str(config),
        )
        mark = gfd_rbac.audit_mark()
        agent.process.send_signal(signal.SIGHUP)
        agent.wait_for("settings reloaded")
        assert agent.passes(1)[0]["changed"] is True
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    labels = dict(line.split("=", 1) for line in want.stdout.splitlines())
    assert any(key.startswith("nvidia.com/a100.") for key in labels)
    assert gfd_rbac.node_labels(node) == {
        "kubernetes.io/hostname": node,
        **FOREIGN_LABELS,
        **labels,
    }
    assert owned(gfd_rbac, node) == set(labels)  # the gpu.* keys it no longer has are released
    assert writes(gfd_requests(gfd_rbac, mark)) == [f"patch nodes/{node} -> 200"]


def test_cleanup_removes_exactly_what_gfd_owns(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node))
    run_ok("--cleanup", *api_args(gfd_rbac, tmp_path, node))
    assert gfd_rbac.node_labels(node) == {"kubernetes.io/hostname": node, **FOREIGN_LABELS}
    assert gfd_rbac.node_annotations(node) == FOREIGN_ANNOTATIONS
    # a second cleanup finds nothing and writes nothing
    mark = gfd_rbac.audit_mark()
    run_ok("--cleanup", *api_args(gfd_rbac, tmp_path, node))
    assert writes(gfd_requests(gfd_rbac, mark)) == []


def test_cleanup_after_a_hand_edited_annotation_keeps_operator_labels(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node))
    edited = ",".join(
        sorted(
            owned(gfd_rbac, node) | {"nvidia.com/gpu.present", "nvidia.com/device-plugin.config"}
        )
    )
    gfd_rbac.ok(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"annotations": {MANAGED: edited}}},
        token=OTHER_TOKEN,
        content_type="application/merge-patch+json",
    )
    run_ok("--cleanup", *api_args(gfd_rbac, tmp_path, node))
    labels = gfd_rbac.node_labels(node)
    assert labels == {"kubernetes.io/hostname": node, **FOREIGN_LABELS}


def test_a_missing_node_fails_the_oneshot_with_one_clear_line(
    gfd_rbac: ControlPlane, tmp_path: Path
) -> None:
    done = run("--oneshot", *api_args(gfd_rbac, tmp_path, "no-such-node"))
    assert done.returncode == 1
    assert "404" in done.stderr and "no-such-node" in done.stderr
    assert "Traceback" not in done.stderr


def test_verification_reads_write_nothing_and_repair_an_edit(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    """SPEC §6.4: at steady state only a verification read (every second here through
    tests/e2e/launch.py, every 10 minutes by default), which publishes again only when
    someone removed or edited gfd's labels."""
    # 2s, not less: an API request may take half the interval (the retry budget), and a
    # pass that fails on a loaded machine would repair the edit by publishing again after
    # the failure, never by the verification this test is about
    agent = Agent(
        *api_args(gfd_rbac, tmp_path, node),
        "--sleep-interval",
        "2s",
        env={"GFD_E2E_VERIFY_INTERVAL": "1"},
    )
    try:
        agent.passes(1)
        mark = gfd_rbac.audit_mark()
        agent.passes(3)  # six seconds: a verification read each pass
        steady = gfd_requests(gfd_rbac, mark)
        assert steady and set(steady) == {f"get nodes/{node} -> 200"}
        key = "nvidia.com/gpu.count"
        gfd_rbac.ok(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": {key: "99"}}},
            token=OTHER_TOKEN,
            content_type="application/merge-patch+json",
        )
        agent.wait_for("labels were changed by someone else; published again", limit=60)
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    assert_published(gfd_rbac, node, SNAPSHOT_A)
