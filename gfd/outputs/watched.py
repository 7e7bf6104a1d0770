"""The base of the API outputs that watch what they published (gfd.kube.watch) instead of
re-reading it every ``verify_interval``; where the server refuses the watch they re-read
again."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gfd.kube.client import JSON, KubeClient, KubeError
from gfd.kube.watch import ObjectWatch, follow, unfollow, watch_client
from gfd.observability import get_logger
from gfd.outputs import Output

if TYPE_CHECKING:
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


class OwnedObject:
    """What an output needs to follow the object it publishes to.

    ``undone(obj)`` says whether the object as seen (None: absent) no longer holds what was
    published; when it does, ``wake()``.  ``on_refused()`` when the server refuses the
    watch (the output goes back to re-reading the object periodically)."""

    def __init__(
        self,
        make_client: Callable[[], KubeClient],
        collection: str,
        name: str,
        what: str,
        undone: Callable[[JSON | None], bool],
    ) -> None:
        self._make_client = make_client
        self._collection = collection
        self._name = name
        self._what = what
        self._undone = undone
        self._watch: ObjectWatch | None = None
        self._wake: Callable[[], None] = lambda: None  # no one to wake yet
        self._log = get_logger(watch=what)

    @property
    def running(self) -> bool:
        return self._watch is not None

    def view(self) -> tuple[bool, JSON | None]:
        """(True, the object as last seen, None: absent) while the watch follows it;
        (False, None) before its first list, once refused, or when not watching."""
        watch = self._watch
        if watch is None or watch.refused or not watch.synced:
            return False, None
        return True, watch.current

    def start(self, wake: Callable[[], None], on_refused: Callable[[], None]) -> None:
        if self._watch is not None:
            return
        self._wake = wake
        self._watch = follow(
            self._make_client, self._collection, self._name, self._what, self._seen, on_refused
        )

    def stop(self) -> None:
        if self._watch is not None:
            unfollow(self._watch, self._seen)
            self._watch = None

    def retell(self, obj: JSON | None) -> None:
        """Judge again ``obj``, as the watch told it earlier, when it could not be judged
        then (the owner's write was in flight)."""
        self._seen(obj)

    def _seen(self, obj: JSON | None) -> None:
        try:
            undone = self._undone(obj)
        except (KubeError, ValueError, TypeError):
            undone = True  # a shape gfd cannot compare: the agent's check reads it properly
        if undone:
            self._log.info("change seen that undoes what gfd published; checking now")
            self._wake()


def resource_version(obj: JSON) -> str | None:
    """The object's ``metadata.resourceVersion``, when it is a string."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return version if isinstance(version, str) else None
