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

from typing import TYPE_CHECKING, Any

from gfd.grammar import PREFIX
from gfd.kube.client import (
    JSON,
    MERGE_PATCH,
    KubeClient,
    bad_answer,
    path_segment,
    publishing_client,
)
from gfd.kube.shapes import string_map
from gfd.labels.partitioning import partition_table
from gfd.observability import get_logger
from gfd.outputs.koordlet import KoordletDeviceInfos
from gfd.partition_table import dumps

if TYPE_CHECKING:
    from gfd.kube.client import KubeClient
    from gfd.outputs.koordlet import KoordletDeviceInfos
    from gfd.partition_table import PartitionTable
    from gfd.settings import Settings
    from gfd.snapshot import Snapshot

PARTITIONS_ANNOTATION = f"{PREFIX}gfd.gpu-partitions"


class PartitionsAnnotation:
    """The partition table as one gfd-owned annotation on the Node."""

    def __init__(self, settings: Settings, *, client: KubeClient | None = None) -> None:

        assert settings.node_name
        self.node_name = settings.node_name
        self._path = f"/api/v1/nodes/{path_segment(settings.node_name)}"
        self._client = client or publishing_client(settings)
        self._published: str | bool | None = False  # False: nothing written by this process
        self._log = get_logger(output="node-annotation", node=self.node_name)

    def publish(self, table: PartitionTable) -> bool:

        value = dumps(table) if table else None
        if value == self._published:
            return False
        if self._published is False and self._current() == value:
            # a restart on a node that already carries this table writes nothing
            self._published = value
            return False
        self._patch(value)
        self._published = value
        self._log.info("patched the gpu partitions annotation", partitions=bool(value))
        return True

    def _current(self) -> str | None:
        """The annotation's value on the node now (None: absent)."""

        def read() -> str | None:
            return self._annotation(self._client.request("GET", self._path))

        return self._client.run(f"read node {self.node_name}", read)

    def cleanup(self) -> None:
        """Remove the annotation if it is there (a node without it is not written to)."""

        def remove() -> None:
            if self._annotation(self._client.request("GET", self._path)) is not None:
                self._write(None)

        self._client.run(f"remove the gpu partitions annotation of {self.node_name}", remove)
        self._published = None

    def _patch(self, value: str | None) -> None:
        self._client.run(f"annotate node {self.node_name}", lambda: self._write(value))

    def _write(self, value: str | None) -> None:
        """One merge patch of the annotation; the answer is the node as the write left it,
        and one that does not show the write (a server or proxy that answered without
        applying it) is no confirmation."""
        patch: dict[str, Any] = {"metadata": {"annotations": {PARTITIONS_ANNOTATION: value}}}
        answer = self._client.request("PATCH", self._path, patch, content_type=MERGE_PATCH)
        if self._annotation(answer) != value:
            raise bad_answer(f"a node {self.node_name} that does not hold what was written")

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
