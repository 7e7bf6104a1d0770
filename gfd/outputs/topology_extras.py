"""What gfd publishes besides the labels when asked to (README "GPU topology"):

- in node-labels mode with ``--topology-labels``, the partition table (Koordinator's JSON)
  in the Node annotation :data:`PARTITIONS_ANNOTATION`.  gfd owns that one key: it is set
  while the table is not empty, removed (``null`` in the merge patch) when it becomes empty,
  and by ``--cleanup``; nothing else on the node is touched;
- with ``--koordlet-device-infos-dir``, koordlet's device-info file (:mod:`.koordlet`).

Both are written only when their content changes; a failure fails the pass like a label
publish does (logged, counted, retried next pass).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gfd.grammar import PREFIX
from gfd.kube.client import (
    JSON,
    MERGE_PATCH,
    KubeClient,
    KubeError,
    bad_answer,
    path_segment,
    publishing_client,
)
from gfd.kube.shapes import string_map
from gfd.kube.watch import watch_client
from gfd.labels.partitioning import partition_table
from gfd.observability import get_logger
from gfd.outputs.koordlet import KoordletDeviceInfos
from gfd.outputs.nodelabels import VERIFY_INTERVAL_SECONDS
from gfd.outputs.watched import OwnedObject, resource_version
from gfd.partition_table import dumps

if TYPE_CHECKING:
    from gfd.kube.client import KubeClient
    from gfd.outputs.koordlet import KoordletDeviceInfos
    from gfd.partition_table import PartitionTable
    from gfd.settings import Settings
    from gfd.snapshot import Snapshot

PARTITIONS_ANNOTATION = f"{PREFIX}gfd.gpu-partitions"


class PartitionsAnnotation:
    """The partition table as one gfd-owned annotation on the Node.

    Owned as the labels are: the watch of the node (the one the node-labels output runs)
    tells when someone else removed or edited it, and the pass after that reads the node
    and writes it again; where the watch is refused, the node is read again every
    :data:`VERIFY_INTERVAL_SECONDS`."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: KubeClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert settings.node_name
        self.node_name = settings.node_name
        self._path = f"/api/v1/nodes/{path_segment(settings.node_name)}"
        self._client = client or publishing_client(settings)
        self._published: str | bool | None = False  # False: nothing written by this process
        self._written: str | None = None  # the node's version after gfd's own last patch
        # the value a write in flight sets (False: none): the watch's thread may tell that
        # write's event before its answer gives the version above
        self._writing: str | bool | None = False
        self._stale = False  # the watch saw the annotation undone: read the node again
        self._clock = clock
        self._read_at: float | None = None  # when the node was last read or written
        self._log = get_logger(output="node-annotation", node=self.node_name)
        self._watched = OwnedObject(
            lambda: watch_client(
                settings.kubeconfig,
                settings.kube_api_qps,
                settings.kube_api_burst,
                self._client.rate_limiter,
            ),
            "/api/v1/nodes",
            self.node_name,
            f"Node {self.node_name}",
            self._undone,
        )

    def watch(self, wake: Callable[[], None]) -> None:
        """``wake()`` when a change undoes the annotation."""
        self._watched.start(wake, lambda: None)

    def unwatch(self) -> None:
        self._watched.stop()

    def _undone(self, node: JSON | None) -> bool:
        writing = self._writing  # read before what was published: it is cleared after
        published = self._published
        if published is False or (node is not None and resource_version(node) == self._written):
            return False  # nothing published yet, or gfd's own patch
        try:
            differs = node is None or self._annotation(node) not in (published, writing)
        except KubeError:
            differs = True  # a shape gfd cannot compare: the pass reads the node properly
        self._stale = self._stale or differs
        return self._stale

    def publish(self, table: PartitionTable) -> bool:
        value = dumps(table) if table else None
        if value == self._published and not self._stale and not self._due():
            return False
        if (self._published is False or value == self._published) and self._current() == value:
            # a restart on a node that already carries this table, or a repair that found
            # it put back already, writes nothing
            self._published = value
            return False
        try:
            self._patch(value)
            self._published = value
        finally:
            self._writing = False  # after what was published: _undone reads them the other way
        self._log.info("patched the gpu partitions annotation", partitions=bool(value))
        return True

    def _due(self) -> bool:
        """Whether the node is read again now: the watch is refused (or not yet listed) and
        the last read is older than the interval."""
        if self._watched.view()[0]:
            return False
        read_at = self._read_at
        return read_at is None or self._clock() - read_at >= VERIFY_INTERVAL_SECONDS

    def _current(self) -> str | None:
        """The annotation's value on the node now (None: absent)."""

        def read() -> str | None:
            self._stale = False
            value = self._annotation(self._client.request("GET", self._path))
            self._read_at = self._clock()
            return value

        return self._client.run(f"read node {self.node_name}", read)

    def cleanup(self) -> None:
        """Remove the annotation if it is there (a node without it is not written to)."""

        def remove() -> None:
            if self._annotation(self._client.request("GET", self._path)) is not None:
                self._write(None)

        try:
            self._client.run(f"remove the gpu partitions annotation of {self.node_name}", remove)
            self._published = None
        finally:
            self._writing = False

    def _patch(self, value: str | None) -> None:
        self._client.run(f"annotate node {self.node_name}", lambda: self._write(value))

    def _write(self, value: str | None) -> None:
        """One merge patch of the annotation; the answer is the node as the write left it,
        and one that does not show the write (a server or proxy that answered without
        applying it) is no confirmation."""
        patch: dict[str, Any] = {"metadata": {"annotations": {PARTITIONS_ANNOTATION: value}}}
        self._stale = False
        self._writing = value
        answer = self._client.request("PATCH", self._path, patch, content_type=MERGE_PATCH)
        if self._annotation(answer) != value:
            raise bad_answer(f"a node {self.node_name} that does not hold what was written")
        self._written = resource_version(answer)
        self._read_at = self._clock()

    def _annotation(self, node: JSON) -> str | None:
        """The annotation's value on ``node`` (None: absent), when it is this node."""
        if (node.get("metadata") or {}).get("name") != self.node_name:
            raise bad_answer(f"an object that is not node {self.node_name}")
        return string_map(node, "metadata", "annotations").get(PARTITIONS_ANNOTATION)


