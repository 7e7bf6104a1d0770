"""The NodeFeature output (SPEC §6.2) against the fake API server, through the real client."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.errors import PublishError
from gfd.outputs.nodefeature import NodeFeatureOutput
from tests.fakes.fake_apiserver import FakeApiServer
from tests.fakes.waits import output_without_waits

NAMESPACE = "gpu-operator"
OBJECT = "nvidia-features-for-n1"
PATH = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}/nodefeatures"
LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}


API_NODE_N1: dict[str, Any] = {}


def make_output(kubeconfig: str, **overrides: Any) -> NodeFeatureOutput:
    values = {"use_node_feature_api": True, "namespace": NAMESPACE, **overrides}
    return output_without_waits(NodeFeatureOutput, kubeconfig, **values)


def stored(api: FakeApiServer) -> dict[str, Any]:
    obj = api.get("NodeFeature", OBJECT, NAMESPACE)
    assert obj is not None
    return obj


def test_first_publish_creates_the_object_as_upstream_does(
    api: FakeApiServer, kubeconfig: str
) -> None:
    make_output(kubeconfig).publish(LABELS)
    obj = stored(api)
    assert obj["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    assert obj["kind"] == "NodeFeature"
    assert obj["metadata"]["name"] == OBJECT
    assert obj["metadata"]["namespace"] == NAMESPACE
    assert obj["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "n1"}
    assert "ownerReferences" not in obj["metadata"]
    # full keys, as upstream puts them in spec.labels
    features = {"flags": {}, "attributes": {}, "instances": {}}
    assert obj["spec"] == {"features": features, "labels": LABELS}
    assert api.counts() == {("GET", f"{PATH}/{OBJECT}"): 1, ("POST", PATH): 1}


def test_publishing_the_same_labels_again_writes_nothing(
    api: FakeApiServer, kubeconfig: str
) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    version = stored(api)["metadata"]["resourceVersion"]
    api.clear_requests()
    output.publish(dict(reversed(list(LABELS.items()))))
    assert api.counts() == {("GET", f"{PATH}/{OBJECT}"): 1}
    assert stored(api)["metadata"]["resourceVersion"] == version


def test_changed_labels_update_the_object(api: FakeApiServer, kubeconfig: str) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    uid = stored(api)["metadata"]["uid"]
    api.clear_requests()
    output.publish({"nvidia.com/gpu.count": "4"})
    assert stored(api)["spec"]["labels"] == {"nvidia.com/gpu.count": "4"}
    assert stored(api)["metadata"]["uid"] == uid
    assert [(r.method, r.status) for r in api.requests] == [("GET", 200), ("PUT", 200)]
    assert len(api.objects("NodeFeature")) == 1


#: a write refused for a conflict, then read again and written again
RETRIED_AFTER_A_CONFLICT = [("GET", 200), ("PUT", 409), ("GET", 200), ("PUT", 200)]


def put_foreign_object(api: FakeApiServer, **labels: str) -> None:
    """This node's NodeFeature as another writer (upstream gfd) left it: no status."""
    api.put_object({
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
        "metadata": {"name": OBJECT, "namespace": NAMESPACE,
                     "labels": {"nfd.node.kubernetes.io/node-name": "n1", **labels}},
        "spec": {"labels": {"nvidia.com/gpu.count": "1"}},
    })  # fmt: skip


