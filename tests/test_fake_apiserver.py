"""The fake API server itself: it must behave like the real one where our outputs rely on it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.fakes.fake_apiserver import FakeApiServer, json_merge_patch


def call(
    api: FakeApiServer, method: str, path: str, body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, dict[str, Any]]:  # fmt: skip
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


# RFC 7386, appendix A
@pytest.mark.parametrize(("target", "patch", "result"), [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])  # fmt: skip
def test_json_merge_patch_follows_rfc7386(target: Any, patch: Any, result: Any) -> None:
    assert json_merge_patch(target, patch) == result


def test_objects_get_uid_and_resource_version(api: FakeApiServer) -> None:
    node = api.add_node("n1", labels={"a": "b"})
    status, fetched = call(api, "GET", "/api/v1/nodes/n1")
    assert status == 200
    assert fetched == node
    assert fetched["metadata"]["uid"]
    assert fetched["metadata"]["resourceVersion"]


def test_missing_object_is_a_status_404(api: FakeApiServer) -> None:
    status, body = call(api, "GET", "/api/v1/nodes/nope")
    assert status == 404
    assert body["kind"] == "Status"
    assert body["reason"] == "NotFound"
    assert body["code"] == 404


def test_create_then_create_again_is_already_exists(api: FakeApiServer) -> None:
    path = "/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/ns/nodefeatures"
    body = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": "x"},
        "spec": {},  # the CRD requires it: a real server answers 422 without
    }
    status, created = call(api, "POST", path, body)
    assert status == 201
    assert created["metadata"]["namespace"] == "ns"
    status, error = call(api, "POST", path, body)
    assert (status, error["reason"]) == (409, "AlreadyExists")


def test_put_with_a_stale_resource_version_is_a_conflict(api: FakeApiServer) -> None:
    node = api.add_node("n1")
    api.edit("Node", "n1", "", lambda obj: obj["metadata"].setdefault("labels", {}).update(x="1"))
    node["metadata"]["labels"] = {"y": "2"}
    status, error = call(api, "PUT", "/api/v1/nodes/n1", node)
    assert (status, error["reason"]) == (409, "Conflict")
    assert api.node_labels("n1") == {"x": "1"}


def test_put_that_changes_nothing_keeps_the_resource_version(api: FakeApiServer) -> None:
    node = api.add_node("n1", labels={"a": "b"})
    status, updated = call(api, "PUT", "/api/v1/nodes/n1", node)
    assert status == 200
    assert updated["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]
    node["metadata"]["labels"]["a"] = "c"
    status, updated = call(api, "PUT", "/api/v1/nodes/n1", node)
    assert updated["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]


def test_merge_patch_sets_and_removes_labels(api: FakeApiServer) -> None:
    api.add_node("n1", labels={"keep": "1", "drop": "2"})
    patch = {"metadata": {"labels": {"drop": None, "new": "3"}}}
    status, _ = call(api, "PATCH", "/api/v1/nodes/n1", patch, "application/merge-patch+json")
    assert status == 200
    assert api.node_labels("n1") == {"keep": "1", "new": "3"}


def test_other_patch_types_are_refused(api: FakeApiServer) -> None:
    api.add_node("n1")
    patch = {"metadata": {"labels": {"a": "b"}}}
    for content_type in ("application/json-patch+json", "application/strategic-merge-patch+json"):
        status, error = call(api, "PATCH", "/api/v1/nodes/n1", patch, content_type)
        assert (status, error["reason"]) == (415, "UnsupportedMediaType")
    assert api.node_labels("n1") == {}


def test_delete(api: FakeApiServer) -> None:
    api.add_node("n1")
    assert call(api, "DELETE", "/api/v1/nodes/n1")[0] == 200
    assert call(api, "DELETE", "/api/v1/nodes/n1")[0] == 404


def test_requests_are_counted_by_verb_and_path(api: FakeApiServer) -> None:
    api.add_node("n1")
    call(api, "GET", "/api/v1/nodes/n1")
    call(api, "GET", "/api/v1/nodes/n1")
    call(api, "GET", "/api/v1/nodes/n2")
    assert api.counts() == {("GET", "/api/v1/nodes/n1"): 2, ("GET", "/api/v1/nodes/n2"): 1}
    assert api.count("GET") == 3
    api.clear_requests()
    assert api.count() == 0


def test_injected_status_faults_are_used_up(api: FakeApiServer) -> None:
    api.add_node("n1")
    api.fail(503, count=2, method="GET")
    api.fail(429, count=1, retry_after=3)
    assert call(api, "GET", "/api/v1/nodes/n1")[0] == 503
    assert call(api, "GET", "/api/v1/nodes/n1")[0] == 503
    status, body = call(api, "GET", "/api/v1/nodes/n1")
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert call(api, "GET", "/api/v1/nodes/n1")[0] == 200


def test_dropped_connection_gets_no_answer(api: FakeApiServer) -> None:
    api.add_node("n1")
    api.drop()
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        call(api, "GET", "/api/v1/nodes/n1")
    assert [r.status for r in api.requests] == [0]
    assert call(api, "GET", "/api/v1/nodes/n1")[0] == 200


def test_down_refuses_connections_and_keeps_objects(api: FakeApiServer) -> None:
    api.add_node("n1", labels={"a": "b"})
    port = api.port
    with api.down():
        assert not api.is_up
        with pytest.raises(urllib.error.URLError):
            call(api, "GET", "/api/v1/nodes/n1")
    assert api.port == port
    status, node = call(api, "GET", "/api/v1/nodes/n1")
    assert status == 200
    assert node["metadata"]["labels"] == {"a": "b"}
