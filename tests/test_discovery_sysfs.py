"""sysfs discovery on a fake tree: PCI class, the vGPU capability scan, the machine type."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gfd.discovery import sysfs
from gfd.discovery.gpu_links import read_numa_node, read_pcie_root
from gfd.snapshot import Vgpu, VgpuDevice
from tests.helpers import table

from .fakes.fake_sysfs import (
    FakeSysfs,
    capability,
    config_with_capabilities,
    plain_config,
    vendor_capability,
    vgpu_capability,
    vgpu_records,
)


@pytest.fixture
def tree(tmp_path: Path) -> FakeSysfs:
    return FakeSysfs(tmp_path / "sys")


def root(tree: FakeSysfs) -> str:
    return str(tree.root)


# ------------------------------------------------------------------ PCI class


@pytest.mark.parametrize(("written", "read"), [(0x030200, 0x030200), (0x030000, 0x030000)])
def test_pci_class(tree: FakeSysfs, written: int, read: int) -> None:
    tree.add_device("0000:07:00.0", pci_class=written)
    assert sysfs.read_pci_class(root(tree), "0000:07:00.0") == read


def test_pci_class_unknown(tree: FakeSysfs) -> None:
    tree.add_device("0000:07:00.0", pci_class=None)
    (tree.devices / "0000:08:00.0").mkdir()
    (tree.devices / "0000:08:00.0" / "class").write_text("garbage\n")
    assert sysfs.read_pci_class(root(tree), "0000:07:00.0") is None  # no class file
    assert sysfs.read_pci_class(root(tree), "0000:08:00.0") is None  # not hex
    assert sysfs.read_pci_class(root(tree), "0000:09:00.0") is None  # no device
    assert sysfs.read_pci_class(root(tree), "") is None


@pytest.mark.parametrize("bus_id", ["../escape", "..", "."])
def test_a_bus_id_is_never_followed_out_of_the_devices_directory(
    tree: FakeSysfs, bus_id: str
) -> None:
    """A bus id is what NVML answers: a path outside bus/pci/devices is never read, though
    a class and a NUMA node lie there to be read."""
    for planted in (tree.devices.parent / "escape", tree.devices, tree.devices.parent):
        planted.mkdir(parents=True, exist_ok=True)
        (planted / "class").write_text("0x030200\n")
        (planted / "numa_node").write_text("1\n")
    assert sysfs.read_pci_class(root(tree), bus_id) is None
    assert read_numa_node(root(tree), bus_id) is None
    assert read_pcie_root(root(tree), bus_id) is None


# ------------------------------------------------------------------ config space parsing


def test_vgpu_capability_found() -> None:
    config = config_with_capabilities([capability(0x01, b"\0" * 6), vgpu_capability()])
    cap = sysfs.vendor_capability(config)
    assert cap is not None and sysfs.is_vgpu_capability(cap)
    assert sysfs.host_driver_info(cap) == VgpuDevice("460.16", "r460_00")


def test_no_capability_list_bit() -> None:
    config = bytearray(config_with_capabilities([vgpu_capability()]))
    config[sysfs.PCI_STATUS_BYTE] &= ~sysfs.PCI_STATUS_CAPABILITY_LIST
    assert sysfs.vendor_capability(bytes(config)) is None


def chain(capabilities: list[bytes], link: tuple[int, int] | None = None) -> bytes:
    """A config space holding ``capabilities``, the next-pointer at ``link[0]`` set to
    ``link[1]``."""
    config = bytearray(config_with_capabilities(capabilities))
    if link is not None:
        config[link[0]] = link[1]
    return bytes(config)


@pytest.mark.parametrize("config", [
    pytest.param(chain([]), id="empty"),
    # the third capability points back to the second
    pytest.param(chain([capability(0x01, b"\0" * 2)] * 3, (0x48 + 1, 0x44)), id="loops"),
    pytest.param(chain([capability(0x05, b"\0" * 2)], (0x40 + 1, 0x40)), id="points-to-itself"),
    pytest.param(chain([capability(0x01), capability(0xFF), vgpu_capability()]),
                 id="ends-with-0xff-before-the-vendor-capability"),
    # 0xff + 2 is beyond a 256-byte config space
    pytest.param(chain([capability(0x01)], (0x40 + 1, 0xFF)), id="points-past-the-end"),
])  # fmt: skip
def test_a_broken_capability_chain_gives_no_vendor_capability(config: bytes) -> None:
    assert sysfs.vendor_capability(config) is None


def test_vendor_capability_without_vf_signature() -> None:
    config = config_with_capabilities([vendor_capability(b"XY" + vgpu_records(b"1", b"2"))])
    cap = sysfs.vendor_capability(config)
    assert cap is not None and not sysfs.is_vgpu_capability(cap)


def test_vendor_capability_too_short_for_a_signature() -> None:
    assert not sysfs.is_vgpu_capability(b"\x09\x00\x04V")


def test_vendor_capability_cut_at_its_length() -> None:
    config = bytearray(config_with_capabilities([vgpu_capability()]))
    config[0x40 + 2] = 10  # length byte says 10: the host-driver record is cut off
    cap = sysfs.vendor_capability(bytes(config))
    assert cap is not None and len(cap) == 10 and sysfs.is_vgpu_capability(cap)
    assert sysfs.host_driver_info(cap) is None


def test_vendor_capability_at_the_end_of_config_space() -> None:
    config = bytearray(plain_config())
    config[sysfs.PCI_STATUS_BYTE] |= sysfs.PCI_STATUS_CAPABILITY_LIST
    cap = vgpu_capability()
    start = 256 - len(cap) + 4  # the last 4 bytes fall off the end
    config[sysfs.PCI_CAPABILITY_LIST] = start
    config[start:] = cap[: 256 - start]
    found = sysfs.vendor_capability(bytes(config))
    assert found is not None and len(found) == 256 - start
    assert sysfs.host_driver_info(found) is None


def test_truncated_config_space() -> None:
    with pytest.raises(sysfs.ConfigSpaceTooShortError, match="run gfd privileged"):
        sysfs.vendor_capability(plain_config(64), "0000:07:00.0")


def test_extended_config_space_is_fine() -> None:
    # A root read of a PCIe device's config gives the 4096-byte extended space.
    config = config_with_capabilities([vgpu_capability("550.90.05", "r550_00")], size=4096)
    assert len(config) == 4096
    cap = sysfs.vendor_capability(config)
    assert cap is not None
    assert sysfs.host_driver_info(cap) == VgpuDevice("550.90.05", "r550_00")


# ------------------------------------------------------------------ vGPU records


NUL_PADDED = bytes([0, 22]) + b"\x00550.1".ljust(10, b"\x00") + b"\x00\x00r550".ljust(10, b"\x00")


@pytest.mark.parametrize(("cap", "expected"), table([
    ("records-before-the-host-driver-record",
     vgpu_capability("535.54", "r535_00", before=[b"\x01\x02\x03", b"abcdefgh"]),
     VgpuDevice("535.54", "r535_00")),
    ("a-record-of-length-zero-stops", vendor_capability(b"VF" + bytes([7, 0]) + bytes(30)), None),
    ("records-running-off-the-end", vendor_capability(b"VF" + bytes([7, 200]) + bytes(30)), None),
    ("no-record-at-all", b"\x09\x00\x05VF", None),
    ("strings-nul-trimmed-at-both-ends", vendor_capability(b"VF" + NUL_PADDED),
     VgpuDevice("550.1", "r550")),
    ("full-width-strings", vgpu_capability("0123456789", "abcdefghij"),
     VgpuDevice("0123456789", "abcdefghij")),
]))  # fmt: skip
def test_host_driver_record(cap: bytes, expected: VgpuDevice | None) -> None:
    assert sysfs.host_driver_info(cap) == expected


# ------------------------------------------------------------------ the scan


def vgpu_config(version: str, branch: str) -> bytes:
    return config_with_capabilities(
        [capability(0x10, b"\0" * 10), vgpu_capability(version, branch)]
    )


NO_VGPU = Vgpu(devices=())
INTEL = {"vendor": "0x8086"}
SHORT = {"config": plain_config(64)}
NO_HOST_DRIVER = {"config": config_with_capabilities([vendor_capability(b"VF" + bytes([5, 0]))])}


@pytest.mark.parametrize(("devices", "expected"), table([
    ("no-nvidia-devices",
     {"0000:00:00.0": {**INTEL, **SHORT}, "0000:00:01.0": {"vendor": "0x1af4"}}, NO_VGPU),
    ("a-plain-gpu", {"0000:07:00.0": {},
                     "0000:07:00.1": {"config": config_with_capabilities([capability(0x01)])}},
     NO_VGPU),
    ("vgpus-in-bus-order", {"0000:b0:00.0": {"config": vgpu_config("460.16", "r460_00")},
                            "0000:0a:00.0": {"config": vgpu_config("460.32", "r460_10")},
                            "0000:07:00.0": {}, "0000:00:00.0": INTEL},
     Vgpu(devices=(VgpuDevice("460.32", "r460_10"), VgpuDevice("460.16", "r460_00")))),
    ("vendor-id-case-insensitive",
     {"0000:0a:00.0": {"vendor": "0x10DE", "config": vgpu_config("1", "2")}},
     Vgpu(devices=(VgpuDevice("1", "2"),))),
    ("unprivileged-gives-none", {"0000:07:00.0": SHORT}, None),
    ("short-config-of-a-non-nvidia-device-ignored",
     {"0000:00:00.0": {**INTEL, **SHORT}, "0000:07:00.0": {}}, NO_VGPU),
    ("a-vgpu-without-host-driver-record", {"0000:07:00.0": NO_HOST_DRIVER}, None),
]))  # fmt: skip
def test_scan(tree: FakeSysfs, devices: dict[str, dict[str, Any]], expected: Vgpu | None) -> None:
    for bus_id, attributes in devices.items():
        tree.add_device(bus_id, **attributes)
    assert sysfs.scan_vgpu(root(tree)) == expected


def test_scan_without_pci_devices_directory(tmp_path: Path) -> None:
    assert sysfs.scan_vgpu(str(tmp_path / "nothing")) is None


def test_scan_skips_a_device_that_went_away(tree: FakeSysfs) -> None:
    (tree.devices / "0000:09:00.0").mkdir()  # no vendor file: removed mid-scan
    tree.add_device("0000:0a:00.0", config=vgpu_config("1", "2"))
    assert sysfs.scan_vgpu(root(tree)) == Vgpu(devices=(VgpuDevice("1", "2"),))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_scan_unreadable_config(tree: FakeSysfs) -> None:
    device = tree.add_device("0000:07:00.0")
    (device / "config").chmod(0)
    assert sysfs.scan_vgpu(root(tree)) is None


def test_scan_config_that_is_a_directory(tree: FakeSysfs) -> None:
    device = tree.devices / "0000:07:00.0"
    device.mkdir()
    (device / "vendor").write_text("0x10de\n")
    (device / "config").mkdir()  # reading it fails with EISDIR, as a permission error would
    assert sysfs.scan_vgpu(root(tree)) is None


# ------------------------------------------------------------------ machine type


@pytest.mark.parametrize(("content", "expected"), [
    (b"  DGXA100 920-23687-2530-000 \n", "DGXA100 920-23687-2530-000"),
    # upstream labels a node whose file is empty ``gpu.machine=`` (empty), not ``unknown``
    (b"", ""), (b"\n", ""), (b"  \t\n", ""),
    (b"Server \xff\xfe X\n", "Server \ufffd\ufffd X"),
])  # fmt: skip
def test_machine_type_is_the_file_stripped(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "product_name"
    path.write_bytes(content)
    assert sysfs.read_machine_type(str(path)) == expected


def test_machine_type_unreadable(tmp_path: Path) -> None:
    assert sysfs.read_machine_type(str(tmp_path / "missing")) is None
    assert sysfs.read_machine_type(str(tmp_path)) is None  # a directory


def test_machine_type_empty_path() -> None:
    assert sysfs.read_machine_type("") is None
