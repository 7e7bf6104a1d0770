"""The fake API server (tests/fakes) against the real one: the same requests, in the same
order, to both; the answers must agree (status, and for successes the labels, annotations
and NodeFeature spec) except for the differences listed here on purpose.  A fake that
starts to hide something the real server does -- or a difference that goes away -- fails
this test, so the fake-based unit tests keep meaning what they say."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.controlplane import ADMIN_TOKEN, GFD_NAMESPACE, ControlPlane
from tests.fakes.fake_apiserver import FakeApiServer

MERGE = "application/merge-patch+json"
NF = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{GFD_NAMESPACE}/nodefeatures"
NF_KIND = {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature"}
NODE = "/api/v1/nodes/parity"

STEPS: list[tuple[str, str, str, Any, str]] = [
    (
        "create node",
        "POST",
        "/api/v1/nodes",
        {"metadata": {"name": "parity", "labels": {"a": "1"}, "annotations": {"x": "1"}}},
        "",
    ),
    ("get a missing node", "GET", "/api/v1/nodes/nope", None, ""),
    (
        "merge patch: set and null",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"nvidia.com/x": "1", "gone": None}}},
        MERGE,
    ),
    ("merge patch: no-op", "PATCH", NODE, {"metadata": {"labels": {"nvidia.com/x": "1"}}}, MERGE),
    (
        "merge patch: last annotation removed",
        "PATCH",
        NODE,
        {"metadata": {"annotations": {"x": None}}},
        MERGE,
    ),
    (
        "invalid label value",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"nvidia.com/y": "bad value!"}}},
        MERGE,
    ),
    ("invalid label key", "PATCH", NODE, {"metadata": {"labels": {"nvidia.com/-bad": "1"}}}, MERGE),
    (
        "patch as application/json",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"z": "1"}}},
        "application/json",
    ),
    (
        "strategic merge patch",
        "PATCH",
        NODE,
        {"metadata": {"labels": {"z": "1"}}},
        "application/strategic-merge-patch+json",
    ),
    (
        "patch with a stale resourceVersion",
        "PATCH",
        NODE,
        {"metadata": {"resourceVersion": "1", "labels": {"z": "2"}}},
        MERGE,
    ),
    (
        "patch a missing node",
        "PATCH",
        "/api/v1/nodes/nope",
        {"metadata": {"labels": {"z": "2"}}},
        MERGE,
    ),
    (
        "node PUT without resourceVersion",
        "PUT",
        NODE,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "parity", "labels": {"only": "this"}},
        },
        "",
    ),
    (
        "create NodeFeature",
        "POST",
        NF,
        {
            **NF_KIND,
            "metadata": {"name": "nf1", "labels": {"nfd.node.kubernetes.io/node-name": "parity"}},
            "spec": {
                "features": {"flags": {}, "attributes": {}, "instances": {}},
                "labels": {"nvidia.com/a": "1"},
            },
        },
        "",
    ),
    ("get NodeFeature", "GET", NF + "/nf1", None, ""),
    ("create it again", "POST", NF, {**NF_KIND, "metadata": {"name": "nf1"}, "spec": {}}, ""),
    ("NodeFeature without spec", "POST", NF, {**NF_KIND, "metadata": {"name": "nf2"}}, ""),
    (
        "NodeFeature label not a string",
        "POST",
        NF,
        {**NF_KIND, "metadata": {"name": "nf3"}, "spec": {"labels": {"a": 1}}},
        "",
    ),
    (
        "NodeFeature in a missing namespace",
        "POST",
        NF.replace(GFD_NAMESPACE, "missing-ns"),
        {**NF_KIND, "metadata": {"name": "nf4"}, "spec": {}},
        "",
    ),
    (
        "owner reference without uid",
        "POST",
        NF,
        {
            **NF_KIND,
            "metadata": {
                "name": "nf5",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd"}],
            },
            "spec": {},
        },
        "",
    ),
    (
        "NodeFeature PUT without resourceVersion",
        "PUT",
        NF + "/nf1",
        {**NF_KIND, "metadata": {"name": "nf1"}, "spec": {"labels": {"b": "2"}}},
        "",
    ),
    (
        "NodeFeature PUT, stale resourceVersion",
        "PUT",
        NF + "/nf1",
        {
            **NF_KIND,
            "metadata": {"name": "nf1", "resourceVersion": "1"},
            "spec": {"labels": {"b": "2"}},
        },
        "",
    ),
    ("delete NodeFeature", "DELETE", NF + "/nf1", None, ""),
    ("delete it again", "DELETE", NF + "/nf1", None, ""),
    (
        "pod without containers",
        "POST",
        f"/api/v1/namespaces/{GFD_NAMESPACE}/pods",
        {
            "metadata": {"name": "pp"},
            "spec": {"serviceAccountName": "gfd", "automountServiceAccountToken": False},
        },
        "",
    ),
    ("get node", "GET", NODE, None, ""),
]

#: differences kept on purpose: step -> (real status, fake status)
KNOWN = {
    # gfd sends merge patches only; the fake refuses any other patch type so that a client
    # that sends the wrong one fails loudly instead of passing by accident
    "strategic merge patch": (200, 415),
    # the fake has no Namespace objects: any namespace exists there
    "NodeFeature in a missing namespace": (404, 201),
    # the fake does not validate pod specs (gfd only reads pods)
    "pod without containers": (422, 201),
}


def call(url: str, method: str, path: str, body: Any, content_type: str, **kw: Any) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", content_type or "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30, **kw) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw)
        except ValueError:
            return error.code, raw.decode(errors="replace")


def essence(answer: Any) -> Any:
    """What the two may not disagree on in a successful answer."""
    if not isinstance(answer, dict) or answer.get("kind") == "Status":
        return answer.get("status") if isinstance(answer, dict) else answer
    metadata = answer.get("metadata") or {}
    return {
        "kind": answer.get("kind"),
        "labels": metadata.get("labels"),
        "annotations": metadata.get("annotations"),
        "ownerReferences": metadata.get("ownerReferences"),
        "spec": answer.get("spec") if answer.get("kind") == "NodeFeature" else None,
    }


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def test_the_fake_answers_as_the_real_server_does(
    gfd_rbac: ControlPlane, fake: FakeApiServer
) -> None:
    differences = {}
    for name, method, path, body, content_type in STEPS:
        real_status, real = call(
            gfd_rbac.url, method, path, body, content_type, context=gfd_rbac._context()
        )
        fake_status, faked = call(fake.url, method, path, body, content_type)
        if real_status != fake_status:
            differences[name] = (real_status, fake_status)
        elif real_status < 300:
            assert essence(real) == essence(faked), name
        else:
            assert (real.get("reason"), real.get("code")) == (
                faked.get("reason"),
                faked.get("code"),
            ), name
    gfd_rbac.delete(NODE)
    assert differences == KNOWN
