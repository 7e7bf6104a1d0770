"""A fake sysfs tree (in a temporary directory) for the sysfs half of discovery.

``FakeSysfs(root)`` lays out ``<root>/bus/pci/devices/<address>/{vendor,class,config}``;
the helpers build PCI configuration spaces byte by byte — capability chains, the vGPU
vendor capability with its records — so the parser can be fed good and broken ones.
``build_from_snapshot`` writes the tree (and machine-type file) a snapshot implies."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gfd.snapshot import Snapshot

from .fake_nvml import UnrealizableSnapshot

CONFIG_SIZE = 256
STATUS = 0x06
CAPABILITY_LIST_BIT = 0x10
CAPABILITY_POINTER = 0x34
VENDOR_SPECIFIC = 0x09

MIB = 2**20
GIB = 2**30
#: ``resource`` flags of a 32-bit and a 64-bit prefetchable memory BAR (IORESOURCE_*)
MEM32 = 0x40200
MEM64 = 0x14220C
_SYSFS_BUS_ID = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def plain_config(size: int = CONFIG_SIZE) -> bytes:
    """A config space with NVIDIA's vendor id and no capability list."""
    config = bytearray(size)
    config[0:2] = b"\xde\x10"
    return bytes(config)


def capability(cap_id: int, body: bytes = b"") -> bytes:
    """A capability: id, next (filled in when laid out), then ``body``."""
    return bytes([cap_id, 0]) + body


def vendor_capability(payload: bytes) -> bytes:
    """The vendor-specific capability: id 0x09, next, length, then ``payload``."""
    return bytes([VENDOR_SPECIFIC, 0, 3 + len(payload)]) + payload


def vgpu_records(version: bytes, branch: bytes, before: Sequence[bytes] = ()) -> bytes:
    """The records of a vGPU capability: ``before`` records, then the host-driver record.

    Each ``before`` entry is a record body; it gets an id (1, 2, ...) and a length byte."""
    out = b""
    for number, body in enumerate(before, start=1):
        out += bytes([number, 2 + len(body)]) + body
    return out + bytes([0, 22]) + version.ljust(10, b"\0") + branch.ljust(10, b"\0")


def vgpu_capability(
    version: str = "460.16", branch: str = "r460_00", *, before: Sequence[bytes] = ()
) -> bytes:
    return vendor_capability(b"VF" + vgpu_records(version.encode(), branch.encode(), before))


def config_with_capabilities(
    capabilities: Sequence[bytes], *, start: int = 0x40, size: int = CONFIG_SIZE
) -> bytes:
    """A config space with ``capabilities`` chained in order from ``start`` (4-aligned)."""
    config = bytearray(plain_config(max(size, CONFIG_SIZE)))
    config[STATUS] |= CAPABILITY_LIST_BIT
    position = start
    positions = []
    for cap in capabilities:
        positions.append(position)
        config[position : position + len(cap)] = cap
        position = (position + len(cap) + 3) & ~3
    if position > CONFIG_SIZE:
        raise ValueError("capabilities do not fit in the config space")
    config[CAPABILITY_POINTER] = positions[0] if positions else 0
    for here, after in zip(positions, [*positions[1:], 0], strict=False):
        config[here + 1] = after
    return bytes(config[:size])


class FakeSysfs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices = root / "bus" / "pci" / "devices"
        self.devices.mkdir(parents=True, exist_ok=True)

    def add_device(
        self, address: str, *, vendor: str | None = "0x10de", pci_class: int | None = 0x030200,
        config: bytes | None = None,
    ) -> Path:  # fmt: skip
        """A PCI function; ``None`` for a file leaves it out (unreadable)."""
        directory = self.devices / address
        directory.mkdir(parents=True, exist_ok=True)
        if vendor is not None:
            (directory / "vendor").write_text(vendor + "\n")
        if pci_class is not None:
            (directory / "class").write_text(f"0x{pci_class:06x}\n")
        (directory / "config").write_bytes(plain_config() if config is None else config)
        return directory

    def add_passthrough_gpu(
        self, address: str, *, device_id: int = 0x20B0, pci_class: int = 0x030200,
        driver: str | None = "vfio-pci",
        bars: Sequence[tuple[int, int]] = ((16 * MIB, MEM32), (64 * GIB, MEM64), (32 * MIB, MEM64)),
        virtual_function_of: str | None = None,
    ) -> Path:  # fmt: skip
        """An NVIDIA GPU as go-nvlib's nvpci reads it for the vfio strategy: ``device``,
        the ``driver`` link (None: unbound), the ``resource`` table (one line per region:
        start, end, flags; ``bars`` gives each BAR's size and flags, laid out from a base
        address) and, for an SR-IOV virtual function, the ``physfn`` link."""
        directory = self.add_device(address, pci_class=pci_class)
        (directory / "device").write_text(f"0x{device_id:04x}\n")
        if driver is not None:
            target = self.root / "bus" / "pci" / "drivers" / driver
            target.mkdir(parents=True, exist_ok=True)
            (directory / "driver").symlink_to(target)
        lines = []
        start = 0x38000000000
        for size, flags in bars:
            end = start + size - 1 if size else start
            lines.append(f"0x{start:016x} 0x{end:016x} 0x{flags:016x}")
            start += max(size, 1 << 20)
        lines += ["0x0000000000000000 0x0000000000000000 0x0000000000000000"] * (13 - len(lines))
        (directory / "resource").write_text("\n".join(lines) + "\n")
        if virtual_function_of is not None:
            (directory / "physfn").symlink_to(self.devices / virtual_function_of)
        return directory

    def under_root(self, address: str, root: str) -> None:
        """Move the function below its PCIe root complex, as the kernel lays it out:
        ``devices/<root>/<address>``, with ``bus/pci/devices/<address>`` a link to it."""
        link = self.devices / address
        if link.is_symlink():
            return
        target = self.root / "devices" / root / address
        target.parent.mkdir(parents=True, exist_ok=True)
        link.rename(target)
        link.symlink_to(os.path.relpath(target, link.parent))


