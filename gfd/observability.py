"""Logging and the metrics interface the agent reports to.

Log records are one JSON object per line on stderr -- ``event``, ``level``, ``timestamp``
and the context, in the order structlog's ``JSONRenderer`` gives them -- or structlog's
console renderer (``--log-format console``, or stderr is a terminal).  The JSON line is made
with ``json.dumps`` here: importing structlog pulls in asyncio, logging and its development
renderer (70-100 ms on a loaded node), which a oneshot that logs one warning would pay for
nothing.  Lines go to whatever ``sys.stderr`` is when they are written; in the gfd process
that is gfd.logsink's sink, which never blocks and counts what it cannot deliver.

``NullMetrics`` is used when ``--metrics-address`` is empty; ``start_metrics(settings)``
returns the Prometheus implementation (imported lazily so oneshot never pays for it).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gfd.settings import Settings

# Numeric levels as in the logging module; kept here so filtering costs no import.
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_config: dict[str, Any] = {"format": None, "level": _LEVELS["info"], "render": None}
#: lines a stream that is not gfd's sink refused (closed, a broken pipe)
_refused = [0]


def configure_logging(log_format: str | None, log_level: str) -> None:
    """Set the format (json, console, or None: console when stderr is a TTY) and the level.

    The renderer is chosen by the first record that passes the level filter, so that a quiet
    ``gfd --oneshot`` imports nothing for logging."""
    _config.update(format=log_format, level=_LEVELS.get(log_level, 20), render=None)


def _renderer() -> Any:
    render = _config["render"]
    if render is None:
        stream = sys.stderr
        tty = stream is not None and stream.isatty()
        log_format = _config["format"]
        if log_format == "console" or (log_format is None and tty):
            from structlog.dev import ConsoleRenderer

            console = ConsoleRenderer(colors=tty)

            def render(record: dict[str, Any]) -> str:
                return str(console(None, record["level"], record))

        else:
            import json

            def render(record: dict[str, Any]) -> str:
                # as structlog's JSONRenderer: insertion order, repr() for what JSON lacks
                return json.dumps(record, default=repr)

        _config["render"] = render
    return render


def _timestamp() -> str:
    """Now in UTC as structlog's ``TimeStamper(fmt="iso", utc=True)`` writes it."""
    from datetime import datetime, timezone

    return datetime.now(tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _exception_text(exc_info: Any) -> str | None:
    """The traceback of ``exc_info`` (an exception, a sys.exc_info() triple, or True for
    the exception being handled), as structlog's ``format_exc_info`` renders it."""
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif not isinstance(exc_info, tuple):
        exc_info = sys.exc_info() if exc_info else (None, None, None)
    if exc_info[0] is None:
        return None
    import traceback

    return "".join(traceback.format_exception(*exc_info)).removesuffix("\n")


def _write(line: str) -> None:
    """``line`` to stderr; a stream that refuses it (closed, EPIPE) only costs the line."""
    stream = sys.stderr
    try:
        if stream is None:
            raise ValueError("stderr is closed")
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        _refused[0] += 1


def log_lines_dropped() -> int:
    """Log lines (and other stderr text, counted by lines) that never reached stderr."""
    from gfd import logsink

    stream = sys.stderr
    sink = stream.dropped if isinstance(stream, logsink.StderrSink) else 0
    return _refused[0] + sink


def _captured_by_structlog(level: str, record: dict[str, Any]) -> bool:
    """True when a ``structlog.testing.capture_logs()`` block took the record: tests assert
    on gfd's records with structlog's own helper, which swaps structlog's processors for a
    ``LogCapture``; the record goes through those processors as it would in structlog."""
    structlog = sys.modules.get("structlog")
    if structlog is None:
        return False  # nothing can be capturing: a JSON run never imports it
    processors = structlog.get_config()["processors"]
    if not any(isinstance(p, structlog.testing.LogCapture) for p in processors):
        return False
    try:
        for processor in processors:
            record = processor(None, level, record)
    except structlog.DropEvent:
        pass
    return True


def _redacted(value: Any, redact: Any) -> Any:
    """``value`` without any credential the process holds (gfd.redaction), in whichever
    field -- an error, a quoted answer, a traceback -- it came."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list | tuple):
        return [_redacted(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: _redacted(item, redact) for key, item in value.items()}
    return value


class Logger:
    """Context bound to log records; a record is built only when it passes the level filter."""

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context

    def bind(self, **context: Any) -> Logger:
        return Logger({**self._context, **context})

    def _emit(self, level: str, event: str, **fields: Any) -> None:
        if _LEVELS[level] < _config["level"]:
            return
        record = {**self._context, **fields}
        record["event"] = event
        if _captured_by_structlog(level, record):
            return
        exc_info = record.pop("exc_info", None)
        record["level"] = level
        record["timestamp"] = _timestamp()
        if exc_info is not None:
            text = _exception_text(exc_info)
            if text is not None:
                record["exception"] = text
        redaction = sys.modules.get("gfd.redaction")
        if redaction is not None:  # else no credential was ever read: nothing to take out
            record = _redacted(record, redaction.redact)
        _write(_renderer()(record))

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

    def set_sleep_interval(self, sleep_interval: float | None) -> None: ...

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

    def set_sleep_interval(self, sleep_interval: float | None) -> None:
        pass

    def close(self) -> None:
        pass


def start_metrics(settings: Settings) -> Metrics:
    """The metrics sink the settings ask for (a served Prometheus registry, or nothing)."""
    if not settings.metrics_address:
        return NullMetrics()
    from gfd.metrics import PrometheusMetrics

    metrics = PrometheusMetrics(settings.metrics_address, settings.sleep_interval)
    get_logger().info(
        "serving metrics and health endpoints",
        address=settings.metrics_address,
        port=metrics.port,
        paths=["/metrics", "/healthz", "/readyz"],
    )
    return metrics
