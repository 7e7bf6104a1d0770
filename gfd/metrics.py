"""Prometheus metrics and the health endpoints (SPEC §8), served with ``--metrics-address``.

- ``/metrics``: the registry below (its own ``CollectorRegistry``: no process or platform
  collectors, nothing global);
- ``/healthz``: 200 while the loop makes progress — the last pass began within
  ``3 * interval + 30 s`` (before the first pass, counted from start-up); with an infinite
  interval, 200 once the first pass began (there is no loop to stall), and during the first
  30 s before that;
- ``/readyz``: 200 once a publish succeeded, else 503.

The server is a threaded ``http.server`` on daemon threads, so it never keeps the process
alive and a slow scraper never blocks the loop.  Clocks are injectable for tests.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gfd import __version__, logsink
from gfd.echo import describe
from gfd.errors import GfdError
from gfd.settings import split_address
from gfd.signals import start_thread

#: how much slack the health check gives on top of three intervals
HEALTH_GRACE_SECONDS = 30.0
#: the most connections served at once (Prometheus and the kubelet's probes need a few)
MAX_CONNECTIONS = 16
#: how long one connection may take to send its request and read the answer
CONNECTION_TIMEOUT_SECONDS = 5.0
#: pass durations are milliseconds to seconds; NVML on a big node can take a few seconds
#: the most gfd_dra_drift series (one per disagreeing label; gfd_dra_drift_labels counts all)
DRIFT_SERIES = 64
PASS_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` → (host, port), as ``--metrics-address`` reads it (settings.split_address)."""
    try:
        return split_address(address)
    except ValueError:
        raise GfdError(f"--metrics-address {describe(address)}: expected host:port") from None


