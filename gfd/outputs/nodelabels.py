"""Labels straight on the Node object, for clusters without NFD (``--use-node-labels``,
SPEC §6.3; beyond upstream).

The agent owns exactly the keys it published last, and records them on the node in the
annotation ``nvidia.com/gfd.managed-labels`` (comma-separated, sorted).  Each publish is one
JSON merge patch that sets the new labels, sets ``null`` for owned keys that disappeared, and
rewrites the annotation — so no label anyone else set is ever touched, ``nvidia.com/`` ones
included.  Labels stay when the agent restarts (the next agent reads the annotation to learn
what it owns); ``--cleanup`` removes exactly the owned labels and the annotation.

What keeps ownership honest:

- Only keys gfd can produce (``gfd.labels.keys.can_produce``) are ever taken from the
  annotation: a hand-edited annotation listing ``nvidia.com/gpu.present`` owns nothing.
- Keys NFD's master records as its own (annotation ``nfd.node.kubernetes.io/feature-labels``,
  also with an ``<instance>.`` prefix) are NFD's: never set, removed or claimed here; which
  keys were left to NFD is logged once.  One NFD lets go of (its NodeFeature deleted, as a
  reload from that output to this one does) is gfd's again: the watch sees the record
  change and gfd publishes the key at once.
- After a write whose answer did not arrive (a 504 from a proxy, a timeout), the node is
  read again before the next write, and every key that write tried to set counts as owned
  until a later write is confirmed — so a write that landed unseen never leaves labels
  nobody owns.
- A start on a node that already carries the right labels and annotation writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
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
from gfd.labels.keys import can_produce
from gfd.observability import get_logger
from gfd.outputs.watched import WatchedOutput, resource_version

if TYPE_CHECKING:
    from gfd.settings import Settings

MANAGED_LABELS_ANNOTATION = f"{PREFIX}gfd.managed-labels"
#: NFD master's record of the labels it manages (nfd-master.go, updateNodeFeatures)
NFD_FEATURE_LABELS_ANNOTATION = "nfd.node.kubernetes.io/feature-labels"
#: the namespace NFD leaves out of the names in that record
NFD_DEFAULT_NAMESPACE = "feature.node.kubernetes.io/"
#: seconds between verification reads at steady state (SPEC §6.4)
VERIFY_INTERVAL_SECONDS = 600.0
#: the most keys named in one log line or message (the annotation may record thousands)
LISTED = 10
#: the states the watch told while a write was in flight that are kept to judge after it
MISSED_KEPT = 16


def owned_keys_from(node: Mapping[str, Any]) -> frozenset[str]:
    """The keys the annotation on ``node`` says gfd owns — only those gfd can produce."""
    value = string_map(node, "metadata", "annotations").get(MANAGED_LABELS_ANNOTATION, "")
    return frozenset(key for key in (part.strip() for part in value.split(",")) if can_produce(key))


def nfd_keys_from(node: Mapping[str, Any]) -> frozenset[str]:
    """The label keys NFD's master records as its own on ``node``.

    nfd-master writes them sorted and comma-separated, dropping the default namespace
    ``feature.node.kubernetes.io/`` (other keys, e.g. ``nvidia.com/gpu.count``, keep theirs);
    with ``-instance=<name>`` the annotation is ``<name>.nfd.node.kubernetes.io/...``."""
    keys: set[str] = set()
    for name, value in string_map(node, "metadata", "annotations").items():
        if name != NFD_FEATURE_LABELS_ANNOTATION and not name.endswith(
            "." + NFD_FEATURE_LABELS_ANNOTATION
        ):
            continue
        for part in value.split(","):
            key = part.strip()
            if key:
                keys.add(key if "/" in key else NFD_DEFAULT_NAMESPACE + key)
    return frozenset(keys)


def managed_labels_value(keys: Iterable[str]) -> str:
    return ",".join(sorted(keys))


def labels_patch(desired: Mapping[str, str], previously_owned: Iterable[str]) -> JSON:
    """The merge patch that moves the node from ``previously_owned`` to ``desired``."""
    labels: dict[str, str | None] = dict(sorted(desired.items()))
    for key in sorted(set(previously_owned) - set(desired)):
        labels[key] = None
    return {
        "metadata": {
            "labels": labels,
            "annotations": {MANAGED_LABELS_ANNOTATION: managed_labels_value(desired) or None},
        }
    }


class NodeLabelsOutput(WatchedOutput):
    """Keeps the defaults for ``offer``, ``keep`` and ``on_exit``: node labels do not age out
    and stay through a restart or a rolling update."""

    kind = "node-labels"
    verify_interval: float | None = VERIFY_INTERVAL_SECONDS

    def __init__(self, settings: Settings, *, client: KubeClient | None = None) -> None:
        # the registry checked the node name once, where the output kind was chosen
        self.node_name = settings.node_name or ""
        self._path = f"/api/v1/nodes/{path_segment(self.node_name)}"
        self._client = client or publishing_client(settings)
        # the keys we own as last confirmed by the server; None: read the node first
        # (the first publish, and after any write whose outcome is unknown)
        self._owned: frozenset[str] | None = None
        # keys a write tried to set whose outcome is unknown: owned until a write is confirmed
        self._unconfirmed: frozenset[str] = frozenset()
        # the keys NFD's master claims, as last read from the node, and the keys gfd would
        # publish were NFD not claiming some (a change in which of those NFD claims is a
        # change to act on: a key NFD lets go of is gfd's to publish at once)
        self._nfd: frozenset[str] = frozenset()
        self._wanted: frozenset[str] = frozenset()
        self._logged_left_out: frozenset[str] = frozenset()
        self._log = get_logger(output=self.kind, node=self.node_name)
        # the labels last published or verified (those gfd may own): what the watch compares
        self._desired: dict[str, str] | None = None
        self._written: str | None = None  # the node's version after gfd's own last patch
        # what the watch's thread told while what the node holds was not known (a write in
        # flight), in the stream's order: what came after the state that a write's answer
        # (or a read) showed is judged once that is known, as the thread cannot wait for it
        self._missed: list[JSON | None] = []
        self._state_lock = threading.Lock()
        self._follow(
            settings,
            self._client,
            "/api/v1/nodes",
            self.node_name,
            f"Node {self.node_name}",
            self._undone,
        )

    # ------------------------------------------------------------- the watch

    def _undone(self, node: JSON | None) -> bool:
        with self._state_lock:
            desired, owned = self._desired, self._owned
            if desired is None or owned is None:  # a write in flight, or nothing published
                self._missed[:] = [*self._missed[-MISSED_KEPT + 1 :], node]
                return False
        if node is None:
            return True
        if resource_version(node) == self._written:
            return False  # gfd's own patch
        wanted = self._wanted
        if nfd_keys_from(self._checked_node(node)) & wanted != self._nfd & wanted:
            return True  # NFD took or let go of some of gfd's keys
        return bool(self._differences(node, desired, owned))

    # ------------------------------------------------------------- the Output protocol

    def publish(self, labels: Mapping[str, str]) -> None:
        def attempt() -> None:
            if self._owned is None:
                node = self._get_node()
                desired = self._ours(labels)
                recorded = owned_keys_from(node) - self._nfd
                if not self._differences(node, desired, recorded | self._unconfirmed):
                    self._confirm(desired, node)
                    self._log.info("node labels already up to date", labels=len(desired))
                    return
                self._patch(desired, recorded)
            else:
                self._patch(self._ours(labels), self._owned)

        self._client.run(f"patch labels of node {self.node_name}", attempt)

    def verify(self, labels: Mapping[str, str]) -> bool:
        wrote = False

        def check() -> None:
            nonlocal wrote
            node = self._get_node()
            desired = self._ours(labels)
            recorded = owned_keys_from(node) - self._nfd
            problems = self._differences(node, desired, recorded | self._unconfirmed)
            if not problems:
                self._confirm(desired, node)
                return
            self._log.warning(
                "node labels were removed or edited, publishing again",
                problems=problems[:LISTED],
                count=len(problems),
            )
            self._patch(desired, recorded | (self._owned or frozenset()))
            wrote = True

        self._client.run(f"verify labels of node {self.node_name}", check)
        return wrote

    def cleanup(self) -> None:
        def remove() -> None:
            node = self._get_node()
            owned = (owned_keys_from(node) | self._unconfirmed) - self._nfd
            annotations = string_map(node, "metadata", "annotations")
            self._note_left_out(owned_keys_from(node) & self._nfd)
            if not owned and MANAGED_LABELS_ANNOTATION not in annotations:
                self._log.info("no gfd labels on the node, nothing to remove")
                return
            patch = {
                "metadata": {
                    "labels": {key: None for key in sorted(owned)},
                    "annotations": {MANAGED_LABELS_ANNOTATION: None},
                }
            }
            self._unconfirmed |= owned
            self._owned = None
            answer = self._checked_node(
                self._client.request("PATCH", self._path, patch, content_type=MERGE_PATCH)
            )
            left = sorted(owned & set(string_map(answer, "metadata", "labels")))
            if left or MANAGED_LABELS_ANNOTATION in string_map(answer, "metadata", "annotations"):
                some = f"{len(left)} labels ({', '.join(left[:LISTED])})" if left else ""
                raise bad_answer(f"a node that still carries {some or MANAGED_LABELS_ANNOTATION}")
            self._owned = frozenset()
            self._unconfirmed = frozenset()
            self._log.info("removed gfd labels from the node", removed=len(owned))

        self._client.run(f"remove gfd labels from node {self.node_name}", remove)

    # ------------------------------------------------------------- internals

    def _get_node(self) -> JSON:
        node = self._checked_node(self._client.request("GET", self._path))
        self._nfd = nfd_keys_from(node)
        return node

    def _checked_node(self, node: JSON) -> JSON:
        """``node`` when it is this node with well-formed labels and annotations."""
        name = (node.get("metadata") or {}).get("name")
        if name != self.node_name:
            raise bad_answer(f"an object that is not node {self.node_name}")
        string_map(node, "metadata", "labels")
        string_map(node, "metadata", "annotations")
        return node

    def _ours(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The labels this output may set: those gfd can own, less those NFD claims."""
        self._wanted = frozenset(key for key in labels if can_produce(key))
        self._note_left_out(
            frozenset(key for key in labels if key in self._nfd),
            frozenset(key for key in labels if not can_produce(key)),
        )
        return {
            key: value
            for key, value in sorted(labels.items())
            if key not in self._nfd and can_produce(key)
        }

    def _note_left_out(self, to_nfd: frozenset[str], foreign: frozenset[str] = frozenset()) -> None:
        """Say once (per change) which keys this output leaves alone, and why."""
        if (to_nfd | foreign) == self._logged_left_out:
            return
        self._logged_left_out = to_nfd | foreign
        if to_nfd:
            self._log.warning(
                "labels left to NFD: its master records them as its own on this node; "
                "run one publisher of these labels per node",
                keys=sorted(to_nfd),
            )
        if foreign:
            self._log.warning(
                "labels not published: gfd may not own these keys", keys=sorted(foreign)
            )

    def _patch(self, desired: Mapping[str, str], previously_owned: frozenset[str]) -> None:
        owned = (previously_owned | self._unconfirmed) - self._nfd
        patch = labels_patch(desired, owned)
        # until the answer arrives, what this write sets may or may not be on the node
        self._unconfirmed = owned | frozenset(desired)
        self._owned = None
        answer = self._checked_node(
            self._client.request("PATCH", self._path, patch, content_type=MERGE_PATCH)
        )
        # the answer is the node as the write left it: one that does not show the write (a
        # server or proxy that answered without applying it) is no confirmation
        problems = self._differences(answer, desired, owned)
        if problems:
            raise bad_answer(
                f"a node that does not hold what was written ({len(problems)}: "
                f"{', '.join(problems[:LISTED])})"
            )
        self._written = resource_version(answer)
        self._confirm(desired, answer)
        removed = sorted(owned - set(desired))
        self._log.info("patched node labels", labels=len(desired), removed=len(removed))

    def _confirm(self, desired: Mapping[str, str], shown: JSON) -> None:
        """Hold ``desired`` as what the node carries, as ``shown`` (a read, or a write's
        answer) showed it; the last state the watch told after that one, while this was not
        known, is judged now (told before it, or not at all yet: nothing to judge here)."""
        with self._state_lock:
            self._owned = frozenset(desired)
            self._unconfirmed = frozenset()
            self._desired = dict(desired)
            missed, self._missed = self._missed, []
        versions = [None if node is None else resource_version(node) for node in missed]
        if resource_version(shown) in versions[:-1]:
            self._watched.retell(missed[-1])

    @staticmethod
    def _differences(
        node: Mapping[str, Any], desired: Mapping[str, str], owned: frozenset[str]
    ) -> list[str]:
        current = string_map(node, "metadata", "labels")
        annotations = string_map(node, "metadata", "annotations")
        problems = [
            f"{key} missing" if key not in current else f"{key} changed"
            for key, value in desired.items()
            if current.get(key) != value
        ]
        problems += [f"{key} stale" for key in sorted(owned - set(desired)) if key in current]
        if annotations.get(MANAGED_LABELS_ANNOTATION) != (managed_labels_value(desired) or None):
            problems.append(f"annotation {MANAGED_LABELS_ANNOTATION} differs")
        return problems
