"""``--kube-api-qps`` and ``--kube-api-burst``: the API client's client-side rate limit.

Upstream passes both to client-go (internal/flags/kubeclient.go:88-89), whose token bucket
lets ``burst`` requests through at once, then one every ``1/qps`` seconds.  The real client
talks to the fake API server here; only the clock and the sleep are fakes."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.kube.client import KubeClient
from gfd.kube.ratelimit import RateLimiter
from gfd.settings import Settings
from tests.fakes.fake_apiserver import FakeApiServer
from tests.fakes.waits import FakeTime

API_NODE_N1 = {"labels": {"a": "b"}}


def test_burst_goes_at_once_then_one_request_per_1_over_qps() -> None:
    time = FakeTime()
    limiter = RateLimiter(2.0, 3, clock=time.clock, sleep=time.sleep)
    waits = [limiter.wait() for _ in range(6)]
    assert waits == [0.0, 0.0, 0.0, 0.5, 0.5, 0.5]
    time.now += 10.0  # idle: the bucket fills up again, to the burst and no further
    assert [limiter.wait() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]


@pytest.mark.parametrize(("qps", "burst", "effective"), [(0.0, 0, (5.0, 10)), (1.0, 0, (1.0, 10))])
def test_zero_means_client_gos_defaults(
    qps: float, burst: int, effective: tuple[float, int]
) -> None:
    time = FakeTime()
    limiter = RateLimiter(qps, burst, clock=time.clock, sleep=time.sleep)
    assert (limiter.qps, limiter.burst) == effective


def test_a_negative_qps_turns_the_limit_off() -> None:
    time = FakeTime()
    limiter = RateLimiter(-1.0, 1, clock=time.clock, sleep=time.sleep)
    assert [limiter.wait() for _ in range(50)] == [0.0] * 50
    assert time.sleeps == []


def _client(kubeconfig: str, time: FakeTime, **limits: Any) -> KubeClient:
    return KubeClient(kubeconfig, budget=30.0, sleep=time.sleep, clock=time.clock, **limits)


def test_the_api_client_waits_between_requests_beyond_the_burst(
    api: FakeApiServer, kubeconfig: str
) -> None:
    time = FakeTime()
    client = _client(kubeconfig, time, qps=4.0, burst=2)
    for _ in range(5):
        client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))
    assert api.count("GET", "/api/v1/nodes/n1") == 5
    assert time.sleeps == [0.25, 0.25, 0.25]


def test_upstreams_defaults_let_ten_requests_through_at_once(kubeconfig: str) -> None:
    time = FakeTime()
    client = _client(kubeconfig, time)
    for _ in range(11):
        client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))
    assert time.sleeps == [0.2]  # the eleventh waits 1/5 s


@pytest.mark.parametrize("factory", [
    "gfd.outputs.nodefeature:NodeFeatureOutput", "gfd.outputs.nodelabels:NodeLabelsOutput",
])  # fmt: skip
def test_the_outputs_build_their_client_with_the_settings_limits(
    kubeconfig: str, factory: str
) -> None:
    import importlib

    module, _, name = factory.partition(":")
    selector = "use_node_feature_api" if "nodefeature" in module else "use_node_labels"
    limits = {"kube_api_qps": 2.5, "kube_api_burst": 7}
    settings = Settings(node_name="n1", kubeconfig=kubeconfig, **limits, **{selector: True})
    output = getattr(importlib.import_module(module), name)(settings)
    limiter = output._client.rate_limiter
    assert (limiter.qps, limiter.burst) == (2.5, 7)


def test_the_limit_never_holds_a_pass_past_its_budget(api: FakeApiServer, kubeconfig: str) -> None:
    """A tiny QPS fails the operation within its budget (counted, retried next pass)
    instead of sleeping for minutes."""
    from gfd.errors import PublishError

    time = FakeTime()
    client = _client(kubeconfig, time, qps=0.001, burst=1)
    client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))
    started = time.now
    with pytest.raises(PublishError, match=r"client-side rate limit \(--kube-api-qps 0\.001"):
        client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))
    assert time.now - started <= 30.0  # the client's budget
    assert api.count("GET", "/api/v1/nodes/n1") == 1