class PrometheusMetrics:
    def __init__(
        self,
        address: str,
        sleep_interval: float | None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        serve: bool = True,
        poll_interval: float = 0.5,
        log_lines_dropped: Callable[[], int] = logsink.log_lines_dropped,
    ) -> None:
        self._interval = sleep_interval
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._started_at = monotonic()
        self._last_pass_started_at: float | None = None
        self._published = False

        self._register(log_lines_dropped)

        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._poll_interval = poll_interval
        if serve:
            self._serve(address, poll_interval)

    def _register(self, log_lines_dropped: Callable[[], int]) -> None:
        """The registry and its instruments, the metrics gfd serves."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values

        # the library keeps every value in files of PROMETHEUS_MULTIPROC_DIR where that is
        # set (for a server of many processes): files nobody removes, a start that fails
        # where it is missing; gfd is one process, whose values stay in its own memory
        values.ValueClass = values.MutexValue
        self.registry = CollectorRegistry(auto_describe=True)

        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(name, documentation, registry=self.registry)

        build_info = Gauge(
            "gfd_build_info", "gfd build information", ["version"], registry=self.registry
        )
        build_info.labels(version=__version__).set(1)
        self._pass_duration = Histogram(
            "gfd_pass_duration_seconds",
            "Duration of one discover-label-publish pass",
            buckets=PASS_DURATION_BUCKETS,
            registry=self.registry,
        )
        self._passes = Counter("gfd_passes", "Passes by result", ["result"], registry=self.registry)
        self._last_success = gauge(
            "gfd_last_success_timestamp_seconds",
            "Unix time at which the last successful pass finished",
        )
        self._labels = gauge("gfd_labels", "Number of labels produced by the last successful pass")
        self._publishes = Counter(
            "gfd_publish",
            "Publish and verification attempts by output and result",
            ["output", "result"],
            registry=self.registry,
        )
        self._retires = Counter(
            "gfd_retire",
            "Attempts to remove what a reload moved away from (an old output), by what it "
            "was and result",
            ["output", "result"],
            registry=self.registry,
        )
        self._nvml_up = gauge("gfd_nvml_up", "1 when NVML could be initialised on the last pass")
        self._gpus_lost = gauge(
            "gfd_gpus_lost",
            "GPUs that did not answer on the last discovery (NVML GPU_IS_LOST, or on the PCI "
            "bus but not listed by NVML)",
        )
        self._register_drift()
        for result in ("success", "error"):
            self._passes.labels(result=result)
        self.registry.register(_LogLinesDropped(log_lines_dropped))

    def _register_drift(self) -> None:
        """The --dra-drift-check instruments (zero while it is off)."""
        from prometheus_client import Counter, Gauge

        self._drift_checks = Counter(
            "gfd_dra_drift_checks",
            "--dra-drift-check comparisons of NVML with the node's ResourceSlices, by result "
            "(error: the slices could not be read)",
            ["result"],
            registry=self.registry,
        )
        self._drift_labels = Gauge(
            "gfd_dra_drift_labels",
            "Labels on which NVML and the node's ResourceSlices disagreed at the last "
            "--dra-drift-check comparison",
            registry=self.registry,
        )
        self._drift = Gauge(
            "gfd_dra_drift",
            "1 for each label on which NVML and the node's ResourceSlices disagreed at the "
            "last --dra-drift-check comparison",
            ["label"],
            registry=self.registry,
        )
        self._drift_shown: tuple[str, ...] = ()

    # ------------------------------------------------------------- the Metrics protocol

    def pass_started(self) -> None:
        with self._lock:
            self._last_pass_started_at = self._monotonic()

    def pass_finished(self, result: str, duration_seconds: float, label_count: int | None) -> None:
        self._passes.labels(result=result).inc()
        self._pass_duration.observe(duration_seconds)
        if result == "success":
            self._last_success.set(self._wall_clock())
            if label_count is not None:
                self._labels.set(label_count)

    def publish_result(self, output: str, result: str) -> None:
        self._publishes.labels(output=output, result=result).inc()
        if result == "success":
            with self._lock:
                self._published = True

    def retire_result(self, output: str, result: str) -> None:
        self._retires.labels(output=output, result=result).inc()

    def nvml_up(self, up: bool) -> None:
        self._nvml_up.set(1 if up else 0)

    def gpus_lost(self, count: int) -> None:
        self._gpus_lost.set(count)

    def dra_drift_check(self, result: str) -> None:
        self._drift_checks.labels(result=result).inc()

    def dra_drift(self, labels: tuple[str, ...]) -> None:
        self._drift_labels.set(len(labels))
        # label keys built from the slices too: a series for the first few only
        labels = labels[:DRIFT_SERIES]
        for gone in set(self._drift_shown) - set(labels):
            self._drift.remove(gone)
        for label in labels:
            self._drift.labels(label=label).set(1)
        self._drift_shown = labels

    def close(self) -> None:
        _stop(self._server, self._thread)
        self._server = None
        self._thread = None

    def rebind(self, address: str) -> None:
        """A reload moved ``--metrics-address``: serve the same registry at ``address``
        first, then close the old server, so a scraper finds one of the two at every
        moment.  Where the new address cannot be served (GfdError, RuntimeError) the old
        server stays."""
        old = (self._server, self._thread)
        try:
            self._serve(address, self._poll_interval)
        except (GfdError, RuntimeError):
            self._server, self._thread = old
            raise
        _stop(*old)

    def set_sleep_interval(self, sleep_interval: float | None) -> None:
        """A reload changed the interval: judge health by the new one from now on."""
        with self._lock:
            self._interval = sleep_interval

    # ------------------------------------------------------------- health

    def healthy(self) -> bool:
        with self._lock:
            last = self._last_pass_started_at
            interval = self._interval
        now = self._monotonic()
        if interval is None:
            # publish once, then wait for signals: nothing can stall after the first pass
            return last is not None or now - self._started_at <= HEALTH_GRACE_SECONDS
        limit = 3 * interval + HEALTH_GRACE_SECONDS
        return now - (last if last is not None else self._started_at) <= limit

    def ready(self) -> bool:
        with self._lock:
            return self._published

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))

    # ------------------------------------------------------------- the server

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        if self._server is None:
            raise RuntimeError("the metrics server is not running")
        return int(self._server.server_address[1])

    def _serve(self, address: str, poll_interval: float) -> None:
        host, port = parse_address(address)
        metrics = self

        class Handler(_Handler):
            pass

        Handler.metrics = metrics
        server_class: type[ThreadingHTTPServer] = _BoundedServer
        if ":" in host:
            server_class = _IPv6Server
        try:
            server = server_class((host, port), Handler)
        except OSError as exc:
            raise GfdError(
                f"--metrics-address {describe(address)}: cannot listen: {exc.strerror or exc}"
            ) from None
        server.daemon_threads = True
        self._server = server
        # close() wakes the serving thread itself; poll_interval bounds its wait where that
        # does not work (shutting down a listening socket wakes accept on Linux)
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": poll_interval},
            name="gfd-metrics",
            daemon=True,
        )
        # its threads (and those it starts per request) leave the signals to the main thread
        try:
            start_thread(self._thread)
        except RuntimeError:  # no thread can start (a pids limit): nothing is served
            server.server_close()
            self._server = None
            raise


def _stop(server: ThreadingHTTPServer | None, thread: threading.Thread | None) -> None:
    """Stop serving: the listening socket closed, the serving thread ended."""
    if server is not None:
        # wake the serving thread's wait for a connection now (the accept it then tries
        # fails and is ignored) rather than after up to poll_interval: a SIGTERM's exit
        # is not held up by it
        with contextlib.suppress(OSError):
            server.socket.shutdown(socket.SHUT_RDWR)
        server.shutdown()
        server.server_close()
    if thread is not None:
        thread.join()


class _LogLinesDropped(Collector):
    """The log lines that never reached stderr, counted where they are dropped (the log
    sink and the log writer, neither of which may import prometheus_client) and read here
    at each scrape."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "gfd_log_lines_dropped",
            "Log lines dropped because stderr was closed, broken or not read fast enough",
            value=self._count(),
        )


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, but at most :data:`MAX_CONNECTIONS` of them: a connection
    past that is closed at once (the scraper retries), so anyone who can reach the port
    cannot make the process start threads without end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that resets, times out or sends garbage is the client's problem: the
        # stock handler prints a traceback to stderr, which anyone who can reach the port
        # could repeat to flood the log
        pass


