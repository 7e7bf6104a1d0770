"""The coalescing of repeated records (gfd.observability.coalesce) with a driven clock:
the count of repeats comes with the next record after the window.  The log stream as a
real process -- library warnings and records as gfd's own, a record repeated many
times -- is a class of the fault matrix (tests/test_fault_matrix.py)."""

from __future__ import annotations

import pytest
import structlog

from gfd import observability


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
