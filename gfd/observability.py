"""Logging (structlog) and the metrics interface the agent reports to.

``NullMetrics`` is used when ``--metrics-address`` is empty; ``start_metrics(settings)``
returns the Prometheus implementation (imported lazily so oneshot never pays for it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gfd.settings import Settings

# Numeric levels as in the logging module; kept here so filtering costs no import.
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
_config: dict[str, Any] = {"format": None, "level": _LEVELS["info"], "ready": False}


def configure_logging(log_format: str | None, log_level: str) -> None:
    """One JSON object per line on stderr (console renderer when stderr is a TTY).

    structlog itself is set up on the first record that passes the level filter: importing
    it costs ~40 ms (it pulls in asyncio), which a quiet ``gfd --oneshot`` never pays."""
    _config.update(format=log_format, level=_LEVELS.get(log_level, 20), ready=False)


def _structlog() -> Any:
    import structlog

    if not _config["ready"]:
        log_format = _config["format"]
        use_console = log_format == "console" or (log_format is None and sys.stderr.isatty())
        renderer: Any = (
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
            if use_console
            else structlog.processors.JSONRenderer(sort_keys=False)
        )
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                _redact_credentials,
                renderer,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(_config["level"]),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            cache_logger_on_first_use=False,
        )
        _config["ready"] = True
    return structlog


def _redact_credentials(
    logger: Any, method: str, event: MutableMapping[str, Any]
) -> Mapping[str, Any]:
    """No credential the process holds reaches a log line (gfd.redaction), whichever field
    -- an error, a quoted answer, a traceback -- carries it."""
    from gfd.redaction import redact

    return {key: _redacted(value, redact) for key, value in event.items()}


def _redacted(value: Any, redact: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list | tuple):
        return [_redacted(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: _redacted(item, redact) for key, item in value.items()}
    return value


class Logger:
    """A structlog bound logger, created only when a record passes the level filter."""

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context

    def bind(self, **context: Any) -> Logger:
        return Logger({**self._context, **context})

    def _emit(self, level: str, event: str, **fields: Any) -> None:
        if _LEVELS["error" if level == "exception" else level] < _config["level"]:
            return
        logger = _structlog().get_logger("gfd").bind(**self._context)
        getattr(logger, level)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, **fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._emit("exception", event, **fields)


def get_logger(**context: Any) -> Logger:
    return Logger(context)


class Metrics(Protocol):
    """What the agent reports.  ``result`` is "success" or "error"."""

    def pass_started(self) -> None: ...

    def pass_finished(
        self, result: str, duration_seconds: float, label_count: int | None
    ) -> None: ...

    def publish_result(self, output: str, result: str) -> None: ...

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
