"""The node-labels admission policy, enforced by a real current kube-apiserver (v1.20 has none):
gfd, as the overlay's service account bound to a pod on gpu-node-1, labels and cleans its node;
the server refuses that token elsewhere, and audits each refusal under the policy's name."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.current import ADMIN_TOKEN, ControlPlane, pod_token, started
from tests.e2e.fixtures_shared import gfd_as, oneshot_labels
from tests.test_manifests import tool

NAMESPACE = "gpu-feature-discovery"
USER = f"system:serviceaccount:{NAMESPACE}:gfd"
POLICY = "gfd-node-labels"
CONTROL_LABELS = [
    "nvidia.com/mig.config",
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.present",
    "nvidia.com/device-plugin.config",
]


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with started() as plane:
        if tool.kustomize_command() is None:
            pytest.skip("no kustomize renderer (kubectl)")
        plane.apply_all(tool.render(tool.Variant("node-labels")))
        plane.create_node("gpu-node-1", {"nvidia.com/gpu.present": "true"})
        plane.create_node("gpu-node-2", {"nvidia.com/gpu.present": "true"})
        yield plane


@pytest.fixture(scope="module")
def token(plane: ControlPlane) -> str:
    token = pod_token(plane, NAMESPACE, "gfd", "gpu-node-1")
    # The policy takes effect once the server has loaded it: wait for a refusal.
    deadline = time.monotonic() + 30
    while merge_patch(plane, token, "gpu-node-2", labels={"nvidia.com/x": "1"})[0] != 403:
        assert time.monotonic() < deadline, "the policy never took effect"
        time.sleep(0.5)
    return token


def patch(
    node: str, labels: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    metadata: dict[str, Any] = {}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return f"/api/v1/nodes/{node}", {"metadata": metadata}


def merge_patch(plane: ControlPlane, token: str, node: str, **kw: Any) -> tuple[int, Any]:
    path, body = patch(node, **kw)
    return plane.request(
        "PATCH", path, body, token=token, content_type="application/merge-patch+json"
    )


def node_labels(plane: ControlPlane, node: str) -> dict[str, str]:
    return dict(plane.ok("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels", {}))


def gfd(
    plane: ControlPlane, tmp_path: Path, token: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return gfd_as(plane, tmp_path, token, NAMESPACE, "--use-node-labels", *args)


def refusals(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    return [
        e
        for e in plane.audit_events()
        if e.get("stage") == "ResponseComplete"
        and e["user"]["username"] == USER
        and e["verb"] == "patch"
        and e.get("objectRef", {}).get("resource") == "nodes"
        and e["objectRef"].get("name") == node
        and e.get("responseStatus", {}).get("code", 0) >= 400
    ]


def test_gfd_as_its_service_account_labels_its_own_node(
    plane: ControlPlane, token: str, tmp_path: Path
) -> None:
    done = gfd(plane, tmp_path, token, "--oneshot", "--node-name", "gpu-node-1")
    assert done.returncode == 0, done.stderr
    labels = node_labels(plane, "gpu-node-1")
    for key, value in oneshot_labels().items():
        assert labels[key] == value
    assert labels["nvidia.com/gpu.present"] == "true"  # the operator's label, untouched
    annotation = plane.ok("GET", "/api/v1/nodes/gpu-node-1")["metadata"]["annotations"]
    assert "nvidia.com/gfd.managed-labels" in annotation

    done = gfd(plane, tmp_path, token, "--cleanup", "--node-name", "gpu-node-1")
    assert done.returncode == 0, done.stderr
    left = {k for k in node_labels(plane, "gpu-node-1") if k.startswith("nvidia.com/")}
    assert left == {"nvidia.com/gpu.present"}


def test_gfd_is_refused_on_another_node_by_the_server(
    plane: ControlPlane, token: str, tmp_path: Path
) -> None:
    before = node_labels(plane, "gpu-node-2")
    done = gfd(plane, tmp_path, token, "--oneshot", "--node-name", "gpu-node-2")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert node_labels(plane, "gpu-node-2") == before
    events = refusals(plane, "gpu-node-2")
    assert events, "no refused patch of gpu-node-2 in the audit log"
    assert all(e["responseStatus"]["code"] == 403 for e in events)
    assert any(POLICY in str(e.get("annotations", {})) for e in events)


@pytest.mark.parametrize(
    "change",
    [
        {"labels": {"example.com/owner": "gfd"}},
        {"labels": {"kubernetes.io/hostname": "elsewhere"}},
        {"annotations": {"example.com/note": "x"}},
        {"annotations": {"nvidia.com/gfd.managed-labels": "nvidia.com/gpu.count", "other": "x"}},
    ],
    ids=["foreign-label", "system-label", "foreign-annotation", "extra-annotation"],
)
def test_changes_outside_gfd_keys_are_refused_on_its_own_node(
    plane: ControlPlane, token: str, change: dict[str, Any]
) -> None:
    before = plane.ok("GET", "/api/v1/nodes/gpu-node-1")["metadata"]
    status, answer = merge_patch(plane, token, "gpu-node-1", **change)
    assert status == 403, answer
    assert POLICY in answer["message"]
    after = plane.ok("GET", "/api/v1/nodes/gpu-node-1")["metadata"]
    assert after.get("labels") == before.get("labels")
    assert after.get("annotations") == before.get("annotations")
    assert refusals(plane, "gpu-node-1")


@pytest.mark.parametrize("label", CONTROL_LABELS)
def test_gpu_operator_control_labels_are_refused(
    plane: ControlPlane, token: str, label: str
) -> None:
    """Neither added, changed nor removed. (Removing a label the node does not have changes
    nothing and passes: the operator sets it first, as an admin.)"""
    status, answer = merge_patch(plane, ADMIN_TOKEN, "gpu-node-1", labels={label: "true"})
    assert status == 200, answer
    before = node_labels(plane, "gpu-node-1")
    for value in ("gfd-was-here", None):
        status, answer = merge_patch(plane, token, "gpu-node-1", labels={label: value})
        assert status == 403, f"{label}={value}: {status} {answer}"
        assert POLICY in answer["message"]
        assert label in answer["message"]  # the policy names the key it refused
    assert node_labels(plane, "gpu-node-1") == before
    assert refusals(plane, "gpu-node-1")


@pytest.mark.parametrize(
    "label", ["nvidia.com/anything", "nvidia.com/gfd.managed-labels", "nvidia.com/gpu.product.x"]
)
def test_nvidia_keys_gfd_cannot_produce_are_refused(
    plane: ControlPlane, token: str, label: str
) -> None:
    status, answer = merge_patch(plane, token, "gpu-node-1", labels={label: "1"})
    assert status == 403, answer
    assert label in answer["message"]


def test_its_partition_annotation_is_allowed(plane: ControlPlane, token: str) -> None:
    """nvidia.com/gfd.gpu-partitions (--topology-labels) is gfd's own annotation too."""
    for value in ('[{"ids":[0,1]}]', None):
        status, answer = merge_patch(
            plane, token, "gpu-node-1", annotations={"nvidia.com/gfd.gpu-partitions": value}
        )
        assert status == 200, answer


def test_its_own_keys_are_allowed_on_its_own_node(plane: ControlPlane, token: str) -> None:
    status, answer = merge_patch(
        plane,
        token,
        "gpu-node-1",
        labels={"nvidia.com/gpu.count": "8"},
        annotations={"nvidia.com/gfd.managed-labels": "nvidia.com/gpu.count"},
    )
    assert status == 200, answer
    status, answer = merge_patch(
        plane,
        token,
        "gpu-node-1",
        labels={"nvidia.com/gpu.count": None},
        annotations={"nvidia.com/gfd.managed-labels": None},
    )
    assert status == 200, answer


def test_other_users_are_not_affected(plane: ControlPlane) -> None:
    status, answer = plane.request(
        "PATCH",
        "/api/v1/nodes/gpu-node-2",
        {"metadata": {"labels": {"example.com/admin": "yes"}}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, answer
