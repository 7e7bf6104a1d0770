"""Round trip: snapshot -> fake NVML + fake sysfs -> discovery -> the same snapshot.

For every example and fixture snapshot, and for generated ones.  A snapshot without a
driver is a node where NVML is unavailable: discovery raises NvmlUnavailableError and the
host-only discovery gives it back."""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gfd import snapshot as snapshot_io
from gfd.discovery import discover, discover_host_only
from gfd.errors import NvmlUnavailableError
from gfd.labels.devices import is_skipped_device
from gfd.settings import Settings
from gfd.snapshot import (
    ComputeCapability,
    Driver,
    Fabric,
    Gpu,
    Mig,
    MigDevice,
    MigEngines,
    MigSlices,
    Snapshot,
    Vgpu,
    VgpuDevice,
)

from .fakes.fake_nvml import INVALID_ARGUMENT, NOT_FOUND, PROFILE_ENUMS, FakeNvml, expected_gb
from .fakes.fake_sysfs import build_from_snapshot

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT_FILES = sorted(
    [*REPO.glob("examples/snapshots/*.yaml"), *REPO.glob("tests/fixtures/snapshots/*.yaml")]
)


def discover_through_fakes(snapshot: Snapshot, root: Path, **fake_options: object) -> Snapshot:
    if snapshot.discovery != "nvml":
        return discover_other_backend(snapshot, root)
    overrides = build_from_snapshot(root, snapshot)
    # the NVML backend named: under "auto" a generated GPU name such as "(nvgpu)" marks an
    # integrated GPU and sends discovery to the tegra backend, as upstream does
    chosen = replace(Settings(), **overrides, device_discovery_strategy="nvml")  # type: ignore[arg-type]
    if snapshot.driver is None:
        fake = FakeNvml(library_missing=True)
        with pytest.raises(NvmlUnavailableError):
            discover(chosen, nvml=fake.module)
        return discover_host_only(chosen)
    fake = FakeNvml.from_snapshot(snapshot, **fake_options)  # type: ignore[arg-type]
    found = discover(chosen, nvml=fake.module)
    assert fake.init_depth == 0, "nvmlShutdown must follow every nvmlInit"
    return found


def discover_other_backend(snapshot: Snapshot, root: Path) -> Snapshot:
    """A vfio snapshot through a fake PCI sysfs tree and PCI ID database; a tegra one
    through the fake CUDA library: the backend's discovery gives the snapshot back."""
    from unittest import mock

    from gfd.discovery import vfio

    from .fakes.fake_cuda import FakeCuda
    from .fakes.fake_sysfs import MEM64, MIB, FakeSysfs

    machine = root / "product_name"
    if snapshot.machine is not None:
        machine.write_text(snapshot.machine + "\n")
    sysfs = FakeSysfs(root / "sys")
    chosen = Settings(
        device_discovery_strategy=snapshot.discovery, sysfs_root=str(sysfs.root),
        machine_type_file=str(machine),
    )  # fmt: skip
    if snapshot.discovery == "tegra":
        return discover(chosen, cuda=FakeCuda.from_snapshot(snapshot))
    names = sorted({gpu.name for gpu in snapshot.gpus})
    ids = root / "pci.ids"
    ids.write_text(
        "10de  NVIDIA Corporation\n"
        + "".join(f"\t{0x2000 + n:04x}  {name}\n" for n, name in enumerate(names))
    )
    for gpu in snapshot.gpus:
        assert gpu.memory_mib is not None
        sysfs.add_passthrough_gpu(
            gpu.pci_bus_id, device_id=0x2000 + names.index(gpu.name),
            pci_class=gpu.pci_class or 0x030200, bars=((gpu.memory_mib * MIB, MEM64),),
        )  # fmt: skip
    with mock.patch.object(vfio, "PCI_IDS_PATHS", (str(ids),)):
        return discover(chosen)


