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

from gfd.observability import get_logger
from gfd.outputs.kube import JSON, KubeClient, KubeError, retry_budget

if TYPE_CHECKING:
    from gfd.settings import Settings

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


def _normalized_features(features: Any) -> JSON:
    # the API server may drop empty maps; an absent map and an empty one mean the same
    result = empty_features()
    if isinstance(features, dict):
        for key, value in features.items():
            if value:
                result[key] = value
    return result


class NodeFeatureOutput:
    kind = "nodefeature"
    verify_interval: float | None = VERIFY_INTERVAL_SECONDS

    def __init__(self, settings: Settings, *, client: KubeClient | None = None) -> None:
        # the registry checked the node name once, where the output kind was chosen
        self.node_name = settings.node_name or ""
        self.namespace = settings.namespace
        self.pod_name = settings.pod_name
        self.object_name = NAME_PREFIX + self.node_name
        self._client = client or KubeClient(
            settings.kubeconfig, budget=retry_budget(settings.sleep_interval)
        )
        self._owner_references: list[JSON] | None = None if settings.pod_name else []
        #: NFD Features for ``spec.features`` (gfd.labels.features), set by the agent
        self.features: JSON = empty_features()
        self._log = get_logger(output=self.kind, node=self.node_name)
        from kubernetes.client import CustomObjectsApi

        self._api = CustomObjectsApi(self._client.api_client)

    # ------------------------------------------------------------- the Output protocol

    def publish(self, labels: Mapping[str, str]) -> None:
        desired = dict(sorted(labels.items()))
        self._client.run(
            f"publish NodeFeature {self.namespace}/{self.object_name}",
            lambda: self._reconcile(desired, self._get()),
        )

    def verify(self, labels: Mapping[str, str]) -> bool:
        desired = dict(sorted(labels.items()))
        wrote = False

        def check() -> None:
            nonlocal wrote
            current = self._get()
            if current is not None and not self._differs(current, desired):
                return
            self._log.warning(
                "NodeFeature object was removed or edited, publishing again",
                object=self.object_name,
                missing=current is None,
            )
            wrote = self._reconcile(desired, current) or wrote

        self._client.run(f"verify NodeFeature {self.namespace}/{self.object_name}", check)
        return wrote

    def on_exit(self) -> None:
        """Nothing: the object outlives the pod (owner references and nfd-gc remove it)."""

    def cleanup(self) -> None:
        def delete() -> None:
            try:
                self._client.invoke(
                    lambda timeout: self._api.delete_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        self.namespace,
                        PLURAL,
                        self.object_name,
                        _request_timeout=timeout,
                    )
                )
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
            obj = self._client.invoke(
                lambda timeout: self._api.get_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    self.object_name,
                    _request_timeout=timeout,
                )
            )
        except KubeError as error:
            if error.not_found:
                return None
            raise
        return obj if isinstance(obj, dict) else None

    def _differs(self, current: JSON, desired: Mapping[str, str]) -> bool:
        metadata = current.get("metadata") or {}
        spec = current.get("spec") or {}
        if (metadata.get("labels") or {}) != {NODE_NAME_LABEL: self.node_name}:
            return True
        if (spec.get("labels") or {}) != desired:
            return True
        if _normalized_features(spec.get("features")) != _normalized_features(self.features):
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
                "spec": {"features": copy.deepcopy(self.features), "labels": dict(desired)},
            }
            if owners:
                body["metadata"]["ownerReferences"] = owners
            self._client.invoke(
                lambda timeout: self._api.create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, body, _request_timeout=timeout
                )
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
        updated["spec"] = {"features": copy.deepcopy(self.features), "labels": dict(desired)}
        # metadata.resourceVersion stays as read: a concurrent write answers 409 and the
        # retry policy re-runs the whole read-compare-write
        self._client.invoke(
            lambda timeout: self._api.replace_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                self.object_name,
                updated,
                _request_timeout=timeout,
            )
        )
        self._log.info("updated NodeFeature object", object=self.object_name, labels=len(desired))
        return True

    def _resolve_owner_references(self) -> list[JSON] | None:
        """The DaemonSet (controller) and the pod, as upstream; [] when there are none.

        A transient failure propagates (the operation is retried); a permanent one (pod not
        found, forbidden) is logged once and publishing goes on without owner references."""
        if self._owner_references is not None:
            return self._owner_references
        assert self.pod_name
        try:
            pod = self._client.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}"
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
        pod_metadata = pod.get("metadata") or {}
        daemonset = next(
            (
                ref
                for ref in pod_metadata.get("ownerReferences") or []
                if isinstance(ref, dict) and ref.get("kind") == "DaemonSet"
            ),
            None,
        )
        if daemonset is None:
            self._log.info(
                "pod is not owned by a DaemonSet, no owner references",
                pod=f"{self.namespace}/{self.pod_name}",
            )
            self._owner_references = []
        else:
            self._owner_references = [
                {
                    "apiVersion": daemonset.get("apiVersion", "apps/v1"),
                    "kind": "DaemonSet",
                    "name": daemonset.get("name"),
                    "uid": daemonset.get("uid"),
                    "controller": True,
                },
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_metadata.get("name", self.pod_name),
                    "uid": pod_metadata.get("uid"),
                },
            ]
        return self._owner_references


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
