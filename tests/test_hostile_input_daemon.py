"""Hostile input under a running daemon (real processes, real FIFOs): a snapshot, config or
output path swapped for a FIFO nobody writes or for ``/dev/zero`` fails that pass (or reload)
with one log line, the daemon keeps going, and SIGTERM still ends it."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.specialfiles import SPECIAL, swap

DGX = Path("examples/snapshots/dgx-a100.yaml")
#: passes of a daemon that writes a file come this often: a test waiting for the next pass
#: waits at most this long (a pass of this snapshot takes a few milliseconds)
INTERVAL = "50ms"

pytestmark = pytest.mark.timeout(120)


SWAPS = ["fifo", "dev-zero"]


@pytest.mark.parametrize("kind", SWAPS)
def test_snapshot_swapped_for_a_special_file_fails_the_pass(
    tmp_path: Path, daemons: Any, kind: str
) -> None:
    snapshot = tmp_path / "node.yaml"
    snapshot.write_text(DGX.read_text())
    out = tmp_path / "gfd"
    daemon = daemons(
        "--sleep-interval", INTERVAL, "--output-file", str(out), "--snapshot-file", str(snapshot),
    )  # fmt: skip
    daemon.wait_for("pass finished")
    published = out.read_text()
    swap(snapshot, SPECIAL[kind])
    failed = daemon.wait_for("pass failed")[0]
    assert "not a regular file" in failed["error"]
    assert len(failed["error"]) < 300
    failed_again = daemon.wait_for("pass failed")[0]  # the loop goes on
    assert failed_again["error"] == failed["error"]
    assert out.read_text() == published
    assert daemon.stop(signal.SIGTERM) == 0


@pytest.mark.parametrize("kind", SWAPS)
def test_config_swapped_for_a_special_file_fails_the_reload(
    tmp_path: Path, daemons: Any, kind: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    out = tmp_path / "gfd"
    daemon = daemons(
        "--sleep-interval", INTERVAL, "--output-file", str(out), "--snapshot-file", str(DGX),
        "--config-file", str(config),
    )  # fmt: skip
    daemon.wait_for("pass finished")
    swap(config, SPECIAL[kind])
    daemon.process.send_signal(signal.SIGHUP)
    failure = daemon.wait_for("reload failed; keeping the settings in force")[0]
    assert "not a regular file" in failure["error"]
    daemon.wait_for("pass finished")
    assert daemon.process.poll() is None
    assert daemon.stop(signal.SIGTERM) == 0


#: (key under flags.gfd, value) a reload must refuse: intervals past any timer, and hosts
#: the socket layer cannot even encode (it would fail only when it listens, with an
#: exception of its own)
IMPOSSIBLE_VALUES = [
    *(("sleepInterval", interval) for interval in ["3000000h", "9999999999", ".nan", ".inf"]),
    *(("metricsAddress", f'"{host}:9400"') for host in ["\\u202eevil", "\\e[31m", "a b"]),
]


def test_sighup_into_an_impossible_value_keeps_the_daemon(tmp_path: Path, daemons: Any) -> None:
    """One daemon is sent each impossible value in turn (each reload waited for before the
    next file is written): every one fails, and it keeps running on what was in force."""
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    out = tmp_path / "gfd"
    daemon = daemons(
        "--output-file", str(out), "--snapshot-file", str(DGX), "--config-file", str(config),
    )  # fmt: skip
    daemon.wait_for("pass finished")
    for key, value in IMPOSSIBLE_VALUES:
        config.write_text(f"version: v1\nflags:\n  gfd:\n    {key}: {value}\n")
        daemon.process.send_signal(signal.SIGHUP)
        failure = daemon.wait_for("reload failed; keeping the settings in force")[0]
        assert key in failure["error"], value
        assert daemon.process.poll() is None, value
        assert out.exists(), value
    assert daemon.stop(signal.SIGTERM) == 0


def test_longest_valid_interval_waits_without_crashing(tmp_path: Path, daemons: Any) -> None:
    out = tmp_path / "gfd"
    # just under Go's maximum (9223372036.854775807 s), and past threading.TIMEOUT_MAX
    daemon = daemons(
        "--sleep-interval", "9223372036.8", "--output-file", str(out),
        "--snapshot-file", str(DGX),
    )  # fmt: skip
    daemon.wait_for("pass finished")
    daemon.process.send_signal(signal.SIGHUP)  # a new run: a second pass, a second long wait
    daemon.wait_for("settings reloaded")
    daemon.wait_for("pass finished")
    assert daemon.process.poll() is None
    assert daemon.stop(signal.SIGTERM) == 0
    # no gap on restart: the file stays on SIGTERM, with an expiry-time far ahead (4 intervals)
    assert out.read_text().startswith("# +expiry-time=")


def test_output_path_swapped_for_a_fifo_is_never_replaced_or_read(
    tmp_path: Path, daemons: Any
) -> None:
    out = tmp_path / "gfd"
    daemon = daemons(
        "--sleep-interval", INTERVAL, "--output-file", str(out), "--snapshot-file", str(DGX),
    )  # fmt: skip
    daemon.wait_for("pass finished")
    swap(out, SPECIAL["fifo"])
    failed = daemon.wait_for("pass failed")[0]
    assert "not a regular file" in failed["error"]
    daemon.wait_for("pass failed")
    assert out.is_fifo()
    assert daemon.stop(signal.SIGTERM) == 0
    assert out.is_fifo()  # not removed on exit either
