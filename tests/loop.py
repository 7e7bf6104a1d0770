"""Running the agent's loop in-process: ``drive(settings, steps)`` runs ``Agent.run`` with a
``wait`` that runs the next step (a function of the agent) at each wait between passes, then
asks the agent to stop as SIGTERM does; the metrics are a recorder a test reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gfd.agent import Agent
from gfd.settings import Settings

Step = Callable[[Agent], object]


@dataclass
class RecordedMetrics:
    """A Metrics that remembers what the agent reported."""

    passes: list[str] = field(default_factory=list)  # "success" / "error", one per pass
    publishes: list[tuple[str, str]] = field(default_factory=list)  # (output, result)
    retires: list[tuple[str, str]] = field(default_factory=list)  # (what, result)
    nvml: list[bool] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # GPUs lost, as each discovery found
    intervals: list[float | None] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)  # where a reload moved the server
    drift_checks: list[str] = field(default_factory=list)  # "success" / "error"
    drift: list[tuple[str, ...]] = field(default_factory=list)  # disagreeing labels
    closed: bool = False

    def pass_started(self) -> None:
        pass

    def pass_finished(self, result: str, duration_seconds: float, label_count: int | None) -> None:
        self.passes.append(result)

    def publish_result(self, output: str, result: str) -> None:
        self.publishes.append((output, result))

    def retire_result(self, output: str, result: str) -> None:
        self.retires.append((output, result))

    def nvml_up(self, up: bool) -> None:
        self.nvml.append(up)

    def gpus_lost(self, count: int) -> None:
        self.lost.append(count)

    def dra_drift_check(self, result: str) -> None:
        self.drift_checks.append(result)

    def dra_drift(self, labels: tuple[str, ...]) -> None:
        self.drift.append(labels)

    def set_sleep_interval(self, sleep_interval: float | None) -> None:
        self.intervals.append(sleep_interval)

    def rebind(self, address: str) -> None:
        self.addresses.append(address)

    def close(self) -> None:
        self.closed = True

    @property
    def writes(self) -> int:
        """How many times the output was written (a publish or a verification's repair)."""
        return sum(1 for _, result in self.publishes if result == "success")


def recorded(agent: Agent) -> RecordedMetrics:
    """The recorder a driven agent reports to."""
    assert isinstance(agent.metrics, RecordedMetrics)
    return agent.metrics


@dataclass
class Run:
    agent: Agent
    status: int
    metrics: RecordedMetrics


def drive(
    settings: Settings, steps: Sequence[Step], *,
    reload_settings: Callable[[], Settings] | None = None, **collaborators: Any,
) -> Run:  # fmt: skip
    """Run the loop: a pass, then each step at the wait that follows, then stop."""
    metrics = RecordedMetrics()
    pending = list(steps)
    holder: list[Agent] = []

    def wait(interval: float | None) -> None:
        agent = holder[0]
        if pending:
            pending.pop(0)(agent)
        else:
            agent.request_stop("SIGTERM")

    reload = reload_settings or (lambda: settings)
    agent = Agent(settings, reload, metrics=metrics, wait=wait, **collaborators)
    holder.append(agent)
    status = agent.run()
    assert not pending, "the agent stopped before every step ran"
    return Run(agent, status, metrics)
