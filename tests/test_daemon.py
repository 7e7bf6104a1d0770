"""The daemon as a real process: SIGHUP reload, SIGTERM/SIGINT/SIGQUIT exit 0 (the features
file kept with its expiry, or removed when it has none), restarts, exit statuses.  The loop's
behaviour pass by pass (publish-on-change, a bad reload, repair, failed passes) is tested
in-process in test_agent_loop.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.process import run_gfd, run_gfd_here

DGX = "examples/snapshots/dgx-a100.yaml"


def test_daemon_writes_once_reloads_on_sighup_and_removes_on_sigterm(
    tmp_path: Path, daemons: Any
) -> None:
    out = tmp_path / "features.d" / "gfd"
    out.parent.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    daemon = daemons(
        "--sleep-interval", "50ms", "--output-file", str(out),
        "--snapshot-file", DGX, "--config-file", str(config),
    )  # fmt: skip
    first = daemon.wait_for("pass finished")[0]
    assert first["changed"] is True
    text = out.read_text()
    assert "nvidia.com/gpu.count=8\n" in text and "nvidia.com/gfd.timestamp=" in text
    assert "nvidia.com/mig.strategy" not in text
    before = os.stat(out)

    steady = daemon.wait_for("pass finished", count=2)
    assert [event["changed"] for event in steady] == [False, False]
    after = os.stat(out)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".gfd-")]

    config.write_text("version: v1\nflags:\n  migStrategy: single\n")
    daemon.process.send_signal(signal.SIGHUP)
    daemon.wait_for("settings reloaded")
    reloaded = daemon.wait_for("pass finished")[0]
    assert reloaded["changed"] is True
    assert "nvidia.com/mig.strategy=single\n" in out.read_text()

    # no gap on restart: SIGTERM keeps the file; its NFD expiry ages it out
    labels = out.read_text()
    assert daemon.stop(signal.SIGTERM) == 0
    assert out.read_text() == labels and labels.startswith("# +expiry-time=")


def test_infinite_interval_publishes_once_and_keeps_the_file(tmp_path: Path, daemons: Any) -> None:
    out = tmp_path / "gfd"
    daemon = daemons(
        "--sleep-interval", "infinite", "--output-file", str(out), "--snapshot-file", DGX
    )
    daemon.wait_for("pass finished")
    assert out.exists()
    assert daemon.stop() == 0
    assert out.exists()  # SPEC §6.1: not removed with an infinite interval


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGQUIT])
def test_sigint_and_sigquit_exit_0_and_remove_a_file_without_expiry(
    tmp_path: Path, daemons: Any, signum: int
) -> None:
    out = tmp_path / "gfd"
    daemon = daemons(
        "--sleep-interval", "3600s", "--expiry-horizon", "never", "--output-file", str(out),
        "--snapshot-file", DGX,
    )  # fmt: skip
    daemon.wait_for("pass finished")
    assert out.exists()
    assert daemon.stop(signum) == 0
    assert not out.exists(), daemon.log()  # the log says whether the stop watchdog ended it


def test_oneshot_never_removes_its_file(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    result = run_gfd("--oneshot", "-o", str(out), "--snapshot-file", DGX)
    assert result.returncode == 0
    assert out.exists()


# ------------------------------------------------------------------ restarts


def test_a_restart_leaves_no_gap(tmp_path: Path, daemons: Any) -> None:
    """The stopped daemon's file stays; the next one finds the same labels with a fresh
    expiry and does not even rewrite it."""
    out = tmp_path / "gfd"
    args = ("--sleep-interval", "100ms", "--output-file", str(out), "--no-timestamp")
    first = daemons(*args, "--snapshot-file", DGX)
    first.wait_for("pass finished")
    published = out.read_text()
    assert published.startswith("# +expiry-time=") and "nvidia.com/gpu.count=8\n" in published
    assert first.stop(signal.SIGTERM) == 0
    assert out.read_text() == published
    inode = os.stat(out).st_ino
    second = daemons(*args, "--snapshot-file", DGX)
    second.wait_for("pass finished", count=2)
    assert os.stat(out).st_ino == inode
    assert second.stop(signal.SIGTERM) == 0
    result = run_gfd_here("--cleanup", "--output-file", str(out))
    assert result.returncode == 0, result.stderr
    assert not out.exists()  # --cleanup still removes it


def test_two_daemons_on_one_file_without_expiry(tmp_path: Path, daemons: Any) -> None:
    """A rolling update overlaps two daemons on one file: the first to exit does not delete
    the file the other one wrote."""
    out = tmp_path / "gfd"
    # one pass each (the next is an hour away): a second pass of the old daemon, with a new
    # timestamp, would rewrite the file between the new one's pass and the read below
    args = ("--sleep-interval", "1h", "--output-file", str(out), "--expiry-horizon", "never")
    old = daemons(*args, "--snapshot-file", DGX)
    old.wait_for("pass finished")
    new = daemons(*args, "--snapshot-file", "examples/snapshots/two-models.yaml")
    new.wait_for("pass finished")
    written = out.read_text()
    assert "cuda.driver.major=570" in written and not written.startswith("#")
    assert old.stop(signal.SIGTERM) == 0
    assert out.read_text() == written
    assert new.stop(signal.SIGTERM) == 0
    assert not out.exists()  # its own file, unchanged: removed as before
