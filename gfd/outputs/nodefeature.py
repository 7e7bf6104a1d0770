"""The NFD NodeFeature output (``--use-node-feature-api``, SPEC §6.2).

One ``NodeFeature`` object per node, ``nvidia-features-for-<node>`` in ``--namespace``, that
nfd-master merges into the node's labels.  As upstream GFD (internal/lm/output.go):
``spec.labels`` holds the full label keys (``nvidia.com/gpu.count``), ``spec.features`` is
empty upstream, ``metadata.labels`` is exactly the node-name label, and — when
``--pod-name`` names a
pod owned by a DaemonSet — the owner references are that DaemonSet (controller) and the pod.
Get → Create if missing → Update only when different; never deleted on exit (owner references
and nfd-gc clean up); ``--cleanup`` deletes it.  Beyond upstream, ``spec.features`` carries
the raw GPU features of gfd.labels.features, which the agent sets in ``features``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gfd.kube.client import (
    JSON,
    KubeClient,
    KubeError,
    bad_answer,
    path_segment,
    publishing_client,
)
from gfd.kube.shapes import string_map
from gfd.labels.features import node_features
from gfd.observability import get_logger
from gfd.outputs.watched import WatchedOutput, resource_version

if TYPE_CHECKING:
    from gfd.settings import Settings
    from gfd.snapshot import Snapshot

GROUP = "nfd.k8s-sigs.io"
VERSION = "v1alpha1"
PLURAL = "nodefeatures"
KIND = "NodeFeature"
NAME_PREFIX = "nvidia-features-for-"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
#: seconds between verification reads at steady state (SPEC §6.4)
VERIFY_INTERVAL_SECONDS = 600.0


def empty_features() -> JSON:
    """``nfdv1alpha1.NewFeatures()``: the three feature maps, empty."""
    return {"flags": {}, "attributes": {}, "instances": {}}


def desired_spec(labels: Mapping[str, str], features: JSON | None = None) -> JSON:
    """The object's ``spec`` for ``labels`` and NFD ``features`` (gfd.labels.features):
    the one place its content is built."""
    return {
        "features": _normalized_spec({"features": features})["features"],
        "labels": dict(sorted(labels.items())),
    }


def _normalized_spec(spec: Any) -> JSON:
    """``spec`` as read back, in the form :func:`desired_spec` builds (the API server drops
    empty maps: an absent map and an empty one mean the same)."""
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise bad_answer(f"spec as {type(spec).__name__}, not an object")
    features = spec.get("features")
    if features is not None and not isinstance(features, dict):
        raise bad_answer(f"spec.features as {type(features).__name__}, not an object")
    normalized = empty_features()
    for key, value in (features or {}).items():
        if value:
            normalized[key] = copy.deepcopy(value)
    return {"features": normalized, "labels": string_map(spec, "labels")}


class NodeFeatureOutput(WatchedOutput):
    """Keeps the defaults for ``keep`` and ``on_exit``: the object does not age out, and it
    outlives the pod (owner references and nfd-gc remove it)."""

    kind = "nodefeature"
    verify_interval: float | None = VERIFY_INTERVAL_SECONDS

    def __init__(self, settings: Settings, *, client: KubeClient | None = None) -> None:
        # the registry checked the node name once, where the output kind was chosen
        self.node_name = settings.node_name or ""
        self.namespace = settings.namespace
        self.pod_name = settings.pod_name
        self.object_name = NAME_PREFIX + self.node_name
        self._client = client or publishing_client(settings)
        self._owner_references: list[JSON] | None = None if settings.pod_name else []
        #: NFD Features for ``spec.features`` (gfd.labels.features), set by the agent
        self.features: JSON = empty_features()
        self._log = get_logger(output=self.kind, node=self.node_name)
        namespace = path_segment(settings.namespace)
        self._collection = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        self._path = f"{self._collection}/{path_segment(self.object_name)}"
        # the labels last published or verified: what a change seen by the watch may undo;
        # and the version gfd's own last write made (its own event undoes nothing)
        self._desired: dict[str, str] | None = None
        self._written: str | None = None
        # the labels a write in flight sets: the watch's thread may tell that write's event
        # before its answer gives the version above
        self._writing: dict[str, str] | None = None
        self._follow(
            settings,
            self._client,
            self._collection,
            self.object_name,
            f"NodeFeature {self.namespace}/{self.object_name}",
            self._undone,
        )

    # ------------------------------------------------------------- the watch

    def _undone(self, obj: JSON | None) -> bool:
        writing = self._writing  # read before what was published: it is cleared after
        desired = self._desired
        if desired is None or (obj is not None and resource_version(obj) == self._written):
            return False
        if obj is None:
            return True
        current = self._checked(obj)
        return self._differs(current, desired) and (
            writing is None or self._differs(current, writing)
        )

    # ------------------------------------------------------------- the Output protocol

    def publish(self, labels: Mapping[str, str]) -> None:
        desired = self._writing = dict(sorted(labels.items()))
        try:
            self._client.run(
                f"publish NodeFeature {self.namespace}/{self.object_name}",
                lambda: self._reconcile(desired, self._get()),
            )
            self._desired = desired
        finally:
            self._writing = None

    def verify(self, labels: Mapping[str, str]) -> bool:
        desired = dict(sorted(labels.items()))
        wrote = False
        # the object as the watch last saw it saves a read; a stale view only costs a write
        # refused with 409 (AlreadyExists, or a resourceVersion conflict), after which the
        # retry reads the object itself
        watched, seen = self._watched.view()

        def check() -> None:
            nonlocal wrote, watched
            current = self._checked(copy.deepcopy(seen)) if watched and seen else None
            if not watched:
                current = self._get()
            watched = False
            if current is not None and not self._differs(current, desired):
                return
            self._log.warning(
                "NodeFeature object was removed or edited, publishing again",
                object=self.object_name,
                missing=current is None,
            )
            wrote = self._reconcile(desired, current) or wrote

        self._writing = desired
        try:
            self._client.run(f"verify NodeFeature {self.namespace}/{self.object_name}", check)
            self._desired = desired
        finally:
            self._writing = None
        return wrote

    def offer(self, snapshot: Snapshot) -> bool:
        """``spec.features``: the raw GPU features of the snapshot (gfd.labels.features);
        True when they changed, so the object is written again."""

        features = node_features(snapshot)
        if features == self.features:
            return False
        self.features = features
        node = features["attributes"].get("nvidia.node") or {}
        omitted = (node.get("elements") or {}).get("omitted")
        if omitted:
            self._log.warning("NodeFeature instances left out to keep it small", omitted=omitted)
        return True

    def cleanup(self) -> None:
        def delete() -> None:
            try:
                self._client.request("DELETE", self._path)
            except KubeError as error:
                if error.not_found:
                    self._log.info("no NodeFeature object to delete", object=self.object_name)
                    return
                raise
            self._log.info("deleted NodeFeature object", object=self.object_name)

        self._client.run(f"delete NodeFeature {self.namespace}/{self.object_name}", delete)

    # ------------------------------------------------------------- internals

    def _get(self) -> JSON | None:
        try:
            obj = self._client.request("GET", self._path)
        except KubeError as error:
            if error.not_found:
                return None
            raise
        return self._checked(obj)

    def _checked(self, obj: JSON) -> JSON:
        """``obj`` when it is this NodeFeature object in a shape gfd can compare."""
        if (obj.get("metadata") or {}).get("name") != self.object_name:
            raise bad_answer(f"an object that is not NodeFeature {self.object_name}")
        string_map(obj, "metadata", "labels")
        _normalized_spec(obj.get("spec"))
        references = (obj.get("metadata") or {}).get("ownerReferences")
        if references is not None and not isinstance(references, list):
            raise bad_answer("metadata.ownerReferences that is not a list")
        return obj

    def _differs(self, current: JSON, desired: Mapping[str, str]) -> bool:
        metadata = current.get("metadata") or {}
        if string_map(current, "metadata", "labels") != {NODE_NAME_LABEL: self.node_name}:
            return True
        if _normalized_spec(current.get("spec")) != desired_spec(desired, self.features):
            return True
        owners = self._owner_references
        return owners is not None and _owner_keys(metadata.get("ownerReferences")) != _owner_keys(
            owners
        )

    def _reconcile(self, desired: Mapping[str, str], current: JSON | None) -> bool:
        """Create or update the object so it holds ``desired``; True when it wrote."""
        owners = self._resolve_owner_references()
        if current is None:
            body: JSON = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "metadata": {
                    "name": self.object_name,
                    "namespace": self.namespace,
                    "labels": {NODE_NAME_LABEL: self.node_name},
                },
                "spec": desired_spec(desired, self.features),
                # NFD's Go type has a Status without omitempty, so its own clients always
                # send one, and NFD's development CRD requires it; a CRD without the field
                # (v0.19 and older) prunes it
                "status": {},
            }
            if owners:
                body["metadata"]["ownerReferences"] = owners
            self._written = self._confirmed(
                self._client.request("POST", self._collection, body), desired
            )
            self._log.info(
                "created NodeFeature object", object=self.object_name, labels=len(desired)
            )
            return True
        if not self._differs(current, desired):
            self._log.debug("NodeFeature object already up to date", object=self.object_name)
            return False
        updated = copy.deepcopy(current)
        metadata = updated.setdefault("metadata", {})
        metadata["labels"] = {NODE_NAME_LABEL: self.node_name}
        if owners is not None:
            if owners:
                metadata["ownerReferences"] = owners
            else:
                metadata.pop("ownerReferences", None)
        updated["spec"] = desired_spec(desired, self.features)
        updated.setdefault("status", {})
        # metadata.resourceVersion stays as read: a concurrent write answers 409 and the
        # retry policy re-runs the whole read-compare-write
        self._written = self._confirmed(self._client.request("PUT", self._path, updated), desired)
        self._log.info("updated NodeFeature object", object=self.object_name, labels=len(desired))
        return True

    def _confirmed(self, answer: JSON, desired: Mapping[str, str]) -> str | None:
        """The version of the object a write answered with, when it holds what was written:
        an answer without the labels (a server or proxy that answered without applying the
        write) is no confirmation."""
        self._checked(answer)
        labels = string_map(answer, "spec", "labels")
        if labels != dict(desired) or string_map(answer, "metadata", "labels") != {
            NODE_NAME_LABEL: self.node_name
        }:
            raise bad_answer(
                f"a NodeFeature {self.object_name} that does not hold what was written"
            )
        return resource_version(answer)

    def _resolve_owner_references(self) -> list[JSON] | None:
        """The DaemonSet (controller) and the pod, as upstream; [] when there are none.

        A transient failure propagates (the operation is retried); a permanent one (pod not
        found, forbidden) is logged once and publishing goes on without owner references."""
        if self._owner_references is not None:
            return self._owner_references
        assert self.pod_name
        try:
            pod = self._client.request(
                "GET",
                f"/api/v1/namespaces/{path_segment(self.namespace)}"
                f"/pods/{path_segment(self.pod_name)}",
            )
        except KubeError as error:
            if error.transient:
                raise
            self._log.warning(
                "cannot resolve owner references, publishing without them",
                pod=f"{self.namespace}/{self.pod_name}",
                error=error.describe(),
            )
            self._owner_references = []
            return self._owner_references
        self._owner_references = _owners_of(pod, self.pod_name)
        if not self._owner_references:
            self._log.info(
                "pod is not owned by a DaemonSet, no owner references",
                pod=f"{self.namespace}/{self.pod_name}",
            )
        return self._owner_references


def _owners_of(pod: JSON, pod_name: str) -> list[JSON]:
    """The owner references upstream sets from ``pod``: the DaemonSet that controls it and
    the pod itself ([] when no DaemonSet owns it).  An answer that is another pod, or whose
    references are not a list of objects with string names and uids, is a bad answer: what
    it holds would be written into the NodeFeature object, and kept for the process's life."""
    metadata = pod.get("metadata") or {}
    if metadata.get("name") != pod_name:
        raise bad_answer(f"an object that is not pod {pod_name}")
    references = metadata.get("ownerReferences") or []
    if not isinstance(references, list):
        raise bad_answer(f"ownerReferences as {type(references).__name__}, not a list")
    daemonset = next(
        (ref for ref in references if isinstance(ref, dict) and ref.get("kind") == "DaemonSet"),
        None,
    )
    if daemonset is None:
        return []
    owners: list[JSON] = [
        {
            "apiVersion": daemonset.get("apiVersion", "apps/v1"),
            "kind": "DaemonSet",
            "name": daemonset.get("name"),
            "uid": daemonset.get("uid"),
            "controller": True,
        },
        {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": metadata.get("uid")},
    ]
    for owner in owners:
        if not all(
            isinstance(owner[key], str) and owner[key] for key in ("apiVersion", "name", "uid")
        ):
            raise bad_answer(
                f"a {owner['kind']} owner reference without a name, uid and apiVersion"
            )
    return owners


def _owner_keys(references: Any) -> list[tuple[Any, ...]]:
    if not isinstance(references, list):
        return []
    return [
        (
            ref.get("apiVersion"),
            ref.get("kind"),
            ref.get("name"),
            ref.get("uid"),
            bool(ref.get("controller")),
        )
        for ref in references
        if isinstance(ref, dict)
    ]
