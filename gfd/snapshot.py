"""The node snapshot: every host fact the labels depend on, as plain frozen data.

A snapshot is written by ``gfd --dump-snapshot`` and read back by ``--snapshot-file``
(SPEC §3, format ``v1``).  Loading is strict: an unknown key, a value of the wrong type or
a missing required field is a :class:`SnapshotError` whose message names the path inside the
document, e.g. ``gpus[3].mig.devices[0].slices.gi: expected an integer, got 'x'``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from gfd.documents import as_list, parse_yaml, read_text
from gfd.echo import clip, clip_path, describe
from gfd.errors import SnapshotError

if TYPE_CHECKING:
    import yaml

SNAPSHOT_VERSION = "v1"

# Bounds on what a snapshot may hold (README "Limits").  Every number must fit the NVML
# type it comes from, so nothing published is ever a cut or wrapped number.
#: the most GPUs, MIG devices on one GPU, MIG devices in all, and vGPU functions
MAX_GPUS = 16384
MAX_MIG_DEVICES_PER_GPU = 64
MAX_MIG_DEVICES = 65536
MAX_VGPU_DEVICES = 4096
#: the longest string (names, UUIDs, versions, the machine type)
MAX_STRING_CHARS = 1024
_UINT32_MAX = 2**32 - 1
#: memory in MiB: NVML counts bytes in 64 bits, so 2**44 MiB
_MEMORY_MIB_MAX = 2**44 - 1
#: a PCI class code is 24 bits
_PCI_CLASS_MAX = 0xFFFFFF
#: nvmlSystemGetCudaDriverVersion returns a C int
_CUDA_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ComputeCapability:
    """``-1.-1`` is upstream's "unknown" (a GPU bound to vfio-pci, no driver to ask)."""

    major: int
    minor: int


#: the discovery backends a snapshot may come from (``discovery:``; nvml when absent)
DISCOVERY_KINDS = ("nvml", "vfio", "tegra", "dra")


@dataclass(frozen=True, slots=True)
class MigSlices:
    gi: int
    ci: int


@dataclass(frozen=True, slots=True)
class MigEngines:
    copy: int = 0
    decoder: int = 0
    encoder: int = 0
    jpeg: int = 0
    ofa: int = 0


@dataclass(frozen=True, slots=True)
class MigDevice:
    profile: str
    memory_mib: int
    multiprocessors: int
    slices: MigSlices
    engines: MigEngines = field(default_factory=MigEngines)


@dataclass(frozen=True, slots=True)
class Mig:
    """MIG state of a MIG-capable GPU (a GPU that is not MIG-capable has ``mig=None``)."""

    enabled: bool
    devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class Fabric:
    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    name: str
    pci_bus_id: str = ""
    pci_class: int | None = None
    memory_mib: int | None = None
    compute_capability: ComputeCapability = field(default_factory=lambda: ComputeCapability(0, 0))
    mig: Mig | None = None
    fabric: Fabric | None = None

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    @property
    def mig_enabled(self) -> bool:
        return self.mig is not None and self.mig.enabled


@dataclass(frozen=True, slots=True)
class VgpuDevice:
    host_driver_version: str
    host_driver_branch: str


