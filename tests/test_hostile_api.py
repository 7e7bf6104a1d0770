"""A broken or hostile API server, in-process: the real client and outputs against the fake
misbehaving at the HTTP level.  Nothing owned is orphaned, nothing foreign
is touched, no answer is trusted for more than it is, and no request outlives its deadline.
Signals and exit statuses are in tests/test_hostile_api_process.py."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import settings as settings_
from hypothesis import strategies as st

from gfd.errors import PublishError, UsageError
from gfd.kube.client import MAX_ANSWER_BYTES, KubeClient, retry_budget
from gfd.labels import build, keys
from gfd.outputs.nodefeature import NodeFeatureOutput
from gfd.outputs.nodelabels import (
    MANAGED_LABELS_ANNOTATION,
    NFD_FEATURE_LABELS_ANNOTATION,
    NodeLabelsOutput,
    owned_keys_from,
)
from gfd.outputs.topology_extras import PartitionsAnnotation
from gfd.partition_table import Partition
from gfd.settings import Settings
from tests.fakes.fake_apiserver import FakeApiServer, Fault, write_kubeconfig
from tests.fakes.waits import FakeTime, client_without_waits
from tests.helpers import table
from tests.strategies import configs, snapshots

pytestmark = pytest.mark.timeout(120)

NODE = "/api/v1/nodes/n1"
FOREIGN = {
    "kubernetes.io/hostname": "n1", "nvidia.com/gpu.present": "true",
    "nvidia.com/device-plugin.config": "a100", "nvidia.com/mig.config": "all-1g.5gb",
    "nvidia.com/gpu.deploy.device-plugin": "true",
}  # fmt: skip
A = {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "A"}
B = {"nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "40960",
     "nvidia.com/mig.capable": "false"}  # fmt: skip
C = {"nvidia.com/gpu.count": "2"}


API_NODE_N1 = {"labels": FOREIGN}  # the shared api fixture (tests/conftest.py) adds it


INTERVAL = 1.0
#: what each operation may take, as at a 1 s interval; the outputs below get a client that
#: skips the waits between attempts (tests/fakes/waits.py), so a test that makes an
#: operation fail until its budget is spent waits only for the requests themselves
BUDGET = retry_budget(INTERVAL)


def settings(kubeconfig: str, **overrides: Any) -> Settings:
    return Settings(
        node_name="n1", kubeconfig=kubeconfig, **{"sleep_interval": INTERVAL, **overrides}
    )


def node_labels(kubeconfig: str, **client: float) -> NodeLabelsOutput:
    return NodeLabelsOutput(
        settings(kubeconfig, use_node_labels=True),
        client=client_without_waits(kubeconfig, budget=BUDGET, **client),
    )


def node_feature(kubeconfig: str, **overrides: Any) -> NodeFeatureOutput:
    return NodeFeatureOutput(
        settings(kubeconfig, use_node_feature_api=True, **overrides),
        client=client_without_waits(kubeconfig, budget=BUDGET),
    )


def gfd_keys_on(api: FakeApiServer) -> dict[str, str]:
    return {k: v for k, v in api.node_labels("n1").items() if k not in FOREIGN}


# ----------------------------------------------------------------- lost answers


#: a request's own limit where a test makes the server answer later than that
SHORT_REQUEST_TIMEOUT = 0.3


def published_a_then_b_unanswered(
    api: FakeApiServer, kubeconfig: str, lost: Fault | None = None, **client: float
) -> NodeLabelsOutput:
    """A published and confirmed; then every write of B applied by the server, its answer
    lost (by default a 504 from a proxy) and the node unreadable until the faults are
    cleared: the pass fails, not knowing what it left on the node."""
    output = node_labels(kubeconfig, **client)
    output.publish(A)
    lost = lost or Fault(status=504, after_apply=True)
    api.inject(dataclasses.replace(lost, method="PATCH", count=None))
    api.fail(503, count=None, method="GET")
    with pytest.raises(PublishError):
        output.publish(B)
    assert gfd_keys_on(api) == B  # it did land
    api.clear_faults()
    return output


@pytest.mark.parametrize(("lost", "client"), table([
    ("504-from-a-proxy", Fault(status=504, after_apply=True), {}),
    ("connection-dropped", Fault(drop=True, after_apply=True), {}),
    ("slower-than-the-timeout", Fault(delay=1.5, after_apply=True),
     {"request_timeout": SHORT_REQUEST_TIMEOUT}),
]))  # fmt: skip
def test_a_write_applied_but_unanswered_orphans_nothing(
    api: FakeApiServer, kubeconfig: str, lost: Fault, client: dict[str, float]
) -> None:
    output = published_a_then_b_unanswered(api, kubeconfig, lost, **client)
    output.publish(C)
    assert gfd_keys_on(api) == C
    assert api.node_annotations("n1")[MANAGED_LABELS_ANNOTATION] == "nvidia.com/gpu.count"
    output.cleanup()
    assert api.node_labels("n1") == FOREIGN


def test_cleanup_after_an_unanswered_write_removes_what_it_wrote(
    api: FakeApiServer, kubeconfig: str
) -> None:
    published_a_then_b_unanswered(api, kubeconfig)
    node_labels(kubeconfig).cleanup()  # a fresh process, as the cleanup Job is
    assert api.node_labels("n1") == FOREIGN


def test_verification_after_an_unanswered_write_removes_stale_keys(
    api: FakeApiServer, kubeconfig: str
) -> None:
    output = published_a_then_b_unanswered(api, kubeconfig)
    # the next pass's labels equal what was published before, so the agent only verifies
    assert output.verify(A) is True
    assert gfd_keys_on(api) == A


# ----------------------------------------------------------------- foreign keys


def test_only_keys_gfd_can_produce_count_as_owned() -> None:
    produced = [
        *(keys.full_key(name) for name in keys.NODE_WIDE),
        *(keys.full_key(f"gpu.{suffix}") for suffix in keys.PER_RESOURCE),
        *(keys.full_key(f"mig-1g.5gb.me.{suffix}") for suffix in keys.PER_RESOURCE),
        "nvidia.com/a100-40gb.product",
    ]
    foreign = [
        "nvidia.com/gpu.present", "nvidia.com/device-plugin.config", "nvidia.com/mig.config",
        "nvidia.com/mig.config.state", "nvidia.com/gpu.deploy.driver",
        "nvidia.com/gpu.deploy.product", "nvidia.com/gfd.managed-labels",
        "nvidia.com/gpu.count.extra", "nvidia.com/GPU.count", "nvidia.com/.count", "nvidia.com/",
        "feature.node.kubernetes.io/gpu.count", "kubernetes.io/hostname",
    ]  # fmt: skip
    node = {"metadata": {"annotations": {MANAGED_LABELS_ANNOTATION: ",".join(produced + foreign)}}}
    assert owned_keys_from(node) == set(produced)


@pytest.mark.parametrize("step", ["publish", "cleanup"])
def test_a_hand_edited_annotation_never_deletes_foreign_labels(
    api: FakeApiServer, kubeconfig: str, step: str
) -> None:
    recorded = ",".join(sorted({*FOREIGN, *A}))
    api.edit_node("n1", labels={**FOREIGN, **A}, annotations={MANAGED_LABELS_ANNOTATION: recorded})
    output = node_labels(kubeconfig)
    if step == "publish":
        output.publish(C)
        assert api.node_labels("n1") == {**FOREIGN, **C}
    else:
        output.cleanup()
        assert api.node_labels("n1") == FOREIGN


@pytest.mark.parametrize("step", ["verify", "cleanup"])
def test_a_thousand_recorded_keys_are_counted_not_listed_in_a_log_line(
    api: FakeApiServer, kubeconfig: str, step: str
) -> None:
    """The annotation is the record of what gfd owns, so the keys it lists are removed; a
    record of a thousand is reported by its count and a few names, in lines of bounded
    length, whether verification finds them stale or a cleanup finds them left."""
    output = node_labels(kubeconfig)
    output.publish(A)
    stale = {f"nvidia.com/k{n}.count": "1" for n in range(1000)}
    recorded = ",".join(sorted({*A, *stale}))

    def add(node: dict[str, Any]) -> None:
        node["metadata"]["labels"].update(stale)
        node["metadata"]["annotations"][MANAGED_LABELS_ANNOTATION] = recorded

    api.edit("Node", "n1", "", add)
    if step == "cleanup":  # the patch answered as if nothing was removed
        api.inject(Fault(body=json.dumps(api.node("n1")).encode(), method="PATCH", count=None))
    with structlog.testing.capture_logs() as logs, contextlib.suppress(PublishError):
        output.verify(A) if step == "verify" else output.cleanup()
    assert logs and all(len(str(entry)) <= 3000 for entry in logs), max(map(str, logs), key=len)
    if step == "verify":
        assert gfd_keys_on(api) == A


# ----------------------------------------------------------------- NFD's keys

NFD_LABELS = {
    "nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/cuda.driver.major": "550", "feature.node.kubernetes.io/pci-10de.present": "true",
}  # fmt: skip
# as nfd-master writes it: sorted, the default namespace left out, other namespaces kept
NFD_RECORD = (
    "nvidia.com/cuda.driver.major,nvidia.com/gpu.count,nvidia.com/gpu.product,pci-10de.present"
)


@pytest.mark.parametrize(
    "annotation", [NFD_FEATURE_LABELS_ANNOTATION, "gpu." + NFD_FEATURE_LABELS_ANNOTATION]
)
def test_keys_nfd_records_as_its_own_are_never_claimed_nor_removed(
    api: FakeApiServer, kubeconfig: str, annotation: str
) -> None:
    api.edit_node("n1", labels={**FOREIGN, **NFD_LABELS}, annotations={annotation: NFD_RECORD})
    # NFD says 8 GPUs of another product: NFD's values stay
    ours = {"nvidia.com/gpu.count": "7", "nvidia.com/gpu.product": "other",
            "nvidia.com/gpu.memory": "40960"}  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        output = node_labels(kubeconfig)
        output.publish(ours)
        output.publish({**ours, "nvidia.com/gpu.family": "ampere"})
    added = {"nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.family": "ampere"}
    assert api.node_labels("n1") == {**FOREIGN, **NFD_LABELS, **added}
    assert api.node_annotations("n1")[MANAGED_LABELS_ANNOTATION] == (
        "nvidia.com/gpu.family,nvidia.com/gpu.memory"
    )
    left = [entry for entry in logs if "left to NFD" in entry["event"]]
    assert len(left) == 1
    assert left[0]["keys"] == ["nvidia.com/gpu.count", "nvidia.com/gpu.product"]

    node_labels(kubeconfig).cleanup()
    assert api.node_labels("n1") == {**FOREIGN, **NFD_LABELS}


def test_cleanup_leaves_nfd_keys_even_when_gfd_once_recorded_them(
    api: FakeApiServer, kubeconfig: str
) -> None:
    recorded = "nvidia.com/gpu.count,nvidia.com/gpu.product"
    annotations = {NFD_FEATURE_LABELS_ANNOTATION: NFD_RECORD, MANAGED_LABELS_ANNOTATION: recorded}
    api.edit_node("n1", labels={**FOREIGN, **NFD_LABELS}, annotations=annotations)
    node_labels(kubeconfig).cleanup()
    assert api.node_labels("n1") == {**FOREIGN, **NFD_LABELS}
    assert MANAGED_LABELS_ANNOTATION not in api.node_annotations("n1")


# ----------------------------------------------------------------- nothing to write


def test_a_start_on_a_correctly_labelled_node_writes_nothing(
    api: FakeApiServer, kubeconfig: str
) -> None:
    node_labels(kubeconfig).publish(A)
    api.clear_requests()
    node_labels(kubeconfig).publish(A)  # the next agent, after a restart
    assert api.count("PATCH") == 0
    assert api.count("GET", NODE) == 1


def test_a_start_with_a_correct_nodefeature_object_writes_nothing(
    api: FakeApiServer, kubeconfig: str
) -> None:
    node_feature(kubeconfig).publish(A)
    api.clear_requests()
    node_feature(kubeconfig).publish(A)
    assert [r.method for r in api.requests] == ["GET"]


# ----------------------------------------------------------------- answers of the wrong kind

NOT_JSON = b"<html><body>502 Bad Gateway</body></html>"
NODE_N1 = b'{"kind":"Node","metadata":{"name":"n1",'
BAD_ANSWERS = table([
    ("non-json-200", Fault(body=NOT_JSON, content_type="text/html")),
    ("non-json-500", Fault(status=500, body=NOT_JSON, content_type="text/html")),
    ("a-list", Fault(body=b"[]")),
    ("an-empty-object", Fault(body=b"{}")),
    ("metadata-a-string", Fault(body=b'{"kind":"Node","metadata":"n1"}')),
    ("annotations-a-list", Fault(body=NODE_N1 + b'"annotations":["a"]}}')),
    ("a-label-value-a-number", Fault(body=NODE_N1 + b'"labels":{"a":1}}}')),
    ("nested-100000-deep", Fault(body=b"[" * 100_000 + b"]" * 100_000)),
])  # fmt: skip


@pytest.mark.parametrize("bad", BAD_ANSWERS)
def test_a_bad_answer_is_a_server_error_that_is_retried(
    api: FakeApiServer, kubeconfig: str, bad: Fault
) -> None:
    output = node_labels(kubeconfig)
    # a copy: the parameter's Fault is shared by every test that uses BAD_ANSWERS
    api.inject(dataclasses.replace(bad, method="GET"))
    with structlog.testing.capture_logs() as logs:
        output.publish(A)
    assert gfd_keys_on(api) == A
    retries = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(retries) == 1
    assert "retrying" in retries[0]["event"]
    assert len(retries[0]["error"]) < 300
    assert "exc_info" not in retries[0]


@pytest.mark.parametrize("bad", BAD_ANSWERS)
def test_cleanup_against_bad_answers_fails_and_says_so(
    api: FakeApiServer, kubeconfig: str, bad: Fault
) -> None:
    node_labels(kubeconfig).publish(A)
    api.inject(dataclasses.replace(bad, method="GET", count=None))  # a copy, as above
    with pytest.raises(PublishError) as raised:
        node_labels(kubeconfig).cleanup()
    assert "\n" not in str(raised.value)
    assert len(str(raised.value)) < 400
    assert gfd_keys_on(api) == A


NAME_NF = "nvidia-features-for-n1"
TABLE = {2: (Partition((0, 1)),)}
OTHER_TABLE = {4: (Partition((0, 1, 2, 3)),)}


def _nodefeature(kubeconfig: str, client: KubeClient) -> NodeFeatureOutput:
    return NodeFeatureOutput(settings(kubeconfig, use_node_feature_api=True), client=client)


def _node_labels(kubeconfig: str, client: KubeClient) -> NodeLabelsOutput:
    return NodeLabelsOutput(settings(kubeconfig, use_node_labels=True), client=client)


def _partitions(kubeconfig: str, client: KubeClient) -> PartitionsAnnotation:
    return PartitionsAnnotation(settings(kubeconfig, use_node_labels=True), client=client)


NOT_WRITTEN = "does not hold what was written"
#: (operation, the verb answered 200 with the object as it was, the one-line complaint):
#: every write gfd sends, each followed by what it reads back of its own write
UNAPPLIED_WRITES = table([
    ("node-labels-publish", lambda k, c: _node_labels(k, c).publish(B), "PATCH", NOT_WRITTEN),
    ("node-labels-cleanup", lambda k, c: _node_labels(k, c).cleanup(), "PATCH", "still carries"),
    ("nodefeature-update", lambda k, c: _nodefeature(k, c).publish(B), "PUT", NOT_WRITTEN),
    ("partitions-annotation", lambda k, c: _partitions(k, c).publish(OTHER_TABLE), "PATCH",
     NOT_WRITTEN),
    ("partitions-annotation-cleanup", lambda k, c: _partitions(k, c).cleanup(), "PATCH",
     NOT_WRITTEN),
    ("nodefeature-create", lambda k, c: _nodefeature(k, c).publish(B), "POST", NOT_WRITTEN),
])  # fmt: skip


@pytest.mark.parametrize(("operation", "verb", "refused"), UNAPPLIED_WRITES)
def test_a_write_answered_but_not_applied_fails(
    api: FakeApiServer, kubeconfig: str, operation: Any, verb: str, refused: str
) -> None:
    node_labels(kubeconfig).publish(A)
    node_feature(kubeconfig).publish(A)
    PartitionsAnnotation(settings(kubeconfig, use_node_labels=True)).publish(TABLE)
    # the server answers 200 with the object as it was (a create: as it was before it was
    # deleted), and changes nothing
    kind, name, namespace = (
        ("Node", "n1", "") if verb == "PATCH" else ("NodeFeature", NAME_NF, "default")
    )
    before = api.get(kind, name, namespace)
    api.inject(Fault(body=json.dumps(before).encode(), method=verb, count=None))
    if verb == "POST":
        api.delete(kind, name, namespace)
        before = None
    # a retry clock moved only by the waits: a slow attempt on a loaded machine spends none of
    # the budget, so each attempt's timeout is what the waits before it left
    waits = FakeTime()
    client = KubeClient(kubeconfig, budget=BUDGET, sleep=waits.sleep, clock=waits.clock)
    with structlog.testing.capture_logs() as logs, pytest.raises(PublishError) as raised:
        operation(kubeconfig, client)
    refused_every_time(refused, logs, raised.value)
    assert api.get(kind, name, namespace) == before


def refused_every_time(refused: str, logs: list[Any], error: PublishError) -> None:
    """Every answer the client read was refused with ``refused`` and retried; the last
    attempt, whose timeout is whatever the waits left of the budget, may instead have ended
    at the deadline (a loaded machine can get there first)."""
    retried = [e["error"] for e in logs if e["event"] == "kubernetes API call failed, retrying"]
    assert retried and all(refused in message for message in retried), retried
    assert refused in str(error) or "deadline" in str(error), error


#: nested deeper than any object gfd reads, yet not so deep that JSON refuses it: copying
#: or serialising it again would exhaust Python's recursion
DEEP = b'{"attributes":' + b'{"a":' * 600 + b"1" + b"}" * 601


@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"metadata":"x"}', b'{"metadata":{"name":"nvidia-features-for-n1"},"spec":[]}',
     b'{"metadata":{"name":"nvidia-features-for-n1"},"spec":{"features":' + DEEP + b"}}",
     b'{"metadata":{"name":"nvidia-features-for-n1"},"status":' + DEEP + b"}"],
    ids=["a-list", "metadata-a-string", "spec-a-list", "features-600-deep", "status-600-deep"],
)  # fmt: skip
def test_nodefeature_bad_answers_are_retried_server_errors(
    api: FakeApiServer, kubeconfig: str, body: bytes
) -> None:
    output = node_feature(kubeconfig)
    api.inject(Fault(body=body, method="GET", count=None))
    with pytest.raises(PublishError, match="the API server sent"):
        output.publish(A)
    assert api.count("GET") > 1
    api.clear_faults()
    output.publish(A)
    stored = api.get("NodeFeature", "nvidia-features-for-n1", "default")
    assert stored is not None and stored["spec"]["labels"] == A


#: the pod a NodeFeature's owner references are read from, answered in a shape no API server
#: sends: what it holds would be written into the object and kept for the process's life
POD = {"name": "gfd-abc", "uid": "u1"}
BAD_PODS = {
    "owners-a-number": {**POD, "ownerReferences": 5},
    "owners-an-object": {**POD, "ownerReferences": {"kind": "DaemonSet"}},
    "owner-name-an-object": {
        **POD, "ownerReferences": [{"kind": "DaemonSet", "name": {"a": 1}, "uid": "u2"}]},
    "owner-without-uid": {**POD, "ownerReferences": [{"kind": "DaemonSet", "name": "gfd"}]},
    "another-pod": {"name": "gfd-xyz", "uid": "u1"},
}  # fmt: skip


@pytest.mark.parametrize("pod", sorted(BAD_PODS))
def test_a_pod_answer_of_the_wrong_shape_is_retried_and_never_written(
    api: FakeApiServer, kubeconfig: str, pod: str
) -> None:
    body = json.dumps({"kind": "Pod", "apiVersion": "v1", "metadata": BAD_PODS[pod]}).encode()
    api.inject(Fault(body=body, path_contains="/pods/", count=None))
    output = node_feature(kubeconfig, pod_name="gfd-abc")
    with pytest.raises(PublishError, match="the API server sent"):
        output.publish(A)
    assert api.get("NodeFeature", "nvidia-features-for-n1", "default") is None
    api.clear_faults()
    api.add_pod("default", "gfd-abc", owner=api.add_daemonset("default", "gfd"))
    output.publish(A)  # the next pass reads the pod again
    stored = api.get("NodeFeature", "nvidia-features-for-n1", "default")
    assert stored is not None
    assert [ref["name"] for ref in stored["metadata"]["ownerReferences"]] == ["gfd", "gfd-abc"]


# ----------------------------------------------------------------- deadlines and sizes


# a header line every 0.03 s: each read of the socket gets something well within the
# request's timeout (0.15 s), so only its total deadline can end it
@pytest.mark.parametrize("stall", table([
    ("headers-trickled-forever", Fault(trickle=0.03, count=None)),
    ("accepts-and-never-answers", Fault(hang=True, count=None)),
]))  # fmt: skip
def test_a_stalling_server_cannot_hold_a_request(
    api: FakeApiServer, kubeconfig: str, stall: Fault
) -> None:
    client = client_without_waits(kubeconfig, budget=0.3, request_timeout=0.15)
    api.inject(stall)
    with pytest.raises(PublishError, match=r"deadline|timed out") as raised:
        client.run("get node n1", lambda: client.request("GET", NODE))
    assert "gave up after" in str(raised.value)
    assert api.count("GET") >= 1


@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "until-close"])
def test_an_answer_larger_than_any_object_is_refused_unread(
    api: FakeApiServer, kubeconfig: str, declare_length: bool
) -> None:
    size = 300 * 1024 * 1024
    api.inject(Fault(huge=size, declare_length=declare_length, count=None))
    waits = FakeTime()  # moved only by the waits, as above
    client = KubeClient(kubeconfig, budget=2.0, sleep=waits.sleep, clock=waits.clock)
    tracemalloc.start()
    try:
        with structlog.testing.capture_logs() as logs, pytest.raises(PublishError) as raised:
            client.run("get node n1", lambda: client.request("GET", NODE))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # "an answer of more than N bytes" or "of M bytes; no object is larger than N bytes"
    refused_every_time(f"than {MAX_ANSWER_BYTES} bytes", logs, raised.value)
    assert peak < 4 * MAX_ANSWER_BYTES
    # per answer: the client stops soon after the cap; what the server got out beyond it
    # sits in socket buffers (a few MB), far from the 300 MiB it offered
    assert api.huge_bytes_sent / api.count("GET") < 3 * MAX_ANSWER_BYTES


# ----------------------------------------------------------------- the server address


@pytest.mark.parametrize("server", [
    "ftp://127.0.0.1:6443", "127.0.0.1:6443", "unix:///run/kube.sock", "http://", "https://:0",
])  # fmt: skip
def test_a_server_that_is_not_an_http_url_is_a_usage_error(tmp_path: Path, server: str) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig", server)
    with pytest.raises(UsageError, match="not an http:// or https:// URL"):
        KubeClient(str(path), budget=1.0)


def test_credentials_in_the_server_url_never_reach_a_message(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig", "http://admin:s3cr3t@127.0.0.1:9")
    client = client_without_waits(str(path), budget=0.3)
    with structlog.testing.capture_logs() as logs, pytest.raises(PublishError) as raised:
        client.run("get node n1", lambda: client.request("GET", NODE))
    assert "s3cr3t" not in str(raised.value)
    assert "admin" not in str(raised.value)
    assert "***@127.0.0.1:9" in str(raised.value)
    assert logs and "s3cr3t" not in repr(logs)


def test_every_key_gfd_publishes_is_one_it_can_own() -> None:
    """The key table of can_produce covers every key the labellers publish (a new label
    key must be added to gfd/labels/keys.py's NODE_WIDE or PER_RESOURCE)."""
    expected = Path(__file__).parent / "fixtures" / "expected"
    published = {
        line.split("=", 1)[0] for path in expected.glob("*.labels")
        for line in path.read_text().splitlines() if "=" in line
    }  # fmt: skip
    assert len(published) > 40
    assert sorted(key for key in published if not keys.can_produce(key)) == []


@settings_(max_examples=150, deadline=None)
@given(snapshots(), st.sampled_from(["none", "single", "mixed"]), configs())
def test_any_snapshot_and_config_publish_only_keys_gfd_can_own(
    snap: Any, strategy: str, config: Any
) -> None:
    if config.sharing.strategy == "mps" and any(g.mig and g.mig.enabled for g in snap.gpus):
        return  # the documented ConfigError
    labels = build(snap, strategy, config, 1).labels
    assert [key for key in labels if not keys.can_produce(key)] == []


@pytest.mark.parametrize("padding", [0, 5000])
def test_an_admission_refusal_keeps_its_reason_in_one_short_line(
    api: FakeApiServer, kubeconfig: str, padding: int
) -> None:
    """A Status message is quoted by both ends: the policy's own message comes last, after
    ~110 characters naming the object, the policy and its binding."""
    reason = "gfd may only change the nvidia.com/ labels it publishes"
    message = (
        f'nodes "{"n" * 63}" is forbidden: ValidatingAdmissionPolicy '
        "'gfd-node-labels.nvidia.com' with binding 'gfd-node-labels.nvidia.com' denied "
        f"request: {'x' * padding} {reason}"
    )
    status = {"kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422}
    body = json.dumps({**status, "message": message}).encode()
    api.inject(Fault(status=422, body=body, method="PATCH", count=None))
    with pytest.raises(PublishError) as raised:
        node_labels(kubeconfig).publish(A)
    text = str(raised.value)
    assert "\n" not in text and len(text) < 400
    assert text.endswith(reason) and 'nodes "nnn' in text
