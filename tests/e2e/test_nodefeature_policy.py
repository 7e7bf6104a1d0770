"""The NodeFeature admission policy, enforced by a real current kube-apiserver: gfd, as the
overlay's service account bound to a pod on gpu-node-1, writes its own node's NodeFeature; the
server refuses other nodes' objects and keys gfd cannot produce, and audits each refusal."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.current import ControlPlane, kubelet_node, pod_token, started
from tests.e2e.fixtures_shared import gfd_as
from tests.e2e.gfdrun import CRD
from tests.test_manifests import tool

NAMESPACE = "gpu-feature-discovery"
USER = f"system:serviceaccount:{NAMESPACE}:gfd"
POLICY = "gfd-nodefeature"
API = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with started() as plane:
        if tool.kustomize_command() is None:
            pytest.skip("no kustomize renderer (kubectl)")
        plane.apply_all([yaml.safe_load(CRD.read_text())])
        objects = [o for o in tool.render(tool.Variant("nodefeature")) if o["kind"] != "DaemonSet"]
        assert POLICY in [o["metadata"]["name"] for o in objects]
        plane.apply_all(objects)
        for node in ("gpu-node-1", "gpu-node-2"):
            kubelet_node(plane, node)
        yield plane


def nodefeature(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {NODE_NAME_LABEL: node}},
        "spec": {"labels": labels},
    }


def create(
    plane: ControlPlane, token: str, obj: dict[str, Any], *, dry_run: bool = False
) -> tuple[int, Any]:
    return plane.request("POST", API + ("?dryRun=All" if dry_run else ""), obj, token=token)


@pytest.fixture(scope="module")
def token(plane: ControlPlane) -> str:
    token = pod_token(plane, NAMESPACE, "gfd", "gpu-node-1")
    other = nodefeature("nvidia-features-for-gpu-node-2", "gpu-node-2", {})
    # RBAC and the policy take effect once the server has loaded them: wait until the
    # refusal is the policy's (a dry run: nothing is created while they load).
    plane.wait_for(
        "the policy in force",
        lambda: POLICY in str(create(plane, token, other, dry_run=True)[1]),
    )
    return token


def gfd(
    plane: ControlPlane, tmp_path: Path, token: str, node: str
) -> subprocess.CompletedProcess[str]:
    api = ("--use-node-feature-api", "--namespace", NAMESPACE, "--node-name", node)
    return gfd_as(plane, tmp_path, token, NAMESPACE, "--oneshot", *api)


def refusals(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in plane.audit_events(user=USER, resource="nodefeatures")
        if e.get("stage") == "ResponseComplete"
        and e.get("objectRef", {}).get("name") in (name, None)
        and e.get("responseStatus", {}).get("code", 0) == 403
        and POLICY in str(e.get("responseStatus", {}))
    ]


def test_gfd_as_its_service_account_writes_its_own_nodes_object(
    plane: ControlPlane, token: str, tmp_path: Path
) -> None:
    done = gfd(plane, tmp_path, token, "gpu-node-1")
    assert done.returncode == 0, done.stderr
    obj = plane.ok("GET", f"{API}/nvidia-features-for-gpu-node-1")
    assert obj["metadata"]["labels"][NODE_NAME_LABEL] == "gpu-node-1"
    assert obj["spec"]["labels"]["nvidia.com/gpu.count"]
    # A second pass updates it (UPDATE passes the policy too).
    done = gfd(plane, tmp_path, token, "gpu-node-1")
    assert done.returncode == 0, done.stderr


def test_gfd_is_refused_another_nodes_object_by_the_server(
    plane: ControlPlane, token: str, tmp_path: Path
) -> None:
    done = gfd(plane, tmp_path, token, "gpu-node-2")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert plane.get(f"{API}/nvidia-features-for-gpu-node-2") is None
    assert refusals(plane, "nvidia-features-for-gpu-node-2"), "no refusal in the audit log"


@pytest.mark.parametrize(
    ("name", "node", "labels"),
    [
        ("nvidia-features-for-gpu-node-1", "gpu-node-2", {}),
        ("nvidia-features-for-gpu-node-1", "gpu-node-1", {"nvidia.com/mig.config": "all-1g.5gb"}),
        ("nvidia-features-for-gpu-node-1", "gpu-node-1", {"nvidia.com/gpu.present": "true"}),
        ("nvidia-features-for-gpu-node-1", "gpu-node-1", {"example.com/rack": "r1"}),
        ("gpu-node-1", "gpu-node-1", {}),
    ],
    ids=["other-node-label", "mig-config", "gpu-present", "foreign-key", "other-name"],
)
def test_objects_outside_its_own_are_refused(
    plane: ControlPlane, token: str, name: str, node: str, labels: dict[str, str]
) -> None:
    status, answer = create(plane, token, nodefeature(name, node, labels), dry_run=True)
    assert status == 403, answer
    assert POLICY in answer["message"]


def test_its_own_keys_pass_the_policy(plane: ControlPlane, token: str) -> None:
    obj = nodefeature(
        "nvidia-features-for-gpu-node-1",
        "gpu-node-1",
        {"nvidia.com/gpu.product": "A100", "nvidia.com/mig-1g.5gb.count": "7"},
    )
    status, answer = create(plane, token, obj, dry_run=True)
    # 201, or 409 when the first test's object exists: both passed admission
    assert status in (201, 409), answer
