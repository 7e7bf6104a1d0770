"""The retry policy's waits, taken out of in-process tests: :class:`SkippedWaits` is the wall
clock except that a wait passes at once (it moves the clock ahead), so a test failing an
operation until its budget runs out does not sit through the backoff; requests still take and
time out in real time.  :class:`FakeTime` moves only by the waits (the policy's own tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from gfd.kube.client import KubeClient, retry_budget
from gfd.kube.limits import REQUEST_TIMEOUT_SECONDS
from gfd.settings import Settings

T = TypeVar("T")


class FakeTime:
    """A clock that only moves when someone sleeps: a test drives a retry policy or a rate
    limit without waiting, and sees every wait it asked for in ``sleeps``."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class SkippedWaits:
    def __init__(self) -> None:
        self.skipped = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return time.monotonic() + self.skipped

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.skipped += seconds


def client_without_waits(
    kubeconfig: str, *, budget: float, request_timeout: float = REQUEST_TIMEOUT_SECONDS
) -> KubeClient:
    """A real client whose retry policy skips its waits (:class:`SkippedWaits`)."""
    waits = SkippedWaits()
    return KubeClient(
        kubeconfig, budget=budget, request_timeout=request_timeout, sleep=waits.sleep,
        clock=waits.clock,
    )  # fmt: skip


def output_without_waits(make: Callable[..., T], kubeconfig: str, **values: Any) -> T:
    """An API output of node ``n1`` (interval 1 s unless ``values`` say otherwise) over the
    real client with the budget its settings give, its waits between attempts skipped: a
    transient error or an outage costs no backoff here."""
    settings = Settings(
        **{"node_name": "n1", "sleep_interval": 1.0, "kubeconfig": kubeconfig, **values}
    )
    budget = retry_budget(settings.sleep_interval)
    return make(settings, client=client_without_waits(kubeconfig, budget=budget))
