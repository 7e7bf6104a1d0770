"""gfd.interrupt: a stop signal ends a blocking request or a wait between retries at once.

A real signal (SIGALRM from a timer, standing in for SIGTERM) is delivered to this process
while the main thread blocks; the pytest timeout guards against the old behaviour (blocking
until the wait or the socket gives up)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from gfd import interrupt
from gfd.errors import PublishError
from gfd.kube.client import KubeClient
from tests.fakes.fake_apiserver import FakeApiServer, Fault

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def stop_on_alarm() -> Iterator[None]:
    interrupt.reset()

    def handler(signum: int, frame: FrameType | None) -> None:
        del frame
        interrupt.request_stop(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGALRM, handler)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
    interrupt.reset()


def alarm_in(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, seconds)


def test_a_wait_between_retries_ends_at_the_signal() -> None:
    alarm_in(0.1)
    with pytest.raises(interrupt.Interrupted, match="SIGALRM"):
        interrupt.sleep(3600)


def test_a_blocking_read_ends_at_the_signal() -> None:
    left, right = socket.socketpair()
    with left, right:
        alarm_in(0.1)
        with pytest.raises(interrupt.Interrupted), interrupt.interruptible():
            left.recv(1)  # nothing ever comes


def test_outside_interruptible_a_signal_only_sets_the_flag() -> None:
    interrupt.request_stop("SIGTERM")
    assert interrupt.stop_requested()
    with pytest.raises(interrupt.Interrupted, match="SIGTERM"):
        interrupt.check()
    with pytest.raises(interrupt.Interrupted), interrupt.interruptible():
        pass  # entering a blocking region after the stop ends it at once


def test_a_request_to_a_silent_server_ends_at_the_signal(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add_node("n1")
        api.inject(Fault(hang=True, count=None))
        client = KubeClient(str(api.write_kubeconfig(tmp_path / "kubeconfig")), budget=30.0)
        alarm_in(0.3)
        with pytest.raises(PublishError, match="get node n1: interrupted by SIGALRM"):
            client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))
        assert api.count("GET") == 1  # no retry after the stop
