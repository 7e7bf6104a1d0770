"""Logging (structlog) and the metrics interface the agent reports to.

``NullMetrics`` is used when ``--metrics-address`` is empty; ``start_metrics(settings)``
returns the Prometheus implementation (imported lazily so oneshot never pays for it).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, Protocol

import structlog

if TYPE_CHECKING:
    from gfd.settings import Settings

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(log_format: str | None, log_level: str) -> None:
    """One JSON object per line on stderr (console renderer when stderr is a TTY)."""
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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(log_level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(**context: Any) -> Any:
    return structlog.get_logger("gfd").bind(**context)


class Metrics(Protocol):
    """What the agent reports.  ``result`` is "success" or "error"."""

    def pass_started(self) -> None: ...

    def pass_finished(
        self, result: str, duration_seconds: float, label_count: int | None
    ) -> None: ...

    def publish_result(self, output: str, result: str) -> None: ...

    def nvml_up(self, up: bool) -> None: ...

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

    def set_sleep_interval(self, sleep_interval: float | None) -> None:
        pass

    def close(self) -> None:
        pass


def start_metrics(settings: Settings) -> Metrics:
    """The metrics sink the settings ask for (a served Prometheus registry, or nothing)."""
    if not settings.metrics_address:
        return NullMetrics()
    from gfd.metrics import PrometheusMetrics

    return PrometheusMetrics(settings.metrics_address, settings.sleep_interval)
