"""NVML discovery against the fake pynvml module: facts, "not here" codes, failures."""

from __future__ import annotations

import ctypes
import inspect
import re
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from gfd.discovery import discover, discover_host_only
from gfd.discovery import nvml as nvml_source
from gfd.errors import DiscoveryError, NvmlUnavailableError, UsageError
from gfd.settings import Settings
from gfd.snapshot import Driver, Fabric, LostGpu, Mig

from .fakes.fake_nvml import (
    FUNCTIONS,
    INVALID_ARGUMENT,
    FakeFabric,
    FakeGpu,
    FakeMigDevice,
    FakeNvml,
)
from .fakes.fake_sysfs import FakeSysfs

A100_BYTES = 40960 * 2**20
CLUSTER = uuid.UUID("7b968a6d-c8aa-45e1-9e07-e1e51be99c31")


def plain_gpu(**changes: object) -> FakeGpu:
    fields: dict[str, object] = {
        "uuid": "GPU-0", "name": "NVIDIA A100-SXM4-40GB", "bus_id": "00000000:07:00.0",
        "memory_total": A100_BYTES,
    }  # fmt: skip
    fields.update(changes)
    return FakeGpu(**fields)  # type: ignore[arg-type]


def one_g(gi_id: int, enum: int = pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE) -> FakeMigDevice:
    return FakeMigDevice(
        gi_id=gi_id, gi_profile_enum=enum, memory_mib=4864, multiprocessors=14, gi_slices=1,
        ci_slices=1, engines=(1, 0, 0, 0, 0),
    )  # fmt: skip


# ------------------------------------------------------------------ the fake itself


def parameters(function: object) -> list[tuple[str, object, object]]:
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_fake_has_pynvmls_signatures(name: str) -> None:
    """Same parameter names, kinds and defaults as the real bindings (types aside)."""
    assert parameters(getattr(FakeNvml().module, name)) == parameters(getattr(pynvml, name))


def test_fake_uses_the_real_error_classes() -> None:
    module = FakeNvml().module
    assert module.NVMLError is pynvml.NVMLError
    assert module.NVMLError_NotSupported is pynvml.NVMLError_NotSupported
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        module.nvmlDeviceGetCount()  # before nvmlInit, as the real library


# ------------------------------------------------------------------ basic facts


def test_one_plain_gpu(settings: Settings) -> None:
    fake = FakeNvml([plain_gpu(compute_capability=(8, 0))])
    found = discover(settings, nvml=fake.module)
    assert found.driver == Driver("550.54.15", 12040)
    (gpu,) = found.gpus
    assert (gpu.index, gpu.uuid, gpu.name) == (0, "GPU-0", "NVIDIA A100-SXM4-40GB")
    assert gpu.pci_bus_id == "0000:07:00.0"
    assert gpu.memory_mib == 40960
    assert (gpu.compute_capability.major, gpu.compute_capability.minor) == (8, 0)
    assert gpu.mig is None  # GetMigMode: NOT_SUPPORTED
    assert gpu.fabric is None  # fabric info: NOT_SUPPORTED
    assert gpu.pci_class is None  # no sysfs entry
    assert fake.init_depth == 0


@pytest.mark.parametrize("cuda", [-1, -12040])
def test_a_negative_cuda_version_fails_the_pass(settings: Settings, cuda: int) -> None:
    """A C int no label and no snapshot can hold (the runtime labels would come out half
    made, and --dump-snapshot would write what --snapshot-file refuses): one error."""
    fake = FakeNvml([plain_gpu()], cuda_version=cuda)
    with pytest.raises(
        DiscoveryError, match=f"nvmlSystemGetCudaDriverVersion reported version {cuda}$"
    ):
        discover(settings, nvml=fake.module)
    assert fake.init_depth == 0  # NVML shut down all the same


@pytest.mark.parametrize(("answer", "held"), [((8, -5), (8, -1)), ((-7, 0), (-1, 0))])
def test_a_compute_capability_below_0_is_unknown(
    settings: Settings, answer: tuple[int, int], held: tuple[int, int]
) -> None:
    """C ints: a part below 0 is held as upstream's unknown, -1, which a snapshot holds
    (--dump-snapshot's output reads back) and no label shows; the rest is labelled."""
    from gfd import snapshot as snapshot_format
    from gfd.config import Config
    from gfd.labels import build

    fake = FakeNvml([plain_gpu(compute_capability=answer)])
    found = discover(settings, nvml=fake.module)
    capability = found.gpus[0].compute_capability
    assert (capability.major, capability.minor) == held
    assert snapshot_format.loads(snapshot_format.dumps(found)) == found
    labels = build(found, "none", Config(), None).labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert "nvidia.com/gpu.compute.minor" not in labels
    assert ("nvidia.com/gpu.compute.major" in labels) == (held[0] >= 0)


