"""Reads this node's ResourceSlices from the API server (``--device-discovery-strategy=dra``).

One ``list`` of ``resource.k8s.io/v1`` resourceslices per pass, narrowed on the server by
the field selector ``spec.nodeName=<node>`` (ResourceSlice's selectable fields include
``spec.nodeName`` and ``spec.driver``), answer read under the client's cap.  gfd only reads
slices: the one verb here is GET, and its RBAC is ``list``/``watch`` on ``resourceslices``.

A pool whose newest generation is not yet complete (the driver is mid-update) keeps the
last complete state; with none yet the pass fails, naming the pool, and the next pass asks
again.  :func:`gfd.discovery.dra.to_snapshot` does the mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from gfd.discovery import dra
from gfd.errors import DiscoveryError, PublishError, UsageError
from gfd.kube.client import KubeClient, bad_answer, retry_budget
from gfd.observability import get_logger
from gfd.settings import Settings
from gfd.snapshot import Snapshot

RESOURCESLICES = "/apis/resource.k8s.io/v1/resourceslices"
#: a page of slices (the API caps a slice at 128 devices; a node has a handful of slices)
PAGE = 100
#: the most pages one pass reads (PAGE * MAX_PAGES slices for one node is no real node)
MAX_PAGES = 16

Request = Callable[[str], Mapping[str, Any]]


def list_path(node: str, continue_token: str = "") -> str:
    selector = quote(f"spec.nodeName={node}", safe="")
    path = f"{RESOURCESLICES}?fieldSelector={selector}&limit={PAGE}"
    if continue_token:
        path += f"&continue={quote(continue_token, safe='')}"
    return path


class SliceReader:
    """This node's slices, one paged list per call, and the last complete state."""

    def __init__(self, node: str, request: Request) -> None:
        self.node = node
        self._request = request
        self._last: Snapshot | None = None
        self.resource_version = ""

    def items(self) -> list[Any]:
        items: list[Any] = []
        token = ""
        for _ in range(MAX_PAGES):
            answer = self._request(list_path(self.node, token))
            page = answer.get("items")
            meta = answer.get("metadata")
            if not isinstance(page, list) or not isinstance(meta, Mapping):
                raise DiscoveryError(f"resourceslices of node {self.node}: not a list answer")
            items.extend(page)
            version = meta.get("resourceVersion")
            self.resource_version = version if isinstance(version, str) else ""
            token = meta.get("continue") or ""
            if not isinstance(token, str) or not token:
                return items
        raise DiscoveryError(
            f"resourceslices of node {self.node}: more than {PAGE * MAX_PAGES} slices"
        )

    def snapshot(self) -> Snapshot:
        state = dra.select_pool(self.items(), self.node)
        if state.complete:
            self._last = dra.to_snapshot(state.slices)
            return self._last
        if self._last is None:
            raise DiscoveryError(f"resourceslices of node {self.node}: {state.reason}")
        get_logger().info(
            "resourceslice pool incomplete; keeping the last complete state", reason=state.reason
        )
        return self._last


_readers: dict[tuple[str | None, str], SliceReader] = {}


def _client_request(client: KubeClient, node: str) -> Request:
    def request(path: str) -> Mapping[str, Any]:
        def get() -> Mapping[str, Any]:
            answer = client.request("GET", path)
            if answer.get("kind") not in (None, "ResourceSliceList"):
                raise bad_answer("an object that is not a ResourceSliceList")
            return answer

        try:
            return client.run(f"list resourceslices of node {node}", get)
        except PublishError as exc:
            raise DiscoveryError(str(exc)) from None

    return request


def read(settings: Settings) -> Snapshot:
    """This node's snapshot from its slices; one reader (client, last state) per node."""
    node = settings.node_name or ""
    if not node:
        raise UsageError(
            "--device-discovery-strategy dra: the node name is unknown (set NODE_NAME)"
        )
    key = (settings.kubeconfig, node)
    if key not in _readers:
        client = KubeClient(settings.kubeconfig, budget=retry_budget(settings.sleep_interval))
        _readers[key] = SliceReader(node, _client_request(client, node))
    return _readers[key].snapshot()