@dataclass(frozen=True, slots=True)
class Vgpu:
    devices: tuple[VgpuDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class Driver:
    version: str
    cuda: int


# The GPU interconnect (optional ``topology`` section; README "Snapshots").
NVLINK_REMOTES = ("gpu", "nvswitch", "other")  # nvmlDeviceGetNvLinkRemoteDeviceType
PCIE_LEVELS = ("internal", "single", "multiple", "hostbridge", "node", "system")
#: the most GPUs a node with a ``topology`` section may list (the partition table and the
#: per-pair facts grow with the square of it; real boards have 16 at most), and the link
#: numbers a GPU may use (NVML_NVLINK_MAX_LINKS is 36 today): README "Limits"
MAX_TOPOLOGY_GPUS = 256
MAX_NVLINKS = 64
MAX_TOPOLOGY_NUMBER = 2**31 - 1  # minors, NUMA nodes


@dataclass(frozen=True, slots=True)
class NvLink:
    """One active NVLink of a GPU; a field NVML did not answer is None."""

    link: int
    version: int | None = None  # NVLink generation (1, 2, 3, ...), not NVML's enum
    remote: str | None = None  # one of NVLINK_REMOTES
    remote_pci_bus_id: str | None = None  # sysfs form; an NVSwitch's own id on NVSwitch boards


@dataclass(frozen=True, slots=True)
class GpuTopology:
    index: int
    minor: int | None = None  # /dev/nvidia<minor> (nvmlDeviceGetMinorNumber)
    numa_node: int | None = None  # /sys/bus/pci/devices/<bus id>/numa_node; None: none/unknown
    cpu_affinity: str | None = None  # Linux CPU list, e.g. "0-47,96-143"
    #: the PCIe root complex above the GPU, as koordlet names it ("pci0000:3a": the first
    #: PCIE_ROOT match in the resolved /sys/bus/pci/devices/<bus id> path); None: unknown
    pcie_root: str | None = None
    nvlinks: tuple[NvLink, ...] = ()  # active links only


@dataclass(frozen=True, slots=True)
class GpuPair:
    gpus: tuple[int, int]  # GPU indices, ascending
    pcie: str | None = None  # nvmlDeviceGetTopologyCommonAncestor, one of PCIE_LEVELS
    nvlink_p2p: bool | None = None  # nvmlDeviceGetP2PStatus(..., NVLINK) == OK


@dataclass(frozen=True, slots=True)
class Topology:
    gpus: tuple[GpuTopology, ...] = ()
    pairs: tuple[GpuPair, ...] = ()


@dataclass(frozen=True, slots=True)
class LostGpu:
    """A GPU that did not answer: NVML said GPU_IS_LOST (or that it needs a reset) for it,
    or the PCI bus shows more NVIDIA display/3D functions than NVML lists.  ``index`` is
    its NVML index when NVML still lists it; ``pci_bus_id`` is known when the PCI bus
    names it (sysfs form, else empty); ``reason`` says what failed."""

    index: int | None = None
    pci_bus_id: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything discovery learned about one node.

    ``driver`` is ``None`` only when NVML could not be used (then ``gpus`` is empty);
    ``vgpu`` is ``None`` when the PCI scan failed (then no ``vgpu.*`` labels at all).
    """

    driver: Driver | None = None
    machine: str | None = None
    vgpu: Vgpu | None = field(default_factory=Vgpu)
    gpus: tuple[Gpu, ...] = ()
    #: GPUs that did not answer this time (``lost_gpus`` in the file, written when any)
    lost: tuple[LostGpu, ...] = ()
    topology: Topology | None = None  # None: not discovered (older snapshots, option off)
    #: how the GPUs were found (--device-discovery-strategy, resolved): one of DISCOVERY_KINDS
    discovery: str = "nvml"


# --------------------------------------------------------------------------- loading

T = TypeVar("T")


_describe = describe


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Reader:
    """Walks one mapping of the document, remembering which keys were consumed."""

    def __init__(self, value: Any, path: str) -> None:
        if not isinstance(value, Mapping):
            raise SnapshotError(
                f"{path or '<document>'}: expected a mapping, got {_describe(value)}"
            )
        for key in value:
            if not isinstance(key, str):
                raise SnapshotError(
                    f"{path or '<document>'}: keys must be strings, got {describe(key)}"
                )
        self._value: Mapping[str, Any] = value
        self._path = path
        self._seen: set[str] = set()

    def path(self, key: str) -> str:
        return _join(self._path, key)

    def has(self, key: str) -> bool:
        return key in self._value

    def raw(self, key: str) -> Any:
        self._seen.add(key)
        return self._value.get(key)

    def required(self, key: str, convert: Callable[[Any, str], T]) -> T:
        self._seen.add(key)
        if key not in self._value:
            raise SnapshotError(f"{self.path(key)}: required field is missing")
        return convert(self._value[key], self.path(key))

    def optional(self, key: str, convert: Callable[[Any, str], T], default: T) -> T:
        self._seen.add(key)
        if key not in self._value:
            return default
        return convert(self._value[key], self.path(key))

    def finish(self) -> None:
        unknown = sorted(set(self._value) - self._seen)
        if unknown:
            raise SnapshotError(f"{self.path(clip(unknown[0]))}: unknown key")


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{path}: expected an integer, got {_describe(value)}")
    return value


def _bounded_int(largest: int) -> Callable[[Any, str], int]:
    """An integer from 0 to ``largest`` (the range of the NVML value it records)."""

    def parse(value: Any, path: str) -> int:
        number = _int(value, path)
        if number < 0:
            raise SnapshotError(f"{path}: expected a non-negative integer, got {_describe(number)}")
        if number > largest:
            raise SnapshotError(f"{path}: {_describe(number)} is out of range (at most {largest})")
        return number

    return parse


_non_negative_int = _bounded_int(_UINT32_MAX)
_memory_mib = _bounded_int(_MEMORY_MIB_MAX)
_pci_class = _bounded_int(_PCI_CLASS_MAX)
_cuda_version = _bounded_int(_CUDA_MAX)


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise SnapshotError(f"{path}: expected a string, got {_describe(value)}")
    if len(value) > MAX_STRING_CHARS:
        raise SnapshotError(
            f"{path}: {_describe(value)} is longer than the limit of {MAX_STRING_CHARS} characters"
        )
    return value


def _limited_list(largest: int, what: str) -> Callable[[Any, str], list[Any]]:
    def parse(value: Any, path: str) -> list[Any]:
        items = _list(value, path)
        if len(items) > largest:
            raise SnapshotError(f"{path}: {len(items)} {what}, more than the limit of {largest}")
        return items

    return parse


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{path}: expected true or false, got {_describe(value)}")
    return value


def _nullable(convert: Callable[[Any, str], T]) -> Callable[[Any, str], T | None]:
    def parse(value: Any, path: str) -> T | None:
        return None if value is None else convert(value, path)

    return parse


def _list(value: Any, path: str) -> list[Any]:
    return as_list(value, path, SnapshotError)


class _Field:
    """How one key of a mapping is read: ``convert`` its value, or take ``default`` when the
    key is absent (no default: the key is required)."""

    def __init__(self, convert: Callable[[Any, str], Any], *default: Any) -> None:
        self.convert = convert
        self.default = default


def _record(build: Callable[..., T], **fields: _Field) -> Callable[[Any, str], T]:
    """A reader of one mapping into ``build(**values)``: the keys are read in the order
    given (the first bad one is reported), and a key not listed is an error."""

    def parse(value: Any, path: str) -> T:
        r = _Reader(value, path)
        values = {
            name: r.optional(name, field.convert, field.default[0])
            if field.default
            else r.required(name, field.convert)
            for name, field in fields.items()
        }
        r.finish()
        return build(**values)

    return parse


_COUNT = _Field(_non_negative_int)


def _capability_part(value: Any, path: str) -> int:
    """A compute capability number, or -1 for unknown (what upstream's vfio backend says)."""
    number = _int(value, path)
    if number < -1:
        raise SnapshotError(
            f"{path}: expected a non-negative integer or -1 (unknown), got {_describe(number)}"
        )
    if number > _UINT32_MAX:
        raise SnapshotError(f"{path}: {_describe(number)} is out of range (at most {_UINT32_MAX})")
    return number


_CAPABILITY_PART = _Field(_capability_part)
_compute_capability = _record(ComputeCapability, major=_CAPABILITY_PART, minor=_CAPABILITY_PART)
_slices = _record(MigSlices, gi=_COUNT, ci=_COUNT)
_engines = _record(
    MigEngines,
    **{
        name: _Field(_non_negative_int, 0) for name in ("copy", "decoder", "encoder", "jpeg", "ofa")
    },
)
_mig_device_fields = _record(
    MigDevice,
    profile=_Field(_str),
    memory_mib=_Field(_memory_mib),
    multiprocessors=_COUNT,
    slices=_Field(_slices),
    engines=_Field(_engines, MigEngines()),
)


def _mig_device(value: Any, path: str) -> MigDevice:
    device = _mig_device_fields(value, path)
    if not device.profile:
        raise SnapshotError(f"{path}.profile: must not be empty")
    return device


def _mig(value: Any, path: str) -> Mig:
    r = _Reader(value, path)
    enabled = r.required("enabled", _bool)
    raw_devices: list[Any] = r.optional(
        "devices", _limited_list(MAX_MIG_DEVICES_PER_GPU, "MIG devices"), []
    )
    r.finish()
    devices = tuple(_mig_device(item, f"{path}.devices[{i}]") for i, item in enumerate(raw_devices))
    return Mig(enabled=enabled, devices=devices)


_fabric = _record(Fabric, cluster_uuid=_Field(_str), clique_id=_COUNT)
_gpu = _record(
    Gpu,
    index=_COUNT,
    uuid=_Field(_str),
    name=_Field(_str),
    pci_bus_id=_Field(_str, ""),
    pci_class=_Field(_nullable(_pci_class), None),
    memory_mib=_Field(_nullable(_memory_mib), None),
    compute_capability=_Field(_compute_capability),
    mig=_Field(_nullable(_mig), None),
    fabric=_Field(_nullable(_fabric), None),
)
_vgpu_device = _record(
    VgpuDevice, host_driver_version=_Field(_str), host_driver_branch=_Field(_str)
)


def _vgpu(value: Any, path: str) -> Vgpu:
    r = _Reader(value, path)
    raw: list[Any] = r.optional("devices", _limited_list(MAX_VGPU_DEVICES, "devices"), [])
    r.finish()
    return Vgpu(
        devices=tuple(_vgpu_device(item, f"{path}.devices[{i}]") for i, item in enumerate(raw))
    )


_lost_gpu = _record(
    LostGpu,
    index=_Field(_nullable(_non_negative_int), None),
    pci_bus_id=_Field(_str, ""),
    reason=_Field(_str, ""),
)
_driver = _record(Driver, version=_Field(_str), cuda=_Field(_cuda_version))


_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
#: koordlet's PCIe root complex id (koordinator pkg/koordlet/metricsadvisor/devices/helper/
#: topology.go, ``pcieRegexp``, at commit a7a1b76bbf81abd26f9c377de1f31a60dd965f6e)
PCIE_ROOT = re.compile(r"pci\d{4}:[0-9a-fA-F]{2}")


def _choice(*allowed: str) -> Callable[[Any, str], str]:
    def parse(value: Any, path: str) -> str:
        text = _str(value, path)
        if text not in allowed:
            raise SnapshotError(
                f"{path}: expected one of {', '.join(allowed)}, got {describe(text)}"
            )
        return text

    return parse


def _cpu_list(value: Any, path: str) -> str:
    text = _str(value, path)
    if not _CPU_LIST.match(text):
        raise SnapshotError(f"{path}: expected a CPU list like '0-47,96-143', got {describe(text)}")
    return text


def _pcie_root(value: Any, path: str) -> str:
    text = _str(value, path)
    if not PCIE_ROOT.fullmatch(text):
        raise SnapshotError(f"{path}: expected a PCIe root like 'pci0000:3a', got {describe(text)}")
    return text


def _nvlink(value: Any, path: str) -> NvLink:
    r = _Reader(value, path)
    link = NvLink(
        link=r.required("link", _non_negative_int),
        version=r.optional("version", _nullable(_non_negative_int), None),
        remote=r.optional("remote", _nullable(_choice(*NVLINK_REMOTES)), None),
        remote_pci_bus_id=r.optional("remote_pci_bus_id", _nullable(_str), None),
    )
    r.finish()
    if link.link >= MAX_NVLINKS:
        raise SnapshotError(f"{path}.link: link numbers go from 0 to {MAX_NVLINKS - 1}")
    if link.version == 0:
        raise SnapshotError(f"{path}.version: NVLink generations start at 1")
    return link


def _small_int(value: Any, path: str) -> int:
    """A minor or NUMA node number: what Koordinator's Go ``int`` (32-bit at worst) holds."""
    number = _non_negative_int(value, path)
    if number > MAX_TOPOLOGY_NUMBER:
        raise SnapshotError(f"{path}: expected at most {MAX_TOPOLOGY_NUMBER}, got {number}")
    return number


def _gpu_topology(value: Any, path: str) -> GpuTopology:
    r = _Reader(value, path)
    raw_links: list[Any] = r.optional("nvlinks", _list, [])
    gpu = GpuTopology(
        index=r.required("index", _non_negative_int),
        minor=r.optional("minor", _nullable(_small_int), None),
        numa_node=r.optional("numa_node", _nullable(_small_int), None),
        cpu_affinity=r.optional("cpu_affinity", _nullable(_cpu_list), None),
        pcie_root=r.optional("pcie_root", _nullable(_pcie_root), None),
        nvlinks=tuple(_nvlink(item, f"{path}.nvlinks[{i}]") for i, item in enumerate(raw_links)),
    )
    r.finish()
    seen: set[int] = set()
    for i, link in enumerate(gpu.nvlinks):
        if link.link in seen:
            raise SnapshotError(f"{path}.nvlinks[{i}].link: duplicate link {link.link}")
        seen.add(link.link)
    return gpu


def _gpu_pair(value: Any, path: str) -> GpuPair:
    r = _Reader(value, path)
    raw = r.required("gpus", _list)
    pair = GpuPair(
        gpus=(0, 0),
        pcie=r.optional("pcie", _nullable(_choice(*PCIE_LEVELS)), None),
        nvlink_p2p=r.optional("nvlink_p2p", _nullable(_bool), None),
    )
    r.finish()
    ends = [_non_negative_int(item, f"{path}.gpus[{i}]") for i, item in enumerate(raw)]
    if len(ends) != 2 or ends[0] >= ends[1]:
        raise SnapshotError(f"{path}.gpus: expected two GPU indices in ascending order")
    return GpuPair(gpus=(ends[0], ends[1]), pcie=pair.pcie, nvlink_p2p=pair.nvlink_p2p)


def _topology(value: Any, path: str) -> Topology:
    r = _Reader(value, path)
    raw_gpus: list[Any] = r.optional("gpus", _list, [])
    raw_pairs: list[Any] = r.optional("pairs", _list, [])
    r.finish()
    return Topology(
        gpus=tuple(_gpu_topology(item, f"{path}.gpus[{i}]") for i, item in enumerate(raw_gpus)),
        pairs=tuple(_gpu_pair(item, f"{path}.pairs[{i}]") for i, item in enumerate(raw_pairs)),
    )


def _check_topology(topology: Topology, indices: set[int]) -> None:
    """Every GPU the topology names is one of ``gpus``, once per entry kind."""
    seen: set[int] = set()
    for i, gpu in enumerate(topology.gpus):
        where = f"topology.gpus[{i}].index"
        if gpu.index not in indices:
            raise SnapshotError(f"{where}: no GPU has index {gpu.index}")
        if gpu.index in seen:
            raise SnapshotError(f"{where}: duplicate index {gpu.index}")
        seen.add(gpu.index)
    pairs: set[tuple[int, int]] = set()
    for i, pair in enumerate(topology.pairs):
        where = f"topology.pairs[{i}].gpus"
        missing = [end for end in pair.gpus if end not in indices]
        if missing:
            raise SnapshotError(f"{where}: no GPU has index {missing[0]}")
        if pair.gpus in pairs:
            raise SnapshotError(f"{where}: duplicate pair {list(pair.gpus)}")
        pairs.add(pair.gpus)


def from_dict(document: Any) -> Snapshot:
    """Validate a parsed YAML/JSON document and build the snapshot it describes."""
    r = _Reader(document, "")
    version = r.required("version", _str)
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"version: unsupported snapshot version {_describe(version)} (expected 'v1')"
        )
    driver = r.optional("driver", _nullable(_driver), None)
    machine = r.optional("machine", _nullable(_str), None)
    no_vgpu: Vgpu | None = Vgpu()
    vgpu = r.optional("vgpu", _nullable(_vgpu), no_vgpu)
    raw_gpus: list[Any] = r.optional("gpus", _limited_list(MAX_GPUS, "GPUs"), [])
    raw_lost: list[Any] = r.optional("lost_gpus", _limited_list(MAX_GPUS, "lost GPUs"), [])
    topology = r.optional("topology", _nullable(_topology), None)
    discovery = r.optional("discovery", _choice(*DISCOVERY_KINDS), "nvml")
    r.finish()
    gpus = tuple(_gpu(item, f"gpus[{i}]") for i, item in enumerate(raw_gpus))
    lost = tuple(_lost_gpu(item, f"lost_gpus[{i}]") for i, item in enumerate(raw_lost))
    if gpus and driver is None:
        raise SnapshotError("driver: required when the snapshot lists GPUs")
    _check_unique(gpus)
    indices = {gpu.index for gpu in gpus}
    buses = {gpu.pci_bus_id.lower(): "gpus" for gpu in gpus if gpu.pci_bus_id}
    lost_indices: dict[int, int] = {}
    for position, gone in enumerate(lost):
        if gone.index is not None and gone.index in indices:
            raise SnapshotError(
                f"lost_gpus[{position}].index: GPU {gone.index} is also listed in gpus"
            )
        if gone.index is not None:
            if gone.index in lost_indices:
                raise SnapshotError(
                    f"lost_gpus[{position}].index: GPU {gone.index} is listed twice "
                    f"(also lost_gpus[{lost_indices[gone.index]}])"
                )
            lost_indices[gone.index] = position
        bus = gone.pci_bus_id.lower()
        if bus:
            if bus in buses:
                raise SnapshotError(
                    f"lost_gpus[{position}].pci_bus_id: {describe(gone.pci_bus_id)} is also "
                    f"listed in {buses[bus]}"
                )
            buses[bus] = f"lost_gpus[{position}]"
    if lost and driver is None:
        raise SnapshotError("driver: required when the snapshot lists lost GPUs")
    if topology is not None:
        if len(gpus) > MAX_TOPOLOGY_GPUS:
            raise SnapshotError(
                f"topology: a snapshot with a topology section lists at most "
                f"{MAX_TOPOLOGY_GPUS} GPUs, this one {len(gpus)}"
            )
        _check_topology(topology, indices)
    return Snapshot(
        driver=driver,
        machine=machine,
        vgpu=vgpu,
        gpus=gpus,
        topology=topology,
        lost=lost,
        discovery=discovery,
    )


def _check_unique(gpus: tuple[Gpu, ...]) -> None:
    """One GPU per index, UUID and PCI bus id; MIG devices in all within the limit."""
    seen: dict[tuple[str, Any], int] = {}
    mig_devices = 0
    for position, gpu in enumerate(gpus):
        for field_name, value in (
            ("index", gpu.index),
            ("uuid", gpu.uuid),
            ("pci_bus_id", gpu.pci_bus_id.lower()),
        ):
            if value == "":
                continue  # an unknown bus id (optional field) is not a duplicate
            first = seen.setdefault((field_name, value), position)
            if first != position:
                raise SnapshotError(
                    f"gpus[{position}].{field_name}: duplicate {field_name} "
                    f"{_describe(getattr(gpu, field_name))} (also gpus[{first}])"
                )
        mig_devices += len(gpu.mig.devices) if gpu.mig else 0
        if mig_devices > MAX_MIG_DEVICES:
            raise SnapshotError(
                f"gpus[{position}].mig.devices: more than the limit of {MAX_MIG_DEVICES} MIG "
                "devices in all"
            )


def loads(text: str, source: str = "<snapshot>") -> Snapshot:
    """Parse snapshot YAML or JSON text."""
    source = clip_path(source)
    document = parse_yaml(text, source, SnapshotError)
    if document is None:
        raise SnapshotError(f"{source}: the snapshot is empty")
    try:
        return from_dict(document)
    except SnapshotError as exc:
        raise SnapshotError(f"{source}: {exc}") from None


def load(path: str) -> Snapshot:
    """Read a snapshot file; every failure is a :class:`SnapshotError` naming the file."""
    return loads(read_text(path, "--snapshot-file", SnapshotError), source=path)


# --------------------------------------------------------------------------- dumping


class _HexInt(int):
    """An int that YAML writes in hex (PCI class codes read best as 0x030200)."""


def _represent_hex(dumper: yaml.SafeDumper, value: _HexInt) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:int", f"0x{int(value):06x}")


class _Flow(dict):  # type: ignore[type-arg]
    """A small mapping YAML writes on one line (an NVLink, a GPU pair)."""


def _represent_flow(dumper: yaml.SafeDumper, value: _Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", value, flow_style=True)


# Characters PyYAML writes raw in plain or single-quoted scalars but reads back as line
# breaks; a string holding one must be double-quoted (escaped) to survive a round trip.
_LINE_BREAKS = ("\x85", "\u2028", "\u2029")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if any(c in value for c in _LINE_BREAKS):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    return dumper.represent_str(value)


@functools.cache
def _yaml_dumper() -> type[yaml.SafeDumper]:
    """The dumper with gfd's representers, built on first use: loading never needs it.
    libyaml's emitter where PyYAML was built with it, else PyYAML's own (same output)."""
    import yaml

    class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        pass

    _Dumper.add_representer(_HexInt, _represent_hex)
    _Dumper.add_representer(_Flow, _represent_flow)
    _Dumper.add_representer(str, _represent_str)
    return _Dumper


def _mig_device_dict(device: MigDevice) -> dict[str, Any]:
    e = device.engines
    return {
        "profile": device.profile,
        "memory_mib": device.memory_mib,
        "multiprocessors": device.multiprocessors,
        "slices": {"gi": device.slices.gi, "ci": device.slices.ci},
        "engines": {
            "copy": e.copy,
            "decoder": e.decoder,
            "encoder": e.encoder,
            "jpeg": e.jpeg,
            "ofa": e.ofa,
        },
    }


def _gpu_dict(gpu: Gpu, hex_class: bool) -> dict[str, Any]:
    pci_class: int | None = gpu.pci_class
    if pci_class is not None and hex_class:
        pci_class = _HexInt(pci_class)
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "pci_bus_id": gpu.pci_bus_id,
        "pci_class": pci_class,
        "memory_mib": gpu.memory_mib,
        "compute_capability": {
            "major": gpu.compute_capability.major,
            "minor": gpu.compute_capability.minor,
        },
        "mig": None
        if gpu.mig is None
        else {
            "enabled": gpu.mig.enabled,
            "devices": [_mig_device_dict(d) for d in gpu.mig.devices],
        },
        "fabric": None
        if gpu.fabric is None
        else {"cluster_uuid": gpu.fabric.cluster_uuid, "clique_id": gpu.fabric.clique_id},
    }


def _without_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _topology_dict(topology: Topology) -> dict[str, Any]:
    """Unknown fields and empty link lists are left out (they load back as None / [])."""
    gpus = []
    for gpu in topology.gpus:
        entry = _without_none(
            {
                "index": gpu.index,
                "minor": gpu.minor,
                "numa_node": gpu.numa_node,
                "pcie_root": gpu.pcie_root,
                "cpu_affinity": gpu.cpu_affinity,
            }
        )
        if gpu.nvlinks:
            entry["nvlinks"] = [
                _Flow(
                    _without_none(
                        {
                            "link": link.link,
                            "version": link.version,
                            "remote": link.remote,
                            "remote_pci_bus_id": link.remote_pci_bus_id,
                        }
                    )
                )
                for link in gpu.nvlinks
            ]
        gpus.append(entry)
    pairs = [
        _Flow(_without_none({"gpus": list(p.gpus), "pcie": p.pcie, "nvlink_p2p": p.nvlink_p2p}))
        for p in topology.pairs
    ]
    return {"gpus": gpus, "pairs": pairs}


def to_dict(snapshot: Snapshot, *, hex_class: bool = False) -> dict[str, Any]:
    """The snapshot as plain data in the v1 layout (every key present, but ``lost_gpus``
    only when a GPU was lost, ``topology`` only when discovered and ``discovery`` only for
    a backend other than NVML: a healthy node's snapshot, and an older one, dump as they
    were)."""
    document = {
        "version": SNAPSHOT_VERSION,
        "driver": None
        if snapshot.driver is None
        else {"version": snapshot.driver.version, "cuda": snapshot.driver.cuda},
        "machine": snapshot.machine,
        "vgpu": None
        if snapshot.vgpu is None
        else {
            "devices": [
                {
                    "host_driver_version": d.host_driver_version,
                    "host_driver_branch": d.host_driver_branch,
                }
                for d in snapshot.vgpu.devices
            ]
        },
        "gpus": [_gpu_dict(g, hex_class) for g in snapshot.gpus],
    }
    if snapshot.lost:
        document["lost_gpus"] = [
            {"index": gone.index, "pci_bus_id": gone.pci_bus_id, "reason": gone.reason}
            for gone in snapshot.lost
        ]
    if snapshot.topology is not None:
        document["topology"] = _topology_dict(snapshot.topology)
    if snapshot.discovery != "nvml":
        document["discovery"] = snapshot.discovery
    return document


def dumps(snapshot: Snapshot) -> str:
    """The snapshot as v1 YAML; ``loads(dumps(s)) == s``."""
    import yaml

    return yaml.dump(
        to_dict(snapshot, hex_class=True),
        Dumper=_yaml_dumper(),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        # one line a value: PyYAML would fold a long string at 80 columns
        width=1 << 30,
    )


def dumps_json(snapshot: Snapshot) -> str:
    import json

    return json.dumps(to_dict(snapshot), indent=2) + "\n"
