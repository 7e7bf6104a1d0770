"""The GPU interconnect: NVLinks, PCIe distance, P2P, NUMA and CPU affinity.

Read inside the NVML session of :mod:`gfd.discovery.nvml` (``read_with_topology``), after
the GPUs themselves.  Everything here is optional: an NVML call that fails, for whatever
reason, leaves its field out (``None``) and is logged at debug level — topology never fails
a pass that would otherwise succeed.

Facts relied on (README "GPU topology"):

- ``nvmlDeviceGetNvLinkState`` answers NOT_SUPPORTED on a GPU without NVLink and
  INVALID_ARGUMENT past the GPU's last link (GB200 has 18 of the 36 ``NVML_NVLINK_MAX_LINKS``),
  so the walk stops at either.
- ``nvmlDeviceGetNvLinkVersion`` returns the ``nvmlNvlinkVersion_t`` enum on real drivers
  (A100 reports 5, ``NVML_NVLINK_VERSION_3_1``: open-mpi/hwloc#658), while NVIDIA's mock
  NVML returns the generation itself; :func:`nvlink_generation` maps both.
- On NVSwitch boards a link's remote PCI id is the switch's, never the peer GPU's, so an
  NVSwitch is recognised from ``nvmlDeviceGetNvLinkRemoteDeviceType`` only.
- The PCIe root complex is the ``pci<domain>:<bus>`` element of the path the kernel's
  ``/sys/bus/pci/devices/<bus id>`` link resolves to (:func:`read_pcie_root`).
- The NUMA node is the kernel's ``/sys/bus/pci/devices/<bus id>/numa_node`` (what
  ``nvidia-smi topo -m`` shows as NUMA affinity); ``nvmlDeviceGetNumaNodeId`` answers only on
  platforms where GPU memory is itself a NUMA node (Grace Hopper), so it is not used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gfd.discovery.sysfs import device_path, read_attribute
from gfd.echo import clip
from gfd.observability import get_logger
from gfd.snapshot import (
    MAX_NVLINKS,
    MAX_TOPOLOGY_GPUS,
    MAX_TOPOLOGY_NUMBER,
    PCIE_ROOT,
    Gpu,
    GpuPair,
    GpuTopology,
    NvLink,
    Topology,
)

ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_FUNCTION_NOT_FOUND = 13
FEATURE_ENABLED = 1
P2P_STATUS_OK = 0
P2P_CAPS_INDEX_NVLINK = 2
MAX_LINKS_FALLBACK = 36  # pynvml.NVML_NVLINK_MAX_LINKS in current bindings
UINT32_MAX = 2**32 - 1
UINT64_MASK = 2**64 - 1
#: what a remote PCI id must look like once normalised (else it is unknown)
BUS_ID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
#: 64-bit words asked of nvmlDeviceGetCpuAffinity: room for 2048 CPUs
CPU_SET_WORDS = 32

#: nvmlNvlinkVersion_t as real drivers return it -> NVLink generation (the major number of
#: the enum's name), as the NVML header declares it: NVIDIA/go-nvml ``pkg/nvml/nvml.h``
#: lines 9418-9429 at commit 2f9e261fe40a7a1c54783d66805e8920564763b4 --
#: ``NVML_NVLINK_VERSION_1_0 = 1``, ``2_0 = 2``, ``2_2 = 3``, ``3_0 = 4``, ``3_1 = 5``,
#: ``4_0 = 6``, ``5_0 = 7``, ``6_0 = 8`` (the same values as pynvml's constants).
ENUM_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
#: the NVLink generation of each architecture (compute capability major)
ARCH_GENERATION = {6: 1, 7: 2, 8: 3, 9: 4, 10: 5}

#: nvmlDeviceGetNvLinkRemoteDeviceType -> snapshot value (IBM NPU and unknown are "other")
REMOTE_TYPES = {0x00: "gpu", 0x02: "nvswitch"}
#: nvmlGpuTopologyLevel_t -> snapshot value
PCIE_LEVELS = {
    0: "internal",
    10: "single",
    20: "multiple",
    30: "hostbridge",
    40: "node",
    50: "system",
}


def nvlink_generation(raw: int, compute_major: int) -> int | None:
    """The NVLink generation for what ``nvmlDeviceGetNvLinkVersion`` returned.

    A real driver's enum is mapped through :data:`ENUM_GENERATION`; a value that is
    exactly the generation of the GPU's architecture while the enum would say otherwise is
    a mock's generation and is taken as it is.  A link is never newer than its GPU: an
    enum past the architecture's generation (a driver that numbers differently from the
    header) counts as the architecture's.  None when the value means nothing known.
    """
    expected = ARCH_GENERATION.get(compute_major)
    from_enum = ENUM_GENERATION.get(raw)
    if expected is not None and raw == expected and from_enum != expected:
        return raw
    if expected is not None and from_enum is not None and from_enum > expected:
        return expected
    return from_enum


def cpu_list(words: Sequence[int]) -> str | None:
    """64-bit affinity words (CPU 0 is bit 0 of word 0) as a Linux CPU list: ``0-3,8``."""
    cpus = [
        64 * position + bit
        for position, word in enumerate(words)
        for bit in range(64)
        if int(word) >> bit & 1
    ]
    if not cpus:
        return None
    ranges: list[str] = []
    start = previous = cpus[0]
    for cpu in [*cpus[1:], -2]:
        if cpu == previous + 1:
            previous = cpu
            continue
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(ranges)


def read_numa_node(sysfs_root: str, bus_id: str) -> int | None:
    """``<root>/bus/pci/devices/<bus id>/numa_node``; None when absent, unreadable or -1."""
    path = device_path(sysfs_root, bus_id, "numa_node")
    text = None if path is None else read_attribute(path, limit=32)
    if text is None or not text.isascii() or not text.lstrip("-").isdigit():
        return None
    node = int(text)
    return node if 0 <= node <= MAX_TOPOLOGY_NUMBER else None


def read_pcie_root(sysfs_root: str, bus_id: str) -> str | None:
    """The PCIe root complex above ``bus_id`` as koordlet names it: the first
    :data:`~gfd.snapshot.PCIE_ROOT` match (``pci0000:3a``) in the path that
    ``<root>/bus/pci/devices/<bus id>`` resolves to, e.g.
    ``/sys/devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0``.  koordlet's GPU and RDMA
    collectors both name it so (koordinator ``pkg/koordlet/metricsadvisor/devices/helper/
    topology.go``, ``getPCIERootComplexID`` and ``parsePCIEID``, commit a7a1b76b), and the
    scheduler places a GPU and an RDMA NIC under one root by comparing these strings.
    None when the link does not resolve or names no root."""
    path = device_path(sysfs_root, bus_id)
    if path is None:
        return None
    try:
        resolved = os.path.realpath(path, strict=True)
        root = os.path.realpath(sysfs_root)
    except (OSError, ValueError):
        return None
    if resolved.startswith(root + os.sep):  # a root in the mount point's own name is not it
        resolved = resolved[len(root) :]
    match = PCIE_ROOT.search(resolved)
    return None if match is None else match.group(0)


def with_numa_nodes(topology: Topology, gpus: Sequence[Gpu], sysfs_root: str) -> Topology:
    """``topology`` with each GPU's NUMA node and PCIe root read from sysfs."""
    bus_ids = {gpu.index: gpu.pci_bus_id for gpu in gpus}
    return replace(
        topology,
        gpus=tuple(
            replace(
                entry,
                numa_node=read_numa_node(sysfs_root, bus_ids.get(entry.index, "")),
                pcie_root=read_pcie_root(sysfs_root, bus_ids.get(entry.index, "")),
            )
            for entry in topology.gpus
        ),
    )


