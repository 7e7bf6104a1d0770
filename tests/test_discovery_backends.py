"""The vfio and tegra discovery strategies, ``auto``'s choice between them and NVML, and the
driver root: each against its lowest seam (a fake PCI sysfs tree and PCI ID database, a
fake CUDA library at its call surface, the NVML fake, the real pynvml module's loader).

Upstream v0.20.0: internal/resource/factory.go (strategy -> manager, resolveMode),
sysfs-lib.go / sysfs-device.go (vfio), cuda-lib.go / cuda-device.go (tegra), go-nvlib
pkg/nvlib/info (ResolvePlatform, HasTegraFiles, IsIntegratedGPUName, tryResolveLibrary)
and pkg/nvpci (GetGPUs, GetTotalAddressableMemory)."""

from __future__ import annotations

import ctypes
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gfd import discovery as discovery_module
from gfd.discovery import cuda as cuda_source
from gfd.discovery import discover, read_snapshot, vfio
from gfd.discovery import nvml as nvml_source
from gfd.discovery.driver_root import LIBRARY_DIRECTORIES, resolve_library
from gfd.errors import DiscoveryError, NvmlUnavailableError
from gfd.observability import NullMetrics
from gfd.settings import Settings
from gfd.snapshot import ComputeCapability, Driver, Gpu

from .fakes.fake_cuda import ERROR_INVALID_DEVICE, ERROR_NO_DEVICE, CudaDevice, FakeCuda
from .fakes.fake_nvml import FakeGpu, FakeNvml
from .fakes.fake_sysfs import GIB, MEM32, MEM64, MIB, FakeSysfs
from .process import run_gfd_here

ROOT = Path(__file__).resolve().parent.parent
PCI_IDS = """\
# a few lines of the PCI ID database
10de  NVIDIA Corporation
\t20b0  GA100 [A100 SXM4 40GB]
\t\t10de 134f  A100 SXM4 40GB
\t20f1  GA100 [A100 PCIe 40GB]
\t2330  GH100 [H100 SXM5 80GB]
10df  Emulex Corporation
\t20f1  Not an NVIDIA device
"""
ORIN = CudaDevice("Orin (nvgpu)", 65892085760, 8, 7)


@pytest.fixture
def sysfs(tmp_path: Path) -> FakeSysfs:
    return FakeSysfs(tmp_path / "sys")


@pytest.fixture
def pci_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "pci.ids"
    path.write_text(PCI_IDS)
    monkeypatch.setattr(vfio, "PCI_IDS_PATHS", ("/nonexistent/pci.ids", str(path)))
    return path


def settings_for(sysfs: FakeSysfs, strategy: str, **changes: Any) -> Settings:
    return replace(
        Settings(), device_discovery_strategy=strategy, sysfs_root=str(sysfs.root),
        machine_type_file="", **changes,
    )  # fmt: skip


# ----------------------------------------------------------------------------------- vfio


def test_vfio_lists_nvidia_gpus_bound_to_vfio_pci_only(sysfs: FakeSysfs, pci_ids: Path) -> None:
    sysfs.add_device("0000:00:00.0", vendor="0x8086", pci_class=0x060000)
    sysfs.add_passthrough_gpu("0000:17:00.0", device_id=0x20F1)
    sysfs.add_passthrough_gpu("0000:18:00.0", driver="nvidia")  # NVML's, not vfio's
    sysfs.add_passthrough_gpu("0000:19:00.0", driver=None)  # unbound
    sysfs.add_passthrough_gpu("0000:1a:00.0", pci_class=0x068000)  # an NVSwitch
    sysfs.add_passthrough_gpu("0000:1b:00.0", pci_class=0x040300)  # its audio function
    sysfs.add_passthrough_gpu("0000:1c:00.4", virtual_function_of="0000:17:00.0")  # SR-IOV VF
    found = discover(settings_for(sysfs, "vfio"))
    assert found.discovery == "vfio"
    assert found.driver == Driver("unknown.unknown.unknown", 0)  # sysfs-lib.go:66-74
    assert found.gpus == (
        Gpu(index=0, uuid="", name="GA100 [A100 PCIe 40GB]", pci_bus_id="0000:17:00.0",
            pci_class=0x030200, memory_mib=128 * 1024,  # 64 GiB + 32 MiB of 64-bit BARs, rounded up
            compute_capability=ComputeCapability(-1, -1)),  # sysfs-device.go:35-37
    )  # fmt: skip


