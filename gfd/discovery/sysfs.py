"""The sysfs half of discovery: PCI class per GPU, the vGPU capability scan, the machine type.

Every path is under ``sysfs_root`` (``/sys`` in production, ``GFD_SYSFS_ROOT`` in tests)
except the machine-type file, whose full path is a setting of its own.

The vGPU scan follows upstream GFD (k8s-device-plugin ``internal/vgpu``), with bounds
checks where upstream would index past the end of the buffer or loop forever:

- each ``<root>/bus/pci/devices/*`` whose ``vendor`` is ``0x10de`` has its ``config`` read;
  all 256 bytes are needed — an unprivileged read returns only the 64-byte header, and
  then the scan gives up (``None``) with a warning to run privileged, rather than guess;
- with the capability-list bit (0x10) of the status byte (0x06) set, the list is walked
  from offset 0x34 (id at +0, next at +1, length at +2), stopping on a loop, on id 0xff
  or on a pointer past the end, to the vendor-specific capability (id 0x09);
- that capability marks a vGPU when its bytes 3 and 4 are ``V`` ``F``; its records start
  at offset 5 (byte 0 record id, byte 1 record length) and record 0 carries 10 bytes of
  host driver version then 10 bytes of branch, NUL-trimmed.
"""

from __future__ import annotations

import os
from typing import Any

from gfd.echo import clip, clip_path
from gfd.files import UnreadableFileError, read_regular
from gfd.observability import get_logger
from gfd.snapshot import MAX_STRING_CHARS, Vgpu, VgpuDevice

PCI_DEVICES = os.path.join("bus", "pci", "devices")
NVIDIA_VENDOR_ID = "0x10de"
NVIDIA_DRIVER = "nvidia"
CONFIG_SPACE_SIZE = 256

PCI_STATUS_BYTE = 0x06
PCI_STATUS_CAPABILITY_LIST = 0x10
PCI_CAPABILITY_LIST = 0x34
PCI_CAPABILITY_VENDOR_SPECIFIC = 0x09
PCI_CAPABILITY_END = 0xFF

VGPU_SIGNATURE = b"VF"
VGPU_RECORD_START = 5
VGPU_HOST_DRIVER_RECORD = 0
HOST_DRIVER_VERSION_LENGTH = 10
HOST_DRIVER_BRANCH_LENGTH = 10
#: a sysfs attribute is at most a page
ATTRIBUTE_MAX_BYTES = 4096
#: DMI's product_name is a short line; more than this is not a machine type
MACHINE_TYPE_MAX_BYTES = 4096


def _log() -> Any:
    # Looked up per message: a logger bound at import would miss configure_logging().
    return get_logger(component="discovery")


_warned: set[str] = set()


def _warn_once(event: str, **context: Any) -> None:
    """The same host problem is reported once per process, not on every pass."""
    key = event + repr(sorted(context.items()))
    if key in _warned:
        _log().debug(event, **context)
        return
    _warned.add(key)
    _log().warning(event, **context)


class ConfigSpaceTooShortError(Exception):
    """``config`` gave fewer than 256 bytes: the pod is not privileged."""

    def __init__(self, address: str, length: int) -> None:
        super().__init__(
            f"PCI device {address}: read only {length} of {CONFIG_SPACE_SIZE} bytes of its "
            f"configuration space; run gfd privileged for vGPU detection"
        )


# ------------------------------------------------------------------------ PCI class


def device_path(sysfs_root: str, bus_id: str, *rest: str) -> str | None:
    """``<root>/bus/pci/devices/<bus id>/<rest>``; None for a bus id that is not one entry
    of that directory (empty, holding ``/``, ``.`` or ``..``): a bus id is what NVML
    answers, and it never leads a read out of the devices directory."""
    if not bus_id or "/" in bus_id or bus_id in (".", ".."):
        return None
    return os.path.join(sysfs_root, PCI_DEVICES, bus_id, *rest)


def read_pci_class(sysfs_root: str, bus_id: str) -> int | None:
    """``<root>/bus/pci/devices/<bus id>/class`` as an int (e.g. 0x030200); None if unknown."""
    path = device_path(sysfs_root, bus_id, "class")
    if path is None:
        return None
    try:
        return int(read_regular(path, ATTRIBUTE_MAX_BYTES).decode("ascii").strip(), 16)
    except UnreadableFileError as exc:
        _warn_once("pci class unknown", path=clip_path(path), error=exc.reason)
    except (UnicodeDecodeError, ValueError):
        _warn_once("pci class unknown", path=clip_path(path), error="not a hexadecimal number")
    return None