def build_from_snapshot(root: Path, snapshot: Snapshot) -> dict[str, Any]:
    """The sysfs tree and machine-type file of ``snapshot``; returns Settings overrides.

    GPUs become NVIDIA functions with their class (none written when null); each vGPU
    device an extra function carrying the capability, at addresses that sort in snapshot
    order; a null vGPU scan a function whose config read is short (not privileged); one
    non-NVIDIA function is there to be skipped."""
    sysfs = FakeSysfs(root / "sys")
    classes: dict[str, int | None] = {}
    for gpu in snapshot.gpus:
        if not gpu.pci_bus_id:
            if gpu.pci_class is not None:
                raise UnrealizableSnapshot(f"GPU {gpu.index}: a PCI class without a bus id")
            continue
        if not _SYSFS_BUS_ID.match(gpu.pci_bus_id):
            raise UnrealizableSnapshot(f"pci_bus_id {gpu.pci_bus_id!r} is not in sysfs form")
        if classes.get(gpu.pci_bus_id, gpu.pci_class) != gpu.pci_class:
            raise UnrealizableSnapshot(f"two PCI classes for {gpu.pci_bus_id}")
        classes[gpu.pci_bus_id] = gpu.pci_class
        sysfs.add_device(gpu.pci_bus_id, pci_class=gpu.pci_class)
    for gone in snapshot.lost:
        if gone.index is None and gone.pci_bus_id:
            sysfs.add_device(gone.pci_bus_id, pci_class=0x030200)  # on the bus, not in NVML
    if "0000:00:00.0" not in classes:
        sysfs.add_device("0000:00:00.0", vendor="0x8086", pci_class=0x060000)
    if snapshot.vgpu is None:
        # (the extra functions carry no class: they stand for the vGPU capability, not for
        # GPUs beyond those NVML lists)
        sysfs.add_device("ffff:ff:1f.7", pci_class=None, config=plain_config(64))
    else:
        for number, device in enumerate(snapshot.vgpu.devices):
            try:
                version = device.host_driver_version.encode("latin-1")
                branch = device.host_driver_branch.encode("latin-1")
            except UnicodeEncodeError:
                raise UnrealizableSnapshot("vGPU host driver strings are bytes") from None
            if len(version) > 10 or len(branch) > 10 or b"\0" in version + branch:
                raise UnrealizableSnapshot("vGPU host driver strings are 10 bytes, no NULs")
            config = config_with_capabilities(
                [
                    capability(0x01, b"\0" * 6),
                    vendor_capability(b"VF" + vgpu_records(version, branch)),
                ]
            )
            sysfs.add_device(
                f"ffff:{number // 32:02x}:{number % 32:02x}.0", pci_class=None, config=config
            )
    settings: dict[str, Any] = {"sysfs_root": str(sysfs.root)}
    if snapshot.topology is not None:
        # the interconnect is discovered only when asked for; its NUMA nodes live in sysfs
        settings["topology_labels"] = True
        bus_ids = {gpu.index: gpu.pci_bus_id for gpu in snapshot.gpus}
        for entry in snapshot.topology.gpus:
            if entry.pcie_root is not None:
                if not bus_ids.get(entry.index):
                    raise UnrealizableSnapshot(f"GPU {entry.index}: a PCIe root without a bus id")
                sysfs.under_root(bus_ids[entry.index], entry.pcie_root)
            if entry.numa_node is not None:
                if not bus_ids.get(entry.index):
                    raise UnrealizableSnapshot(f"GPU {entry.index}: a NUMA node without a bus id")
                node_file = sysfs.devices / bus_ids[entry.index] / "numa_node"
                node_file.write_text(f"{entry.numa_node}\n")
    if snapshot.machine is None:
        settings["machine_type_file"] = str(root / "no-such-product-name")
    else:
        if snapshot.machine != snapshot.machine.strip():
            raise UnrealizableSnapshot("the machine type is read stripped")
        machine_file = root / "product_name"
        machine_file.write_bytes(snapshot.machine.encode() + (b"\n" if snapshot.machine else b""))
        settings["machine_type_file"] = str(machine_file)
    return settings