@pytest.mark.skipif(not SNAPSHOT_FILES, reason="no example or fixture snapshots yet")
@pytest.mark.parametrize("path", SNAPSHOT_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_snapshot_files_round_trip(path: Path, tmp_path: Path) -> None:
    snapshot = snapshot_io.load(str(path))
    found = discover_through_fakes(snapshot, tmp_path)
    # a DGX Station's display adapter is listed by NVML but skipped by discovery (go-nvlib)
    gpus = tuple(gpu for gpu in snapshot.gpus if not is_skipped_device(gpu.name))
    expected = replace(snapshot, gpus=gpus)
    assert snapshot_io.dumps(found) == snapshot_io.dumps(expected)
    assert found == expected


# ------------------------------------------------------------------ generated snapshots

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
_HOST_DRIVER_TEXT = st.text(st.characters(min_codepoint=1, max_codepoint=255), max_size=10)


_PROFILE_ENUMS = sorted(PROFILE_ENUMS)
#: one draw for five engine counts of 0-8: a string of five digits (one Hypothesis choice)
_ENGINE_COUNTS = st.text(alphabet="012345678", min_size=5, max_size=5)


@st.composite
def mig_devices(draw: st.DrawFn, parent_mib: int) -> MigDevice:
    g, suffix = draw(st.sampled_from(_PROFILE_ENUMS))
    c = draw(st.integers(min_value=1, max_value=g))
    memory = draw(st.integers(min_value=1, max_value=parent_mib))
    gb = expected_gb(memory, parent_mib * 2**20)
    profile = f"{g}g.{gb}gb{suffix}" if c == g else f"{c}c.{g}g.{gb}gb{suffix}"
    return MigDevice(
        profile=profile, memory_mib=memory,
        multiprocessors=draw(st.integers(min_value=0, max_value=200)), slices=MigSlices(gi=g, ci=c),
        engines=MigEngines(*(int(digit) for digit in draw(_ENGINE_COUNTS))),
    )  # fmt: skip


_MEMORIES = st.none() | st.integers(min_value=1024, max_value=300_000)
_MIG_KINDS = st.sampled_from(["none", "disabled", "enabled"])
_FABRICS = st.none() | st.builds(
    Fabric,
    cluster_uuid=st.integers(min_value=1, max_value=2**128 - 1).map(
        lambda n: str(uuid.UUID(int=n))
    ),
    clique_id=st.integers(min_value=0, max_value=2**32 - 1),
)
_PCI_CLASSES = st.none() | st.integers(0, 0xFFFFFF)
#: compute capability major 0-15, minor 0-9, as one number (major * 10 + minor)
_CAPABILITIES = st.integers(min_value=0, max_value=159)


@st.composite
def gpus(draw: st.DrawFn, index: int, bus_id: str) -> Gpu:
    memory = draw(_MEMORIES)
    mig_kind = draw(_MIG_KINDS)
    mig: Mig | None = None
    if mig_kind == "disabled":
        mig = Mig(enabled=False)
    elif mig_kind == "enabled":
        devices: list[MigDevice] = []
        if memory is not None:
            devices = draw(st.lists(mig_devices(memory), max_size=8))
        mig = Mig(enabled=True, devices=tuple(devices))
    fabric = draw(_FABRICS)
    capability = draw(_CAPABILITIES)
    return Gpu(
        index=index,
        uuid=f"{draw(_TEXT)}-{index}",  # any text, but one GPU per UUID (a repeat is refused)
        name=draw(_TEXT), pci_bus_id=bus_id, pci_class=None if not bus_id else draw(_PCI_CLASSES),
        memory_mib=memory, compute_capability=ComputeCapability(capability // 10, capability % 10),
        mig=mig, fabric=fabric,
    )  # fmt: skip


def _bus_id(number: int) -> str:
    """domain (16 bits, at most 0xfffe), bus (8), device (5) and function (3) of one number:
    one Hypothesis choice where four integers cost four and a tuple"""
    domain, bus, slot = number >> 16, (number >> 8) & 0xFF, number & 0xFF
    return f"{domain:04x}:{bus:02x}:{slot >> 3:02x}.{slot & 7}"


_BUS_IDS = st.integers(min_value=0, max_value=0xFFFE_FFFF).map(_bus_id)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    vgpu = draw(
        st.none()
        | st.lists(st.builds(VgpuDevice, _HOST_DRIVER_TEXT, _HOST_DRIVER_TEXT), max_size=3).map(
            lambda devices: Vgpu(devices=tuple(devices))
        )
    )
    machine = draw(st.none() | _TEXT.map(str.strip))
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        return Snapshot(driver=None, machine=machine, vgpu=vgpu, gpus=())
    driver = Driver(version=draw(_TEXT), cuda=draw(st.integers(min_value=0, max_value=2**31 - 1)))
    bus_ids = draw(st.lists(_BUS_IDS | st.just(""), max_size=5))
    bus_ids = [b for position, b in enumerate(bus_ids) if not b or b not in bus_ids[:position]]
    return Snapshot(
        driver=driver, machine=machine, vgpu=vgpu,
        gpus=tuple(draw(gpus(index, bus_id)) for index, bus_id in enumerate(bus_ids)),
    )  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    snapshot=snapshots(),
    empty_slot_error=st.sampled_from([NOT_FOUND, INVALID_ARGUMENT]),
    bytes_strings=st.booleans(),
)
def test_generated_snapshots_round_trip(
    snapshot: Snapshot, empty_slot_error: int, bytes_strings: bool
) -> None:
    options: dict[str, object] = {"empty_slot_error": empty_slot_error}
    if bytes_strings:
        options["bytes_strings"] = True
    with tempfile.TemporaryDirectory() as directory:
        found = discover_through_fakes(snapshot, Path(directory), **options)
    # a GPU named as the display adapter is skipped, as in the files (Hypothesis draws the
    # code's string constants, so it does name one)
    gpus = tuple(gpu for gpu in snapshot.gpus if not is_skipped_device(gpu.name))
    assert found == replace(snapshot, gpus=gpus)
    # ...and through --dump-snapshot / --snapshot-file
    assert snapshot_io.loads(snapshot_io.dumps(found)) == found