# ------------------------------------------------------------------------ GPUs on the bus

#: PCI base class and subclass of display (VGA, 0x0300) and 3D (0x0302) controllers: every
#: NVIDIA GPU is one of them (NVSwitches, bridges and audio functions are not)
GPU_PCI_CLASSES = (0x0300, 0x0302)


def nvidia_gpu_functions(sysfs_root: str) -> tuple[str, ...] | None:
    """Bus ids of the NVIDIA display/3D functions on the PCI bus, sorted; None when the
    bus cannot be listed (then nobody can say whether a GPU is missing)."""
    root = os.path.join(sysfs_root, PCI_DEVICES)
    try:
        addresses = sorted(os.listdir(root))
    except OSError:
        return None
    found = []
    for address in addresses:
        directory = os.path.join(root, address)
        if gpu_class(directory) is not None and _could_be_nvml_gpu(directory):
            found.append(address)
    return tuple(found)


def gpu_class(directory: str) -> int | None:
    """The PCI class of the function at ``directory`` (a ``bus/pci/devices`` entry) when it
    is an NVIDIA display or 3D controller; None for anything else, and for a function gone
    or unreadable (not evidence of a GPU)."""
    vendor = read_attribute(os.path.join(directory, "vendor"))
    if vendor is None or vendor.lower() != NVIDIA_VENDOR_ID:
        return None
    try:
        pci_class = int(read_attribute(os.path.join(directory, "class")) or "", 16)
    except ValueError:
        return None
    return pci_class if pci_class >> 8 in GPU_PCI_CLASSES else None


def is_virtual_function(directory: str) -> bool:
    """An SR-IOV virtual function (it has a ``physfn`` link)."""
    return os.path.lexists(os.path.join(directory, "physfn"))


def bound_driver(directory: str) -> str | None:
    """The name of the driver the function is bound to; None when unbound (or unreadable)."""
    try:
        return os.path.basename(os.readlink(os.path.join(directory, "driver")))
    except OSError:
        return None


def _could_be_nvml_gpu(directory: str) -> bool:
    """False for functions NVML never lists, so their absence from NVML is no loss: SR-IOV
    virtual functions (``physfn``: a vGPU host's VFs) and GPUs bound to another driver
    (``vfio-pci`` for passthrough to a VM, ``nouveau``, ``pci-stub``).  Unbound functions
    count: the driver may have failed to probe a GPU that fell off."""
    if is_virtual_function(directory):
        return False
    driver = bound_driver(directory)
    return driver is None or driver == NVIDIA_DRIVER


def read_attribute(path: str, limit: int = ATTRIBUTE_MAX_BYTES) -> str | None:
    """A small sysfs attribute, stripped; None when missing, not a regular file (a FIFO
    is never waited on), unreadable, larger than ``limit`` bytes or not text."""
    try:
        return read_regular(path, limit).decode("ascii").strip()
    except (UnreadableFileError, UnicodeDecodeError):
        return None


# ------------------------------------------------------------------------ machine type


def read_machine_type(path: str) -> str | None:
    """The machine-type file, read and stripped; None for an empty path or an unreadable file.

    An empty (or all-whitespace) file gives ``""``, not None: upstream GFD labels that node
    ``gpu.machine=`` (empty), while an unreadable file gives ``unknown``; the snapshot keeps
    the two apart so the labels can match upstream in both cases.
    """
    if not path:
        return None
    shown = clip_path(path)
    try:
        data = read_regular(path, MACHINE_TYPE_MAX_BYTES)
    except UnreadableFileError as exc:
        _warn_once("machine type unknown", path=shown, error=exc.reason)
        return None
    text = data.decode("utf-8", errors="replace").strip()
    if len(text) > MAX_STRING_CHARS:
        _warn_once(
            "machine type unknown",
            path=shown,
            error=f"longer than the limit of {MAX_STRING_CHARS} characters",
        )
        return None
    return text


# ------------------------------------------------------------------------ vGPU


