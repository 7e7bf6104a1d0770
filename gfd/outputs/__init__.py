"""Destinations for labels.  Every output subclasses :class:`Output`, which holds the no-op
defaults, and writes only what it does differently;
``make_output(settings)`` builds the one the settings select, as declared in
:mod:`gfd.output_kinds`.  The Kubernetes outputs are imported only when selected, so the
file and stdout paths never pay for the client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gfd.output_kinds import output_kind_of

if TYPE_CHECKING:
    from gfd.settings import Settings
    from gfd.snapshot import Snapshot

Labels = Mapping[str, str]


class Output:
    """One destination.  The agent calls ``publish`` only when the label set changed.  The
    defaults do nothing: an output that never verifies, takes nothing from the snapshot,
    whose labels never age out and which leaves nothing behind overrides only ``publish``."""

    #: short name used in logs and metrics: "stdout", "file", "nodefeature", "node-labels"
    kind: str
    #: seconds between verification reads at steady state; None: never verify
    verify_interval: float | None = None

    def publish(self, labels: Labels) -> None:
        """Make the destination hold exactly ``labels``; raise PublishError on failure."""
        raise NotImplementedError

    def verify(self, labels: Labels) -> bool:
        """Check the destination still holds ``labels``; re-publish if it does not.

        Returns True when it had to re-publish.  Raises PublishError on failure."""
        return False

    def offer(self, snapshot: Snapshot) -> bool:
        """Take what this output publishes besides the labels from the pass's snapshot
        (NodeFeature ``spec.features``); True when that changed, so the agent publishes
        again although the labels did not."""
        return False

    def keep(self, labels: Labels) -> None:
        """A pass failed and ``labels`` stay (SPEC §7): an output whose labels age out
        (the features file's expiry) renews them.  Raises PublishError on failure."""

    def on_exit(self) -> None:
        """Called when the daemon exits on SIGTERM/SIGINT/SIGQUIT (a features file without
        expiry that is still this process's own is removed; nothing else is)."""

    def cleanup(self) -> None:
        """``--cleanup``: remove everything this labeller published for this node."""


def make_output(settings: Settings) -> Output:
    """The output the settings select (see :mod:`gfd.output_kinds`)."""

    output: Output = output_kind_of(settings).build(settings)
    return output