def test_vfio_gpus_come_in_bus_order_and_a_graphics_gpu_counts(
    sysfs: FakeSysfs, pci_ids: Path
) -> None:
    for address in ("0001:01:00.0", "0000:65:00.0", "0000:17:00.0"):
        sysfs.add_passthrough_gpu(address, pci_class=0x030000, device_id=0x2330)
    found = discover(settings_for(sysfs, "vfio"))
    buses = [gpu.pci_bus_id for gpu in found.gpus]
    assert buses == ["0000:17:00.0", "0000:65:00.0", "0001:01:00.0"]
    assert [gpu.index for gpu in found.gpus] == [0, 1, 2]
    assert {gpu.name for gpu in found.gpus} == {"GH100 [H100 SXM5 80GB]"}
    assert {gpu.pci_class for gpu in found.gpus} == {0x030000}


def test_a_device_the_database_does_not_know_is_unknown_device(
    sysfs: FakeSysfs, monkeypatch: pytest.MonkeyPatch, pci_ids: Path
) -> None:
    sysfs.add_passthrough_gpu("0000:17:00.0", device_id=0x9999)
    assert discover(settings_for(sysfs, "vfio")).gpus[0].name == "UNKNOWN_DEVICE"
    monkeypatch.setattr(vfio, "PCI_IDS_PATHS", ("/nonexistent/pci.ids",))
    sysfs.add_passthrough_gpu("0000:18:00.0", device_id=0x20B0)
    assert {gpu.name for gpu in discover(settings_for(sysfs, "vfio")).gpus} == {"UNKNOWN_DEVICE"}


def test_the_database_is_read_for_nvidia_devices_only(pci_ids: Path) -> None:
    assert vfio.nvidia_device_names((str(pci_ids),)) == {
        0x20B0: "GA100 [A100 SXM4 40GB]", 0x20F1: "GA100 [A100 PCIe 40GB]",
        0x2330: "GH100 [H100 SXM5 80GB]",
    }  # fmt: skip


def _resource(*regions: tuple[int, int]) -> str:
    lines, start = [], 0x1000000000
    for size, flags in regions:
        end = start + size - 1 if size else start
        lines.append(f"0x{start:016x} 0x{end:016x} 0x{flags:016x}")
        start += max(size, MIB)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("regions", "total"),
    [
        (((16 * MIB, MEM32), (64 * GIB, MEM64), (32 * MIB, MEM64)), 128 * GIB),
        (((16 * MIB, MEM32), (32 * GIB, MEM64)), 32 * GIB),  # a power of two stays
        (((16 * MIB, MEM32), (256 * MIB, MEM32)), 0),  # no 64-bit BAR: 0 (no memory label)
        (((0, 0),) * 6 + ((8 * GIB, MEM64),), 0),  # region 6 (the ROM slot) is not a BAR
        (((16 * MIB, MEM32), (0, 0), (3 * GIB, MEM64)), 4 * GIB),
    ],
)
def test_bar_memory_is_go_nvlibs_total_addressable_memory(
    regions: tuple[tuple[int, int], ...], total: int
) -> None:
    assert vfio.bar_memory_bytes(_resource(*regions)) == total


def test_an_unreadable_resource_table_fails_the_pass(sysfs: FakeSysfs, pci_ids: Path) -> None:
    directory = sysfs.add_passthrough_gpu("0000:17:00.0")
    (directory / "resource").write_text("0x0 0x1\n")
    with pytest.raises(DiscoveryError, match=r"0000:17:00\.0.*line 1"):
        discover(settings_for(sysfs, "vfio"))
    (directory / "resource").unlink()
    with pytest.raises(DiscoveryError, match=r"cannot read .*0000:17:00\.0/resource"):
        discover(settings_for(sysfs, "vfio"))


def test_no_pci_bus_fails_the_pass(tmp_path: Path) -> None:
    chosen = replace(Settings(), device_discovery_strategy="vfio", sysfs_root=str(tmp_path))
    with pytest.raises(DiscoveryError, match="cannot list PCI devices"):
        discover(chosen)


