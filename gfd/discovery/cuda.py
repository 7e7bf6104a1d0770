"""The tegra strategy: integrated GPUs (Jetson, IGX) through the CUDA driver library.

Upstream's CUDA resource manager (internal/resource/cuda-lib.go, cuda-device.go, over
internal/cuda/api.go) loads ``libcuda.so.1`` and asks it for the driver's CUDA version and,
per device, its name, total memory and compute capability.  Everything else is fixed:
driver version ``unknown.unknown.unknown`` (cuda-lib.go GetDriverVersion), no UUID, no MIG,
PCI class 0 (so ``gpu.mode`` is ``unknown``), not fabric-attached.

Everything here calls the library through one object, ``lib``: a ``ctypes.CDLL`` in
production, or any stand-in with the same call surface in tests (functions taking the
same ctypes arguments -- ``byref`` pointers, ``c_int``, a string buffer -- and returning a
``CUresult`` int), so this module runs unchanged against a fake.
"""

from __future__ import annotations

import ctypes
from typing import Any

from gfd.discovery.driver_root import load_shared, resolve_library
from gfd.echo import clip_path
from gfd.errors import DiscoveryError, NvmlUnavailableError
from gfd.files import UnreadableFileError
from gfd.snapshot import MAX_GPUS, ComputeCapability, Driver, Gpu

LIBRARY = "libcuda.so.1"
SUCCESS = 0
#: CUdevice_attribute values (cuda.h; upstream internal/cuda/consts.go)
ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
#: the name buffer upstream passes to cuDeviceGetName (internal/cuda/api.go)
NAME_BYTES = 96
#: what upstream reports as the driver version on Tegra (cuda-lib.go GetDriverVersion)
UNKNOWN_DRIVER_VERSION = "unknown.unknown.unknown"

_RESULT_NAMES = {
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    304: "CUDA_ERROR_OPERATING_SYSTEM",
    999: "CUDA_ERROR_UNKNOWN",
}

UNAVAILABLE_HINT = (
    "check that the NVIDIA driver (JetPack/L4T) is installed on the host and that the "
    "container sees libcuda.so.1 (the NVIDIA container runtime, or --driver-root-ctr-path)"
)


def result_name(code: int) -> str:
    return _RESULT_NAMES.get(code, f"CUresult {code}")


def load_library(driver_root: str) -> Any:
    """``libcuda.so.1``, from the driver root when it is there, else by name."""
    path = resolve_library(driver_root, LIBRARY)
    try:
        return load_shared(path, ctypes.RTLD_GLOBAL)
    except UnreadableFileError as exc:
        raise NvmlUnavailableError(
            f"CUDA is unavailable: {LIBRARY} under --driver-root-ctr-path "
            f"({clip_path(path)}) is not loaded: {exc.reason}; {UNAVAILABLE_HINT}"
        ) from None
    except OSError as exc:
        raise NvmlUnavailableError(
            f"CUDA is unavailable: {path} could not be loaded ({exc}); {UNAVAILABLE_HINT}"
        ) from None


def _call(lib: Any, function: str, *args: Any) -> int:
    try:
        result = getattr(lib, function)(*args)
    except AttributeError:
        raise DiscoveryError(f"the CUDA library has no function {function}") from None
    return int(result)


def _check(lib: Any, function: str, *args: Any, device: int | None = None) -> None:
    result = _call(lib, function, *args)
    if result != SUCCESS:
        where = "" if device is None else f"CUDA device {device}: "
        raise DiscoveryError(f"{where}{function} failed: {result_name(result)}")


def runtime_version(version: int) -> int:
    """The driver's CUDA version as upstream's CUDA manager reads it (cuda-lib.go:
    major = v / 1000, minor = v % 100 / 10), in the snapshot's ``1000*major + 10*minor``
    form, so the labels come out as upstream's whatever the raw number."""
    return (version // 1000) * 1000 + ((version % 100) // 10) * 10


def read(lib: Any) -> tuple[Driver, tuple[Gpu, ...]]:
    """The driver and the GPUs the CUDA library reports.

    ``cuInit`` failing is :class:`NvmlUnavailableError` (the driver cannot be used at all:
    upstream's manager Init fails); any later failure is :class:`DiscoveryError`.  A
    device whose memory cannot be read is kept with its memory unknown, as upstream
    ignores that error (internal/lm/resource.go, NewGPUResourceLabeler)."""
    result = _call(lib, "cuInit", ctypes.c_uint(0))
    if result != SUCCESS:
        raise NvmlUnavailableError(
            f"CUDA is unavailable: cuInit failed: {result_name(result)}; {UNAVAILABLE_HINT}"
        )
    version = ctypes.c_int(0)
    _check(lib, "cuDriverGetVersion", ctypes.byref(version))
    if version.value < 0:  # no label, nor a snapshot, can hold it
        raise DiscoveryError(f"cuDriverGetVersion reported version {version.value}")
    count = ctypes.c_int(0)
    _check(lib, "cuDeviceGetCount", ctypes.byref(count))
    if not 0 <= count.value <= MAX_GPUS:
        raise DiscoveryError(f"cuDeviceGetCount reported {count.value} devices")
    gpus = []
    for index in range(count.value):
        handle = ctypes.c_int(0)
        _check(lib, "cuDeviceGet", ctypes.byref(handle), ctypes.c_int(index), device=index)
        name = ctypes.create_string_buffer(NAME_BYTES)
        _check(lib, "cuDeviceGetName", name, ctypes.c_int(NAME_BYTES), handle, device=index)
        capability = []
        for attribute in (ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ATTRIBUTE_COMPUTE_CAPABILITY_MINOR):
            value = ctypes.c_int(0)
            _check(
                lib,
                "cuDeviceGetAttribute",
                ctypes.byref(value),
                ctypes.c_int(attribute),
                handle,
                device=index,
            )
            capability.append(max(value.value, -1))  # below 0: unknown, as from NVML
        total = ctypes.c_size_t(0)
        # the _v2 entry point takes a size_t (cuda.h maps cuDeviceTotalMem to it)
        memory_ok = _call(lib, "cuDeviceTotalMem_v2", ctypes.byref(total), handle) == SUCCESS
        gpus.append(
            Gpu(
                index=index,
                uuid="",
                name=name.value.decode("utf-8", errors="replace"),
                memory_mib=(total.value // 2**20) if memory_ok else None,
                compute_capability=ComputeCapability(capability[0], capability[1]),
            )
        )
    driver = Driver(version=UNKNOWN_DRIVER_VERSION, cuda=runtime_version(version.value))
    return driver, tuple(gpus)
