"""A fake NVML that stands in for the ``pynvml`` module.

``FakeNvml(...).module`` is a module object with the same surface as ``pynvml`` for the
subset gfd uses: the same function names and signatures, opaque handles, the *real*
``pynvml`` error classes and ``NVML_*`` constants (so ``except`` clauses are exercised
against the real types) and the real ctypes structs as return values.  Put it in
``sys.modules["pynvml"]`` or pass it as ``discover(settings, nvml=fake.module)``.

What it models:

- GPUs with UUID, name, PCI bus id (NVML's 8-digit-domain, upper-case form), total memory
  in bytes (``None``: GetMemoryInfo says NOT_SUPPORTED), compute capability;
- MIG: mode NOT_SUPPORTED / disabled / enabled, ``max_mig_devices`` slots with gaps
  (empty slots answer NOT_FOUND, or INVALID_ARGUMENT if asked), per-device attributes, GPU
  instances with profile *ids* and a per-GPU table of which profile *enums* are supported
  and which id each has — so discovery has to do the same lookups as on a real GPU;
- fabric info through ``nvmlDeviceGetGpuFabricInfoV`` / ``nvmlDeviceGetGpuFabricInfo``
  (NOT_SUPPORTED when the GPU has none);
- failure injection: library not found, ``nvmlInit`` failing with any code, a GPU lost
  after N calls touching it, a GPU lost from the start (``FakeGpu.lost``), entry points
  missing from the driver (FUNCTION_NOT_FOUND) or from the bindings (the attribute is
  absent), strings returned as ``bytes`` (old bindings);
- call counting (``calls``), and the init/shutdown balance (``init_depth``).

``FakeNvml.from_snapshot(snapshot)`` inverts discovery: it produces the raw NVML values
(memory in bytes, GPU-instance profile enums and ids, fabric structs) from which discovery
must give the snapshot back.  It raises :class:`UnrealizableSnapshot` for a snapshot no
NVML could produce (e.g. a MIG profile name that does not follow from the memory sizes)."""

from __future__ import annotations

import ctypes
import functools
import math
import re
import types
import uuid as uuid_module
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeVar

import pynvml as real

from gfd.snapshot import Gpu, Snapshot

NOT_SUPPORTED = real.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = real.NVML_ERROR_NOT_FOUND
INVALID_ARGUMENT = real.NVML_ERROR_INVALID_ARGUMENT

P = real  # profile enum constants, for brevity below

# (G slices, suffix) -> NVML_GPU_INSTANCE_PROFILE_* enum, for the names a GPU can have: the
# suffix's spelling in the enum's name, and the slice counts that have it.
ENUM_SUFFIXES = {"": ("", (1, 2, 3, 4, 6, 7, 8)), "+me": ("_REV1", (1, 2)),
                 "+me.all": ("_ALL_ME", (1, 2)), "+gfx": ("_GFX", (1, 2, 3, 4)),
                 "-me": ("_NO_ME", (1, 2))}  # fmt: skip
PROFILE_ENUMS: dict[tuple[int, str], int] = {
    (slices, suffix): getattr(P, f"NVML_GPU_INSTANCE_PROFILE_{slices}_SLICE{spelling}")
    for suffix, (spelling, counts) in ENUM_SUFFIXES.items() for slices in counts
}  # fmt: skip
SLICES_OF_ENUM = {enum: slices for (slices, _suffix), enum in PROFILE_ENUMS.items()}
SLICES_OF_ENUM[P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2] = 1

