"""The NVML half of discovery: driver, GPUs, MIG devices and fabric, through ``pynvml``.

Everything here talks to NVML through one object, ``nvml``: the ``pynvml`` module (package
``nvidia-ml-py``) in production, or any stand-in with the same module surface in tests
(same function names and signatures, ``NVMLError`` with its ``value`` code, the
``NVML_*`` constants, the ctypes structs).  :func:`load_module` is the import seam: it does
``import pynvml``, so a fake placed in ``sys.modules["pynvml"]`` is picked up unchanged.

Errors: ``nvmlInit`` failing (library missing included) is :class:`NvmlUnavailableError`;
any other NVML error during the pass is :class:`DiscoveryError` naming the GPU and the
call.  The few codes NVML uses to say "not here" are facts, not errors (SPEC §3, §5.6):
MIG mode NOT_SUPPORTED (not MIG-capable), a MIG slot NOT_FOUND / INVALID_ARGUMENT (empty),
fabric info NOT_SUPPORTED (not attached), memory info failing (memory unknown).
"""

from __future__ import annotations

import ctypes
import os
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from gfd.discovery import mig_profile
from gfd.discovery.driver_root import load_shared, resolve_library
from gfd.discovery.gpu_links import TopologyReader
from gfd.echo import clip_path
from gfd.errors import DiscoveryError, NvmlLibraryMissingError, NvmlUnavailableError
from gfd.files import UnreadableFileError
from gfd.labels.devices import is_skipped_device
from gfd.observability import get_logger
from gfd.snapshot import (
    ComputeCapability,
    Driver,
    Fabric,
    Gpu,
    LostGpu,
    Mig,
    MigDevice,
    MigEngines,
    MigSlices,
    Topology,
)

# nvml.h return codes (pynvml.NVML_ERROR_*); numeric so a stand-in module needs only .value.
ERROR_UNINITIALIZED = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
DEVICE_MIG_ENABLE = 1
GPU_FABRIC_STATE_COMPLETED = 3
SUCCESS = 0

# Errors that mean the GPU (or NVML) is gone, not that a fact is missing: they fail the
# pass even where another error would only leave a field null.
_FATAL_CODES = frozenset({ERROR_UNINITIALIZED, ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED})
# Errors that mean this one GPU is unusable: it is recorded as lost and the others are read.
_LOST_CODES = frozenset({ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED})

UNAVAILABLE_HINT = (
    "check that the NVIDIA driver is installed on the host, that the container runs with "
    "the NVIDIA container runtime, and that NVIDIA_VISIBLE_DEVICES is set (e.g. to 'all')"
)

