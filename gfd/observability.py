"""Logging and the metrics interface the agent reports to.

Log records are structlog's: one JSON object per line on stderr (``JSONRenderer``) --
the context, then ``event``, ``level`` and ``timestamp`` -- or structlog's console renderer
(``--log-format console``, or stderr is a terminal).  Every record passes the same
processors: the level filter, the level and an ISO UTC time stamp, the traceback of
``exc_info`` as text, and :func:`redact` (gfd.redaction: no credential the process holds
leaves it in a log line), then the renderer.  Lines go to whatever ``sys.stderr`` is when
they are written (gfd.logsink.write_line); in the gfd process that is gfd.logsink's sink,
which never blocks and counts what it cannot deliver.  Tests read records with
``structlog.testing.capture_logs``.

``NullMetrics`` is used when ``--metrics-address`` is empty; ``start_metrics(settings)``
returns the Prometheus implementation (imported lazily so oneshot never pays for it).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from collections.abc import MutableMapping
from typing import IO, TYPE_CHECKING, Any, Protocol

from gfd import logsink
from gfd.echo import printable

if TYPE_CHECKING:
    from gfd.settings import Settings

# Numeric levels as in the logging module; kept here so filtering costs no import.
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_config: dict[str, Any] = {"format": None, "level": _LEVELS["info"], "renderer": None}
_configured = [False]


def configure_logging(log_format: str | None, log_level: str) -> None:
    """Set the format (json, console, or None: console when stderr is a TTY) and the level.

    structlog itself is imported and configured by the first record that passes the level
    filter, so that a quiet ``gfd --oneshot`` pays nothing for logging."""
    _config.update(format=log_format, level=_LEVELS.get(log_level, 20), renderer=None)
    restart_coalescing()
    _adopt_library_messages()
    signals = sys.modules.get("gfd.signals")
    if signals is not None and signals.without_watchdog():
        get_logger().warning(
            "stop watchdog not started: no thread can start; a stop is not forced past a block"
        )


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: IO[str] | None = None,
    line: str | None = None,
) -> None:
    get_logger().warning(
        "library warning", category=category.__name__, message=str(message), origin=filename
    )


def _adopt_library_messages() -> None:
    """Python's warnings and the ``logging`` records of the libraries gfd uses (urllib3, the
    kubernetes client) become gfd's own records, in gfd's format: the log stream is gfd's."""
    warnings.showwarning = _show_warning
    root = logging.getLogger()
    root.handlers[:] = [_Forward()]
    root.setLevel(logging.WARNING)
    logging.lastResort = None


class _Forward(logging.Handler):
    """A library's ``logging`` record as a gfd record (its level, its logger's name)."""

    def emit(self, record: logging.LogRecord) -> None:
        level = record.levelname.lower()
        level = level if level in _LEVELS else ("error" if record.levelno > 40 else "debug")
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        getattr(get_logger(), level)("library log", logger=record.name, message=message)


#: how long repeats of one record are counted instead of written
COALESCE_SECONDS = 60.0
#: records remembered for coalescing, at most (the oldest is forgotten first)
COALESCE_KEYS = 256
_seen: dict[str, list[float]] = {}
#: one record at a time through the store above: the main loop and the watches' threads
#: log at once, and two new records forgetting the same oldest one would fail the second
_seen_lock = threading.Lock()


def coalesce(_logger: Any, method: str, record: MutableMapping[str, Any]) -> Any:
    """The processor that keeps a fast loop from flooding the log: a record equal to one
    written less than :data:`COALESCE_SECONDS` ago (same level, event and fields) is dropped
    and counted; the next equal record after that carries the count as ``repeated``."""

    import structlog

    key = repr(sorted((str(k), repr(v)) for k, v in record.items()))
    now = time.monotonic()
    with _seen_lock:
        seen = _seen.get(key)
        if seen is not None and now - seen[0] < COALESCE_SECONDS:
            seen[1] += 1
            raise structlog.DropEvent
        if seen is not None and seen[1]:
            record["repeated"] = int(seen[1])
        _seen.pop(key, None)
        if len(_seen) >= COALESCE_KEYS:
            del _seen[next(iter(_seen))]
        _seen[key] = [now, 0]
    return record


def restart_coalescing() -> None:
    """Forget the records seen: a new run (a start, or a reload that changed the settings)
    says again what applies to it, even a warning the last run already said."""
    with _seen_lock:
        _seen.clear()


class _StderrLogger:
    """structlog's final logger: each rendered record is one line on the current stderr."""

    def msg(self, line: str) -> None:
        logsink.write_line(line)
        if logsink.writer_missing():
            get_logger().warning(
                "stderr writer thread not started: no thread can start; a log line is "
                "written only when stderr takes it at once, else dropped and counted"
            )

    debug = info = warning = error = critical = exception = msg


def _stderr_logger(*_args: Any) -> _StderrLogger:
    return _StderrLogger()