def test_old_bindings_returning_bytes(settings: Settings) -> None:
    fake = FakeNvml([plain_gpu(uuid="GPU-b", name="Tesla T4")], bytes_strings=True)
    found = discover(settings, nvml=fake.module)
    assert found.driver is not None and found.driver.version == "550.54.15"
    assert (found.gpus[0].uuid, found.gpus[0].name) == ("GPU-b", "Tesla T4")


@pytest.mark.parametrize("bytes_strings", [False, True], ids=["current-bindings", "old-bindings"])
@pytest.mark.parametrize(("field", "raw"), [
    ("name", b"NVIDIA A100\xff\xfe-SXM4"), ("uuid", b"GPU-\xc3("),
    ("bus_id", b"00000000:07:00.\xff"), ("driver_version", b"550.\x8054.15"),
])  # fmt: skip
def test_driver_strings_that_are_not_utf8_get_replacement_characters(
    settings: Settings, field: str, raw: bytes, bytes_strings: bool
) -> None:
    """Current bindings decode strictly and raise UnicodeDecodeError; upstream labels
    whatever bytes the driver wrote, and old bindings' bytes are read with replacements."""
    gpu = plain_gpu(**({} if field == "driver_version" else {field: raw}))
    version = raw if field == "driver_version" else "550.54.15"
    fake = FakeNvml([gpu], driver_version=version, bytes_strings=bytes_strings)
    found = discover(settings, nvml=fake.module)
    read = {
        "name": found.gpus[0].name, "uuid": found.gpus[0].uuid, "bus_id": found.gpus[0].pci_bus_id,
        "driver_version": found.driver and found.driver.version,
    }  # fmt: skip
    assert read[field] == raw.decode("utf-8", "replace")


@pytest.mark.parametrize(
    ("nvml_form", "sysfs_form"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00000000:B7:00.0", "0000:b7:00.0"),
        ("00000001:0A:1F.3", "0001:0a:1f.3"),
        ("00010000:01:00.0", "10000:01:00.0"),  # VMD domains keep their digits, as in sysfs
        ("0000:07:00.0", "0000:07:00.0"),
        ("not-a-bus-id", "not-a-bus-id"),
        ("", ""),
    ],
)
def test_bus_id_normalisation(nvml_form: str, sysfs_form: str) -> None:
    assert nvml_source.normalize_bus_id(nvml_form) == sysfs_form


def test_pci_class_comes_from_sysfs(settings: Settings) -> None:
    FakeSysfs(Path(settings.sysfs_root)).add_device("0000:b7:00.0", pci_class=0x030000)
    fake = FakeNvml([plain_gpu(bus_id="00000000:B7:00.0")])
    assert discover(settings, nvml=fake.module).gpus[0].pci_class == 0x030000


@pytest.mark.parametrize(
    ("total", "mib"), [(None, None), (81559 * 2**20 + 123, 81559)], ids=["unknown", "rounded"]
)
def test_memory_unknown_is_null_and_rounds_down_to_mib(
    settings: Settings, total: int | None, mib: int | None
) -> None:
    fake = FakeNvml([plain_gpu(memory_total=total)])
    assert discover(settings, nvml=fake.module).gpus[0].memory_mib == mib


def test_no_gpus(settings: Settings) -> None:
    fake = FakeNvml([])
    found = discover(settings, nvml=fake.module)
    assert found.driver is not None and found.gpus == ()


def test_gpus_in_index_order(settings: Settings) -> None:
    fake = FakeNvml([plain_gpu(uuid=f"GPU-{i}", bus_id=f"00000000:{i:02X}:00.0") for i in range(4)])
    found = discover(settings, nvml=fake.module)
    assert [(g.index, g.uuid) for g in found.gpus] == [(i, f"GPU-{i}") for i in range(4)]


# ------------------------------------------------------------------ MIG


@pytest.mark.parametrize(
    ("mode", "slot_calls"), [(0, 0), (1, 7)], ids=["capable-but-disabled", "enabled-no-devices"]
)
def test_mig_mode_without_devices(settings: Settings, mode: int, slot_calls: int) -> None:
    fake = FakeNvml([plain_gpu(mig_mode=mode)])
    assert discover(settings, nvml=fake.module).gpus[0].mig == Mig(enabled=bool(mode))
    assert fake.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == slot_calls