class TopologyOutputs:
    def __init__(
        self,
        annotation: PartitionsAnnotation | None,
        koordlet: KoordletDeviceInfos | None,
    ) -> None:
        self.annotation = annotation
        self.koordlet = koordlet

    def publish(self, snapshot: Snapshot, override: PartitionTable | None) -> None:

        table = partition_table(snapshot, override)
        if self.annotation is not None:
            self.annotation.publish(table)
        if self.koordlet is not None:
            self.koordlet.publish(snapshot, table)

    def watch(self, wake: Callable[[], None]) -> None:
        """``wake()`` when a change undoes what was published (the annotation; the koordlet
        file is checked every pass)."""
        if self.annotation is not None:
            self.annotation.watch(wake)

    def unwatch(self) -> None:
        if self.annotation is not None:
            self.annotation.unwatch()

    def cleanup(self) -> None:
        if self.annotation is not None:
            self.annotation.cleanup()
        if self.koordlet is not None:
            self.koordlet.cleanup()


def make_topology_outputs(settings: Settings, *, cleanup: bool = False) -> TopologyOutputs | None:
    """The extra outputs the settings ask for; None when there are none.  For ``--cleanup``
    the annotation is removed in node-labels mode whether or not topology labels are on."""
    annotation = None
    wanted = settings.topology_labels or cleanup
    if settings.use_node_labels and wanted and settings.node_name:
        annotation = PartitionsAnnotation(settings)
    koordlet = None
    if settings.koordlet_device_infos_dir:
        koordlet = KoordletDeviceInfos(settings.koordlet_device_infos_dir)
    if annotation is None and koordlet is None:
        return None
    return TopologyOutputs(annotation, koordlet)
