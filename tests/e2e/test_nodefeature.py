"""The NodeFeature output (SPEC §6.2) against a real kube-apiserver serving NFD's own CRD, gfd
as the manifests' service account with the nodefeature overlay's RBAC.

The DaemonSet is the one rendered from manifests/overlays/nodefeature; its Pod is created the
way the DaemonSet controller would (owner reference, node name) -- no kubelet or controller
runs here, so nothing starts it and nothing garbage-collects."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.controlplane import ADMIN_TOKEN, GFD_NAMESPACE, ControlPlane
from tests.e2e.gfdrun import (
    SNAPSHOT_A,
    SNAPSHOT_B,
    Agent,
    api_args,
    expected_labels,
    gfd_requests,
    run,
    run_ok,
    workload_of,
    writes,
)

pytestmark = pytest.mark.timeout(180)
GROUP_VERSION = "nfd.k8s-sigs.io/v1alpha1"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


def nodefeature_path(node: str, namespace: str = GFD_NAMESPACE) -> str:
    return f"/apis/{GROUP_VERSION}/namespaces/{namespace}/nodefeatures/nvidia-features-for-{node}"


def nf_args(plane: ControlPlane, tmp_path: Path, node: str, *extra: str, **kw: Any) -> list[str]:
    return [
        *api_args(plane, tmp_path, node, output="--use-node-feature-api", **kw),
        "--namespace",
        GFD_NAMESPACE,
        *extra,
    ]


def daemonset_and_pod(plane: ControlPlane, node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rendered DaemonSet, and a pod of it on NODE as the DaemonSet controller makes it."""
    daemonset = plane.apply(workload_of("nodefeature", "DaemonSet"))
    template = daemonset["spec"]["template"]
    pod = plane.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"gfd-{node}"[:63],
                "namespace": GFD_NAMESPACE,
                "labels": template["metadata"].get("labels", {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": daemonset["metadata"]["name"],
                        "uid": daemonset["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            # no kubelet mounts anything, and no token controller runs (v1.20's ServiceAccount
            # admission would wait for a token Secret): the stand-in pod mounts no token
            "spec": {**template["spec"], "nodeName": node, "automountServiceAccountToken": False},
        }
    )
    return daemonset, pod


def test_created_in_the_pods_namespace_owned_by_pod_and_daemonset(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    daemonset, pod = daemonset_and_pod(gfd_rbac, node)
    run_ok("--oneshot", *nf_args(gfd_rbac, tmp_path, node, "--pod-name", pod["metadata"]["name"]))
    obj = gfd_rbac.ok("GET", nodefeature_path(node))
    assert obj["metadata"]["labels"] == {NODE_NAME_LABEL: node}
    assert obj["spec"]["labels"] == expected_labels(SNAPSHOT_A)
    owners = [
        (ref["kind"], ref["name"], ref["uid"], ref.get("controller", False))
        for ref in obj["metadata"]["ownerReferences"]
    ]
    assert owners == [
        ("DaemonSet", daemonset["metadata"]["name"], daemonset["metadata"]["uid"], True),
        ("Pod", pod["metadata"]["name"], pod["metadata"]["uid"], False),
    ]


def test_without_a_pod_no_owner_references(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    run_ok("--oneshot", *nf_args(gfd_rbac, tmp_path, node))
    obj = gfd_rbac.ok("GET", nodefeature_path(node))
    assert "ownerReferences" not in obj["metadata"]
    assert obj["spec"]["labels"] == expected_labels(SNAPSHOT_A)


def test_updated_only_when_the_labels_change(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    snapshot = tmp_path / "snapshot.yaml"
    shutil.copyfile(SNAPSHOT_A, snapshot)
    args = nf_args(gfd_rbac, tmp_path, node, snapshot_file=snapshot)
    agent = Agent(*args, "--sleep-interval", "0.2s")
    try:
        assert agent.passes(1)[0]["changed"] is True
        created = gfd_rbac.ok("GET", nodefeature_path(node))
        mark = gfd_rbac.audit_mark()
        assert [p["changed"] for p in agent.passes(5)] == [False] * 5
        assert gfd_requests(gfd_rbac, mark) == []  # steady state: nothing sent at all
        staging = tmp_path / "next.yaml"
        shutil.copyfile(SNAPSHOT_B, staging)
        os.replace(staging, snapshot)
        agent.wait_for("updated NodeFeature object", limit=60)
        agent.passes(2)
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    name = f"nodefeatures/nvidia-features-for-{node}"
    assert writes(gfd_requests(gfd_rbac, mark)) == [f"update {name} -> 200"]
    obj = gfd_rbac.ok("GET", nodefeature_path(node))
    assert obj["spec"]["labels"] == expected_labels(SNAPSHOT_B)
    assert obj["metadata"]["uid"] == created["metadata"]["uid"]  # updated, not re-created
    # SIGTERM leaves it for the owner references / nfd-gc (SPEC §6.2)


def test_cleanup_deletes_the_object(gfd_rbac: ControlPlane, node: str, tmp_path: Path) -> None:
    run_ok("--oneshot", *nf_args(gfd_rbac, tmp_path, node))
    # The nodefeature overlay's Role has no delete (the object goes with its owners), so
    # --cleanup is an administrator's command: run it with an admin's credentials.
    run_ok("--cleanup", *nf_args(gfd_rbac, tmp_path, node, token=ADMIN_TOKEN))
    assert gfd_rbac.get(nodefeature_path(node)) is None
    run_ok("--cleanup", *nf_args(gfd_rbac, tmp_path, node, token=ADMIN_TOKEN))  # idempotent


def test_cleanup_as_the_service_account_is_refused_by_rbac(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    run_ok("--oneshot", *nf_args(gfd_rbac, tmp_path, node))
    done = run("--cleanup", *nf_args(gfd_rbac, tmp_path, node))
    assert done.returncode != 0
    assert "403" in done.stderr
    assert gfd_rbac.get(nodefeature_path(node)) is not None


def test_a_deleted_object_is_created_again_at_the_next_verification(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    # 2s: at 0.2s an API request gets 0.1s (half the interval), and a pass failed on a
    # loaded machine would re-create the object without the verification under test
    agent = Agent(
        *nf_args(gfd_rbac, tmp_path, node),
        "--sleep-interval",
        "2s",
        env={"GFD_E2E_VERIFY_INTERVAL": "1"},
    )
    try:
        agent.passes(1)
        first = gfd_rbac.ok("GET", nodefeature_path(node))
        gfd_rbac.delete(nodefeature_path(node))  # nfd-gc, or a human
        agent.wait_for("NodeFeature object was removed or edited, publishing again", limit=60)
        # the warning comes before the write: wait for the object, then stop
        gfd_rbac.wait_for(
            "the object created again", lambda: gfd_rbac.get(nodefeature_path(node)), timeout=60
        )
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    again = gfd_rbac.ok("GET", nodefeature_path(node))
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    assert again["spec"]["labels"] == expected_labels(SNAPSHOT_A)


def test_a_start_with_the_object_up_to_date_writes_nothing(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    _, pod = daemonset_and_pod(gfd_rbac, node)
    args = nf_args(gfd_rbac, tmp_path, node, "--pod-name", pod["metadata"]["name"])
    run_ok("--oneshot", *args)
    mark = gfd_rbac.audit_mark()
    run_ok("--oneshot", *args)
    requests = gfd_requests(gfd_rbac, mark)
    assert requests and writes(requests) == []
