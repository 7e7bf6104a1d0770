"""The features file's expiry and keep-on-exit under hostile conditions:
extreme horizons, clocks far off, special files swapped in while a daemon runs."""

from __future__ import annotations

import datetime
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from gfd.errors import PublishError
from gfd.outputs.file import FileOutput, format_expiry, split_features_file
from tests.process import run_gfd_here
from tests.specialfiles import make_fifo, replace_with_directory, swap

DGX = "examples/snapshots/dgx-a100.yaml"
LABELS = {"nvidia.com/gpu.count": "8"}
GO_MAX_HORIZON = 2_562_047 * 3600.0  # the longest duration Go (and gfd) accepts


def at(year: int) -> float:
    return datetime.datetime(year, 1, 1, tzinfo=datetime.timezone.utc).timestamp()


def test_a_clock_far_ahead_with_the_longest_horizon_still_writes(tmp_path: Path) -> None:
    """now + horizon past year 9999 raised ValueError ('year 10292 is out of range') out
    of every write: the daemon never published again."""
    path = tmp_path / "gfd"
    output = FileOutput(
        str(path), remove_on_exit=False, expiry_horizon=GO_MAX_HORIZON, clock=lambda: at(9999)
    )
    output.publish(LABELS)
    expires, body = split_features_file(path.read_text())
    assert body == "nvidia.com/gpu.count=8\n"
    assert path.read_text().startswith("# +expiry-time=9999-12-31T23:59:59Z\n")
    assert expires is not None


def test_a_held_expiry_is_not_renewed_on_every_pass(tmp_path: Path) -> None:
    now = [at(9990)]
    path = tmp_path / "gfd"
    output = FileOutput(
        str(path), remove_on_exit=False, expiry_horizon=GO_MAX_HORIZON, clock=lambda: now[0]
    )
    output.publish(LABELS)
    inode = path.stat().st_ino
    for _ in range(5):
        now[0] += 3600
        assert output.verify(LABELS) is False
    assert path.stat().st_ino == inode  # no write: every rename gives a new inode


@pytest.mark.parametrize("seconds", [-(10**12), 10**15, float(2**62)])
def test_format_expiry_never_raises(seconds: float) -> None:
    text = format_expiry(seconds)
    assert len(text) == 20 and text.endswith("Z")


def test_clock_jumps_renew_once_then_stay_quiet(tmp_path: Path) -> None:
    now = [at(2026)]
    path = tmp_path / "gfd"
    output = FileOutput(str(path), remove_on_exit=False, expiry_horizon=3600, clock=lambda: now[0])
    output.publish(LABELS)
    for jump in (-10 * 365 * 86400, 50 * 365 * 86400):  # far back, then far ahead
        now[0] += jump
        output.verify(LABELS)  # one write to bring the expiry in line with the clock
        inode = path.stat().st_ino
        for _ in range(3):
            now[0] += 60
            assert output.verify(LABELS) is False
        assert path.stat().st_ino == inode
        expires, _ = split_features_file(path.read_text())
        assert expires is not None and 0 < expires - now[0] <= 3600


@pytest.mark.parametrize("horizon", ["1ns", "0.5s", "59s"])
def test_a_horizon_that_lapses_before_nfd_reads_the_file_is_refused(
    horizon: str, tmp_path: Path
) -> None:
    out = tmp_path / "gfd"
    result = run_gfd_here(
        "--oneshot", "--snapshot-file", DGX, "-o", str(out), "--expiry-horizon", horizon
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--expiry-horizon" in lines[0]
    assert not out.exists()


def swap_in_a_fifo(path: Path) -> None:
    swap(path, make_fifo)


def special_files() -> list[Any]:
    return [
        pytest.param(swap_in_a_fifo, id="fifo"),
        pytest.param(replace_with_directory, id="directory"),
    ]


@pytest.mark.parametrize("make", special_files())
def test_special_file_swapped_in_under_a_running_daemon(
    make: Any, tmp_path: Path, daemons: Any
) -> None:
    """With an expiry, every pass reads the file back: a FIFO put at its path blocked the
    loop (and SIGTERM) for good, a directory was renamed over or read."""
    out = tmp_path / "gfd"
    daemon = daemons(
        "--sleep-interval", "50ms", "--output-file", str(out), "--snapshot-file", DGX
    )  # fmt: skip
    daemon.wait_for("pass finished")
    make(out)
    daemon.wait_for("pass failed")  # refused, logged, the loop goes on
    daemon.wait_for("pass failed")
    assert daemon.stop(signal.SIGTERM) == 0  # the wait inside stop() is the hang guard
    assert out.is_fifo() or out.is_dir()


def test_cleanup_never_removes_a_fifo_or_directory(tmp_path: Path) -> None:
    fifo = tmp_path / "gfd"
    os.mkfifo(fifo)
    output = FileOutput(str(fifo), remove_on_exit=True, expiry_horizon=None)
    with pytest.raises(PublishError, match="not a regular file"):
        output.cleanup()
    output.on_exit()  # not its own file: left alone, no block
    assert fifo.is_fifo()


def test_a_running_daemon_does_not_rewrite_a_current_file(tmp_path: Path, daemons: Any) -> None:
    """The expiry is checked on every pass; it must not turn into a write every pass."""
    out = tmp_path / "gfd"
    # 50ms passes against a 60s horizon: five passes in a quarter of a second, the expiry
    # still far off at every one of them
    daemon = daemons(
        "--sleep-interval", "50ms", "--expiry-horizon", "60s", "--output-file", str(out),
        "--snapshot-file", DGX, "--no-timestamp",
    )  # fmt: skip
    daemon.wait_for("pass finished")
    inode, text = out.stat().st_ino, out.read_text()
    daemon.wait_for("pass finished", count=4)
    assert (out.stat().st_ino, out.read_text()) == (inode, text)
    assert daemon.stop(signal.SIGTERM) == 0
    assert out.read_text() == text  # kept on exit, expiry and all
