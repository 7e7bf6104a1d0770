"""Other writers, on the real server: one that writes between gfd's read and its write, and a
node deleted and re-created (as when a machine is re-provisioned under the same name) while
the daemon runs.  Nothing written by either side is lost, and gfd converges."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.controlplane import OTHER_TOKEN, ControlPlane
from tests.e2e.gfdrun import (
    FOREIGN_LABELS,
    MANAGED,
    SNAPSHOT_A,
    SNAPSHOT_B,
    Agent,
    api_args,
    expected_labels,
    gfd_requests,
    run_ok,
)
from tests.e2e.relay import relay
from tests.e2e.test_nodefeature import nf_args, nodefeature_path

pytestmark = pytest.mark.timeout(180)
MERGE = "application/merge-patch+json"


def test_a_node_write_between_gfds_read_and_patch_is_kept(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    interleaved: list[str] = []

    def other_writer(method: str, path: str) -> None:
        if method == "PATCH" and path.startswith(f"/api/v1/nodes/{node}") and not interleaved:
            # after gfd's GET, before its PATCH: the kubelet (or anyone) updates the node
            answer = gfd_rbac.ok(
                "PATCH",
                f"/api/v1/nodes/{node}",
                {
                    "metadata": {
                        "labels": {"example.com/written-between": "yes"},
                        "annotations": {"example.com/note": "written between"},
                    }
                },
                token=OTHER_TOKEN,
                content_type=MERGE,
            )
            interleaved.append(answer["metadata"]["resourceVersion"])

    with relay(gfd_rbac.url, str(gfd_rbac.ca_file), other_writer) as url:
        run_ok("--oneshot", *api_args(gfd_rbac, tmp_path, node, server=url))
    assert interleaved, "the other writer never ran"
    labels = gfd_rbac.node_labels(node)
    assert labels["example.com/written-between"] == "yes"
    assert {k: labels[k] for k in FOREIGN_LABELS} == FOREIGN_LABELS
    assert {k: v for k, v in labels.items() if k in expected_labels(SNAPSHOT_A)} == (
        expected_labels(SNAPSHOT_A)
    )
    annotations = gfd_rbac.node_annotations(node)
    assert annotations["example.com/note"] == "written between"
    assert annotations[MANAGED] == ",".join(sorted(expected_labels(SNAPSHOT_A)))


def test_a_nodefeature_write_between_gfds_read_and_update_is_kept(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    run_ok("--oneshot", *nf_args(gfd_rbac, tmp_path, node))
    interleaved: list[str] = []
    path = nodefeature_path(node)

    def other_writer(method: str, request_path: str) -> None:
        if method == "PUT" and request_path.startswith(path) and not interleaved:
            obj = gfd_rbac.ok("GET", path)
            obj["metadata"].setdefault("annotations", {})["example.com/note"] = "written between"
            interleaved.append(gfd_rbac.ok("PUT", path, obj, token=OTHER_TOKEN)["metadata"]["uid"])

    mark = gfd_rbac.audit_mark()
    with relay(gfd_rbac.url, str(gfd_rbac.ca_file), other_writer) as url:
        run_ok(
            "--oneshot", *nf_args(gfd_rbac, tmp_path, node, snapshot_file=SNAPSHOT_B, server=url)
        )
    assert interleaved, "the other writer never ran"
    obj = gfd_rbac.ok("GET", path)
    assert obj["metadata"]["annotations"]["example.com/note"] == "written between"
    assert obj["spec"]["labels"] == expected_labels(SNAPSHOT_B)
    # the server refused gfd's stale update (409), gfd read again and updated
    name = f"nodefeatures/nvidia-features-for-{node}"
    updates = [r for r in gfd_requests(gfd_rbac, mark) if r.startswith("update")]
    assert updates == [f"update {name} -> 409", f"update {name} -> 200"]


def test_a_node_deleted_and_recreated_under_the_daemon_is_labelled_again(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    agent = Agent(
        *api_args(gfd_rbac, tmp_path, node),
        "--sleep-interval",
        "0.2s",
        env={"GFD_E2E_VERIFY_INTERVAL": "1"},
    )
    try:
        agent.passes(1)
        gfd_rbac.delete_node(node)
        # re-registered by its kubelet: new object, its own labels, none of gfd's
        gfd_rbac.create_node(node, {"example.com/reprovisioned": "yes"})
        # its next verification read (every second here, 10 minutes by default) finds the
        # labels gone -- or, when it ran while the node was away, the failed pass is retried
        want = expected_labels(SNAPSHOT_A)
        gfd_rbac.wait_for(
            "gfd's labels back on the re-created node",
            lambda: {k: v for k, v in gfd_rbac.node_labels(node).items() if k in want} == want,
            timeout=60,
        )
        assert agent.process.poll() is None
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    labels = gfd_rbac.node_labels(node)
    assert labels["example.com/reprovisioned"] == "yes"
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/")} == expected_labels(
        SNAPSHOT_A
    )
    assert gfd_rbac.node_annotations(node)[MANAGED] == ",".join(sorted(expected_labels(SNAPSHOT_A)))


def test_a_node_absent_for_a_while_fails_passes_then_converges(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    gfd_rbac.delete_node(node)
    agent = Agent(*api_args(gfd_rbac, tmp_path, node), "--sleep-interval", "0.2s")
    try:
        failed = agent.wait_for("pass failed", limit=60)[0]
        assert "404" in failed["error"]
        gfd_rbac.create_node(node)
        while agent.passes(1)[0]["changed"] is not True:
            pass
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    labels = gfd_rbac.node_labels(node)
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/")} == expected_labels(
        SNAPSHOT_A
    )
