"""A fake of the CUDA driver library at its call surface, as ``gfd.discovery.cuda`` calls it.

``FakeCuda(devices, driver_version=...)`` stands where ``ctypes.CDLL("libcuda.so.1")``
would: the same function names, called with the same ctypes arguments (``byref`` pointers
it writes through, ``c_int`` values, a string buffer and its length), returning a
``CUresult`` int.  ``fail[function] = code`` makes a function return that code; ``calls``
records every call by name.  ``from_snapshot`` builds the library a tegra snapshot implies."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from gfd.snapshot import Snapshot

from .fake_nvml import UnrealizableSnapshot

SUCCESS = 0
ERROR_INVALID_VALUE = 1
ERROR_NOT_INITIALIZED = 3
ERROR_NO_DEVICE = 100
ERROR_INVALID_DEVICE = 101
ERROR_UNKNOWN = 999
ATTRIBUTE_MAJOR = 75
ATTRIBUTE_MINOR = 76


@dataclass
class CudaDevice:
    name: str
    total_memory_bytes: int
    major: int
    minor: int


def _target(pointer: Any) -> Any:
    """What a ``ctypes.byref`` argument points at (the fake writes through it)."""
    return pointer._obj


@dataclass
class FakeCuda:
    devices: list[CudaDevice] = field(default_factory=list)
    driver_version: int = 12020
    fail: dict[str, int] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    initialised: bool = False

    def _enter(self, name: str, needs_init: bool = True) -> int:
        self.calls.append(name)
        if name in self.fail:
            return self.fail[name]
        if needs_init and not self.initialised:
            return ERROR_NOT_INITIALIZED
        return SUCCESS

    def _device(self, handle: Any) -> CudaDevice | None:
        number = handle.value
        return self.devices[number] if 0 <= number < len(self.devices) else None

    def cuInit(self, flags: ctypes.c_uint) -> int:
        if flags.value != 0:
            return ERROR_INVALID_VALUE
        result = self._enter("cuInit", needs_init=False)
        if result == SUCCESS:
            self.initialised = True
        return result

    def cuDriverGetVersion(self, version: Any) -> int:
        result = self._enter("cuDriverGetVersion", needs_init=False)
        if result == SUCCESS:
            _target(version).value = self.driver_version
        return result

    def cuDeviceGetCount(self, count: Any) -> int:
        result = self._enter("cuDeviceGetCount")
        if result == SUCCESS:
            _target(count).value = len(self.devices)
        return result

    def cuDeviceGet(self, handle: Any, ordinal: ctypes.c_int) -> int:
        result = self._enter("cuDeviceGet")
        if result != SUCCESS:
            return result
        if not 0 <= ordinal.value < len(self.devices):
            return ERROR_INVALID_DEVICE
        _target(handle).value = ordinal.value
        return SUCCESS

    def cuDeviceGetName(self, buffer: Any, length: ctypes.c_int, handle: ctypes.c_int) -> int:
        result = self._enter("cuDeviceGetName")
        device = self._device(handle)
        if result != SUCCESS or device is None:
            return result or ERROR_INVALID_DEVICE
        buffer.value = device.name.encode()[: length.value - 1]
        return SUCCESS

    def cuDeviceGetAttribute(
        self, value: Any, attribute: ctypes.c_int, handle: ctypes.c_int
    ) -> int:
        result = self._enter("cuDeviceGetAttribute")
        device = self._device(handle)
        if result != SUCCESS or device is None:
            return result or ERROR_INVALID_DEVICE
        if attribute.value == ATTRIBUTE_MAJOR:
            _target(value).value = device.major
        elif attribute.value == ATTRIBUTE_MINOR:
            _target(value).value = device.minor
        else:
            return ERROR_INVALID_VALUE
        return SUCCESS

    def cuDeviceTotalMem_v2(self, total: Any, handle: ctypes.c_int) -> int:
        result = self._enter("cuDeviceTotalMem_v2")
        device = self._device(handle)
        if result != SUCCESS or device is None:
            return result or ERROR_INVALID_DEVICE
        _target(total).value = device.total_memory_bytes
        return SUCCESS

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> FakeCuda:
        """The library a tegra snapshot's GPUs came from (its CUDA version, in the
        snapshot's 1000*major + 10*minor form, is what the library reports)."""
        if snapshot.driver is None:
            raise UnrealizableSnapshot("a tegra snapshot has a driver")
        devices = []
        for position, gpu in enumerate(snapshot.gpus):
            if gpu.index != position or gpu.uuid or gpu.pci_bus_id or gpu.pci_class is not None:
                raise UnrealizableSnapshot("CUDA devices have positions, no UUID, no PCI facts")
            if gpu.mig is not None or gpu.fabric is not None or gpu.memory_mib is None:
                raise UnrealizableSnapshot("CUDA devices report no MIG, no fabric, a memory")
            devices.append(
                CudaDevice(
                    gpu.name, gpu.memory_mib * 2**20, gpu.compute_capability.major,
                    gpu.compute_capability.minor,
                )
            )  # fmt: skip
        return cls(devices=devices, driver_version=snapshot.driver.cuda)
