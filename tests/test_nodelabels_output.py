"""The node-labels output (SPEC §6.3) against the fake API server, through the real client."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.errors import PublishError
from gfd.outputs.nodelabels import (
    MANAGED_LABELS_ANNOTATION,
    NodeLabelsOutput,
    labels_patch,
    owned_keys_from,
)
from tests.fakes.fake_apiserver import MERGE_PATCH, FakeApiServer
from tests.fakes.waits import output_without_waits
from tests.helpers import FOREIGN, FOREIGN_ANNOTATIONS

NODE_PATH = "/api/v1/nodes/n1"
LABELS = {
    "nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/mig.capable": "true",
}  # fmt: skip


API_NODE_N1 = {"labels": FOREIGN, "annotations": FOREIGN_ANNOTATIONS}


def make_output(kubeconfig: str, **overrides: Any) -> NodeLabelsOutput:
    return output_without_waits(NodeLabelsOutput, kubeconfig, use_node_labels=True, **overrides)


def managed(keys: dict[str, str]) -> str:
    return ",".join(sorted(keys))


def test_labels_patch_sets_new_nulls_gone_and_records_ownership() -> None:
    patch = labels_patch(
        {"nvidia.com/b": "2", "nvidia.com/a": "1"}, {"nvidia.com/a", "nvidia.com/old"}
    )
    assert patch == {"metadata": {
        "labels": {"nvidia.com/a": "1", "nvidia.com/b": "2", "nvidia.com/old": None},
        "annotations": {MANAGED_LABELS_ANNOTATION: "nvidia.com/a,nvidia.com/b"},
    }}  # fmt: skip


def test_only_nvidia_keys_are_taken_from_the_annotation() -> None:
    recorded = "nvidia.com/gpu.count, kubernetes.io/hostname,,nvidia.com/"
    node = {"metadata": {"annotations": {MANAGED_LABELS_ANNOTATION: recorded}}}
    assert owned_keys_from(node) == {"nvidia.com/gpu.count"}
    assert owned_keys_from({"metadata": {}}) == frozenset()


def test_first_publish_is_one_read_and_one_merge_patch(api: FakeApiServer, kubeconfig: str) -> None:
    make_output(kubeconfig).publish(LABELS)
    assert [(r.method, r.path, r.content_type) for r in api.requests] == [
        ("GET", NODE_PATH, None), ("PATCH", NODE_PATH, MERGE_PATCH),
    ]  # fmt: skip
    assert api.node_labels("n1") == {**FOREIGN, **LABELS}
    assert api.node_annotations("n1") == {
        **FOREIGN_ANNOTATIONS,
        MANAGED_LABELS_ANNOTATION: managed(LABELS),
    }


def test_a_change_is_one_patch_that_touches_only_owned_keys(
    api: FakeApiServer, kubeconfig: str
) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.clear_requests()
    new = {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "40960"}
    output.publish(new)
    assert [(r.method, r.content_type) for r in api.requests] == [("PATCH", MERGE_PATCH)]
    assert api.requests[0].body == {
        "metadata": {
            "labels": {
                "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "40960",
                "nvidia.com/gpu.product": None, "nvidia.com/mig.capable": None,
            },
            "annotations": {MANAGED_LABELS_ANNOTATION: managed(new)},
        }
    }  # fmt: skip
    assert api.node_labels("n1") == {**FOREIGN, **new}


def test_a_restart_keeps_the_labels_and_removes_stale_ones(
    api: FakeApiServer, kubeconfig: str
) -> None:
    first = make_output(kubeconfig)
    first.publish(LABELS)
    first.on_exit()
    assert api.node_labels("n1") == {**FOREIGN, **LABELS}  # nothing removed on exit

    second = make_output(kubeconfig)  # a new process: knows nothing but the annotation
    second.publish({"nvidia.com/gpu.count": "8"})
    assert api.node_labels("n1") == {**FOREIGN, "nvidia.com/gpu.count": "8"}
    assert api.node_annotations("n1")[MANAGED_LABELS_ANNOTATION] == "nvidia.com/gpu.count"


def test_a_hand_edited_annotation_cannot_make_it_delete_foreign_labels(
    api: FakeApiServer, kubeconfig: str
) -> None:
    forged = {MANAGED_LABELS_ANNOTATION: "kubernetes.io/hostname,nvidia.com/gpu.count"}
    api.edit("Node", "n1", "", lambda node: node["metadata"]["annotations"].update(forged))
    make_output(kubeconfig).publish(LABELS)
    assert api.node_labels("n1") == {**FOREIGN, **LABELS}


def test_verify_is_one_get_when_nothing_changed(api: FakeApiServer, kubeconfig: str) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.clear_requests()
    assert output.verify(LABELS) is False
    assert api.counts() == {("GET", NODE_PATH): 1}


@pytest.mark.parametrize("tamper", [
    pytest.param(lambda m: m["labels"].pop("nvidia.com/gpu.count"), id="label removed"),
    pytest.param(lambda m: m["labels"].update({"nvidia.com/gpu.count": "1"}), id="edited"),
    pytest.param(lambda m: m["annotations"].pop(MANAGED_LABELS_ANNOTATION), id="annotation"),
])  # fmt: skip
def test_verify_repairs_what_someone_else_changed(
    api: FakeApiServer, kubeconfig: str, tamper: Any
) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    api.edit("Node", "n1", "", lambda node: tamper(node["metadata"]))
    api.clear_requests()
    assert output.verify(LABELS) is True
    assert [r.method for r in api.requests] == ["GET", "PATCH"]
    assert api.node_labels("n1") == {**FOREIGN, **LABELS}
    assert api.node_annotations("n1")[MANAGED_LABELS_ANNOTATION] == managed(LABELS)


def test_verify_removes_a_stale_owned_label_put_back_by_someone(
    api: FakeApiServer, kubeconfig: str
) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    output.publish({"nvidia.com/gpu.count": "8"})

    def put_back(node: dict[str, Any]) -> None:
        node["metadata"]["annotations"][MANAGED_LABELS_ANNOTATION] = managed(LABELS)
        node["metadata"]["labels"].update(LABELS)

    api.edit("Node", "n1", "", put_back)
    assert output.verify({"nvidia.com/gpu.count": "8"}) is True
    assert api.node_labels("n1") == {**FOREIGN, "nvidia.com/gpu.count": "8"}


def test_cleanup_leaves_the_node_as_it_was_before(api: FakeApiServer, kubeconfig: str) -> None:
    before = api.node("n1")["metadata"]
    output = make_output(kubeconfig)
    output.publish(LABELS)
    output.publish({**LABELS, "nvidia.com/gpu.count": "4"})

    make_output(kubeconfig).cleanup()  # a separate `gfd --cleanup` process
    after = api.node("n1")["metadata"]
    assert after["labels"] == before["labels"]
    assert after["annotations"] == before["annotations"]


def test_cleanup_with_nothing_published_writes_nothing(api: FakeApiServer, kubeconfig: str) -> None:
    make_output(kubeconfig).cleanup()
    assert [r.method for r in api.requests] == ["GET"]
    assert api.node_labels("n1") == FOREIGN


def test_a_missing_node_is_an_error_at_once(api: FakeApiServer, kubeconfig: str) -> None:
    with pytest.raises(PublishError, match=r"404 NotFound: nodes \"n9\" not found"):
        make_output(kubeconfig, node_name="n9").publish(LABELS)
    assert api.count() == 1


def test_an_outage_fails_the_publish_and_the_next_one_repairs(
    api: FakeApiServer, kubeconfig: str
) -> None:
    output = make_output(kubeconfig)
    output.publish(LABELS)
    with api.down(), pytest.raises(PublishError, match="gave up after"):
        output.publish({"nvidia.com/gpu.count": "2"})
    api.fail(503, count=1)
    output.publish({"nvidia.com/gpu.count": "2"})
    assert api.node_labels("n1") == {**FOREIGN, "nvidia.com/gpu.count": "2"}