@pytest.mark.parametrize("gap_error", [pynvml.NVML_ERROR_NOT_FOUND, INVALID_ARGUMENT])
def test_mig_slots_with_gaps(settings: Settings, gap_error: int) -> None:
    slots = {1: one_g(1), 4: one_g(2), 6: one_g(3, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)}
    fake = FakeNvml([plain_gpu(mig_mode=1, mig_slots=slots, empty_slot_error=gap_error)])
    fake.gpus[0].supported_profile_enums |= {pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1}
    mig = discover(settings, nvml=fake.module).gpus[0].mig
    assert mig is not None
    assert [d.profile for d in mig.devices] == ["1g.5gb", "1g.5gb", "1g.5gb+me"]
    device = mig.devices[0]
    assert (device.memory_mib, device.multiprocessors) == (4864, 14)
    assert (device.slices.gi, device.slices.ci) == (1, 1)
    assert (device.engines.copy, device.engines.decoder) == (1, 0)


def test_other_slot_errors_fail_the_pass(settings: Settings) -> None:
    gpu = plain_gpu(mig_mode=1, empty_slot_error=pynvml.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(DiscoveryError, match="GPU 0 in nvmlDeviceGetMigDeviceHandleByIndex"):
        discover(settings, nvml=FakeNvml([gpu]).module)


def test_compute_instances_share_a_gpu_instance(settings: Settings) -> None:
    half = replace(  # a fake's own dataclass
        one_g(1, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE),
        memory_mib=9856,
        gi_slices=2,
        ci_slices=1,
    )
    fake = FakeNvml([plain_gpu(mig_mode=1, mig_slots={0: half, 1: half})])
    mig = discover(settings, nvml=fake.module).gpus[0].mig
    assert mig is not None and [d.profile for d in mig.devices] == ["1c.2g.10gb"] * 2
    assert fake.calls["nvmlDeviceGetGpuInstanceById"] == 1  # asked once per GPU instance


def test_mig_devices_need_the_parent_memory(settings: Settings) -> None:
    fake = FakeNvml([plain_gpu(memory_total=None, mig_mode=1, mig_slots={0: one_g(1)})])
    with pytest.raises(DiscoveryError, match="GPU 0: MIG profile names need"):
        discover(settings, nvml=fake.module)
    assert fake.init_depth == 0


def test_profile_id_not_found(settings: Settings) -> None:
    gpu = plain_gpu(mig_mode=1, mig_slots={0: one_g(1)}, supported_profile_enums=frozenset())
    with pytest.raises(DiscoveryError, match="no GPU instance profile has id 19"):
        discover(settings, nvml=FakeNvml([gpu]).module)


def test_profile_info_falls_back_to_v1(settings: Settings) -> None:
    """A driver without nvmlDeviceGetGpuInstanceProfileInfoV: the v1 struct is used."""
    gpu = plain_gpu(mig_mode=1, mig_slots={0: one_g(1), 1: one_g(2)})
    fake = FakeNvml([gpu], missing_symbols={"nvmlDeviceGetGpuInstanceProfileInfoV"})
    mig = discover(settings, nvml=fake.module).gpus[0].mig
    assert mig is not None and [d.profile for d in mig.devices] == ["1g.5gb", "1g.5gb"]


# ------------------------------------------------------------------ fabric


def fabric_gpu(**fabric: object) -> FakeGpu:
    values: dict[str, object] = {"cluster_uuid": CLUSTER.bytes, "clique_id": 7}
    values.update(fabric)
    return plain_gpu(fabric=FakeFabric(**values))  # type: ignore[arg-type]


def test_fabric_attached(settings: Settings) -> None:
    fake = FakeNvml([fabric_gpu()])
    gpu = discover(settings, nvml=fake.module).gpus[0]
    assert gpu.fabric == Fabric(str(CLUSTER), 7)
    assert fake.calls["nvmlDeviceGetGpuFabricInfoV"] == 1
    assert fake.calls["nvmlDeviceGetGpuFabricInfo"] == 0


@pytest.mark.parametrize("fabric", [
    {"state": pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS},
    {"state": pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED},
    {"status": pynvml.NVML_ERROR_TIMEOUT},
    {"cluster_uuid": bytes(16)},
])  # fmt: skip
def test_fabric_not_attached(settings: Settings, fabric: dict[str, object]) -> None:
    assert discover(settings, nvml=FakeNvml([fabric_gpu(**fabric)]).module).gpus[0].fabric is None


def test_fabric_uuid_is_canonical_lower_case(settings: Settings) -> None:
    raw = bytes.fromhex("ABCDEF0123456789ABCDEF0123456789")
    gpu = discover(settings, nvml=FakeNvml([fabric_gpu(cluster_uuid=raw)]).module).gpus[0]
    assert gpu.fabric is not None
    assert gpu.fabric.cluster_uuid == "abcdef01-2345-6789-abcd-ef0123456789"


V, PLAIN = "nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"


@pytest.mark.parametrize(("functions", "symbols", "found", "plain_calls"), [
    ({V}, set(), True, 1), (set(), {V}, True, 1), ({PLAIN}, {V}, False, 0),
], ids=["bindings-lack-v", "driver-lacks-v", "absent-from-both"])  # fmt: skip
def test_fabric_plain_call_when_v_is_missing(
    settings: Settings, functions: set[str], symbols: set[str], found: bool, plain_calls: int
) -> None:
    fake = FakeNvml([fabric_gpu()], missing_functions=functions, missing_symbols=symbols)
    fabric = discover(settings, nvml=fake.module).gpus[0].fabric
    assert fabric == (Fabric(str(CLUSTER), 7) if found else None)
    assert fake.calls[PLAIN] == plain_calls


def test_fabric_info_from_a_c_char_uuid_field() -> None:
    """Bindings that declare clusterUuid as c_char[16] must not lose bytes after a NUL."""

    class CharInfo(ctypes.Structure):
        _fields_ = [
            ("clusterUuid", ctypes.c_char * 16), ("status", ctypes.c_uint),
            ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint),
        ]  # fmt: skip

    raw = bytes([0] * 8 + [1] * 8)
    info = CharInfo(b"", 0, 3, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED)
    ctypes.memmove(ctypes.addressof(info) + CharInfo.clusterUuid.offset, raw, 16)
    assert info.clusterUuid == b""  # what reading the field would give
    fabric = nvml_source.fabric_from_info(info)
    assert fabric == Fabric(str(uuid.UUID(bytes=raw)), 3)