# Profile enum -> the profile *id* NVML reports for it.  The first seven are what an A100
# reports (nvidia-smi mig -lgip: 1g.5gb is 19, 1g.5gb+me 20, 1g.10gb 15, 2g.10gb 14, 3g 9,
# 4g 5, 7g 0); the rest are distinct stand-ins.  Discovery must not assume enum == id.
PROFILE_IDS: dict[int, int] = {
    P.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 0, P.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 5,
    P.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 9, P.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 14,
    P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15, P.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 19,
    P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20, P.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: 21,
    P.NVML_GPU_INSTANCE_PROFILE_8_SLICE: 30, P.NVML_GPU_INSTANCE_PROFILE_6_SLICE: 31,
    P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: 32, P.NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: 33,
    P.NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX: 34, P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: 35,
    P.NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME: 36, P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: 37,
    P.NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: 38, P.NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX: 39,
}  # fmt: skip
# What every fake MIG GPU supports besides the enums its devices use (an A100's plain set).
BASE_PROFILE_ENUMS = frozenset(PROFILE_ENUMS[slices, ""] for slices in (1, 2, 3, 4, 7))

_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(\+me\.all|\+me|\+gfx|-me)?$")
_SYSFS_BUS_ID = re.compile(r"^([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


#: the reason discovery gives a GPU that the PCI bus shows and NVML does not list
LOST_FROM_NVML = "on the PCI bus but not listed by NVML"


class UnrealizableSnapshot(ValueError):
    """No NVML could produce this snapshot, so it cannot round-trip through the fake."""


# --------------------------------------------------------------------------- the raw model


@dataclass
class FakeMigDevice:
    gi_id: int  # the GPU instance it lives in (shared by CIs of one GI)
    gi_profile_enum: int  # NVML_GPU_INSTANCE_PROFILE_*
    memory_mib: int  # memorySizeMB attribute
    multiprocessors: int
    gi_slices: int
    ci_slices: int
    engines: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # copy dec enc jpeg ofa


@dataclass
class FakeFabric:
    cluster_uuid: bytes  # 16 raw bytes
    clique_id: int
    state: int = real.NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = real.NVML_SUCCESS


@dataclass
class FakeNvLink:
    """One NVLink as NVML answers for it; ``None`` fields answer NOT_SUPPORTED."""

    active: bool = True
    version: int | None = None  # the raw value nvmlDeviceGetNvLinkVersion returns
    remote_type: int | None = None  # NVML_NVLINK_DEVICE_TYPE_*
    remote_bus_id: str | bytes | None = None  # NVML form


# NVLink generation -> what a real driver's nvmlDeviceGetNvLinkVersion returns: the
# nvmlNvlinkVersion_t enum as pynvml's constants (and nvml.h) declare it (A100 reports
# NVML_NVLINK_VERSION_3_1); NVIDIA's mock returns the generation itself.
DRIVER_NVLINK_VERSION = {
    1: real.NVML_NVLINK_VERSION_1_0, 2: real.NVML_NVLINK_VERSION_2_0,
    3: real.NVML_NVLINK_VERSION_3_1, 4: real.NVML_NVLINK_VERSION_4_0,
    5: real.NVML_NVLINK_VERSION_5_0,
}  # fmt: skip
REMOTE_TYPE = {
    "gpu": real.NVML_NVLINK_DEVICE_TYPE_GPU, "nvswitch": real.NVML_NVLINK_DEVICE_TYPE_SWITCH,
    "other": real.NVML_NVLINK_DEVICE_TYPE_UNKNOWN,
}  # fmt: skip
TOPOLOGY_LEVEL = {
    "internal": real.NVML_TOPOLOGY_INTERNAL, "single": real.NVML_TOPOLOGY_SINGLE,
    "multiple": real.NVML_TOPOLOGY_MULTIPLE, "hostbridge": real.NVML_TOPOLOGY_HOSTBRIDGE,
    "node": real.NVML_TOPOLOGY_NODE, "system": real.NVML_TOPOLOGY_SYSTEM,
}  # fmt: skip


@dataclass
class FakeGpu:
    # strings as the driver writes them: bytes stand for what may not be UTF-8
    uuid: str | bytes
    name: str | bytes
    bus_id: str | bytes  # NVML form: 00000000:07:00.0
    memory_total: int | None  # bytes; None: GetMemoryInfo answers NOT_SUPPORTED
    compute_capability: tuple[int, int] = (8, 0)
    mig_mode: int | None = None  # None: NOT_SUPPORTED; else current mode (0 or 1)
    max_mig_devices: int = 7
    mig_slots: dict[int, FakeMigDevice] = field(default_factory=dict)
    empty_slot_error: int = NOT_FOUND
    fabric: FakeFabric | None = None  # None: NOT_SUPPORTED
    supported_profile_enums: frozenset[int] = BASE_PROFILE_ENUMS
    lost: bool = False  # fell off the bus: every call touching it answers GPU_IS_LOST
    # topology: the minor number and CPU affinity (None: NOT_SUPPORTED); NVLink slots
    # 0..nvlink_count-1 (0: GetNvLinkState answers NOT_SUPPORTED, as on a PCIe-only GPU;
    # past the last slot INVALID_ARGUMENT); slots not in ``nvlinks`` are inactive
    minor: int | None = None
    cpus: tuple[int, ...] | None = None
    nvlink_count: int = 0
    nvlinks: dict[int, FakeNvLink] = field(default_factory=dict)


class _DeviceHandle:
    """Opaque, like ``c_nvmlDevice_t``: discovery can only pass it back."""

    __slots__ = ("_gpu", "_slot")

    def __init__(self, gpu: int, slot: int | None = None) -> None:
        self._gpu, self._slot = gpu, slot


class _GpuInstanceHandle:
    __slots__ = ("_gi_id", "_gpu")

    def __init__(self, gpu: int, gi_id: int) -> None:
        self._gpu, self._gi_id = gpu, gi_id


T = TypeVar("T")


def _known(value: T | None) -> T:
    """The field's value, or NOT_SUPPORTED where the fake GPU leaves it unset."""
    if value is None:
        raise _error(NOT_SUPPORTED)
    return value


def _pci_info(bus_id: str | bytes) -> Any:
    raw = bus_id if isinstance(bus_id, bytes) else bus_id.encode()
    info = real.nvmlPciInfo_t()  # the real struct: reading busId decodes it as pynvml does
    info.busId = raw
    info.busIdLegacy = raw[:15]
    return info


def _error(code: int) -> real.NVMLError:
    return real.NVMLError(code)


# Real pynvml names copied as they are: error classes, constants, structs.
_COPIED_PREFIXES = ("NVML_", "NVMLError", "c_nvml", "nvmlPciInfo", "nvmlGpuFabricInfo")
#: what every fake module takes from the real one (constants, error classes, structures),
#: looked up once: scanning pynvml's ~2000 names per fake was a third of a round trip
_COPIED = {name: getattr(real, name) for name in dir(real) if name.startswith(_COPIED_PREFIXES)}


class FakeNvml:
    def __init__(
        self, gpus: Iterable[FakeGpu] = (), *, driver_version: str | bytes = "550.54.15",
        cuda_version: int = 12040, library_missing: bool = False, init_error: int | None = None,
        bytes_strings: bool = False, missing_symbols: Iterable[str] = (),
        missing_functions: Iterable[str] = (),
    ) -> None:  # fmt: skip
        self.gpus = list(gpus)
        self.driver_version, self.cuda_version = driver_version, cuda_version
        self.library_missing, self.init_error = library_missing, init_error
        self.bytes_strings = bytes_strings
        self.missing_symbols = set(missing_symbols)  # FUNCTION_NOT_FOUND (old driver)
        # GPU index pairs (low, high) -> NVML_TOPOLOGY_* / NVML_P2P_STATUS_* for NVLink;
        # a pair not listed answers NOT_SUPPORTED
        self.common_ancestor: dict[tuple[int, int], int] = {}
        self.p2p_nvlink: dict[tuple[int, int], int] = {}
        self.calls: Counter[str] = Counter()
        self.init_depth = 0
        self._lost: dict[int, int] = {}  # gpu -> calls left before it is lost
        self.module = self._build_module(set(missing_functions))

    # ------------------------------------------------------------- set-up helpers

    def lose_gpu(self, index: int, *, after_calls: int = 0) -> None:
        """GPU ``index`` answers GPU_IS_LOST once ``after_calls`` calls have touched it."""
        self._lost[index] = after_calls

    def recover_gpus(self) -> None:
        """Every lost GPU answers again (as after a reset)."""
        self._lost.clear()

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def _build_module(self, missing_functions: set[str]) -> types.ModuleType:
        module = types.ModuleType("pynvml", "fake NVML bindings (tests/fakes/fake_nvml.py)")
        module.__dict__.update(_COPIED)
        for name in FUNCTIONS:
            if name not in missing_functions:
                setattr(module, name, self._counted(name, getattr(self, "_" + name)))
        return module

    def _counted(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name in self.missing_symbols:
                raise _error(real.NVML_ERROR_FUNCTION_NOT_FOUND)
            if name not in ("nvmlInit", "nvmlShutdown") and self.init_depth <= 0:
                raise _error(real.NVML_ERROR_UNINITIALIZED)
            return function(*args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def _text(self, value: str | bytes) -> str | bytes:
        raw = value if isinstance(value, bytes) else value.encode()
        if self.bytes_strings:
            return raw
        # current bindings decode the driver's bytes strictly, as this does
        return str(real.convertStrBytes(lambda: raw)())

    def _gpu(self, handle: Any, *, mig_ok: bool = False) -> FakeGpu:
        if not isinstance(handle, _DeviceHandle):
            raise _error(INVALID_ARGUMENT)
        if handle._slot is not None and not mig_ok:
            raise _error(INVALID_ARGUMENT)
        self._touch(handle._gpu)
        return self.gpus[handle._gpu]

    def _touch(self, index: int) -> None:
        if self.gpus[index].lost:
            raise _error(real.NVML_ERROR_GPU_IS_LOST)
        if index in self._lost:
            if self._lost[index] <= 0:
                raise _error(real.NVML_ERROR_GPU_IS_LOST)
            self._lost[index] -= 1

    def _mig(self, handle: Any) -> FakeMigDevice:
        if not isinstance(handle, _DeviceHandle) or handle._slot is None:
            raise _error(INVALID_ARGUMENT)
        self._touch(handle._gpu)
        return self.gpus[handle._gpu].mig_slots[handle._slot]

    # ------------------------------------------------------------- the pynvml surface

    def _nvmlInit(self) -> None:
        if self.library_missing:
            raise _error(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        if self.init_error is not None:
            raise _error(self.init_error)
        self.init_depth += 1

    def _nvmlShutdown(self) -> None:
        if self.init_depth <= 0:
            raise _error(real.NVML_ERROR_UNINITIALIZED)
        self.init_depth -= 1

    def _nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self._text(self.driver_version)

    def _nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_version

    def _nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def _nvmlDeviceGetHandleByIndex(self, index: int) -> _DeviceHandle:
        if not 0 <= index < len(self.gpus):
            raise _error(INVALID_ARGUMENT)
        self._touch(index)
        return _DeviceHandle(index)

    def _nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:
        return self._text(self._gpu(handle).uuid)

    def _nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        return self._text(self._gpu(handle).name)

    def _nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return _pci_info(self._gpu(handle).bus_id)

    def _nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        total = _known(self._gpu(handle).memory_total)
        return real.c_nvmlMemory_t(total=total, free=total, used=0)

    def _nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return self._gpu(handle).compute_capability

    def _nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        mode = _known(self._gpu(device).mig_mode)
        return [mode, mode]

    def _nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu = self._gpu(device)
        return 0 if gpu.mig_mode is None else gpu.max_mig_devices

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> _DeviceHandle:
        gpu = self._gpu(device)
        if gpu.mig_mode is None:
            raise _error(NOT_SUPPORTED)
        if not 0 <= index < gpu.max_mig_devices:
            raise _error(INVALID_ARGUMENT)
        if gpu.mig_mode != 1 or index not in gpu.mig_slots:
            raise _error(gpu.empty_slot_error)
        return _DeviceHandle(device._gpu, index)

    def _nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> _DeviceHandle:
        self._mig(migDevice)
        return _DeviceHandle(migDevice._gpu)

    def _nvmlDeviceGetAttributes(self, device: Any) -> Any:
        mig = self._mig(device)
        copy, decoder, encoder, jpeg, ofa = mig.engines
        return real.c_nvmlDeviceAttributes(
            multiprocessorCount=mig.multiprocessors, sharedCopyEngineCount=copy,
            sharedDecoderCount=decoder, sharedEncoderCount=encoder, sharedJpegCount=jpeg,
            sharedOfaCount=ofa, gpuInstanceSliceCount=mig.gi_slices,
            computeInstanceSliceCount=mig.ci_slices, memorySizeMB=mig.memory_mib,
        )  # fmt: skip

    def _nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return self._mig(device).gi_id

    def _nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        gpu = self._gpu(device)
        if not any(m.gi_id == gpuInstanceId for m in gpu.mig_slots.values()):
            raise _error(NOT_FOUND)
        return _GpuInstanceHandle(device._gpu, gpuInstanceId)

    def _nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        if not isinstance(gpuInstance, _GpuInstanceHandle):
            raise _error(INVALID_ARGUMENT)
        self._touch(gpuInstance._gpu)
        gpu = self.gpus[gpuInstance._gpu]
        mig = next(m for m in gpu.mig_slots.values() if m.gi_id == gpuInstance._gi_id)
        info = real.c_nvmlGpuInstanceInfo_t()
        info.id = gpuInstance._gi_id
        info.profileId = PROFILE_IDS[mig.gi_profile_enum]
        return info

    def _nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        gpu = self._gpu(device)
        if version == 2:
            if "nvmlDeviceGetGpuInstanceProfileInfoV" in self.missing_symbols:
                raise _error(real.NVML_ERROR_FUNCTION_NOT_FOUND)
            info: Any = real.c_nvmlGpuInstanceProfileInfo_v2_t()
        elif version == 1:
            info = real.c_nvmlGpuInstanceProfileInfo_t()
        else:
            raise _error(real.NVML_ERROR_FUNCTION_NOT_FOUND)
        if not 0 <= profile < real.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _error(INVALID_ARGUMENT)
        if gpu.mig_mode is None or profile not in gpu.supported_profile_enums:
            raise _error(NOT_SUPPORTED)
        info.id = PROFILE_IDS[profile]
        info.sliceCount = SLICES_OF_ENUM.get(profile, 1)
        return info

    def _nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int:
        fabric = _known(self._gpu(device).fabric)
        struct = getattr(gpuFabricInfo, "_obj", gpuFabricInfo)  # byref(...) or the struct
        ctypes.memmove(struct.clusterUuid, fabric.cluster_uuid, 16)
        struct.cliqueId = fabric.clique_id
        struct.state = fabric.state
        struct.status = fabric.status
        return real.NVML_SUCCESS

    _nvmlDeviceGetGpuFabricInfo = _nvmlDeviceGetGpuFabricInfoV

    # ------------------------------------------------------------- topology

    def _nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return _known(self._gpu(handle).minor)

    def _nvmlDeviceGetCpuAffinity(self, handle: Any, cpuSetSize: int) -> Any:
        cpus = _known(self._gpu(handle).cpus)
        words = (ctypes.c_ulonglong * cpuSetSize)()
        for cpu in cpus:
            if cpu // 64 < cpuSetSize:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def _link(self, device: Any, link: int) -> FakeNvLink | None:
        gpu = self._gpu(device)
        if gpu.nvlink_count == 0:
            raise _error(NOT_SUPPORTED)
        if not 0 <= link < gpu.nvlink_count:
            raise _error(INVALID_ARGUMENT)
        return gpu.nvlinks.get(link)

    def _nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        found = self._link(device, link)
        active = found is not None and found.active
        return real.NVML_FEATURE_ENABLED if active else real.NVML_FEATURE_DISABLED

    def _link_field(self, device: Any, link: int, name: str) -> Any:
        found = self._link(device, link)
        return _known(None if found is None else getattr(found, name))

    def _nvmlDeviceGetNvLinkVersion(self, device: Any, link: int) -> int:
        return int(self._link_field(device, link, "version"))

    def _nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return int(self._link_field(handle, link, "remote_type"))

    def _nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> Any:
        return _pci_info(self._link_field(device, link, "remote_bus_id"))

    def _pair(self, device1: Any, device2: Any, table: dict[tuple[int, int], int]) -> int:
        self._gpu(device1)
        self._gpu(device2)
        first, second = sorted((device1._gpu, device2._gpu))
        if (first, second) not in table:
            raise _error(NOT_SUPPORTED)
        return table[(first, second)]

    def _nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        return self._pair(device1, device2, self.common_ancestor)

    def _nvmlDeviceGetP2PStatus(self, device1: Any, device2: Any, p2pIndex: int) -> int:
        if p2pIndex != real.NVML_P2P_CAPS_INDEX_NVLINK:
            raise _error(NOT_SUPPORTED)  # only the NVLink capability is modelled
        return self._pair(device1, device2, self.p2p_nvlink)

    # ------------------------------------------------------------- from a snapshot

    @classmethod
    def from_snapshot(
        cls, snapshot: Snapshot, *, empty_slot_error: int = NOT_FOUND, **options: Any
    ) -> FakeNvml:
        """The fake node whose discovery gives ``snapshot`` back (NVML part)."""
        if snapshot.driver is None:
            raise UnrealizableSnapshot("no driver: NVML is unavailable on this node")
        gpus = sorted(snapshot.gpus, key=lambda g: g.index)
        devices = {gpu.index: fake_gpu_from(gpu, empty_slot_error=empty_slot_error) for gpu in gpus}
        for gone in snapshot.lost:
            if gone.index is None:
                # not listed by NVML at all: only the PCI bus shows it (fake sysfs)
                if not gone.pci_bus_id or gone.reason != LOST_FROM_NVML:
                    raise UnrealizableSnapshot(f"lost GPU {gone}: not what discovery reports")
                continue
            reason = f"NVML error on GPU {gone.index} in nvmlDeviceGetHandleByIndex: GPU is lost"
            if gone.pci_bus_id or gone.reason != reason:
                raise UnrealizableSnapshot(f"lost GPU {gone}: not what discovery reports")
            devices[gone.index] = FakeGpu(uuid="", name="", bus_id="", memory_total=None, lost=True)
        if sorted(devices) != list(range(len(devices))):
            raise UnrealizableSnapshot("NVML numbers GPUs 0..n-1")
        version_style = options.pop("nvlink_version_style", "driver")
        fake = cls(
            [devices[index] for index in sorted(devices)], driver_version=snapshot.driver.version,
            cuda_version=snapshot.driver.cuda, **options,
        )  # fmt: skip
        if snapshot.topology is not None:
            apply_topology(fake, snapshot, version_style)
        return fake


#: every function of the pynvml surface the fake implements (the counted ones), in the order
#: of its methods above (topology last)
FUNCTIONS = tuple(name[1:] for name in vars(FakeNvml) if name.startswith("_nvml"))
#: the calls of topology discovery: the fake's functions from the minor number on
TOPOLOGY_FUNCTIONS = FUNCTIONS[FUNCTIONS.index("nvmlDeviceGetMinorNumber") :]


# --------------------------------------------------------------------------- inversion


def expected_gb(mig_memory_mib: int, parent_total_bytes: int) -> int:
    """The GB of a profile name, in exact arithmetic (independent of gfd's float version)."""
    fraction = Fraction(mig_memory_mib * 2**20, parent_total_bytes)
    eighths = math.ceil(fraction * 8)
    total_gb = -(-parent_total_bytes // 2**30)
    return math.floor(Fraction(eighths, 8) * total_gb + Fraction(1, 2))


def nvml_bus_id(sysfs_bus_id: str) -> str:
    """``0000:07:00.0`` as NVML prints it: ``00000000:07:00.0`` (upper-case hex)."""
    if not sysfs_bus_id:
        return ""
    match = _SYSFS_BUS_ID.match(sysfs_bus_id)
    if match is None:
        raise UnrealizableSnapshot(f"pci_bus_id {sysfs_bus_id!r} is not in sysfs form")
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):08X}:{bus.upper()}:{device.upper()}.{function}"


def spread_slots(count: int, max_slots: int) -> list[int]:
    """``count`` slot indices in order over ``max_slots``, leaving gaps between them."""
    return [k * max_slots // count for k in range(count)] if count else []


def fake_gpu_from(gpu: Gpu, *, empty_slot_error: int = NOT_FOUND) -> FakeGpu:
    total = None if gpu.memory_mib is None else gpu.memory_mib * 2**20
    fake = FakeGpu(
        uuid=gpu.uuid, name=gpu.name, bus_id=nvml_bus_id(gpu.pci_bus_id), memory_total=total,
        compute_capability=(gpu.compute_capability.major, gpu.compute_capability.minor),
        empty_slot_error=empty_slot_error,
    )  # fmt: skip
    if gpu.fabric is not None:
        try:
            cluster = uuid_module.UUID(gpu.fabric.cluster_uuid)
        except ValueError:
            raise UnrealizableSnapshot(f"cluster_uuid {gpu.fabric.cluster_uuid!r}") from None
        if str(cluster) != gpu.fabric.cluster_uuid or cluster.int == 0:
            raise UnrealizableSnapshot(f"cluster_uuid {gpu.fabric.cluster_uuid!r} not canonical")
        if gpu.fabric.clique_id >= 2**32:
            raise UnrealizableSnapshot("clique_id is a 32-bit value in NVML")
        fake.fabric = FakeFabric(cluster.bytes, gpu.fabric.clique_id)
    if gpu.mig is None:
        return fake
    fake.mig_mode = 1 if gpu.mig.enabled else 0
    if not gpu.mig.enabled:
        if gpu.mig.devices:
            raise UnrealizableSnapshot(f"GPU {gpu.index}: MIG devices on a MIG-disabled GPU")
        return fake
    if gpu.mig.devices and total is None:
        raise UnrealizableSnapshot(f"GPU {gpu.index}: MIG devices need the GPU's memory")
    migs: list[FakeMigDevice] = []
    gi_id, ci_used = 0, 0
    for device in gpu.mig.devices:
        match = _PROFILE.match(device.profile)
        if match is None:
            raise UnrealizableSnapshot(f"MIG profile {device.profile!r} is not canonical")
        c_text, g_text, gb_text, suffix = match.groups()
        g, gb, suffix = int(g_text), int(gb_text), suffix or ""
        c = g if c_text is None else int(c_text)
        if c_text is not None and c == g:
            raise UnrealizableSnapshot(f"MIG profile {device.profile!r}: C equals G")
        if (g, c) != (device.slices.gi, device.slices.ci):
            raise UnrealizableSnapshot(f"MIG profile {device.profile!r} vs slices {device.slices}")
        assert total is not None
        if gb != expected_gb(device.memory_mib, total):
            raise UnrealizableSnapshot(
                f"MIG profile {device.profile!r}: {device.memory_mib} MiB of {gpu.memory_mib} "
                f"MiB gives {expected_gb(device.memory_mib, total)}gb"
            )
        enum = PROFILE_ENUMS.get((g, suffix))
        if enum is None:
            raise UnrealizableSnapshot(f"MIG profile {device.profile!r}: no such GPU instance")
        # Compute instances smaller than their GPU instance share it while they fit.
        previous = migs[-1] if migs else None
        shares = (
            previous is not None
            and c < g
            and previous.ci_slices < previous.gi_slices
            and (previous.gi_profile_enum, previous.memory_mib) == (enum, device.memory_mib)
            and ci_used + c <= g
        )
        if shares:
            ci_used += c
        else:
            gi_id, ci_used = gi_id + 1, c
        e = device.engines
        migs.append(
            FakeMigDevice(
                gi_id=gi_id, gi_profile_enum=enum, memory_mib=device.memory_mib,
                multiprocessors=device.multiprocessors, gi_slices=g, ci_slices=c,
                engines=(e.copy, e.decoder, e.encoder, e.jpeg, e.ofa),
            )
        )  # fmt: skip
    fake.max_mig_devices = max(7, len(migs))
    fake.mig_slots = dict(zip(spread_slots(len(migs), fake.max_mig_devices), migs, strict=True))
    fake.supported_profile_enums = BASE_PROFILE_ENUMS | {m.gi_profile_enum for m in migs}
    return fake


def _cpus(cpu_list: str | None) -> tuple[int, ...] | None:
    if cpu_list is None:
        return None
    cpus: list[int] = []
    for part in cpu_list.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return tuple(cpus)


def apply_topology(fake: FakeNvml, snapshot: Snapshot, version_style: str = "driver") -> None:
    """Give ``fake`` the NVML answers from which discovery reads ``snapshot.topology``.

    ``version_style``: ``driver`` answers nvmlDeviceGetNvLinkVersion with the enum real
    drivers return, ``mock`` with the generation (as NVIDIA's mock NVML does)."""
    topology = snapshot.topology
    assert topology is not None
    indices = [gpu.index for gpu in sorted(snapshot.gpus, key=lambda g: g.index)]
    if [entry.index for entry in topology.gpus] != indices:
        raise UnrealizableSnapshot("discovery lists every GPU's topology, in index order")
    every_pair = [(a, b) for i, a in enumerate(indices) for b in indices[i + 1 :]]
    if [pair.gpus for pair in topology.pairs] != every_pair:
        raise UnrealizableSnapshot("discovery lists every GPU pair, in order")
    for entry in topology.gpus:
        gpu = fake.gpus[entry.index]
        gpu.minor = entry.minor
        gpu.cpus = _cpus(entry.cpu_affinity)
        gpu.nvlink_count = max((link.link for link in entry.nvlinks), default=-1) + 1
        for link in entry.nvlinks:
            if link.link >= real.NVML_NVLINK_MAX_LINKS:
                raise UnrealizableSnapshot(f"NVLink {link.link} is past NVML_NVLINK_MAX_LINKS")
            version = link.version
            if version is not None and version_style == "driver":
                if version not in DRIVER_NVLINK_VERSION:
                    raise UnrealizableSnapshot(f"no driver reports NVLink generation {version}")
                version = DRIVER_NVLINK_VERSION[version]
            gpu.nvlinks[link.link] = FakeNvLink(
                version=version,
                remote_type=None if link.remote is None else REMOTE_TYPE[link.remote],
                remote_bus_id=None
                if link.remote_pci_bus_id is None
                else nvml_bus_id(link.remote_pci_bus_id),
            )
    for pair in topology.pairs:
        if pair.pcie is not None:
            fake.common_ancestor[pair.gpus] = TOPOLOGY_LEVEL[pair.pcie]
        if pair.nvlink_p2p is not None:
            fake.p2p_nvlink[pair.gpus] = (
                real.NVML_P2P_STATUS_OK if pair.nvlink_p2p else real.NVML_P2P_STATUS_NOT_SUPPORTED
            )


def dgx_a100_mig_node(gpu_count: int = 8, migs_per_gpu: int = 7) -> FakeNvml:
    """A DGX A100-like node: A100-SXM4-40GB GPUs, each split into 1g.5gb MIG devices."""
    gpus = [
        FakeGpu(
            uuid=f"GPU-79a2ba02-a537-ccbf-2965-8e9d90c0bd{index:02x}",
            name="NVIDIA A100-SXM4-40GB",
            bus_id=f"00000000:{0x07 + 8 * index:02X}:00.0",
            memory_total=40960 * 2**20,
            mig_mode=1,
            max_mig_devices=7,
            mig_slots={
                slot: FakeMigDevice(
                    gi_id=slot + 1, gi_profile_enum=P.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                    memory_mib=4864, multiprocessors=14, gi_slices=1, ci_slices=1,
                    engines=(1, 0, 0, 0, 0),
                )
                for slot in range(migs_per_gpu)
            },
        )
        for index in range(gpu_count)
    ]  # fmt: skip
    return FakeNvml(gpus, driver_version="550.54.15", cuda_version=12040)
