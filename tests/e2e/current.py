"""Harness additions for the newest server: a control plane per module, TokenRequest tokens bound to
a pod on a node (the server records that node, which the admission policies read), and Nodes as
a kubelet registers them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest

from tests.e2e import controlplane, servers
from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane, Server
from tests.e2e.helm import REQUIRED

__all__ = ["ADMIN_TOKEN", "ControlPlane", "kubelet_node", "pod_token", "started"]


@contextmanager
def started(server: Server = servers.CURRENT) -> Iterator[ControlPlane]:
    """A control plane of SERVER for the caller alone; skips (fails under `make e2e`) when
    its binaries are not built."""
    missing = server.missing()
    if missing:
        reason = f"{server.version}: missing {', '.join(missing)} (build: {server.build_hint})"
        if REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)
    with controlplane.running(server) as plane:
        yield plane


def kubelet_node(plane: ControlPlane, name: str, labels: Mapping[str, str] | None = None) -> None:
    """A Node as a kubelet registers it, annotations included (nfd-master's JSON patches add
    to the annotations map, and are refused where there is none)."""
    plane.create_node(name, labels)
    plane.ok(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {
            "metadata": {
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}
            }
        },
        content_type="application/merge-patch+json",
    )


def pod_token(
    plane: ControlPlane, namespace: str, service_account: str, node: str, pod: str | None = None
) -> str:
    """A token of the service account bound to a (pending, kubelet-less) pod on NODE: what
    the kubelet would mount into gfd's pod there."""
    pod = pod or f"gfd-{node}"
    status, answer = plane.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "metadata": {"name": pod},
            "spec": {
                "nodeName": node,
                "serviceAccountName": service_account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "gfd", "image": "gfd"}],
            },
        },
    )
    assert status in (201, 409), answer
    uid = plane.ok("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")["metadata"]["uid"]
    answer = plane.ok(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [],
                "expirationSeconds": 3600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
            },
        },
    )
    return str(answer["status"]["token"])