# ------------------------------------------------------------------ NVML unavailable


def test_library_missing(settings: Settings) -> None:
    with pytest.raises(NvmlUnavailableError) as caught:
        discover(settings, nvml=FakeNvml(library_missing=True).module)
    message = str(caught.value)
    assert "\n" not in message
    assert "libnvidia-ml.so.1 could not be loaded" in message
    for hint in ("driver is installed", "NVIDIA container runtime", "NVIDIA_VISIBLE_DEVICES"):
        assert hint in message


@pytest.mark.parametrize(("code", "text"), [
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "version mismatch"),
])  # fmt: skip
def test_init_failing(settings: Settings, code: int, text: str) -> None:
    fake = FakeNvml(init_error=code)
    with pytest.raises(NvmlUnavailableError, match=f"nvmlInit failed: .*{text}") as caught:
        discover(settings, nvml=fake.module)
    assert "NVIDIA_VISIBLE_DEVICES" in str(caught.value)
    assert fake.calls["nvmlShutdown"] == 0  # nothing to shut down


def test_bindings_missing(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(NvmlUnavailableError, match="nvidia-ml-py"):
        discover(settings)


def test_import_seam_picks_up_a_module_in_sys_modules(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeNvml([plain_gpu()])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module)
    assert discover(settings).gpus[0].uuid == "GPU-0"
    assert fake.calls["nvmlInit"] == fake.calls["nvmlShutdown"] == 1


def test_real_bindings_without_a_driver(settings: Settings) -> None:
    """This test machine has no NVIDIA driver: the real pynvml cannot load the library."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("an NVIDIA driver is installed here")
    with pytest.raises(NvmlUnavailableError, match=r"libnvidia-ml\.so\.1 could not be loaded"):
        discover(settings)


def test_unknown_strategy(settings: Settings) -> None:
    bad = replace(settings, device_discovery_strategy="bogus")
    with pytest.raises(UsageError, match="--device-discovery-strategy"):
        discover(bad, nvml=FakeNvml().module)


@pytest.mark.parametrize("strategy", ["auto", "nvml"])
def test_both_strategies_read_nvml(settings: Settings, strategy: str) -> None:
    fake = FakeNvml([plain_gpu()])
    chosen = replace(settings, device_discovery_strategy=strategy)
    assert len(discover(chosen, nvml=fake.module).gpus) == 1


# ------------------------------------------------------------------ failures mid-pass


@pytest.mark.parametrize("after_calls", [0, 1, 3, 6, 12, 20])
def test_gpu_lost_mid_pass(settings: Settings, after_calls: int) -> None:
    """A GPU lost at any call is recorded as lost; the others are still read
    (this test used to expect the whole discovery to fail)."""
    slots = {i: one_g(i + 1) for i in range(7)}
    gpus = [
        plain_gpu(uuid=f"GPU-{i}", bus_id=f"00000000:{i:02X}:00.0", mig_mode=1, mig_slots=slots)
        for i in range(3)
    ]
    fake = FakeNvml(gpus)
    fake.lose_gpu(1, after_calls=after_calls)
    found = discover(settings, nvml=fake.module)
    assert [gpu.uuid for gpu in found.gpus] == ["GPU-0", "GPU-2"]
    assert all(gpu.mig is not None and len(gpu.mig.devices) == 7 for gpu in found.gpus)
    (lost,) = found.lost
    assert lost.index == 1 and lost.pci_bus_id in ("", "0000:01:00.0")
    assert re.fullmatch(r"NVML error on GPU 1 in nvml\w+: GPU is lost", lost.reason)
    assert fake.init_depth == 0  # nvmlShutdown ran


def test_a_gpu_missing_from_nvml_but_on_the_pci_bus_is_lost(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs = FakeSysfs(Path(settings.sysfs_root))
    for bus in ("0000:01:00.0", "0000:02:00.0", "0000:03:00.0"):
        sysfs.add_device(bus, pci_class=0x030200)
    sysfs.add_device("0000:04:00.0", pci_class=0x068000)  # an NVSwitch: not a GPU
    sysfs.add_device("0000:05:00.0", vendor="0x8086", pci_class=0x030000)  # not NVIDIA
    gpus = [plain_gpu(uuid=f"GPU-{i}", bus_id=f"00000000:{i:02X}:00.0") for i in (1, 3)]
    found = discover(settings, nvml=FakeNvml(gpus).module)
    assert len(found.gpus) == 2
    assert found.lost == (
        LostGpu(pci_bus_id="0000:02:00.0", reason="on the PCI bus but not listed by NVML"),
    )
    # a container that sees only some GPUs: NVML rightly lists fewer
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "GPU-1,GPU-3")
    assert discover(settings, nvml=FakeNvml(gpus).module).lost == ()


def test_error_reading_the_driver(settings: Settings) -> None:
    fake = FakeNvml([plain_gpu()], missing_symbols={"nvmlSystemGetCudaDriverVersion"})
    with pytest.raises(DiscoveryError, match="nvmlSystemGetCudaDriverVersion: Function Not Found"):
        discover(settings, nvml=fake.module)
    assert fake.init_depth == 0


def test_shutdown_failure_does_not_hide_the_result(settings: Settings) -> None:
    fake = FakeNvml([plain_gpu()])

    def failing_shutdown() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    fake.module.nvmlShutdown = failing_shutdown
    assert len(discover(settings, nvml=fake.module).gpus) == 1


def test_retry_after_the_driver_appears(settings: Settings) -> None:
    """Each discovery initialises NVML afresh, so a later pass sees a driver that came up."""
    fake = FakeNvml([plain_gpu()], library_missing=True)
    with pytest.raises(NvmlUnavailableError):
        discover(settings, nvml=fake.module)
    fake.library_missing = False
    assert len(discover(settings, nvml=fake.module).gpus) == 1
    assert len(discover(settings, nvml=fake.module).gpus) == 1
    assert fake.calls["nvmlInit"] == 3 and fake.calls["nvmlShutdown"] == 2
    assert fake.init_depth == 0


# ------------------------------------------------------------------ host only


def test_host_only(settings: Settings, tmp_path: Path) -> None:
    machine = tmp_path / "product_name"
    machine.write_text("DGXA100 920-23687-2530-000\n")
    FakeSysfs(Path(settings.sysfs_root)).add_device("0000:00:00.0", vendor="0x8086")
    found = discover_host_only(replace(settings, machine_type_file=str(machine)))
    assert found.driver is None and found.gpus == ()
    assert found.machine == "DGXA100 920-23687-2530-000"
    assert found.vgpu is not None and found.vgpu.devices == ()
