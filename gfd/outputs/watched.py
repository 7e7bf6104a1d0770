"""The base of the API outputs that watch what they published (gfd.kube.watch) instead of
re-reading it every ``verify_interval``; where the server refuses the watch they re-read
again."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gfd.kube.watch import OwnedObject, watch_client
from gfd.outputs import Output

if TYPE_CHECKING:
    from gfd.kube.client import KubeClient
    from gfd.settings import Settings


class WatchedOutput(Output):
    _watched: OwnedObject

    def _follow(
        self,
        settings: Settings,
        client: KubeClient,
        collection: str,
        name: str,
        what: str,
        undone: Callable[[Any], bool],
    ) -> None:
        """Set up the watch of the object ``name`` in ``collection`` (not started yet): its
        own client, under the output's client-side rate limit."""
        self._watched = OwnedObject(
            lambda: watch_client(
                settings.kubeconfig,
                settings.kube_api_qps,
                settings.kube_api_burst,
                client.rate_limiter,
            ),
            collection,
            name,
            what,
            undone,
        )

    def watch(self, wake: Callable[[], None]) -> None:
        """``wake()`` when a change undoes what was published."""
        self.verify_interval = None
        self._watched.start(wake, self._watch_refused)

    def unwatch(self) -> None:
        self._watched.stop()
        self._watch_refused()

    def _watch_refused(self) -> None:
        self.verify_interval = type(self).verify_interval  # the periodic re-read again
