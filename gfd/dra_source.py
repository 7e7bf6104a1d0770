"""Reads this node's ResourceSlices from the API server (``--device-discovery-strategy=dra``,
and ``--dra-drift-check`` beside NVML).

A daemon watches them (:class:`gfd.kube.watch.CollectionWatch` on ``resource.k8s.io/v1``
resourceslices with the field selector ``spec.nodeName=<node>``: a paged list, then a watch
from its ``resourceVersion`` with bookmarks, resumed after the stream ends, listed again on
410 Gone) and holds the slices of driver ``gpu.nvidia.com``; a pass reads that cache, and a
change in it wakes the agent's loop at once (:func:`follow`).  Until the watch has listed,
in a oneshot run, or when the server refuses the watch (RBAC without ``watch``: one line),
each pass lists the slices itself (paged, 100 a page).  gfd only reads slices: the one
verb here is GET, and its RBAC is ``list``/``watch`` on ``resourceslices``.

A pool whose newest generation is not yet complete (the driver is mid-update) keeps the
last complete state; with none yet the pass fails, naming the pool, and the next pass asks
again.  :func:`gfd.discovery.dra.to_snapshot` does the mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from gfd.config import Config
from gfd.discovery import dra
from gfd.errors import DiscoveryError, PublishError, UsageError
from gfd.kube.client import KubeClient, bad_answer, retry_budget
from gfd.kube.stream import MAX_HELD_BYTES, held_size
from gfd.kube.watch import CollectionWatch, name_of, watch_client
from gfd.labels import build
from gfd.observability import Metrics, get_logger
from gfd.settings import Settings
from gfd.snapshot import Snapshot

RESOURCESLICES = "/apis/resource.k8s.io/v1/resourceslices"
#: a page of slices (the API caps a slice at 128 devices; a node has a handful of slices)
PAGE = 100
#: the most pages one pass reads (PAGE * MAX_PAGES slices for one node is no real node)
MAX_PAGES = 16
#: the disagreeing labels one drift line names with their two values
DRIFT_SHOWN = 8

Request = Callable[[str], Mapping[str, Any]]
#: which slices a pass used: (name, resourceVersion) of each slice of the driver
Fingerprint = frozenset[tuple[str, str]]


def list_path(node: str, continue_token: str = "") -> str:
    selector = quote(f"spec.nodeName={node}", safe="")
    path = f"{RESOURCESLICES}?fieldSelector={selector}&limit={PAGE}"
    if continue_token:
        path += f"&continue={quote(continue_token, safe='')}"
    return path


def _fingerprint(items: Iterable[Any]) -> Fingerprint:
    return frozenset(
        (name_of(item), str((item.get("metadata") or {}).get("resourceVersion")))
        for item in items
        if isinstance(item, dict) and dra.is_driver_slice(item)
    )


def _nothing() -> None:
    """No one to wake."""


class SliceReader:
    """This node's slices -- from the watch's cache when it runs and has listed, else one
    paged list per call -- and the last complete state."""

    def __init__(self, node: str, request: Request) -> None:
        self.node = node
        self._request = request
        self._last: Snapshot | None = None
        self.resource_version = ""
        self._watch: CollectionWatch | None = None
        self._wake: Callable[[], None] = _nothing
        self._used: Fingerprint | None = None  # the slices the last pass read
        #: the labels on which NVML and the slices disagreed last (--dra-drift-check)
        self.drift: tuple[str, ...] = ()
        self.drift_error = ""

    # ------------------------------------------------------------- the watch

    def watch(self, client: KubeClient, wake: Callable[[], None]) -> None:
        """Watch the slices (the watch's own ``client``); ``wake()`` when they change."""
        self._wake = wake
        if self._watch is not None:
            return
        node = self.node
        watch = CollectionWatch(
            client,
            RESOURCESLICES,
            f"spec.nodeName={node}",
            f"ResourceSlices of node {node}",
            belongs=lambda obj: dra.node_of(obj) == node,
            keep=dra.is_driver_slice,
            fallback="listing them on each pass instead",
        )
        watch.follow(self._seen, _nothing)
        self._watch = watch
        watch.start()

    def unwatch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()

    @property
    def watching(self) -> bool:
        """The watch runs and holds the slices (listed, not refused)."""
        watch = self._watch
        return watch is not None and watch.synced and not watch.refused

    def _seen(self, objects: dict[str, Any]) -> None:
        # before any pass read the slices there is nothing to redo: the first pass reads them
        if self._used is not None and _fingerprint(objects.values()) != self._used:
            self._wake()

    # ------------------------------------------------------------- reading

    def items(self) -> list[Any]:
        watch = self._watch
        if watch is not None and watch.synced and not watch.refused:
            items = list(watch.current.values())
        else:
            items = self._list()
        self._used = _fingerprint(items)
        return items

    def _list(self) -> list[Any]:
        """This node's slices of the driver, page by page: what the watch would hold, under
        the watch's bounds (no more pages than its objects fill, no more bytes together)."""
        items: list[Any] = []
        size = 0
        token = ""
        for _ in range(MAX_PAGES):
            answer = self._request(list_path(self.node, token))
            page = answer.get("items")
            meta = answer.get("metadata")
            if not isinstance(page, list) or not isinstance(meta, Mapping):
                raise DiscoveryError(f"resourceslices of node {self.node}: not a list answer")
            page = [i for i in page if dra.is_driver_slice(i) and dra.node_of(i) == self.node]
            size += sum(held_size(item) for item in page)
            if size > MAX_HELD_BYTES:
                raise DiscoveryError(
                    f"resourceslices of node {self.node}: more than {MAX_HELD_BYTES >> 20} MiB"
                )
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
#: the client each reader's passes use (its rate limit is the watch's too)
_clients: dict[tuple[str | None, str], KubeClient] = {}


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


def _node(settings: Settings, option: str) -> str:
    node = settings.node_name or ""
    if not node:
        raise UsageError(f"{option}: the node name is unknown (set NODE_NAME)")
    return node


def _reader(settings: Settings, option: str) -> SliceReader:
    """The reader (client, watch, last state) of this node's slices, one per node."""
    node = _node(settings, option)
    key = (settings.kubeconfig, node)
    if key not in _readers:
        client = KubeClient(settings.kubeconfig, budget=retry_budget(settings.sleep_interval))
        _clients[key] = client
        _readers[key] = SliceReader(node, _client_request(client, node))
    return _readers[key]


def read(settings: Settings) -> Snapshot:
    """This node's snapshot from its slices; one reader (client, last state) per node."""
    return _reader(settings, "--device-discovery-strategy dra").snapshot()


def reads_slices(settings: Settings) -> bool:
    """Whether passes under ``settings`` read this node's slices."""
    if settings.snapshot_file:
        return False
    return settings.device_discovery_strategy == "dra" or settings.dra_drift_check


def follow(settings: Settings, wake: Callable[[], None]) -> None:
    """A daemon's watch of this node's slices while ``settings`` read them, ``wake()`` on a
    change; the watches of settings no longer in force end."""
    wanted = (settings.kubeconfig, settings.node_name or "") if reads_slices(settings) else None
    for key, reader in _readers.items():
        if key != wanted:
            reader.unwatch()
    if wanted is None or not wanted[1]:
        return
    reader = _reader(settings, "--device-discovery-strategy dra")
    limiter = _clients[wanted].rate_limiter
    reader.watch(
        watch_client(settings.kubeconfig, settings.kube_api_qps, settings.kube_api_burst, limiter),
        wake,
    )


# ----------------------------------------------------------------- what the drift check compares

#: labels slices cannot carry (README "DRA nodes"): the fabric, the PCI class, the machine
#: type, the vGPU scan, and whether a GPU without MIG enabled could enable it
NOT_IN_SLICES = frozenset(
    {
        "nvidia.com/gpu.clique",
        "nvidia.com/gpu.mode",
        "nvidia.com/gpu.machine",
        "nvidia.com/vgpu.present",
        "nvidia.com/mig.capable",
    }
)
#: the driver publishes the driver version through semver, which drops a leading zero
SEMVER_LOSSY = frozenset(
    {
        "nvidia.com/cuda.driver-version.full",
        "nvidia.com/cuda.driver-version.revision",
        "nvidia.com/cuda.driver.rev",
    }
)
#: the MIG strategy the drift check labels both sides with: every GPU and MIG profile
#: gets labels of its own, so a difference in either shows
DRIFT_MIG_STRATEGY = "mixed"


def drift(nvml: Snapshot, slices: Snapshot) -> dict[str, tuple[str | None, str | None]]:
    """The labels on which ``nvml`` and ``slices`` disagree, on what slices can carry: label
    key → (NVML's value, the slices' value; None: no such label).  The labels are built
    from each snapshot alone (default config, no timestamp), as the proof compares them; a
    GPU's total memory counts only where the slices announce it."""
    mine = dict(build(nvml, DRIFT_MIG_STRATEGY, Config(), None).labels)
    theirs = dict(build(slices, DRIFT_MIG_STRATEGY, Config(), None).labels)
    skip = NOT_IN_SLICES | SEMVER_LOSSY
    if any(gpu.memory_mib is None for gpu in slices.gpus):
        skip |= {key for key in set(mine) | set(theirs) if key.endswith("gpu.memory")}
    keys = (set(mine) | set(theirs)) - skip
    return {
        key: (mine.get(key), theirs.get(key))
        for key in sorted(keys)
        if mine.get(key) != theirs.get(key)
    }


# ----------------------------------------------------------------- the drift check


def check_drift(settings: Settings, nvml: Snapshot, metrics: Metrics) -> None:
    """``--dra-drift-check``: compare what NVML found with what the slices say, on the
    labels slices can carry; the metric each pass, one line when the set changes.  A slice
    read that fails is one line per new error and leaves the labels alone (they are
    NVML's)."""
    reader = _reader(settings, "--dra-drift-check")
    log = get_logger(node=reader.node)
    try:
        from_slices = reader.snapshot()
    except DiscoveryError as exc:
        metrics.dra_drift_check("error")
        if str(exc) != reader.drift_error:
            reader.drift_error = str(exc)
            log.warning("drift check: cannot read the node's ResourceSlices", error=str(exc))
        return
    reader.drift_error = ""
    metrics.dra_drift_check("success")
    differences = drift(nvml, from_slices)
    keys = tuple(sorted(differences))
    metrics.dra_drift(keys)
    if keys == reader.drift:
        return
    reader.drift = keys
    if not keys:
        log.info("drift check: NVML and the ResourceSlices agree again")
        return
    shown = {key: differences[key] for key in keys[:DRIFT_SHOWN]}
    log.warning(
        "drift check: NVML and the ResourceSlices disagree",
        labels=len(keys),
        differences={key: {"nvml": a, "slices": b} for key, (a, b) in shown.items()},
    )