def vendor_capability(config: bytes, address: str = "") -> bytes | None:
    """The vendor-specific capability in a PCI config space, or None when there is none.

    Raises :class:`ConfigSpaceTooShortError` for fewer than 256 bytes.
    """
    if len(config) < CONFIG_SPACE_SIZE:
        raise ConfigSpaceTooShortError(address, len(config))
    if not config[PCI_STATUS_BYTE] & PCI_STATUS_CAPABILITY_LIST:
        return None
    visited: set[int] = set()
    position = config[PCI_CAPABILITY_LIST]
    while position != 0:
        if position in visited or position + 2 >= len(config):
            return None  # the chain loops, or points past the end
        capability_id = config[position]
        if capability_id == PCI_CAPABILITY_END:
            return None
        if capability_id == PCI_CAPABILITY_VENDOR_SPECIFIC:
            length = config[position + 2]
            return config[position : position + length]
        visited.add(position)
        position = config[position + 1]
    return None


def is_vgpu_capability(capability: bytes) -> bool:
    return len(capability) >= 5 and capability[3:5] == VGPU_SIGNATURE


def host_driver_info(capability: bytes) -> VgpuDevice | None:
    """The host driver record of a vGPU capability; None when it cannot be found."""
    position = VGPU_RECORD_START
    if position >= len(capability):
        return None
    record = capability[position]
    while record != VGPU_HOST_DRIVER_RECORD:
        if position + 1 >= len(capability):
            return None
        length = capability[position + 1]
        if length == 0:
            return None  # a record that does not advance would loop forever
        position += length
        if position >= len(capability):
            return None
        record = capability[position]
    start = position + 2
    end = start + HOST_DRIVER_VERSION_LENGTH + HOST_DRIVER_BRANCH_LENGTH
    if end > len(capability):
        return None
    version = capability[start : start + HOST_DRIVER_VERSION_LENGTH]
    branch = capability[start + HOST_DRIVER_VERSION_LENGTH : end]
    # Upstream turns each byte into one character (Latin-1) and trims NULs at both ends.
    return VgpuDevice(
        host_driver_version=version.strip(b"\0").decode("latin-1"),
        host_driver_branch=branch.strip(b"\0").decode("latin-1"),
    )


def scan_vgpu(sysfs_root: str) -> Vgpu | None:
    """Every NVIDIA PCI function carrying the vGPU capability, in bus-id order.

    None when the scan cannot be trusted (PCI devices unreadable, a short config read, a
    vGPU capability without a host-driver record): then no ``vgpu.*`` labels at all.
    """
    root = os.path.join(sysfs_root, PCI_DEVICES)
    try:
        addresses = sorted(os.listdir(root))
    except OSError as exc:
        _warn_once(
            "vgpu scan failed: cannot list PCI devices",
            path=clip_path(root),
            error=exc.strerror or type(exc).__name__,
        )
        return None
    devices: list[VgpuDevice] = []
    for address in addresses:
        device_dir = os.path.join(root, address)
        try:
            vendor = read_regular(os.path.join(device_dir, "vendor"), ATTRIBUTE_MAX_BYTES)
            if vendor.decode("ascii").strip().lower() != NVIDIA_VENDOR_ID:
                continue
            # the standard header and capabilities; the extended space past it is not used
            config = read_regular(os.path.join(device_dir, "config"), CONFIG_SPACE_SIZE, cut=True)
        except UnreadableFileError as exc:
            if exc.missing:
                continue  # the device went away between the listing and the read
            _warn_once(
                "vgpu scan failed: cannot read PCI device", device=clip(address), error=exc.reason
            )
            return None
        except UnicodeDecodeError:
            _warn_once(
                "vgpu scan failed: cannot read PCI device", device=clip(address), error="not text"
            )
            return None
        try:
            capability = vendor_capability(config, address)
        except ConfigSpaceTooShortError as exc:
            _warn_once("vgpu scan skipped: run privileged for vGPU detection", reason=str(exc))
            return None
        if capability is None or not is_vgpu_capability(capability):
            continue
        info = host_driver_info(capability)
        if info is None:
            _warn_once(
                "vgpu scan failed: no host driver record in the vGPU capability", device=address
            )
            return None
        devices.append(info)
    return Vgpu(devices=tuple(devices))
