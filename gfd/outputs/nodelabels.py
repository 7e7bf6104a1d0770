"""Labels straight on the Node object, for clusters without NFD (``--use-node-labels``,
SPEC §6.3; beyond upstream).

The agent owns exactly the keys it published last, and records them on the node in the
annotation ``nvidia.com/gfd.managed-labels`` (comma-separated, sorted).  Each publish is one
JSON merge patch that sets the new labels, sets ``null`` for owned keys that disappeared, and
rewrites the annotation — so no label anyone else set is ever touched, ``nvidia.com/`` ones
included.  Labels stay when the agent restarts (the next agent reads the annotation to learn
what it owns); ``--cleanup`` removes exactly the owned labels and the annotation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gfd.grammar import PREFIX
from gfd.observability import get_logger
from gfd.outputs.kube import JSON, MERGE_PATCH, KubeClient, retry_budget

if TYPE_CHECKING:
    from gfd.settings import Settings

MANAGED_LABELS_ANNOTATION = f"{PREFIX}gfd.managed-labels"
#: only keys under this prefix are ever taken from the annotation (a hand-edited annotation
#: must not make the agent delete somebody else's label)
OWNED_PREFIX = PREFIX
#: seconds between verification reads at steady state (SPEC §6.4)
VERIFY_INTERVAL_SECONDS = 600.0


def owned_keys_from(node: Mapping[str, Any]) -> frozenset[str]:
    """The keys the annotation on ``node`` says gfd owns."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(MANAGED_LABELS_ANNOTATION) or ""
    return frozenset(
        key.strip()
        for key in str(value).split(",")
        if key.strip().startswith(OWNED_PREFIX) and key.strip() != OWNED_PREFIX
    )


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


class NodeLabelsOutput:
    kind = "node-labels"
    verify_interval: float | None = VERIFY_INTERVAL_SECONDS

    def __init__(self, settings: Settings, *, client: KubeClient | None = None) -> None:
        # the registry checked the node name once, where the output kind was chosen
        self.node_name = settings.node_name or ""
        self._path = f"/api/v1/nodes/{self.node_name}"
        self._client = client or KubeClient(
            settings.kubeconfig, budget=retry_budget(settings.sleep_interval)
        )
        # the keys we own; None until read from the node's annotation (first publish)
        self._owned: frozenset[str] | None = None
        self._log = get_logger(output=self.kind, node=self.node_name)

    # ------------------------------------------------------------- the Output protocol

    def publish(self, labels: Mapping[str, str]) -> None:
        desired = dict(sorted(labels.items()))

        def attempt() -> None:
            if self._owned is None:
                self._owned = owned_keys_from(self._get_node())
            self._patch(desired, self._owned)

        self._client.run(f"patch labels of node {self.node_name}", attempt)

    def verify(self, labels: Mapping[str, str]) -> bool:
        desired = dict(sorted(labels.items()))
        wrote = False

        def check() -> None:
            nonlocal wrote
            node = self._get_node()
            recorded = owned_keys_from(node)
            problems = self._differences(node, desired, recorded)
            if not problems:
                self._owned = frozenset(desired)
                return
            self._log.warning(
                "node labels were removed or edited, publishing again", problems=problems
            )
            self._patch(desired, recorded | (self._owned or frozenset()))
            wrote = True

        self._client.run(f"verify labels of node {self.node_name}", check)
        return wrote

    def on_exit(self) -> None:
        """Nothing: labels stay through a restart or a rolling update."""

    def cleanup(self) -> None:
        def remove() -> None:
            node = self._get_node()
            owned = owned_keys_from(node)
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            if not owned and MANAGED_LABELS_ANNOTATION not in annotations:
                self._log.info("no gfd labels on the node, nothing to remove")
                return
            patch = {
                "metadata": {
                    "labels": {key: None for key in sorted(owned)},
                    "annotations": {MANAGED_LABELS_ANNOTATION: None},
                }
            }
            self._client.request("PATCH", self._path, patch, content_type=MERGE_PATCH)
            self._owned = frozenset()
            self._log.info("removed gfd labels from the node", removed=len(owned))

        self._client.run(f"remove gfd labels from node {self.node_name}", remove)

    # ------------------------------------------------------------- internals

    def _get_node(self) -> JSON:
        return self._client.request("GET", self._path)

    def _patch(self, desired: Mapping[str, str], previously_owned: frozenset[str]) -> None:
        patch = labels_patch(desired, previously_owned)
        self._client.request("PATCH", self._path, patch, content_type=MERGE_PATCH)
        removed = sorted(previously_owned - set(desired))
        self._owned = frozenset(desired)
        self._log.info("patched node labels", labels=len(desired), removed=len(removed))

    @staticmethod
    def _differences(
        node: Mapping[str, Any], desired: Mapping[str, str], recorded: frozenset[str]
    ) -> list[str]:
        metadata = node.get("metadata") or {}
        current = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        problems = [
            f"{key} missing" if key not in current else f"{key} changed"
            for key, value in desired.items()
            if current.get(key) != value
        ]
        problems += [f"{key} stale" for key in sorted(recorded - set(desired)) if key in current]
        if annotations.get(MANAGED_LABELS_ANNOTATION) != (managed_labels_value(desired) or None):
            problems.append(f"annotation {MANAGED_LABELS_ANNOTATION} differs")
        return problems
