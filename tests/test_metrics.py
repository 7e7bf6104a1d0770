"""Prometheus metrics and the health endpoints (SPEC §8), scraped over HTTP."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gfd import __version__
from gfd.errors import GfdError
from gfd.metrics import HEALTH_GRACE_SECONDS, PrometheusMetrics, parse_address
from gfd.observability import NullMetrics, start_metrics
from gfd.settings import Settings
from tests.helpers import Clock
from tests.process import http_get

FAST = 0.02  # serving-loop poll interval: lets close() return at once


def get(metrics: PrometheusMetrics, path: str) -> tuple[int, str]:
    return http_get(metrics.port, path)


def samples(metrics: PrometheusMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = get(metrics, "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
    }  # fmt: skip


@pytest.fixture
def clock() -> Clock:
    return Clock(500.0)


@pytest.fixture
def metrics(clock: Clock) -> Iterator[PrometheusMetrics]:
    served = PrometheusMetrics(
        "127.0.0.1:0", 60.0, monotonic=clock, wall_clock=lambda: 1.7e9, poll_interval=FAST
    )
    yield served
    served.close()


def test_port_zero_binds_a_free_port(metrics: PrometheusMetrics) -> None:
    assert metrics.port > 0
    assert get(metrics, "/nope")[0] == 404
    # the listener names gfd alone: the interpreter's version would tell a scanner which
    # of its flaws to try
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/healthz", timeout=10) as r:
        assert r.headers["Server"] == f"gfd/{__version__}"


def test_metrics_carry_the_spec_names(metrics: PrometheusMetrics) -> None:
    metrics.pass_started()
    metrics.nvml_up(True)
    metrics.publish_result("node-labels", "success")
    metrics.pass_finished("success", 0.02, 26)
    metrics.pass_started()
    metrics.publish_result("node-labels", "error")
    metrics.pass_finished("error", 0.5, None)

    found = samples(metrics)
    assert found[("gfd_build_info", (("version", __version__),))] == 1
    assert found[("gfd_passes_total", (("result", "success"),))] == 1
    assert found[("gfd_passes_total", (("result", "error"),))] == 1
    assert found[("gfd_pass_duration_seconds_count", ())] == 2
    assert found[("gfd_pass_duration_seconds_sum", ())] == pytest.approx(0.52)
    assert found[("gfd_pass_duration_seconds_bucket", (("le", "0.025"),))] == 1
    assert found[("gfd_last_success_timestamp_seconds", ())] == 1.7e9
    assert found[("gfd_labels", ())] == 26
    assert found[("gfd_nvml_up", ())] == 1
    assert found[("gfd_publish_total", (("output", "node-labels"), ("result", "success")))] == 1
    assert found[("gfd_publish_total", (("output", "node-labels"), ("result", "error")))] == 1


def test_drift_series_follow_the_disagreeing_set(metrics: PrometheusMetrics) -> None:
    from gfd.metrics import DRIFT_SERIES

    product, count = "nvidia.com/gpu.product", "nvidia.com/gpu.count"
    metrics.dra_drift_check("success")
    metrics.dra_drift((count, product))
    found = samples(metrics)
    assert found[("gfd_dra_drift_labels", ())] == 2
    assert found[("gfd_dra_drift", (("label", product),))] == 1
    assert found[("gfd_dra_drift", (("label", count),))] == 1
    assert found[("gfd_dra_drift_checks_total", (("result", "success"),))] == 1
    metrics.dra_drift((product,))  # the count agrees again: its series goes
    found = samples(metrics)
    assert ("gfd_dra_drift", (("label", count),)) not in found
    assert found[("gfd_dra_drift_labels", ())] == 1
    many = tuple(f"nvidia.com/mig-{i}g.{i}gb.count" for i in range(DRIFT_SERIES * 2))
    metrics.dra_drift(many)  # label keys built from slices: the series are capped
    found = samples(metrics)
    assert found[("gfd_dra_drift_labels", ())] == DRIFT_SERIES * 2
    assert sum(1 for name, _ in found if name == "gfd_dra_drift") == DRIFT_SERIES
    metrics.dra_drift(())
    assert not [key for key in samples(metrics) if key[0] == "gfd_dra_drift"]


def test_a_failed_pass_keeps_the_last_success_and_label_count(metrics: PrometheusMetrics) -> None:
    metrics.pass_finished("success", 0.01, 12)
    metrics.pass_finished("error", 0.01, None)
    found = samples(metrics)
    assert found[("gfd_labels", ())] == 12
    assert found[("gfd_last_success_timestamp_seconds", ())] == 1.7e9
    metrics.nvml_up(False)
    assert samples(metrics)[("gfd_nvml_up", ())] == 0


def test_readyz_waits_for_the_first_successful_publish(metrics: PrometheusMetrics) -> None:
    assert get(metrics, "/readyz")[0] == 503
    metrics.pass_started()
    metrics.publish_result("nodefeature", "error")
    metrics.pass_finished("error", 0.1, None)
    assert get(metrics, "/readyz")[0] == 503
    metrics.publish_result("nodefeature", "success")
    assert get(metrics, "/readyz") == (200, "ok\n")


def test_healthz_fails_when_the_loop_stalls(metrics: PrometheusMetrics, clock: Clock) -> None:
    limit = 3 * 60.0 + HEALTH_GRACE_SECONDS
    assert get(metrics, "/healthz")[0] == 200  # starting up
    clock.now += limit + 1
    assert get(metrics, "/healthz")[0] == 503  # no pass ever began
    metrics.pass_started()
    assert get(metrics, "/healthz")[0] == 200
    clock.now += limit
    assert get(metrics, "/healthz")[0] == 200  # exactly at the limit: still fine
    clock.now += 1
    assert get(metrics, "/healthz") == (503, "stalled\n")
    metrics.pass_started()  # the loop moves again
    assert get(metrics, "/healthz")[0] == 200


def test_healthz_follows_a_reloaded_interval(metrics: PrometheusMetrics, clock: Clock) -> None:
    metrics.pass_started()
    metrics.set_sleep_interval(600.0)
    clock.now += 3 * 60.0 + HEALTH_GRACE_SECONDS + 1  # stalled for the old 60 s interval
    assert get(metrics, "/healthz")[0] == 200
    metrics.set_sleep_interval(None)
    clock.now += 10 * 3600
    assert get(metrics, "/healthz")[0] == 200


def test_healthz_with_an_infinite_interval(clock: Clock) -> None:
    metrics = PrometheusMetrics("127.0.0.1:0", None, monotonic=clock, poll_interval=FAST)
    try:
        assert get(metrics, "/healthz")[0] == 200
        clock.now += HEALTH_GRACE_SECONDS + 1
        assert get(metrics, "/healthz")[0] == 503  # the first pass never began
        metrics.pass_started()
        clock.now += 10 * 365 * 86400
        assert get(metrics, "/healthz")[0] == 200
    finally:
        metrics.close()


def test_the_server_stops_on_close(clock: Clock) -> None:
    metrics = PrometheusMetrics("127.0.0.1:0", 1.0, monotonic=clock, poll_interval=FAST)
    port = metrics.port
    metrics.close()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GfdError, match=f"--metrics-address '127.0.0.1:{port}': cannot listen"):
            PrometheusMetrics(f"127.0.0.1:{port}", 1.0)


@pytest.mark.parametrize(("address", "parsed"), [
    (":8080", ("", 8080)), ("0.0.0.0:9", ("0.0.0.0", 9)), ("[::1]:8080", ("::1", 8080)),
])  # fmt: skip
def test_addresses(address: str, parsed: tuple[str, int]) -> None:
    assert parse_address(address) == parsed


def test_ipv6_loopback_is_served() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        metrics = PrometheusMetrics("[::1]:0", 1.0, poll_interval=FAST)
    except GfdError:
        pytest.skip("IPv6 loopback unavailable")
    try:
        with urllib.request.urlopen(f"http://[::1]:{metrics.port}/healthz", timeout=10) as r:
            assert r.status == 200
    finally:
        metrics.close()


def test_start_metrics_follows_the_settings() -> None:
    assert isinstance(start_metrics(Settings()), NullMetrics)
    served = start_metrics(Settings(metrics_address="127.0.0.1:0"))
    try:
        assert isinstance(served, PrometheusMetrics)
        assert get(served, "/healthz")[0] == 200
    finally:
        served.close()


def test_lost_gpus_are_a_gauge(metrics: PrometheusMetrics) -> None:
    metrics.gpus_lost(2)
    assert samples(metrics)[("gfd_gpus_lost", ())] == 2
    metrics.gpus_lost(0)
    assert samples(metrics)[("gfd_gpus_lost", ())] == 0


def test_dropped_log_lines_are_a_counter_read_at_each_scrape(clock: Clock) -> None:
    dropped = [0]
    served = PrometheusMetrics(
        "127.0.0.1:0", 60.0, monotonic=clock, poll_interval=FAST,
        log_lines_dropped=lambda: dropped[0],
    )  # fmt: skip
    try:
        assert samples(served)[("gfd_log_lines_dropped_total", ())] == 0
        dropped[0] = 7
        assert samples(served)[("gfd_log_lines_dropped_total", ())] == 7
    finally:
        served.close()


def test_a_log_line_stderr_refuses_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside gfd's own sink (a replaced sys.stderr), a stream that refuses a line costs
    the line, counted, and never an exception in the code that logs."""
    from gfd import observability

    class Broken:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def isatty(self) -> bool:
            return False

    before = observability.log_lines_dropped()
    monkeypatch.setattr("sys.stderr", Broken())
    observability.get_logger().error("nobody will read this")
    monkeypatch.setattr("sys.stderr", None)
    observability.get_logger().error("nor this")
    monkeypatch.undo()
    assert observability.log_lines_dropped() == before + 2
