"""The agent's wake-up flag is set from signal handlers, so it must never wait for a lock
that the interrupted main thread may hold (the hang CI met: SIGTERM ignored for 30 s)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd import interrupt

DGX = "examples/snapshots/dgx-a100.yaml"


@pytest.fixture
def on_usr1() -> Iterator[Callable[[Callable[[], None]], None]]:
    previous = signal.getsignal(signal.SIGUSR1)

    def install(action: Callable[[], None]) -> None:
        signal.signal(signal.SIGUSR1, lambda signum, frame: action())

    yield install
    signal.signal(signal.SIGUSR1, previous)


def test_a_signal_inside_clear_sets_the_flag_and_is_not_lost(
    on_usr1: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wake = interrupt.Wakeup()
    wake.set()
    on_usr1(wake.set)
    real_read = os.read
    fired: list[bool] = []

    def read_then_signal(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGUSR1)  # the handler runs here, inside clear()
        return data

    monkeypatch.setattr(os, "read", read_then_signal)
    wake.clear()
    monkeypatch.undo()
    assert fired
    assert wake.wait(5) is True  # set by the handler: the next wait does not sleep


def test_a_signal_during_an_endless_wait_ends_it(on_usr1: Any) -> None:
    wake = interrupt.Wakeup()
    on_usr1(wake.set)
    signal.setitimer(signal.ITIMER_REAL, 0)
    previous = signal.signal(
        signal.SIGALRM, lambda signum, frame: os.kill(os.getpid(), signal.SIGUSR1)
    )
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        assert wake.wait(None) is True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_wait_times_out_unset_and_clear_forgets_an_earlier_set() -> None:
    wake = interrupt.Wakeup()
    assert wake.wait(0.01) is False and not wake.is_set()
    for _ in range(100_000):  # more than a pipe holds: set() never blocks
        wake.set()
    wake.clear()
    assert not wake.is_set() and wake.wait(0) is False


def test_a_storm_of_signals_never_hangs_the_daemon(tmp_path: Path, daemons: Any) -> None:
    """Hundreds of SIGHUPs land at random points of the loop (inside waits, clears and
    passes); the daemon keeps going, and SIGTERM still ends it with exit 0."""
    out = tmp_path / "gfd"
    daemon = daemons(
        "--sleep-interval", "1ms", "--output-file", str(out), "--snapshot-file", DGX,
        "--no-timestamp",
    )  # fmt: skip
    daemon.wait_for("pass finished")
    for _ in range(400):
        daemon.process.send_signal(signal.SIGHUP)
        time.sleep(0.001)
    daemon.wait_for("settings reloaded")
    assert daemon.process.poll() is None
    assert daemon.stop(signal.SIGTERM) == 0
    assert "nvidia.com/gpu.count=8\n" in out.read_text()


def test_a_stale_byte_without_the_flag_does_not_end_the_wait_early() -> None:
    """A set() in another thread can write its byte after a clear() undid its flag; the
    wait must still sleep its time (not spin on the readable pipe) and report unset."""
    wake = interrupt.Wakeup()
    os.write(wake._write, b"\0")  # the byte of a set() whose flag a clear() took back
    real = wake._poll
    calls: list[int | None] = []

    class Counting:
        def poll(self, timeout: int | None = None) -> list[tuple[int, int]]:
            calls.append(timeout)
            return real.poll(timeout)

    wake._poll = Counting()  # type: ignore[assignment]
    # 50 ms: a wait spinning on the readable pipe would poll thousands of times in it
    assert wake.wait(0.05) is False
    assert len(calls) <= 3  # the stale byte woke it once; then it slept out its time
