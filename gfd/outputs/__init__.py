"""Destinations for labels.  Every output implements the small :class:`Output` protocol;
``make_output(settings)`` picks the one the settings select.  The Kubernetes outputs are
imported only when selected, so the file and stdout paths never pay for the client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gfd.settings import Settings

Labels = Mapping[str, str]


class Output(Protocol):
    """One destination.  The agent calls ``publish`` only when the label set changed."""

    #: short name used in logs and metrics: "stdout", "file", "nodefeature", "node-labels"
    kind: str
    #: seconds between verification reads at steady state; None: never verify
    verify_interval: float | None

    def publish(self, labels: Labels) -> None:
        """Make the destination hold exactly ``labels``; raise PublishError on failure."""

    def verify(self, labels: Labels) -> bool:
        """Check the destination still holds ``labels``; re-publish if it does not.

        Returns True when it had to re-publish.  Raises PublishError on failure."""

    def on_exit(self) -> None:
        """Called when the daemon exits on SIGTERM/SIGINT/SIGQUIT (a features file without
        expiry that is still this process's own is removed; nothing else is)."""

    def cleanup(self) -> None:
        """``--cleanup``: remove everything this labeller published for this node."""


def make_output(settings: Settings) -> Output:
    if settings.use_node_feature_api:
        from gfd.outputs.nodefeature import NodeFeatureOutput

        return NodeFeatureOutput(settings)
    if settings.use_node_labels:
        from gfd.outputs.nodelabels import NodeLabelsOutput

        return NodeLabelsOutput(settings)
    from gfd.outputs.file import FileOutput, StdoutOutput

    path = settings.effective_output_file
    if path is None:
        return StdoutOutput()
    return FileOutput(
        path,
        remove_on_exit=not settings.oneshot and settings.sleep_interval is not None,
        expiry_horizon=settings.effective_expiry_horizon,
    )
