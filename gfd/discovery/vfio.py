"""The vfio strategy: GPUs bound to ``vfio-pci`` for pass-through (KubeVirt), from PCI sysfs.

Upstream's vfio resource manager (internal/resource/sysfs-lib.go, sysfs-device.go, over
go-nvlib's nvpci) loads no driver library at all.  It lists the NVIDIA GPUs on the PCI bus
(display or 3D controllers that are not SR-IOV virtual functions, in bus order), keeps
those whose driver is ``vfio-pci`` and reports for each: the device name from the PCI ID
database, the PCI class, a memory figure from the BARs, compute capability -1.-1, no MIG,
not fabric-attached.  The driver version is ``unknown.unknown.unknown`` and the CUDA
version 0.0 (sysfs-lib.go GetDriverVersion, GetCudaDriverVersion).
"""

from __future__ import annotations

import os
from typing import Any

from gfd.discovery import sysfs
from gfd.errors import DiscoveryError
from gfd.files import UnreadableFileError, read_regular
from gfd.observability import get_logger
from gfd.snapshot import MAX_GPUS, ComputeCapability, Driver, Gpu

VFIO_DRIVER = "vfio-pci"
UNKNOWN_DRIVER_VERSION = "unknown.unknown.unknown"
#: what go-nvlib names a device the PCI ID database does not know (nvpci.UnknownDeviceString)
UNKNOWN_DEVICE = "UNKNOWN_DEVICE"
#: upstream's compute capability for a GPU no driver speaks for (sysfs-device.go)
UNKNOWN_CAPABILITY = ComputeCapability(-1, -1)
#: where the PCI ID database is looked for, in go-nvlib's order (pkg/pciids)
PCI_IDS_PATHS = (
    "/usr/share/misc/pci.ids",
    "/usr/local/share/pci.ids",
    "/usr/share/hwdata/pci.ids",
    "/usr/share/pci.ids",
)
#: the most bytes read of a pci.ids file (today's is about 1.5 MB)
MAX_PCI_IDS_BYTES = 16 * 2**20
#: BARs counted (PCI_IOV_NUM_BAR) and the resource flag bits of a 64-bit memory BAR
_NUM_BARS = 6
_MEM_TYPE_MASK = 0x06
_MEM_TYPE_64 = 0x04
#: the most bytes read of a ``resource`` file (one short line per region)
_RESOURCE_FILE_BYTES = 64 * 1024


def _log() -> Any:
    return get_logger(component="discovery")


def _address_order(address: str) -> int:
    """go-nvlib sorts functions by their address read as one hex number."""
    try:
        return int(address.replace(":", "").replace(".", ""), 16)
    except ValueError:
        return -1


def nvidia_device_names(paths: tuple[str, ...] = PCI_IDS_PATHS) -> dict[int, str]:
    """NVIDIA's device ids and names from the first PCI ID database found (empty if none)."""
    for path in paths:
        data = _read_regular_file(path, MAX_PCI_IDS_BYTES)
        if data is not None:
            return _nvidia_section(data.decode("utf-8", errors="replace"))
    return {}


def _read_regular_file(path: str, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a regular file; None when missing, unreadable or not a
    regular file (a FIFO put in its place is never waited on: gfd/files.py)."""
    try:
        return read_regular(path, limit, cut=True)
    except UnreadableFileError:
        return None


def _nvidia_section(text: str) -> dict[int, str]:
    """pci.ids: a vendor line ``10de  NVIDIA Corporation``, then one tab-indented line per
    device (``\\t20b0  GA100 [A100 SXM4 40GB]``); subsystem lines have two tabs."""
    names: dict[int, str] = {}
    inside = False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if not line.startswith("\t"):
            if inside:
                break
            inside = line[:4].lower() == "10de"
            continue
        if inside and not line.startswith("\t\t"):
            number, _, name = line[1:].partition(" ")
            try:
                names.setdefault(int(number, 16), name.strip())
            except ValueError:
                continue
    return names


def bar_memory_bytes(resource_text: str) -> int:
    """go-nvlib's GetTotalAddressableMemory(roundUp=true), its 64-bit half: the sizes of
    the 64-bit memory BARs among the first six regions, summed and rounded up to a power
    of two (0 stays 0)."""
    regions = []
    for number, line in enumerate(resource_text.strip().splitlines()):
        fields = line.split()
        if len(fields) != 3:
            raise ValueError(f"line {number + 1} does not hold three numbers")
        start, end, flags = (int(value, 0) for value in fields)
        if end - start != 0:
            regions.append((number, start, end, flags))
    total = 0
    for counted, (number, start, end, flags) in enumerate(regions):
        if number >= _NUM_BARS or counted == _NUM_BARS:
            break
        if flags & _MEM_TYPE_MASK == _MEM_TYPE_64:
            total += end - start + 1
    return 0 if total == 0 else 1 << (total - 1).bit_length()


def read(sysfs_root: str) -> tuple[Driver, tuple[Gpu, ...]]:
    """The vfio-bound NVIDIA GPUs of this node; DiscoveryError when the bus cannot be read."""
    root = os.path.join(sysfs_root, sysfs.PCI_DEVICES)
    try:
        addresses = sorted(os.listdir(root), key=_address_order)
    except OSError as exc:
        raise DiscoveryError(f"cannot list PCI devices in {root}: {exc.strerror or exc}") from None
    names: dict[int, str] | None = None
    gpus: list[Gpu] = []
    for address in addresses:
        directory = os.path.join(root, address)
        pci_class = sysfs.gpu_class(directory)
        if pci_class is None:
            continue
        if sysfs.is_virtual_function(directory):
            continue  # go-nvlib's GetGPUs leaves SR-IOV virtual functions out
        driver = sysfs.bound_driver(directory) or ""
        if driver != VFIO_DRIVER:
            _log().info("device not bound to vfio-pci; skipped", device=address, driver=driver)
            continue
        if len(gpus) >= MAX_GPUS:
            raise DiscoveryError(f"more than {MAX_GPUS} GPUs bound to vfio-pci")
        device_text = sysfs.read_attribute(os.path.join(directory, "device")) or ""
        resource_path = os.path.join(directory, "resource")
        resource_text = sysfs.read_attribute(resource_path, _RESOURCE_FILE_BYTES)
        if resource_text is None:
            raise DiscoveryError(f"PCI device {address}: cannot read {resource_path}")
        try:
            device_id = int(device_text, 16)
            memory = bar_memory_bytes(resource_text)
        except ValueError as exc:
            raise DiscoveryError(
                f"PCI device {address}: unreadable device or resource: {exc}"
            ) from None
        if names is None:
            names = nvidia_device_names(PCI_IDS_PATHS)
        gpus.append(
            Gpu(
                index=len(gpus),
                uuid="",
                name=names.get(device_id, UNKNOWN_DEVICE),
                pci_bus_id=address,
                pci_class=pci_class,
                # upstream reports this byte count where MiB belong (sysfs-device.go,
                # GetTotalMemoryMiB); gfd keeps the unit the label promises
                memory_mib=memory // 2**20,
                compute_capability=UNKNOWN_CAPABILITY,
            )
        )
    return Driver(version=UNKNOWN_DRIVER_VERSION, cuda=0), tuple(gpus)
