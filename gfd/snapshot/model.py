"""The node snapshot's records: every host fact the labels depend on, as plain frozen data.

Each field is declared once, here: its type, its bounds (the :class:`~gfd.snapshot.fields.Kind`
in its metadata), its YAML name and whether a dump leaves it out at its default.  The v1
reader, writer and validation (SPEC §3) are derived from these declarations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gfd.echo import describe
from gfd.errors import SnapshotError
from gfd.snapshot.fields import (
    BOOL,
    COUNT,
    TEXT,
    UINT32_MAX,
    HexInt,
    Items,
    Nullable,
    Record,
    Scalar,
    bounded,
    bounded_parse,
    checked,
    choice_parse,
    declare,
    parse_int,
    parse_text,
)

# Bounds on what a snapshot may hold (README "Limits").  Every number must fit the NVML
# type it comes from, so nothing published is ever a cut or wrapped number.
#: the most GPUs, MIG devices on one GPU, MIG devices in all, and vGPU functions
MAX_GPUS = 16384
MAX_MIG_DEVICES_PER_GPU = 64
MAX_MIG_DEVICES = 65536
MAX_VGPU_DEVICES = 4096
#: memory in MiB: NVML counts bytes in 64 bits, so 2**44 MiB
MEMORY_MIB = bounded(2**44 - 1)
#: a PCI class code is 24 bits (written in hex in YAML)
PCI_CLASS = bounded(0xFFFFFF, yaml_form=HexInt)
#: nvmlSystemGetCudaDriverVersion returns a C int
CUDA_VERSION = bounded(2**31 - 1)


def _capability_part(value: Any, path: str) -> int:
    """A compute capability number, or -1 for unknown (what upstream's vfio backend says)."""
    number = parse_int(value, path)
    if number < -1:
        raise SnapshotError(
            f"{path}: expected a non-negative integer or -1 (unknown), got {describe(number)}"
        )
    if number > UINT32_MAX:
        raise SnapshotError(f"{path}: {describe(number)} is out of range (at most {UINT32_MAX})")
    return number


CAPABILITY_PART = Scalar(_capability_part)


@dataclass(frozen=True, slots=True)
class ComputeCapability:
    """``-1.-1`` is upstream's "unknown" (a GPU bound to vfio-pci, no driver to ask)."""

    major: int = field(metadata=declare(CAPABILITY_PART))
    minor: int = field(metadata=declare(CAPABILITY_PART))


#: the discovery backends a snapshot may come from (``discovery:``; nvml when absent)
DISCOVERY_KINDS = ("nvml", "vfio", "tegra", "dra")


@dataclass(frozen=True, slots=True)
class MigSlices:
    gi: int = field(metadata=declare(COUNT))
    ci: int = field(metadata=declare(COUNT))


@dataclass(frozen=True, slots=True)
class MigEngines:
    copy: int = field(default=0, metadata=declare(COUNT))
    decoder: int = field(default=0, metadata=declare(COUNT))
    encoder: int = field(default=0, metadata=declare(COUNT))
    jpeg: int = field(default=0, metadata=declare(COUNT))
    ofa: int = field(default=0, metadata=declare(COUNT))


@dataclass(frozen=True, slots=True)
class MigDevice:
    profile: str = field(metadata=declare(checked(parse_text, bool, "must not be empty")))
    memory_mib: int = field(metadata=declare(MEMORY_MIB))
    multiprocessors: int = field(metadata=declare(COUNT))
    slices: MigSlices = field(metadata=declare(Record(MigSlices)))
    engines: MigEngines = field(default_factory=MigEngines, metadata=declare(Record(MigEngines)))


@dataclass(frozen=True, slots=True)
class Mig:
    """MIG state of a MIG-capable GPU (a GPU that is not MIG-capable has ``mig=None``)."""

    enabled: bool = field(metadata=declare(BOOL))
    devices: tuple[MigDevice, ...] = field(
        default=(),
        metadata=declare(
            Items(Record(MigDevice), limit=MAX_MIG_DEVICES_PER_GPU, what="MIG devices")
        ),
    )


@dataclass(frozen=True, slots=True)
class Fabric:
    cluster_uuid: str = field(metadata=declare(TEXT))
    clique_id: int = field(metadata=declare(COUNT))


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int = field(metadata=declare(COUNT))
    uuid: str = field(metadata=declare(TEXT))
    name: str = field(metadata=declare(TEXT))
    pci_bus_id: str = field(default="", metadata=declare(TEXT))
    pci_class: int | None = field(default=None, metadata=declare(Nullable(PCI_CLASS)))
    memory_mib: int | None = field(default=None, metadata=declare(Nullable(MEMORY_MIB)))
    #: required in a document, though code may leave it out
    compute_capability: ComputeCapability = field(
        default_factory=lambda: ComputeCapability(0, 0),
        metadata=declare(Record(ComputeCapability), required=True),
    )
    mig: Mig | None = field(default=None, metadata=declare(Nullable(Record(Mig))))
    fabric: Fabric | None = field(default=None, metadata=declare(Nullable(Record(Fabric))))

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    @property
    def mig_enabled(self) -> bool:
        return self.mig is not None and self.mig.enabled


@dataclass(frozen=True, slots=True)
class VgpuDevice:
    host_driver_version: str = field(metadata=declare(TEXT))
    host_driver_branch: str = field(metadata=declare(TEXT))


@dataclass(frozen=True, slots=True)
class Vgpu:
    devices: tuple[VgpuDevice, ...] = field(
        default=(),
        metadata=declare(Items(Record(VgpuDevice), limit=MAX_VGPU_DEVICES, what="devices")),
    )


@dataclass(frozen=True, slots=True)
class Driver:
    version: str = field(metadata=declare(TEXT))
    cuda: int = field(metadata=declare(CUDA_VERSION))


# The GPU interconnect (optional ``topology`` section; README "Snapshots").
NVLINK_REMOTES = ("gpu", "nvswitch", "other")  # nvmlDeviceGetNvLinkRemoteDeviceType
PCIE_LEVELS = ("internal", "single", "multiple", "hostbridge", "node", "system")
#: the most GPUs a node with a ``topology`` section may list (the partition table and the
#: per-pair facts grow with the square of it; real boards have 16 at most), and the link
#: numbers a GPU may use (NVML_NVLINK_MAX_LINKS is 36 today): README "Limits"
MAX_TOPOLOGY_GPUS = 256
MAX_NVLINKS = 64
MAX_TOPOLOGY_NUMBER = 2**31 - 1  # minors, NUMA nodes

_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
#: koordlet's PCIe root complex id (koordinator pkg/koordlet/metricsadvisor/devices/helper/
#: topology.go, ``pcieRegexp``, at commit a7a1b76bbf81abd26f9c377de1f31a60dd965f6e)
PCIE_ROOT = re.compile(r"pci\d{4}:[0-9a-fA-F]{2}")

_COUNT_OR_NULL = Nullable(COUNT)
#: a minor or NUMA node number: what Koordinator's Go ``int`` (32-bit at worst) holds
_TOPOLOGY_NUMBER = Nullable(
    checked(
        bounded_parse(UINT32_MAX),
        lambda n: n <= MAX_TOPOLOGY_NUMBER,
        f"expected at most {MAX_TOPOLOGY_NUMBER}, got {{value}}",
    )
)


def _omitted_when_unknown(kind: Scalar) -> dict[str, Any]:
    return declare(Nullable(kind), omit_default=True)


@dataclass(frozen=True, slots=True)
class NvLink:
    """One active NVLink of a GPU; a field NVML did not answer is None."""

    link: int = field(
        metadata=declare(
            checked(
                bounded_parse(UINT32_MAX),
                lambda n: n < MAX_NVLINKS,
                f"link numbers go from 0 to {MAX_NVLINKS - 1}",
            )
        )
    )
    #: NVLink generation (1, 2, 3, ...), not NVML's enum
    version: int | None = field(
        default=None,
        metadata=_omitted_when_unknown(
            checked(bounded_parse(UINT32_MAX), bool, "NVLink generations start at 1")
        ),
    )
    remote: str | None = field(  # one of NVLINK_REMOTES
        default=None, metadata=_omitted_when_unknown(Scalar(choice_parse(*NVLINK_REMOTES)))
    )
    #: sysfs form; an NVSwitch's own id on NVSwitch boards
    remote_pci_bus_id: str | None = field(default=None, metadata=_omitted_when_unknown(TEXT))


def _distinct_links(links: tuple[NvLink, ...], path: str) -> None:
    seen: set[int] = set()
    for i, link in enumerate(links):
        if link.link in seen:
            raise SnapshotError(f"{path}[{i}].link: duplicate link {link.link}")
        seen.add(link.link)


@dataclass(frozen=True, slots=True)
class GpuTopology:
    index: int = field(metadata=declare(COUNT))
    #: /dev/nvidia<minor> (nvmlDeviceGetMinorNumber)
    minor: int | None = field(default=None, metadata=declare(_TOPOLOGY_NUMBER, omit_default=True))
    #: /sys/bus/pci/devices/<bus id>/numa_node; None: none/unknown
    numa_node: int | None = field(
        default=None, metadata=declare(_TOPOLOGY_NUMBER, omit_default=True)
    )
    #: the PCIe root complex above the GPU, as koordlet names it ("pci0000:3a": the first
    #: PCIE_ROOT match in the resolved /sys/bus/pci/devices/<bus id> path); None: unknown
    pcie_root: str | None = field(
        default=None,
        metadata=_omitted_when_unknown(
            checked(
                parse_text,
                PCIE_ROOT.fullmatch,
                "expected a PCIe root like 'pci0000:3a', got {value}",
            )
        ),
    )
    #: Linux CPU list, e.g. "0-47,96-143"
    cpu_affinity: str | None = field(
        default=None,
        metadata=_omitted_when_unknown(
            checked(
                parse_text, _CPU_LIST.match, "expected a CPU list like '0-47,96-143', got {value}"
            )
        ),
    )
    #: active links only
    nvlinks: tuple[NvLink, ...] = field(
        default=(),
        metadata=declare(
            Items(Record(NvLink, flow=True), check=_distinct_links), omit_default=True
        ),
    )


def _ascending_pair(ends: tuple[int, ...], path: str) -> None:
    if len(ends) != 2 or ends[0] >= ends[1]:
        raise SnapshotError(f"{path}: expected two GPU indices in ascending order")


@dataclass(frozen=True, slots=True)
class GpuPair:
    #: GPU indices, ascending
    gpus: tuple[int, int] = field(metadata=declare(Items(COUNT, check=_ascending_pair)))
    #: nvmlDeviceGetTopologyCommonAncestor, one of PCIE_LEVELS
    pcie: str | None = field(
        default=None, metadata=_omitted_when_unknown(Scalar(choice_parse(*PCIE_LEVELS)))
    )
    #: nvmlDeviceGetP2PStatus(..., NVLINK) == OK
    nvlink_p2p: bool | None = field(default=None, metadata=_omitted_when_unknown(BOOL))


@dataclass(frozen=True, slots=True)
class Topology:
    gpus: tuple[GpuTopology, ...] = field(default=(), metadata=declare(Items(Record(GpuTopology))))
    pairs: tuple[GpuPair, ...] = field(
        default=(), metadata=declare(Items(Record(GpuPair, flow=True)))
    )


@dataclass(frozen=True, slots=True)
class LostGpu:
    """A GPU that did not answer: NVML said GPU_IS_LOST (or that it needs a reset) for it,
    or the PCI bus shows more NVIDIA display/3D functions than NVML lists.  ``index`` is
    its NVML index when NVML still lists it; ``pci_bus_id`` is known when the PCI bus
    names it (sysfs form, else empty); ``reason`` says what failed."""

    index: int | None = field(default=None, metadata=declare(_COUNT_OR_NULL))
    pci_bus_id: str = field(default="", metadata=declare(TEXT))
    reason: str = field(default="", metadata=declare(TEXT))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything discovery learned about one node.

    ``driver`` is ``None`` only when NVML could not be used (then ``gpus`` is empty);
    ``vgpu`` is ``None`` when the PCI scan failed (then no ``vgpu.*`` labels at all).
    Written with ``version: v1`` first; ``lost_gpus``, ``topology`` and ``discovery`` only
    when they are not their defaults (a healthy NVML node's snapshot dumps as it always did).
    """

    driver: Driver | None = field(default=None, metadata=declare(Nullable(Record(Driver))))
    machine: str | None = field(default=None, metadata=declare(Nullable(TEXT)))
    vgpu: Vgpu | None = field(default_factory=Vgpu, metadata=declare(Nullable(Record(Vgpu))))
    gpus: tuple[Gpu, ...] = field(
        default=(), metadata=declare(Items(Record(Gpu), limit=MAX_GPUS, what="GPUs"))
    )
    #: GPUs that did not answer this time (``lost_gpus`` in the file, written when any)
    lost: tuple[LostGpu, ...] = field(
        default=(),
        metadata=declare(
            Items(Record(LostGpu), limit=MAX_GPUS, what="lost GPUs"),
            key="lost_gpus",
            omit_default=True,
        ),
    )
    #: None: not discovered (older snapshots, option off)
    topology: Topology | None = field(
        default=None, metadata=declare(Nullable(Record(Topology)), omit_default=True)
    )
    #: how the GPUs were found (--device-discovery-strategy, resolved): one of DISCOVERY_KINDS
    discovery: str = field(
        default="nvml", metadata=declare(Scalar(choice_parse(*DISCOVERY_KINDS)), omit_default=True)
    )