def test_an_existing_object_from_upstream_is_taken_over(
    api: FakeApiServer, kubeconfig: str
) -> None:
    put_foreign_object(api, extra="x")
    make_output(kubeconfig).publish(LABELS)
    obj = stored(api)
    assert obj["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "n1"}
    assert obj["spec"]["labels"] == LABELS


def test_created_and_updated_objects_carry_a_status(api: FakeApiServer, kubeconfig: str) -> None:
    """NFD's Go type has ``Status`` without omitempty (api/nfd/v1alpha1/types.go), so its
    clients always send one and its development CRD lists ``status`` as required; a CRD
    without the field prunes it.  An object taken over without one gets one on update."""
    put_foreign_object(api)
    make_output(kubeconfig).publish(LABELS)
    assert stored(api)["status"] == {}
    api.delete("NodeFeature", OBJECT, NAMESPACE)
    make_output(kubeconfig).publish(LABELS)
    assert stored(api)["status"] == {} and stored(api)["spec"]["labels"] == LABELS


def test_a_conflict_is_retried_with_a_fresh_get(api: FakeApiServer, kubeconfig: str) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.clear_requests()
    # someone else writes between our read and our write: the first PUT carries a stale
    # resourceVersion and gets 409
    touched = {"touched": "yes"}
    api.edit("NodeFeature", OBJECT, NAMESPACE, lambda o: o["metadata"].update(annotations=touched))
    api.fail(409, count=1, method="PUT")
    output.publish({"nvidia.com/gpu.count": "2"})
    assert [(r.method, r.status) for r in api.requests] == RETRIED_AFTER_A_CONFLICT
    obj = stored(api)
    assert obj["spec"]["labels"] == {"nvidia.com/gpu.count": "2"}
    assert obj["metadata"]["annotations"] == {"touched": "yes"}


def test_a_stale_resource_version_is_a_real_conflict(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.clear_requests()
    real_get = output._get
    raced = False

    def get_then_race() -> Any:
        nonlocal raced
        obj = real_get()
        if not raced:
            raced = True
            api.edit("NodeFeature", OBJECT, NAMESPACE, lambda o: o["spec"].update(raced=True))
        return obj

    monkeypatch.setattr(output, "_get", get_then_race)
    output.publish({"nvidia.com/gpu.count": "2"})
    assert [(r.method, r.status) for r in api.requests] == RETRIED_AFTER_A_CONFLICT
    assert stored(api)["spec"]["labels"] == {"nvidia.com/gpu.count": "2"}


def test_owner_references_name_the_daemonset_and_the_pod(
    api: FakeApiServer, kubeconfig: str
) -> None:
    daemonset = api.add_daemonset(NAMESPACE, "gpu-feature-discovery")
    pod = api.add_pod(NAMESPACE, "gpu-feature-discovery-x7k2p", owner=daemonset)
    make_output(kubeconfig, pod_name="gpu-feature-discovery-x7k2p").publish(LABELS)
    assert stored(api)["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpu-feature-discovery",
         "uid": daemonset["metadata"]["uid"], "controller": True},
        {"apiVersion": "v1", "kind": "Pod", "name": "gpu-feature-discovery-x7k2p",
         "uid": pod["metadata"]["uid"]},
    ]  # fmt: skip


def test_owner_references_are_added_to_an_existing_object(
    api: FakeApiServer, kubeconfig: str
) -> None:
    make_output(kubeconfig).publish(LABELS)
    daemonset = api.add_daemonset(NAMESPACE, "gfd")
    api.add_pod(NAMESPACE, "gfd-abc", owner=daemonset)
    output = make_output(kubeconfig, pod_name="gfd-abc")
    output.publish(LABELS)
    refs = stored(api)["metadata"]["ownerReferences"]
    assert [(ref["kind"], ref["name"]) for ref in refs] == [
        ("DaemonSet", "gfd"), ("Pod", "gfd-abc"),
    ]  # fmt: skip
    # resolved once: later publishes do not read the pod again
    api.clear_requests()
    output.publish({"nvidia.com/gpu.count": "1"})
    assert api.count(path_contains="/pods/") == 0


def test_a_pod_not_owned_by_a_daemonset_gives_no_owner_references(
    api: FakeApiServer, kubeconfig: str
) -> None:
    api.add_pod(NAMESPACE, "standalone")
    make_output(kubeconfig, pod_name="standalone").publish(LABELS)
    assert "ownerReferences" not in stored(api)["metadata"]


def test_a_missing_pod_does_not_stop_publishing(api: FakeApiServer, kubeconfig: str) -> None:
    make_output(kubeconfig, pod_name="gone").publish(LABELS)
    assert stored(api)["spec"]["labels"] == LABELS
    assert "ownerReferences" not in stored(api)["metadata"]


def test_verify_is_one_get_when_nothing_changed(api: FakeApiServer, kubeconfig: str) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.clear_requests()
    assert output.verify(LABELS) is False
    assert api.counts() == {("GET", f"{PATH}/{OBJECT}"): 1}


def test_verify_recreates_a_deleted_object(api: FakeApiServer, kubeconfig: str) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.delete("NodeFeature", OBJECT, NAMESPACE)
    assert output.verify(LABELS) is True
    assert stored(api)["spec"]["labels"] == LABELS


def test_verify_repairs_edited_labels(api: FakeApiServer, kubeconfig: str) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    edited = {"nvidia.com/gpu.count": "99"}
    api.edit("NodeFeature", OBJECT, NAMESPACE, lambda obj: obj["spec"]["labels"].update(edited))
    assert output.verify(LABELS) is True
    assert stored(api)["spec"]["labels"] == LABELS


def test_cleanup_deletes_only_this_nodes_object(api: FakeApiServer, kubeconfig: str) -> None:
    make_output(kubeconfig).publish(LABELS)
    make_output(kubeconfig, node_name="n2").publish(LABELS)
    output = make_output(kubeconfig)
    output.cleanup()
    names = [obj["metadata"]["name"] for obj in api.objects("NodeFeature")]
    assert names == ["nvidia-features-for-n2"]
    output.cleanup()  # nothing left: still fine


def test_on_exit_leaves_the_object(api: FakeApiServer, kubeconfig: str) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.clear_requests()
    output.on_exit()
    assert api.count() == 0
    assert stored(api)["spec"]["labels"] == LABELS


def test_an_outage_fails_the_publish_and_the_next_one_succeeds(
    api: FakeApiServer, kubeconfig: str
) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    with api.down(), pytest.raises(PublishError, match="cannot reach the API server"):
        output.publish({"nvidia.com/gpu.count": "4"})
    output.publish({"nvidia.com/gpu.count": "4"})
    assert len(api.objects("NodeFeature")) == 1
    assert stored(api)["spec"]["labels"] == {"nvidia.com/gpu.count": "4"}


def test_transient_errors_during_create_do_not_duplicate(
    api: FakeApiServer, kubeconfig: str
) -> None:
    api.fail(503, count=1, method="GET")
    api.fail(500, count=1, method="POST")
    make_output(kubeconfig).publish(LABELS)
    assert len(api.objects("NodeFeature")) == 1


def test_forbidden_is_a_clear_error(api: FakeApiServer, kubeconfig: str) -> None:
    api.fail(403, count=None)
    with pytest.raises(PublishError) as raised:
        make_output(kubeconfig).publish(LABELS)
    message = str(raised.value)
    assert message.startswith(f"publish NodeFeature {NAMESPACE}/{OBJECT}: 403 Forbidden")
    assert "RBAC" in message
    assert api.count() == 1