def _each_string(value: Any, change: Any) -> Any:
    """``value`` with ``change`` applied to every string in it, however deep in lists and
    dictionaries."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list | tuple):
        return [_each_string(item, change) for item in value]
    if isinstance(value, dict):
        return {key: _each_string(item, change) for key, item in value.items()}
    return value


def redact(_logger: Any, _method: str, record: MutableMapping[str, Any]) -> Any:
    """The processor that takes out any credential the process holds (gfd.redaction), in
    whichever field -- an error, a quoted answer, a traceback -- it came."""
    redaction = sys.modules.get("gfd.redaction")
    if redaction is None:  # no credential was ever read: nothing to take out
        return record
    return _each_string(dict(record), redaction.redact)


def render(logger: Any, method: str, record: MutableMapping[str, Any]) -> Any:
    """structlog's JSONRenderer, or its ConsoleRenderer where the settings ask for it.

    JSON escapes every control character itself; the console renderer writes a value as it
    is unless it holds a space, a quote or a line break, so a value that reached a field
    unclipped (a name from a directory, an answer of the driver) could carry a terminal
    escape to whoever reads the log: every value but a traceback is shown escaped first."""
    renderer = _config["renderer"]
    if renderer is None:
        import structlog

        stream = sys.stderr
        tty = stream is not None and stream.isatty()
        log_format = _config["format"]
        if log_format == "console" or (log_format is None and tty):
            renderer = _escaping(structlog.dev.ConsoleRenderer(colors=tty))
        else:
            renderer = structlog.processors.JSONRenderer(default=repr)
        _config["renderer"] = renderer
    return renderer(logger, method, record)


def _escaping(console: Any) -> Any:
    def render_escaped(logger: Any, method: str, record: MutableMapping[str, Any]) -> Any:
        shown = {
            key: item if key == "exception" else _each_string(item, printable)
            for key, item in record.items()
        }
        return console(logger, method, shown)

    return render_escaped


def use_structlog() -> Any:
    """structlog, configured with gfd's processors the first time (once: a test's
    ``structlog.testing.capture_logs`` swaps the processors for a while and puts these back).
    """
    import structlog

    if not _configured[0]:
        _configured[0] = True
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                coalesce,
                structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
                structlog.processors.format_exc_info,
                redact,
                render,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(0),
            logger_factory=_stderr_logger,
            cache_logger_on_first_use=False,
        )
    return structlog


def log_lines_dropped() -> int:
    """Log lines (and other stderr text, counted by lines) that never reached stderr."""
    return logsink.log_lines_dropped()


class Logger:
    """Context bound to structlog records; structlog is reached only by a record that
    passes the level filter."""

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context

    def bind(self, **context: Any) -> Logger:
        return Logger({**self._context, **context})

    def _emit(self, level: str, event: str, **fields: Any) -> None:
        if _LEVELS[level] >= _config["level"]:
            bound = use_structlog().get_logger().bind(**self._context)
            getattr(bound, level)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, **fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error record with the traceback of the exception being handled."""
        fields.setdefault("exc_info", True)
        self._emit("error", event, **fields)


def get_logger(**context: Any) -> Logger:
    return Logger(context)


class Metrics(Protocol):
    """What the agent reports.  ``result`` is "success" or "error"."""

    def pass_started(self) -> None: ...

    def pass_finished(
        self, result: str, duration_seconds: float, label_count: int | None
    ) -> None: ...

    def publish_result(self, output: str, result: str) -> None: ...

    def retire_result(self, output: str, result: str) -> None: ...

    def nvml_up(self, up: bool) -> None: ...

    def gpus_lost(self, count: int) -> None: ...

    def dra_drift_check(self, result: str) -> None: ...

    def dra_drift(self, labels: tuple[str, ...]) -> None: ...

    def set_sleep_interval(self, sleep_interval: float | None) -> None: ...

    def rebind(self, address: str) -> None: ...

    def close(self) -> None: ...


class NullMetrics:
    def pass_started(self) -> None:
        pass

    def pass_finished(self, result: str, duration_seconds: float, label_count: int | None) -> None:
        pass

    def publish_result(self, output: str, result: str) -> None:
        pass

    def retire_result(self, output: str, result: str) -> None:
        pass

    def nvml_up(self, up: bool) -> None:
        pass

    def gpus_lost(self, count: int) -> None:
        pass

    def dra_drift_check(self, result: str) -> None:
        pass

    def dra_drift(self, labels: tuple[str, ...]) -> None:
        pass

    def set_sleep_interval(self, sleep_interval: float | None) -> None:
        pass

    def rebind(self, address: str) -> None:
        pass

    def close(self) -> None:
        pass


def start_metrics(settings: Settings) -> Metrics:
    """The metrics sink the settings ask for (a served Prometheus registry, or nothing)."""
    if not settings.metrics_address:
        return NullMetrics()
    # prometheus_client and the HTTP server load only where metrics are served
    from gfd.metrics import PrometheusMetrics

    try:
        metrics = PrometheusMetrics(settings.metrics_address, settings.sleep_interval)
    except RuntimeError as exc:  # "can't start new thread": a pids limit; labelling goes on
        get_logger().warning(
            "metrics and health endpoints not served: no thread can start",
            address=settings.metrics_address,
            error=str(exc),
        )
        return NullMetrics()
    get_logger().info(
        "serving metrics and health endpoints",
        address=settings.metrics_address,
        port=metrics.port,
        paths=["/metrics", "/healthz", "/readyz"],
    )
    return metrics