_BUS_ID = re.compile(r"^([0-9a-fA-F]+):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def _log() -> Any:
    # Looked up per message: a logger bound at import would miss configure_logging().
    return get_logger(component="discovery")


LIBRARY = "libnvidia-ml.so.1"


def load_module(driver_root: str = "/") -> Any:
    """The NVML bindings: ``import pynvml`` (a module already in ``sys.modules`` wins), with
    ``libnvidia-ml.so.1`` taken from ``driver_root`` when it is there (see use_library)."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailableError(
            f"NVML is unavailable: the Python NVML bindings (package nvidia-ml-py, module "
            f"pynvml) cannot be imported: {exc}"
        ) from None
    use_library(pynvml, resolve_library(driver_root, LIBRARY))
    return pynvml


def use_library(module: Any, path: str) -> None:
    """Make the bindings use the NVML library at ``path``.

    pynvml loads ``libnvidia-ml.so.1`` by name in ``nvmlInit`` unless its module global
    ``nvmlLib`` already holds a library (``_LoadNvmlLibrary``); that global is the one
    place to hand it another.  A bare name, a library already loaded, or bindings without
    that global (a stand-in module) are left alone."""
    if os.sep not in path or getattr(module, "nvmlLib", "absent") is not None:
        return
    try:
        library = load_shared(path)
    except UnreadableFileError as exc:
        raise NvmlLibraryMissingError(
            f"NVML is unavailable: {LIBRARY} under --driver-root-ctr-path "
            f"({clip_path(path)}) is not loaded: {exc.reason}"
        ) from None
    except OSError as exc:
        raise NvmlLibraryMissingError(
            f"NVML is unavailable: {clip_path(path)} (from --driver-root-ctr-path) could not "
            f"be loaded: {exc}"
        ) from None
    lock = getattr(module, "libLoadLock", None)
    if lock is None:
        module.nvmlLib = library
        return
    with lock:
        if module.nvmlLib is None:
            module.nvmlLib = library


def error_code(err: BaseException) -> int | None:
    """The NVML return code carried by an ``NVMLError``."""
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


def unavailable_message(err: BaseException) -> str:
    """One line for ``nvmlInit`` failing: what failed and what to check."""
    code = error_code(err)
    if code == ERROR_LIBRARY_NOT_FOUND:
        what = "libnvidia-ml.so.1 could not be loaded"
    else:
        what = f"nvmlInit failed: {err}"
    return f"NVML is unavailable: {what}; {UNAVAILABLE_HINT}"


def as_text(value: Any) -> str:
    """NVML strings: ``str`` from current bindings, ``bytes`` from old ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def read_text(read: Callable[[], Any]) -> str:
    """The string ``read`` gets from the bindings, as :func:`as_text` gives it.

    Current bindings decode what the driver wrote as strict UTF-8, so bytes that are not
    UTF-8 raise UnicodeDecodeError out of the call (or out of a struct's field); the bytes
    it carries are the whole answer, and they get the replacement characters that old
    bindings' answers get, as upstream labels whatever bytes the driver gives."""
    try:
        return as_text(read())
    except UnicodeDecodeError as exc:
        return as_text(bytes(exc.object))


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:07:00.0`` in the sysfs form ``0000:07:00.0`` (lower case).

    The domain is printed as Linux does (``%04x``), so a domain above 0xffff keeps its
    digits.  Anything that does not look like a bus id is only lower-cased.
    """
    text = bus_id.strip()
    match = _BUS_ID.match(text)
    if match is None:
        return text.lower()
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


@contextmanager
def session(nvml: Any) -> Iterator[None]:
    """``nvmlInit`` … ``nvmlShutdown``; an init failure is :class:`NvmlUnavailableError`."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        if error_code(err) == ERROR_LIBRARY_NOT_FOUND:
            raise NvmlLibraryMissingError(unavailable_message(err)) from None
        raise NvmlUnavailableError(unavailable_message(err)) from None
    try:
        yield
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as err:
            # Never hide the pass's own outcome behind a shutdown problem.
            _log().warning("nvml shutdown failed", error=str(err))


@dataclass(frozen=True, slots=True)
class NvmlReading:
    """One pass over NVML: the driver, every GPU that answered (``pci_class`` is left for
    sysfs), the GPUs NVML reports lost (GPU_IS_LOST, RESET_REQUIRED), and how many
    devices nvmlDeviceGetCount listed (answering, lost and skipped alike)."""

    driver: Driver
    gpus: tuple[Gpu, ...]
    lost: tuple[LostGpu, ...] = ()
    device_count: int = 0


def read(nvml: Any) -> NvmlReading:
    """One pass over NVML (see :class:`NvmlReading`)."""
    with session(nvml):
        return _NvmlReader(nvml).read()


def read_with_topology(nvml: Any) -> tuple[NvmlReading, Topology | None]:
    """:func:`read` plus the interconnect, in the same NVML session (never fails on it:
    None when it could not be read at all)."""

    with session(nvml):
        reading = _NvmlReader(nvml).read()
        try:
            topology = TopologyReader(nvml, normalize_bus_id).read(reading.gpus)
        except Exception as exc:  # a fault of its own must never fail the pass
            _log().warning("topology not read", error=repr(exc)[:100])
            topology = None
        return reading, topology


class _NvmlReader:
    """One discovery pass.  ``_call`` remembers the current call for error messages."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._error_type: type[BaseException] = nvml.NVMLError
        self._current = ""
        self._profile_info_version: int | None = None  # None: the bindings' default
        self._bus_id = ""  # of the GPU being read, once known

    def _call(self, name: str, *args: Any) -> Any:
        self._current = name
        return getattr(self._nvml, name)(*args)

    def _text(self, name: str, *args: Any) -> str:
        return read_text(lambda: self._call(name, *args))

    def read(self) -> NvmlReading:
        try:
            driver = Driver(
                version=self._text("nvmlSystemGetDriverVersion"),
                cuda=int(self._call("nvmlSystemGetCudaDriverVersion")),
            )
            count = int(self._call("nvmlDeviceGetCount"))
        except self._error_type as err:
            raise DiscoveryError(f"NVML error in {self._current}: {err}") from None
        if driver.cuda < 0:  # a C int: no label, nor a snapshot, can hold a negative one
            raise DiscoveryError(f"nvmlSystemGetCudaDriverVersion reported version {driver.cuda}")
        gpus = []
        lost = []
        for index in range(count):
            self._bus_id = ""
            try:
                gpu = self._gpu(index)
                if gpu is not None:
                    gpus.append(gpu)
            except self._error_type as err:
                if error_code(err) in _LOST_CODES:
                    # one GPU off the bus must not blind gfd to the others
                    reason = f"NVML error on GPU {index} in {self._current}: {err}"
                    _log().warning("gpu lost", index=index, error=reason)
                    lost.append(LostGpu(index=index, pci_bus_id=self._bus_id, reason=reason))
                    continue
                raise DiscoveryError(
                    f"NVML error on GPU {index} in {self._current}: {err}"
                ) from None
            except DiscoveryError as err:
                raise DiscoveryError(f"GPU {index}: {err}") from None
        return NvmlReading(driver, tuple(gpus), tuple(lost), count)

    # ------------------------------------------------------------------ one GPU

    def _gpu(self, index: int) -> Gpu | None:
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        name = self._text("nvmlDeviceGetName", handle)
        if is_skipped_device(name):
            # like go-nvlib's VisitDevices: a DGX Station's display adapter is not a GPU
            _log().debug("skipping display device", index=index, name=name)
            return None
        uuid_text = self._text("nvmlDeviceGetUUID", handle)
        pci = self._call("nvmlDeviceGetPciInfo", handle)
        self._bus_id = normalize_bus_id(read_text(lambda: pci.busId))
        total_bytes = self._total_memory(handle)
        major, minor = (
            int(part) for part in self._call("nvmlDeviceGetCudaComputeCapability", handle)
        )
        if min(major, minor) < -1:  # C ints: a part below 0 is unknown, which is -1
            _log().warning("gpu compute capability unknown", gpu=index, answer=f"{major}.{minor}")
            major, minor = max(major, -1), max(minor, -1)
        return Gpu(
            index=index,
            uuid=uuid_text,
            name=name,
            pci_bus_id=self._bus_id,
            memory_mib=None if total_bytes is None else total_bytes // (1 << 20),
            compute_capability=ComputeCapability(major=major, minor=minor),
            mig=self._mig(handle, total_bytes),
            fabric=self._fabric(handle),
        )

    def _total_memory(self, handle: Any) -> int | None:
        try:
            info = self._call("nvmlDeviceGetMemoryInfo", handle)
        except self._error_type as err:
            if error_code(err) in _FATAL_CODES:
                raise
            _log().warning("gpu memory unknown", call=self._current, error=str(err))
            return None
        return int(info.total)

    # ------------------------------------------------------------------ MIG

    def _mig(self, handle: Any, total_bytes: int | None) -> Mig | None:
        try:
            current, _pending = self._call("nvmlDeviceGetMigMode", handle)
        except self._error_type as err:
            if error_code(err) == ERROR_NOT_SUPPORTED:
                return None
            raise
        if int(current) != DEVICE_MIG_ENABLE:
            # A MIG-capable GPU with MIG off has no MIG devices: no need to walk the slots.
            return Mig(enabled=False)
        slot_count = int(self._call("nvmlDeviceGetMaxMigDeviceCount", handle))
        profiles = _ProfileIds(self, handle)
        devices = []
        for slot in range(slot_count):
            try:
                mig_handle = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            except self._error_type as err:
                if error_code(err) in (ERROR_NOT_FOUND, ERROR_INVALID_ARGUMENT):
                    continue
                raise
            if total_bytes is None:
                raise DiscoveryError(
                    "MIG profile names need the GPU's total memory, "
                    "and nvmlDeviceGetMemoryInfo failed"
                )
            devices.append(self._mig_device(mig_handle, profiles, total_bytes))
        return Mig(enabled=True, devices=tuple(devices))

    def _mig_device(self, mig_handle: Any, profiles: _ProfileIds, total_bytes: int) -> MigDevice:
        attributes = self._call("nvmlDeviceGetAttributes", mig_handle)
        gi_slices = int(attributes.gpuInstanceSliceCount)
        ci_slices = int(attributes.computeInstanceSliceCount)
        memory_mib = int(attributes.memorySizeMB)
        gi_id = int(self._call("nvmlDeviceGetGpuInstanceId", mig_handle))
        enum = profiles.enum_for_instance(gi_id, gi_slices)
        try:
            profile = mig_profile.profile_name(enum, ci_slices, memory_mib, total_bytes)
        except ValueError as exc:
            raise DiscoveryError(f"MIG device of GPU instance {gi_id}: {exc}") from None
        return MigDevice(
            profile=profile,
            memory_mib=memory_mib,
            multiprocessors=int(attributes.multiprocessorCount),
            slices=MigSlices(gi=gi_slices, ci=ci_slices),
            engines=MigEngines(
                copy=int(attributes.sharedCopyEngineCount),
                decoder=int(attributes.sharedDecoderCount),
                encoder=int(attributes.sharedEncoderCount),
                jpeg=int(attributes.sharedJpegCount),
                ofa=int(attributes.sharedOfaCount),
            ),
        )

    def gpu_instance_profile_id(self, handle: Any, gi_id: int) -> int:
        instance = self._call("nvmlDeviceGetGpuInstanceById", handle, gi_id)
        return int(self._call("nvmlGpuInstanceGetInfo", instance).profileId)

    def profile_id_of_enum(self, handle: Any, enum: int) -> int | None:
        """The profile id NVML gives profile ``enum`` on this GPU; None where unsupported."""
        try:
            if self._profile_info_version is None:
                info = self._call("nvmlDeviceGetGpuInstanceProfileInfo", handle, enum)
            else:
                info = self._call(
                    "nvmlDeviceGetGpuInstanceProfileInfo", handle, enum, self._profile_info_version
                )
        except self._error_type as err:
            code = error_code(err)
            if code == ERROR_FUNCTION_NOT_FOUND and self._profile_info_version is None:
                # A driver without the versioned (...InfoV) entry point: use v1.
                self._profile_info_version = 1
                return self.profile_id_of_enum(handle, enum)
            if code in (ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT):
                return None
            raise
        return int(info.id)

    # ------------------------------------------------------------------ fabric

    def _fabric(self, handle: Any) -> Fabric | None:
        """SPEC §5.6: attached iff COMPLETED, status SUCCESS and a non-zero cluster UUID."""
        for call, struct in (
            ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
            ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
        ):
            struct_type = getattr(self._nvml, struct, None)
            if struct_type is None or getattr(self._nvml, call, None) is None:
                continue  # bindings too old for this entry point
            info = struct_type()
            try:
                self._call(call, handle, ctypes.byref(info))
            except self._error_type as err:
                code = error_code(err)
                if code == ERROR_FUNCTION_NOT_FOUND:
                    continue  # driver too old for this entry point
                if code == ERROR_NOT_SUPPORTED:
                    return None
                raise
            return fabric_from_info(info)
        return None


def _raw_field(info: Any, name: str) -> bytes:
    # Read the bytes behind the field: some bindings declare clusterUuid as c_char[16],
    # which ctypes would cut at the first NUL and decode.
    field = getattr(type(info), name)
    return ctypes.string_at(ctypes.addressof(info) + field.offset, field.size)


def fabric_from_info(info: Any) -> Fabric | None:
    cluster = _raw_field(info, "clusterUuid")
    if int(info.state) != GPU_FABRIC_STATE_COMPLETED or int(info.status) != SUCCESS:
        return None
    if not any(cluster):
        return None

    return Fabric(cluster_uuid=str(uuid.UUID(bytes=cluster[:16])), clique_id=int(info.cliqueId))


class _ProfileIds:
    """GPU-instance profile lookups for one parent GPU, each NVML answer asked once.

    A MIG device names its GPU instance; the instance's info gives a profile *id*; the
    profile *enum* (what the name's suffix depends on) is the one whose profile info on the
    parent carries that id — go-nvlib walks every enum for every device, we ask only until
    the id is found and remember the answers.
    """

    def __init__(self, reader: _NvmlReader, handle: Any) -> None:
        self._reader = reader
        self._handle = handle
        self._instance_profile: dict[int, int] = {}  # GPU instance id -> profile id
        self._enum_id: dict[int, int | None] = {}  # profile enum -> profile id (None: n/a)

    def enum_for_instance(self, gi_id: int, gi_slices: int) -> int:
        profile_id = self._instance_profile.get(gi_id)
        if profile_id is None:
            profile_id = self._reader.gpu_instance_profile_id(self._handle, gi_id)
            self._instance_profile[gi_id] = profile_id
        for enum, known in self._enum_id.items():
            if known == profile_id:
                return enum

        for enum in mig_profile.candidate_enums(gi_slices):
            if enum in self._enum_id:
                continue
            found = self._reader.profile_id_of_enum(self._handle, enum)
            self._enum_id[enum] = found
            if found == profile_id:
                return enum
        raise DiscoveryError(f"GPU instance {gi_id}: no GPU instance profile has id {profile_id}")
