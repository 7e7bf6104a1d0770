"""A oneshot's log line, from the imports and stderr of real processes: the JSON format is
structlog's own JSONRenderer in gfd's record shape (event, level, timestamp last), a quiet
oneshot writes nothing, and the console format loads structlog.dev."""

from __future__ import annotations

import json
from pathlib import Path

from .test_imports import loaded, nvml_oneshot


def test_a_json_log_line_is_structlogs_json_renderer(tmp_path: Path) -> None:
    quiet = nvml_oneshot(tmp_path / "quiet")
    warned = nvml_oneshot(tmp_path / "warned", machine_type_file=str(tmp_path / "missing"))
    assert quiet["stderr"] == ""
    (line,) = warned["stderr"].splitlines()
    record = json.loads(line)
    assert (record["event"], record["level"]) == ("machine type unknown", "warning")
    assert list(record)[-3:] == ["event", "level", "timestamp"]  # structlog's order
    assert "nvidia.com/gpu.machine=unknown\n" in warned["stdout"]

    assert loaded(warned, ["structlog.processors"]) == ["structlog.processors"]


def test_the_console_format_is_structlogs_and_loads_it(tmp_path: Path) -> None:
    """The other side: the recorder sees structlog.dev where the console renderer is used."""
    warned = nvml_oneshot(
        tmp_path, "--log-format", "console", machine_type_file=str(tmp_path / "missing")
    )
    assert "machine type unknown" in warned["stderr"]
    assert not warned["stderr"].startswith("{")
    assert loaded(warned, ["structlog.dev"]) == ["structlog.dev"]