class _Unanswered(Exception):
    """An NVML call that gave no answer; the field it was for stays out."""

    def __init__(self, code: int | None) -> None:
        super().__init__(code)
        self.code = code


class TopologyReader:
    """One topology read over GPUs already discovered (inside an open NVML session)."""

    def __init__(self, nvml: Any, normalize_bus_id: Callable[[str], str]) -> None:
        self._nvml = nvml
        self._normalize = normalize_bus_id
        self._error_type: type[BaseException] = nvml.NVMLError
        self._log = get_logger(component="discovery.topology")

    def _call(self, name: str, *args: Any) -> Any:
        function = getattr(self._nvml, name, None)
        if function is None:  # bindings too old for this entry point
            raise _Unanswered(ERROR_FUNCTION_NOT_FOUND)
        try:
            return function(*args)
        except self._error_type as err:
            code = getattr(err, "value", None)
            self._log.debug("topology fact unknown", call=name, error=clip(str(err)))
            raise _Unanswered(code if isinstance(code, int) else None) from None
        except Exception as exc:  # broken bindings or driver: the fact is unknown, no more
            self._log.debug("topology fact unknown", call=name, error=clip(repr(exc)))
            raise _Unanswered(None) from None

    def _optional(self, name: str, *args: Any) -> Any:
        try:
            return self._call(name, *args)
        except _Unanswered:
            return None

    def _number(self, name: str, *args: Any, limit: int = UINT32_MAX) -> int | None:
        """An NVML call that answers a number; None when it does not, or answers anything
        but an integer in ``0..limit`` (garbage is a fact unknown, never a failed pass)."""
        value = self._call(name, *args)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
            self._log.debug("topology fact unknown", call=name, answer=clip(repr(value)))
            raise _Unanswered(None)
        return value

    def _optional_number(self, name: str, *args: Any, limit: int = UINT32_MAX) -> int | None:
        try:
            return self._number(name, *args, limit=limit)
        except _Unanswered:
            return None

    def read(self, gpus: Sequence[Gpu]) -> Topology | None:
        """The interconnect of ``gpus``; None past MAX_TOPOLOGY_GPUS GPUs (a warning)."""
        if len(gpus) > MAX_TOPOLOGY_GPUS:
            self._log.warning(
                "topology not read: more GPUs than the partition table handles",
                gpus=len(gpus),
                limit=MAX_TOPOLOGY_GPUS,
            )
            return None
        handles: dict[int, Any] = {}
        entries = []
        for gpu in gpus:
            handle = self._optional("nvmlDeviceGetHandleByIndex", gpu.index)
            if handle is None:
                entries.append(GpuTopology(index=gpu.index))
                continue
            handles[gpu.index] = handle
            entries.append(self._gpu(gpu, handle))
        pairs = []
        ordered = sorted(handles)
        for position, first in enumerate(ordered):
            for second in ordered[position + 1 :]:
                pairs.append(self._pair(first, second, handles[first], handles[second]))
        return Topology(gpus=tuple(entries), pairs=tuple(pairs))

    def _gpu(self, gpu: Gpu, handle: Any) -> GpuTopology:
        minor = self._optional_number("nvmlDeviceGetMinorNumber", handle, limit=MAX_TOPOLOGY_NUMBER)
        words = self._optional("nvmlDeviceGetCpuAffinity", handle, CPU_SET_WORDS)
        return GpuTopology(
            index=gpu.index,
            minor=minor,
            cpu_affinity=self._affinity(words),
            nvlinks=self._nvlinks(gpu, handle),
        )

    def _affinity(self, words: Any) -> str | None:
        """The affinity words as a CPU list; None for anything but up to CPU_SET_WORDS
        integers."""
        try:
            listed = list(words)[: CPU_SET_WORDS + 1] if words is not None else None
        except Exception:  # not a sequence at all
            listed = None
        if listed is None or len(listed) > CPU_SET_WORDS:
            return None
        if not all(isinstance(w, int) and not isinstance(w, bool) for w in listed):
            return None
        return cpu_list([w & UINT64_MASK for w in listed])

    def _links_to_walk(self) -> int:
        declared = getattr(self._nvml, "NVML_NVLINK_MAX_LINKS", MAX_LINKS_FALLBACK)
        if isinstance(declared, bool) or not isinstance(declared, int) or declared < 0:
            return MAX_LINKS_FALLBACK
        return min(declared, MAX_NVLINKS)

    def _nvlinks(self, gpu: Gpu, handle: Any) -> tuple[NvLink, ...]:
        links = []
        for link in range(self._links_to_walk()):
            try:
                state = self._number("nvmlDeviceGetNvLinkState", handle, link)
            except _Unanswered as missing:
                if link == 0 or missing.code in (ERROR_INVALID_ARGUMENT, ERROR_FUNCTION_NOT_FOUND):
                    break  # no NVLink at all, or past the GPU's last link
                continue
            if state != FEATURE_ENABLED:
                continue
            links.append(self._link(gpu, handle, link))
        return tuple(links)

    def _bus_id(self, remote_pci: Any) -> str | None:
        try:
            raw = getattr(remote_pci, "busId", None)
        except UnicodeDecodeError:  # current bindings decode the field strictly: no bus id
            return None
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        if not isinstance(raw, str):
            return None
        text = self._normalize(raw[:64])
        return text if BUS_ID.fullmatch(text) else None

    def _link(self, gpu: Gpu, handle: Any, link: int) -> NvLink:
        raw_version = self._optional_number("nvmlDeviceGetNvLinkVersion", handle, link)
        remote_type = self._optional_number("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        remote_pci = self._optional("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        return NvLink(
            link=link,
            version=None
            if raw_version is None
            else nvlink_generation(raw_version, gpu.compute_capability.major),
            remote=None if remote_type is None else REMOTE_TYPES.get(remote_type, "other"),
            remote_pci_bus_id=None if remote_pci is None else self._bus_id(remote_pci),
        )

    def _pair(self, first: int, second: int, handle_a: Any, handle_b: Any) -> GpuPair:
        level = self._optional_number("nvmlDeviceGetTopologyCommonAncestor", handle_a, handle_b)
        status = self._optional_number(
            "nvmlDeviceGetP2PStatus", handle_a, handle_b, P2P_CAPS_INDEX_NVLINK
        )
        return GpuPair(
            gpus=(first, second),
            pcie=None if level is None else PCIE_LEVELS.get(level),
            nvlink_p2p=None if status is None else status == P2P_STATUS_OK,
        )