class _IPv6Server(_BoundedServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    metrics: PrometheusMetrics
    server_version = f"gfd/{__version__}"
    #: a connection that sends nothing is closed after this long
    timeout = CONNECTION_TIMEOUT_SECONDS

    def version_string(self) -> str:
        # gfd's name alone: the interpreter's version would tell a scanner what to try
        return self.server_version

    def setup(self) -> None:
        # the timeout above bounds each read; a client trickling its request a byte at a
        # time would pass every one of them, so the whole connection has a deadline too
        super().setup()
        self._deadline = threading.Timer(CONNECTION_TIMEOUT_SECONDS, self._cut)
        self._deadline.daemon = True
        start_thread(self._deadline)

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST

        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, self.metrics.exposition(), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            ok = self.metrics.healthy()
            self._send(200 if ok else 503, b"ok\n" if ok else b"stalled\n")
        elif path == "/readyz":
            ok = self.metrics.ready()
            self._send(200 if ok else 503, b"ok\n" if ok else b"not published yet\n")
        else:
            self._send(404, b"not found\n")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A refused request (a method other than GET, a malformed line, too many headers)
        is answered with its status and the standard phrase alone: the stock answer quotes
        the request back -- its method, its words -- in the status line and the page."""
        status = HTTPStatus(code)
        self.close_connection = True
        self._send(status.value, f"{status.value} {status.phrase}\n".encode())

    def _send(
        self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