def test_vfio_node_through_the_command(sysfs: FakeSysfs, pci_ids: Path, tmp_path: Path) -> None:
    """The example snapshot's node, built as sysfs, gives the example's expected labels."""
    sysfs.add_device("0000:00:00.0", vendor="0x8086", pci_class=0x060000)
    sysfs.add_passthrough_gpu("0000:17:00.0", device_id=0x20F1)
    sysfs.add_passthrough_gpu("0000:65:00.0", device_id=0x20F1)
    machine = tmp_path / "product_name"
    machine.write_text("ProLiant DL380 Gen10 Plus\n")
    result = run_gfd_here(
        "--oneshot", "--no-timestamp", "--device-discovery-strategy", "vfio",
        "--machine-type-file", str(machine), env={"GFD_SYSFS_ROOT": str(sysfs.root)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = ROOT / "tests/fixtures/expected/kubevirt-a100-vfio.none.labels"
    assert result.stdout == expected.read_text()


# ---------------------------------------------------------------------------------- tegra


def test_tegra_reads_the_cuda_library(sysfs: FakeSysfs) -> None:
    library = FakeCuda([ORIN], driver_version=12060)
    found = discover(settings_for(sysfs, "tegra"), cuda=library)
    assert found.discovery == "tegra"
    assert found.driver == Driver("unknown.unknown.unknown", 12060)  # cuda-lib.go:66-70
    assert found.gpus == (
        Gpu(index=0, uuid="", name="Orin (nvgpu)",
            memory_mib=65892085760 // 2**20,  # cuda-device.go:61-68
            compute_capability=ComputeCapability(8, 7)),
    )  # fmt: skip
    assert library.calls[0] == "cuInit"


@pytest.mark.parametrize(("raw", "stored"), [(12020, 12020), (12345, 12040), (11040, 11040)])
def test_the_cuda_version_is_read_as_upstreams_cuda_manager_reads_it(
    sysfs: FakeSysfs, raw: int, stored: int
) -> None:
    """cuda-lib.go:60-61: major = v / 1000, minor = v % 100 / 10."""
    found = discover(settings_for(sysfs, "tegra"), cuda=FakeCuda([ORIN], driver_version=raw))
    assert found.driver is not None and found.driver.cuda == stored


def test_cuinit_failing_is_the_driver_being_unavailable(sysfs: FakeSysfs) -> None:
    library = FakeCuda([ORIN], fail={"cuInit": ERROR_NO_DEVICE})
    with pytest.raises(
        NvmlUnavailableError, match="CUDA is unavailable: cuInit failed: CUDA_ERROR_NO_DEVICE"
    ):
        discover(settings_for(sysfs, "tegra"), cuda=library)


def test_without_fail_on_init_error_a_dead_cuda_gives_the_minimal_set(
    sysfs: FakeSysfs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        cuda_source, "load_library", lambda root: FakeCuda([ORIN], fail={"cuInit": 999})
    )
    chosen = settings_for(sysfs, "tegra", fail_on_init_error=False)
    found = read_snapshot(chosen, first_pass=True, metrics=NullMetrics())
    assert found.driver is None and found.gpus == ()


def test_a_device_query_failing_fails_the_pass_naming_it(sysfs: FakeSysfs) -> None:
    library = FakeCuda([ORIN, ORIN], fail={"cuDeviceGetName": ERROR_INVALID_DEVICE})
    with pytest.raises(DiscoveryError, match="CUDA device 0: cuDeviceGetName failed"):
        discover(settings_for(sysfs, "tegra"), cuda=library)


def test_memory_that_cannot_be_read_is_left_unknown(sysfs: FakeSysfs) -> None:
    """Upstream ignores that error (internal/lm/resource.go:49-52): no memory label."""
    library = FakeCuda([ORIN], fail={"cuDeviceTotalMem_v2": 999})
    assert discover(settings_for(sysfs, "tegra"), cuda=library).gpus[0].memory_mib is None


def test_a_missing_cuda_library_is_named(sysfs: FakeSysfs, tmp_path: Path) -> None:
    with pytest.raises(NvmlUnavailableError, match=r"CUDA is unavailable: libcuda\.so\.1"):
        cuda_source.load_library(str(tmp_path / "no-driver-root"))


def test_tegra_node_through_the_command(sysfs: FakeSysfs, monkeypatch: pytest.MonkeyPatch) -> None:
    library = FakeCuda([ORIN], driver_version=12020)
    roots: list[str] = []

    def load(root: str) -> FakeCuda:
        roots.append(root)
        return library

    monkeypatch.setattr(cuda_source, "load_library", load)
    result = run_gfd_here(
        "--oneshot", "--no-timestamp", "--device-discovery-strategy=tegra",
        "--container-driver-root=/host", "--machine-type-file", "/nonexistent/product_name",
        env={"GFD_SYSFS_ROOT": str(sysfs.root)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    expected = ROOT / "tests/fixtures/expected/jetson-agx-orin-tegra.none.labels"
    assert result.stdout == expected.read_text()
    assert roots == ["/host"]


# ----------------------------------------------------------------------------------- auto


@pytest.fixture
def no_tegra_release(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "etc" / "nv_tegra_release"
    monkeypatch.setattr(discovery_module, "TEGRA_RELEASE_FILE", str(path))
    return path


def _gpu(name: str) -> FakeGpu:
    return FakeGpu(uuid="GPU-0", name=name, bus_id="00000000:07:00.0", memory_total=2**34)


def test_auto_takes_tegra_when_the_tegra_files_are_there_and_nvml_is_not(
    sysfs: FakeSysfs, no_tegra_release: Path
) -> None:
    missing = FakeNvml(library_missing=True)
    no_tegra_release.parent.mkdir()
    no_tegra_release.write_text("# R36 (release), REVISION: 3.0\n")
    found = discover(settings_for(sysfs, "auto"), nvml=missing.module, cuda=FakeCuda([ORIN]))
    assert found.discovery == "tegra"


def test_auto_reads_the_soc_family_too(sysfs: FakeSysfs, no_tegra_release: Path) -> None:
    family = sysfs.root / "devices" / "soc0" / "family"
    family.parent.mkdir(parents=True)
    family.write_text("Tegra234\n")
    missing = FakeNvml(library_missing=True)
    found = discover(settings_for(sysfs, "auto"), nvml=missing.module, cuda=FakeCuda([ORIN]))
    assert found.discovery == "tegra"
    family.write_text("jetson-something\n")  # go-nvlib: the family must start with "tegra"
    with pytest.raises(NvmlUnavailableError):
        discover(settings_for(sysfs, "auto"), nvml=missing.module, cuda=FakeCuda([ORIN]))


@pytest.mark.parametrize("name", ["Orin (nvgpu)", "NVIDIA Thor"])
def test_auto_takes_tegra_when_nvml_lists_an_integrated_gpu(
    sysfs: FakeSysfs, no_tegra_release: Path, name: str
) -> None:
    nvml = FakeNvml([_gpu(name)])
    library = FakeCuda([CudaDevice(name, 2**34, 8, 7)])
    found = discover(settings_for(sysfs, "auto"), nvml=nvml.module, cuda=library)
    assert found.discovery == "tegra" and found.gpus[0].uuid == ""
    assert nvml.init_depth == 0  # NVML was shut down before CUDA took over


def test_auto_stays_with_nvml_otherwise(sysfs: FakeSysfs, no_tegra_release: Path) -> None:
    no_tegra_release.parent.mkdir()
    no_tegra_release.write_text("R36\n")
    nvml = FakeNvml([_gpu("NVIDIA A100-SXM4-40GB")])
    untouched = FakeCuda([ORIN])
    found = discover(settings_for(sysfs, "auto"), nvml=nvml.module, cuda=untouched)
    assert found.discovery == "nvml" and untouched.calls == []
    # the library loads but nvmlInit fails: an NVML platform that is broken, not Tegra
    broken = FakeNvml(init_error=999)
    with pytest.raises(NvmlUnavailableError):
        discover(settings_for(sysfs, "auto"), nvml=broken.module, cuda=untouched)
    assert untouched.calls == []


def test_only_auto_falls_back(sysfs: FakeSysfs, no_tegra_release: Path) -> None:
    no_tegra_release.parent.mkdir()
    no_tegra_release.write_text("R36\n")
    missing = FakeNvml(library_missing=True)
    with pytest.raises(NvmlUnavailableError):
        discover(settings_for(sysfs, "nvml"), nvml=missing.module, cuda=FakeCuda([ORIN]))


# ---------------------------------------------------------------------------- driver root


def _library(tmp_path: Path) -> str:
    """A real shared object to stand for a driver library (ctypes' own extension)."""
    import _ctypes

    path = getattr(_ctypes, "__file__", None)
    if not path:
        pytest.skip("_ctypes is built in: no shared object to load")
    return str(path)


@pytest.mark.parametrize("root", ["", "/"])
def test_no_driver_root_means_by_name(root: str) -> None:
    assert resolve_library(root, "libnvidia-ml.so.1") == "libnvidia-ml.so.1"


def test_the_driver_root_is_searched_in_upstreams_order(tmp_path: Path) -> None:
    root = tmp_path / "driver-root"
    assert resolve_library(str(root), "libnvidia-ml.so.1") == "libnvidia-ml.so.1"
    for directory in reversed(LIBRARY_DIRECTORIES):
        target = root / directory.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        (target / "libnvidia-ml.so.550.54.15").write_bytes(b"")
        (target / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.550.54.15")
    expected = root / "usr/lib64/libnvidia-ml.so.550.54.15"
    assert resolve_library(str(root), "libnvidia-ml.so.1") == str(expected)
    # a dangling link is passed over, as EvalSymlinks fails on it
    (expected).unlink()
    second = root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"
    assert resolve_library(str(root), "libnvidia-ml.so.1") == str(second)


def test_nvml_is_loaded_from_the_driver_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pynvml's own loader is handed the library (its ``nvmlLib`` global), so nvmlInit
    uses it instead of looking ``libnvidia-ml.so.1`` up by name."""
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    library = tmp_path / "driver-root" / "usr" / "lib64" / "libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.symlink_to(_library(tmp_path))
    module = nvml_source.load_module(str(tmp_path / "driver-root"))
    assert module is pynvml
    assert isinstance(pynvml.nvmlLib, ctypes.CDLL)
    assert pynvml.nvmlLib._name == os.path.realpath(library)
    # not a real NVML: nvmlInit finds no nvmlInit_v2 in it, one clear line
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    chosen = replace(Settings(), driver_root_ctr_path=str(tmp_path / "driver-root"))
    with pytest.raises(NvmlUnavailableError, match="NVML is unavailable: nvmlInit failed"):
        discover(replace(chosen, machine_type_file=""))


def test_a_driver_root_library_that_does_not_load_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    library = tmp_path / "usr" / "lib64" / "libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"not an ELF file")
    with pytest.raises(NvmlUnavailableError, match=r"libnvidia-ml\.so\.1 \(from --driver-root"):
        nvml_source.load_module(str(tmp_path))
    assert pynvml.nvmlLib is None


def test_a_pci_ids_that_is_not_a_regular_file_is_passed_over(tmp_path: Path, pci_ids: Path) -> None:
    fifo = tmp_path / "fifo.ids"
    os.mkfifo(fifo)
    assert vfio.nvidia_device_names((str(fifo), str(pci_ids)))[0x20F1] == "GA100 [A100 PCIe 40GB]"
    assert vfio.nvidia_device_names((str(tmp_path),)) == {}  # a directory


@pytest.mark.parametrize("count", [-1, 16385, 2**31 - 1])
def test_an_impossible_device_count_fails_the_pass(sysfs: FakeSysfs, count: int) -> None:
    class Lying(FakeCuda):
        def cuDeviceGetCount(self, pointer: Any) -> int:
            pointer._obj.value = count
            return 0

    with pytest.raises(DiscoveryError, match=f"cuDeviceGetCount reported {count} devices"):
        discover(settings_for(sysfs, "tegra"), cuda=Lying([ORIN]))


def test_a_negative_cuda_version_fails_the_pass(sysfs: FakeSysfs) -> None:
    """A C int no label and no snapshot can hold: one error, never a half-labelled version."""
    fake = FakeCuda([ORIN])
    fake.driver_version = -1
    with pytest.raises(DiscoveryError, match="cuDriverGetVersion reported version -1"):
        discover(settings_for(sysfs, "tegra"), cuda=fake)


def test_a_compute_capability_below_0_is_unknown(sysfs: FakeSysfs) -> None:
    """As from NVML: a part below 0 is -1, which a snapshot holds and reads back."""
    from gfd import snapshot as snapshot_format

    found = discover(settings_for(sysfs, "tegra"), cuda=FakeCuda([replace(ORIN, minor=-9)]))
    capability = found.gpus[0].compute_capability
    assert (capability.major, capability.minor) == (8, -1)
    assert snapshot_format.loads(snapshot_format.dumps(found)) == found
