"""The shared Kubernetes client and its one retry policy (SPEC §6.4), against the fake."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.errors import PublishError, UsageError
from gfd.kube.client import MAX_BUDGET_SECONDS, KubeClient, KubeError, retry_budget
from gfd.kube.shapes import string_map
from tests.fakes.fake_apiserver import FakeApiServer
from tests.fakes.waits import FakeTime, client_without_waits

API_NODE_N1 = {"labels": {"a": "b"}}


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def client(kubeconfig: str, fake_time: FakeTime) -> KubeClient:
    return KubeClient(kubeconfig, budget=10.0, sleep=fake_time.sleep, clock=fake_time.clock)


def get_node(client: KubeClient) -> dict[str, object]:
    return client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))


@pytest.mark.parametrize(("interval", "budget"), [
    (1.0, 0.5), (60.0, 30.0), (3600.0, MAX_BUDGET_SECONDS), (None, MAX_BUDGET_SECONDS),
])  # fmt: skip
def test_budget_never_exceeds_half_the_interval_nor_30s(
    interval: float | None, budget: float
) -> None:
    assert retry_budget(interval) == budget


def test_a_missing_kubeconfig_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--kubeconfig"):
        KubeClient(str(tmp_path / "missing"), budget=1.0)


def test_a_malformed_kubeconfig_is_a_one_line_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("clusters: [\n")
    with pytest.raises(UsageError, match="--kubeconfig") as raised:
        KubeClient(str(path), budget=1.0)
    assert "\n" not in str(raised.value)


def test_outside_a_cluster_without_kubeconfig_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(UsageError, match="in-cluster"):
        KubeClient(None, budget=1.0)


def test_a_plain_request_reaches_the_server_with_the_token(
    api: FakeApiServer, client: KubeClient
) -> None:
    node = get_node(client)
    assert node["metadata"] == api.node("n1")["metadata"]
    assert api.count("GET", "/api/v1/nodes/n1") == 1


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429, 409])
def test_transient_statuses_are_retried(
    api: FakeApiServer, client: KubeClient, fake_time: FakeTime, status: int
) -> None:
    api.fail(status, count=2)
    get_node(client)
    assert api.count("GET") == 3
    assert len(fake_time.sleeps) == 2


def test_dropped_connections_are_retried(api: FakeApiServer, client: KubeClient) -> None:
    api.drop(count=2)
    get_node(client)
    assert [request.status for request in api.requests] == [0, 0, 200]


@pytest.mark.parametrize(("status", "words"), [(403, "RBAC"), (404, "not found"), (422, "422")])
def test_permanent_errors_fail_at_once(
    api: FakeApiServer, client: KubeClient, status: int, words: str
) -> None:
    if status == 404:
        path = "/api/v1/nodes/missing"
    else:
        api.fail(status, count=1)
        path = "/api/v1/nodes/n1"
    with pytest.raises(PublishError, match=words) as raised:
        client.run("get node", lambda: client.request("GET", path))
    assert api.count() == 1
    assert "gave up" not in str(raised.value)


def test_waits_grow_exponentially_with_jitter_and_are_capped(
    api: FakeApiServer, kubeconfig: str, fake_time: FakeTime
) -> None:
    client = KubeClient(kubeconfig, budget=1000.0, sleep=fake_time.sleep, clock=fake_time.clock)
    api.fail(503, count=10)
    get_node(client)
    waits = fake_time.sleeps
    assert len(waits) == 10
    for attempt, wait in enumerate(waits, start=1):
        base = min(5.0, 0.1 * 2 ** (attempt - 1))
        assert base / 2 <= wait <= base
    assert max(waits) <= 5.0


@pytest.mark.parametrize(
    ("retry_after", "least", "most"),
    [(3, 3.0, 5.0), ("1e9", 5.0, 5.0), ("-5", 0.05, 0.1), ("nan", 0.05, 0.1),
     ("Wed, 21 Oct 2015 07:28:00 GMT", 0.05, 0.1)],
    ids=["seconds", "past-the-cap", "negative", "nan", "a-date"],
)  # fmt: skip
def test_retry_after_is_honoured(
    api: FakeApiServer, client: KubeClient, fake_time: FakeTime, retry_after: int | str,
    least: float, most: float,
) -> None:  # fmt: skip
    """A Retry-After of seconds is waited, never past the longest wait; one that is not a
    number of seconds from now leaves the usual first wait."""
    api.fail(429, count=1, retry_after=retry_after)
    get_node(client)
    assert least <= fake_time.sleeps[0] <= most


def test_an_unreachable_server_fails_within_the_budget(
    api: FakeApiServer, client: KubeClient, fake_time: FakeTime
) -> None:
    api.go_down()
    started = fake_time.now
    with pytest.raises(PublishError) as raised:
        get_node(client)
    message = str(raised.value)
    assert message.startswith("get node n1: cannot reach the API server at http://127.0.0.1:")
    assert "Connection refused" in message
    assert "gave up after" in message
    # the policy never sleeps past its budget (10 s here)
    assert fake_time.now - started < 10.0
    assert len(fake_time.sleeps) >= 3


def test_each_request_gets_at_most_what_the_budget_has_left(
    api: FakeApiServer, client: KubeClient, fake_time: FakeTime
) -> None:
    seen: list[float] = []

    def operation() -> None:
        seen.append(client.timeout())
        fake_time.now += 9.5
        seen.append(client.timeout())

    client.run("two requests", operation)
    assert seen == [10.0, 0.5]
    assert client.timeout() == 10.0  # outside an operation: the per-request limit


def test_a_slow_server_is_cut_off_by_the_request_timeout(
    api: FakeApiServer, kubeconfig: str
) -> None:
    # the waits between attempts skipped: only the requests' own timeouts take time
    client = client_without_waits(kubeconfig, budget=0.2, request_timeout=0.1)
    api.delay(5.0, count=None)
    with pytest.raises(PublishError, match="cannot reach the API server"):
        get_node(client)


def test_kube_error_descriptions() -> None:
    assert KubeError("boom").transient
    assert KubeError("x", status=409).transient
    assert not KubeError("x", status=403).transient
    assert KubeError('nodes "n" not found', status=404, reason="NotFound").describe() == (
        '404 NotFound: nodes "n" not found'
    )


def test_string_map_reads_a_null_step_as_empty_and_refuses_any_other_shape() -> None:
    """A map under a null parent is absent; under a list or a string the answer is not
    what the API returns: a server fault, retried like a 5xx, naming where it broke."""
    assert string_map({"metadata": None}, "metadata", "labels") == {}
    assert string_map({"metadata": {"labels": {"a": "b"}}}, "metadata", "labels") == {"a": "b"}
    for parent, where in (([], "metadata"), ({"labels": ["x"]}, "metadata.labels")):
        with pytest.raises(KubeError) as raised:
            string_map({"metadata": parent}, "metadata", "labels")
        assert raised.value.server_fault and raised.value.transient
        assert f"{where} as list, not a map of strings" in raised.value.message
    with pytest.raises(KubeError, match="the object as str"):
        string_map("not an object", "metadata")  # type: ignore[arg-type]
