"""The log stream is gfd's alone: what libraries say (Python's ``warnings`` -- urllib3's
InsecureRequestWarning and clock warning, ssl's deprecations -- and ``logging`` records of
urllib3 and the kubernetes client) comes out as gfd's own records, one JSON object per
line with ``--log-format json``; and a record repeated by a fast loop is written once, then
counted (gfd.observability.coalesce).

Each case is a real process whose real stderr is read and parsed line by line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import structlog

from gfd import observability
from tests.process import ROOT

PROVOKE = """
import logging, ssl, warnings
from gfd.observability import configure_logging, get_logger
configure_logging("json", "info")
import urllib3
from urllib3.exceptions import InsecureRequestWarning, SystemTimeWarning
warnings.simplefilter("always")
warnings.warn("Unverified HTTPS request is being made", InsecureRequestWarning)
warnings.warn("System time is way off (before 2024-01-01)", SystemTimeWarning)
warnings.warn("ssl.PROTOCOL_TLS is deprecated", DeprecationWarning)
logging.getLogger("urllib3.connectionpool").warning(
    "Retrying (%s) after %s", "Retry(total=2)", "boom"
)
logging.getLogger("kubernetes.client.rest").error("response body: %r", b"{}")
logging.getLogger("urllib3").warning("bad %d format", "x")
for _ in range(50):
    get_logger(node="n1").error("pass failed", error="api unreachable")
"""


def run(code: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON


def test_library_warnings_and_log_records_are_gfd_json_records() -> None:
    records = run(PROVOKE)
    warned = {r["category"]: r for r in records if r["event"] == "library warning"}
    assert set(warned) == {"InsecureRequestWarning", "SystemTimeWarning", "DeprecationWarning"}
    assert all(r["level"] == "warning" and "timestamp" in r for r in warned.values())
    logged = [r for r in records if r["event"] == "library log"]
    assert [(r["logger"], r["level"]) for r in logged] == [
        ("urllib3.connectionpool", "warning"),
        ("kubernetes.client.rest", "error"),
        ("urllib3", "warning"),
    ]
    assert "Retry(total=2)" in logged[0]["message"]


def test_a_repeated_record_is_written_once_within_the_window() -> None:
    records = run(PROVOKE)
    failed = [r for r in records if r["event"] == "pass failed"]
    assert len(failed) == 1
    assert failed[0]["node"] == "n1"


def test_the_count_of_repeats_comes_with_the_next_record_after_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(observability, "_seen", {})
    now = [100.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    record = {"event": "pass failed", "level": "error"}
    assert observability.coalesce(None, "error", dict(record)) == record
    for _ in range(3):
        with pytest.raises(structlog.DropEvent):
            observability.coalesce(None, "error", dict(record))
    other = {"event": "pass failed", "level": "error", "error": "another"}
    assert observability.coalesce(None, "error", dict(other)) == other  # not the same record
    now[0] += observability.COALESCE_SECONDS
    assert observability.coalesce(None, "error", dict(record)) == {**record, "repeated": 3}
