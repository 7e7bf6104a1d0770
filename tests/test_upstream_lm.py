"""Upstream GFD's own label tables (NVIDIA/k8s-device-plugin ``internal/lm/*_test.go``) as
table-driven tests of ours: upstream's mocked devices (``internal/resource/testing``) written
as snapshots, the whole engine run, and the labels of upstream's labeler under test compared
whole with its expected map.

The mocks: ``rt.NewFullGPU()`` is ``MOCKMODEL``, 300 MiB, compute capability 8.0, MIG
neither capable nor enabled, PCI class 0x030000; ``rt.NewMigEnabledDevice(migs...)`` the
same, MIG-capable and enabled, compute capability **0.0** (no family/compute labels);
``rt.NewMigDevice(gi, ci, gb, attrs...)`` profile ``<gi>g.<gb>gb``, memory ``gb``, slices
gi/ci, multiprocessors and engines 0 unless given; the manager: driver ``400.300``, CUDA 8.0.
Where the stored tables predate the ``sharing-strategy`` label, the expected maps add it as
upstream's ``baseLabeler`` (internal/lm/resource.go) emits it: the active strategy when
replicas > 1, else ``none``; ``""`` in the single-strategy INVALID set (SPEC §5.2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gfd.config import Config, ReplicatedResource, ResourcePattern, Sharing, wildcard_regex
from gfd.errors import ConfigError
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
from tests.helpers import labels_of, table

P = "nvidia.com/"
MOCKMODEL = "MOCKMODEL"
MOCK_DRIVER = Driver("400.300", 8000)  # GetDriverVersion "400.300", GetCudaDriverVersion 8.0
GRAPHICS = 0x030000
COMPUTE = 0x030200
ENGINES = ("copy", "decoder", "encoder", "jpeg", "ofa")

# ------------------------------------------------------------------ upstream's mocks


def new_mig_device(gi: int, ci: int, gb: int, **attributes: int) -> MigDevice:
    """rt.NewMigDevice(gi, ci, gb, attributes...)."""
    return MigDevice(
        profile=f"{gi}g.{gb}gb", memory_mib=gb,
        multiprocessors=attributes.get("multiprocessors", 0), slices=MigSlices(gi, ci),
        engines=MigEngines(**{engine: attributes.get(engine, 0) for engine in ENGINES}),
    )  # fmt: skip


@dataclass(frozen=True)
class Mock:
    """One mocked device; ``index`` is given by its place in the manager's list."""

    mig: Mig | None = None
    cc: tuple[int, int] = (8, 0)
    pci_class: int | None = GRAPHICS
    name: str = MOCKMODEL
    memory: int | None = 300
    fabric: Fabric | None = None


def full_gpu(**changes: Any) -> Mock:
    """rt.NewFullGPU()."""
    return Mock(**changes)


def mig_enabled_device(*migs: MigDevice) -> Mock:
    """rt.NewMigEnabledDevice(migs...): MIG on, compute capability 0.0."""
    return Mock(mig=Mig(True, migs), cc=(0, 0))


def manager(*mocks: Mock, machine: str | None = None, vgpu: Vgpu | None = None) -> Snapshot:
    """rt.NewManagerMockWithDevices(devices...)."""
    gpus = tuple(
        Gpu(
            index=index, uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000", name=mock.name,
            pci_bus_id=f"0000:{index + 1:02x}:00.0", pci_class=mock.pci_class,
            memory_mib=mock.memory, compute_capability=ComputeCapability(*mock.cc), mig=mock.mig,
            fabric=mock.fabric,
        )
        for index, mock in enumerate(mocks)
    )  # fmt: skip
    return Snapshot(driver=MOCK_DRIVER, machine=machine, vgpu=vgpu, gpus=gpus)


@dataclass(frozen=True)
class TimeSlicing:
    """spec.TimeSlicing{Resources: [...]}: (name, replicas, renamed) per entry."""

    resources: tuple[tuple[str, int, bool], ...] = ()
    mps: bool = False
    mig_names: dict[str, str] = field(default_factory=dict)  # MIG profile -> resource name

    def config(self) -> Config:
        entries = tuple(ReplicatedResource(P + n, r, renamed) for n, r, renamed in self.resources)
        replicated = any(r > 1 for _, r, _ in self.resources)
        strategy = ("mps" if self.mps else "time-slicing") if replicated else "none"
        patterns = tuple(
            ResourcePattern(profile, name, wildcard_regex(profile))
            for profile, name in self.mig_names.items()
        )
        return Config(mig_patterns=patterns, sharing=Sharing(strategy, entries))


NO_SHARING = TimeSlicing()
GPU_TIMES_2 = TimeSlicing((("gpu", 2, False),))

# ------------------------------------------------------------- what a labeler produces

NOT_RESOURCE_LABELS = {P + "gpu.machine", P + "gpu.mode", P + "gpu.clique"}


def resource_labeler(labels: dict[str, str]) -> dict[str, str]:
    """What upstream's NewResourceLabeler produces: every gpu.* and mig-* label (but the
    machine-type, GPU-mode and IMEX labelers' gpu.machine, gpu.mode, gpu.clique) and
    mig.strategy."""
    return {
        key: value for key, value in labels.items()
        if (key.startswith((P + "gpu.", P + "mig-")) or key == P + "mig.strategy")
        and key not in NOT_RESOURCE_LABELS
    }  # fmt: skip


def one_resource(labels: dict[str, str], resource: str) -> dict[str, str]:
    """What one upstream resource labeler (NewGPUResourceLabeler, NewMIGResourceLabeler)
    produces: the labels of one resource."""
    prefix = f"{P}{resource}."
    return {
        k: v for k, v in labels.items() if k.startswith(prefix) and k not in NOT_RESOURCE_LABELS
    }


def only(labels: dict[str, str], *keys: str) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k[len(P) :] in keys}


def ns(labels: dict[str, str]) -> dict[str, str]:
    """Upstream writes the full keys; the tables below leave out the prefix."""
    return {P + key: value for key, value in labels.items()}


# ---------------------------------------------------------------- expected fragments

ARCH_8_0 = {"gpu.compute.major": "8", "gpu.compute.minor": "0", "gpu.family": "ampere"}


def gpu_labels(count: int, replicas: int, product: str, strategy: str, memory: int = 300):
    return {
        "gpu.count": str(count), "gpu.replicas": str(replicas), "gpu.memory": str(memory),
        "gpu.product": product, "gpu.sharing-strategy": strategy,
    }  # fmt: skip


def mig_labels(
    resource: str, count: int, replicas: int, product: str, strategy: str, memory: int, **attr
):
    labels = {
        "count": str(count), "replicas": str(replicas), "memory": str(memory), "product": product,
        "sharing-strategy": strategy, "multiprocessors": str(attr.get("multiprocessors", 0)),
        "slices.gi": str(attr["gi"]), "slices.ci": str(attr["ci"]),
        **{f"engines.{engine}": str(attr.get(engine, 0)) for engine in ENGINES},
    }  # fmt: skip
    return {f"{resource}.{k}": v for k, v in labels.items()}


INVALID = {
    "gpu.count": "0", "gpu.replicas": "0", "gpu.memory": "0",
    "gpu.product": "MOCKMODEL-MIG-INVALID", "gpu.sharing-strategy": "", "mig.strategy": "single",
}  # fmt: skip

# =========================================================================================
# internal/lm/mig-strategy_test.go, TestMigStrategyNoneLabels
# (NewResourceLabeler, migStrategy none, config.Sharing.TimeSlicing = tc.timeSlicing)

MIG_STRATEGY_NONE = [
    ("no devices returns empty labels", (), NO_SHARING, {}),
    ("single non-mig device returns non-mig (none) labels", (full_gpu(),), NO_SHARING,
     ARCH_8_0 | gpu_labels(1, 1, "MOCKMODEL", "none")),
    ("sharing is applied to single device", (full_gpu(),), GPU_TIMES_2,
     ARCH_8_0 | gpu_labels(1, 2, "MOCKMODEL-SHARED", "time-slicing")),
    ("sharing is applied to multiple devices", (full_gpu(), full_gpu()), GPU_TIMES_2,
     ARCH_8_0 | gpu_labels(2, 2, "MOCKMODEL-SHARED", "time-slicing")),
    ("sharing is not applied to single MIG device; replicas is zero", (mig_enabled_device(),),
     GPU_TIMES_2, gpu_labels(1, 0, "MOCKMODEL", "none")),
    ("sharing is not applied to muliple MIG device; replicas is zero",
     (mig_enabled_device(), mig_enabled_device()), GPU_TIMES_2,
     gpu_labels(2, 0, "MOCKMODEL", "none")),
    # the full GPU's labeler (with sharing, compute capability 8.0) overrides the
    # MIG-enabled one's (newGPULabelers appends the full GPUs last)
    ("sharing is applied to MIG device and non-MIG device", (mig_enabled_device(), full_gpu()),
     GPU_TIMES_2, ARCH_8_0 | gpu_labels(2, 2, "MOCKMODEL-SHARED", "time-slicing")),
]  # fmt: skip


@pytest.mark.parametrize(("devices", "sharing", "expected"), table(MIG_STRATEGY_NONE))
def test_mig_strategy_none_labels(
    devices: tuple[Mock, ...], sharing: TimeSlicing, expected: dict[str, str]
) -> None:
    labels = labels_of(manager(*devices), "none", sharing.config())
    assert resource_labeler(labels) == ns(expected)


# =========================================================================================
# internal/lm/mig-strategy_test.go, TestMigStrategySingleLabels
# (NewResourceLabeler, migStrategy single, no sharing); the last four rows are the same
# INVALID layouts under time-slicing: SPEC §5.2 (single) asks for an empty
# sharing-strategy whatever the sharing, with product, count, replicas, memory as upstream

A_1G = new_mig_device(1, 2, 100)
ATTRS = {"multiprocessors": 12, "copy": 13, "decoder": 14, "encoder": 15, "jpeg": 16, "ofa": 17}
A_1G_ATTRS = new_mig_device(1, 2, 100, **ATTRS)

SINGLE = {"mig.strategy": "single"}
TIMES_4, TIMES_4_RENAMED = TimeSlicing((("gpu", 4, False),)), TimeSlicing((("gpu", 4, True),))
A_1G_3G = mig_enabled_device(A_1G, new_mig_device(3, 4, 100))
MIG_STRATEGY_SINGLE = [
    ("no devices returns empty labels", (), NO_SHARING, {}),
    ("single non-mig device returns non-mig (none) labels", (full_gpu(),), NO_SHARING,
     ARCH_8_0 | gpu_labels(1, 1, "MOCKMODEL", "none") | SINGLE),
    ("multiple non-mig device returns non-mig (none) labels", (full_gpu(), full_gpu()),
     NO_SHARING, ARCH_8_0 | gpu_labels(2, 1, "MOCKMODEL", "none") | SINGLE),
    ("single mig-enabled device returns mig labels", (mig_enabled_device(A_1G),), NO_SHARING,
     mig_labels("gpu", 1, 1, "MOCKMODEL-MIG-1g.100gb", "none", 100, gi=1, ci=2) | SINGLE),
    ("multiple mig-enabled devices returns mig labels",
     (mig_enabled_device(A_1G_ATTRS), mig_enabled_device(A_1G_ATTRS)), NO_SHARING,
     mig_labels("gpu", 2, 1, "MOCKMODEL-MIG-1g.100gb", "none", 100, gi=1, ci=2, **ATTRS)
     | SINGLE),
    ("empty mig devices returns MIG invalid label", (mig_enabled_device(),), NO_SHARING, INVALID),
    ("mixed mig config returns MIG invalid label", (A_1G_3G,), NO_SHARING, INVALID),
    ("mixed mig enabled and disabled returns invalid config",
     (mig_enabled_device(A_1G), full_gpu()), NO_SHARING, ARCH_8_0 | INVALID),
    ("enabled, disabled, and empty returns invalid config",
     (mig_enabled_device(A_1G), full_gpu(), mig_enabled_device()), NO_SHARING,
     ARCH_8_0 | INVALID),
    ("time-sliced: empty mig devices returns MIG invalid label", (mig_enabled_device(),),
     TIMES_4, INVALID),
    ("time-sliced: mixed mig config returns MIG invalid label", (A_1G_3G,), TIMES_4, INVALID),
    ("time-sliced: mixed mig enabled and disabled returns invalid config",
     (mig_enabled_device(A_1G), full_gpu()), TIMES_4, ARCH_8_0 | INVALID),
    ("time-sliced and renamed: enabled, disabled, and empty returns invalid config",
     (mig_enabled_device(A_1G), full_gpu(), mig_enabled_device()), TIMES_4_RENAMED,
     ARCH_8_0 | INVALID),
]  # fmt: skip


@pytest.mark.parametrize(("devices", "sharing", "expected"), table(MIG_STRATEGY_SINGLE))
def test_mig_strategy_single_labels(
    devices: tuple[Mock, ...], sharing: TimeSlicing, expected: dict[str, str]
) -> None:
    labels = labels_of(manager(*devices), "single", sharing.config())
    assert resource_labeler(labels) == ns(expected)


# =========================================================================================
# internal/lm/resource_test.go, TestGPUResourceLabeler
# (NewGPUResourceLabeler(config, rt.NewFullGPU(), count): `count` identical full GPUs)

GPU_RESOURCE_LABELER = [
    ("zero count returns empty", 0, NO_SHARING, {}),
    ("no sharing", 1, NO_SHARING, ARCH_8_0 | gpu_labels(1, 1, "MOCKMODEL", "none")),
    ("sharing ignores non-matching resource", 1, TimeSlicing((("not-gpu", 2, False),)),
     ARCH_8_0 | gpu_labels(1, 1, "MOCKMODEL", "none")),
    ("shared appends suffix and doubles count", 1, GPU_TIMES_2,
     ARCH_8_0 | gpu_labels(1, 2, "MOCKMODEL-SHARED", "time-slicing")),
    ("renamed does not append suffix and doubles count", 1, TimeSlicing((("gpu", 2, True),)),
     ARCH_8_0 | gpu_labels(1, 2, "MOCKMODEL", "time-slicing")),
]  # fmt: skip


@pytest.mark.parametrize(("count", "sharing", "expected"), table(GPU_RESOURCE_LABELER))
def test_gpu_resource_labeler(count: int, sharing: TimeSlicing, expected: dict[str, str]) -> None:
    labels = labels_of(manager(*[full_gpu()] * count), "none", sharing.config())
    assert one_resource(labels, "gpu") == ns(expected)


# =========================================================================================
# internal/lm/resource_test.go, TestMigResourceLabeler
# (NewMIGResourceLabeler(resourceName, config, rt.NewMigDevice(1, 2, 300), count) on a
# MIG-enabled parent: resource "nvidia.com/gpu" is the single strategy's, any other name a
# mixed-strategy resource; upstream's table names it mig-1g.1gb while the mock's profile is
# 1g.300gb, so a resources.mig pattern (SPEC §5.3) gives the mock's profile that name)

MIG_300 = new_mig_device(1, 2, 300)
MIG_1G_1GB = {"1g.300gb": "mig-1g.1gb"}

SHARED_300 = "MOCKMODEL-MIG-1g.300gb-SHARED"
MIG_RESOURCE_LABELER = [
    ("zero count returns empty", "gpu", 0, NO_SHARING, {}),
    ("no sharing", "gpu", 1, NO_SHARING,
     mig_labels("gpu", 1, 1, "MOCKMODEL-MIG-1g.300gb", "none", 300, gi=1, ci=2)),
    ("shared appends suffix and doubles count", "gpu", 1, GPU_TIMES_2,
     mig_labels("gpu", 1, 2, SHARED_300, "time-slicing", 300, gi=1, ci=2)),
    ("renamed does not append suffix and doubles count", "gpu", 1,
     TimeSlicing((("gpu", 2, True),)),
     mig_labels("gpu", 1, 2, "MOCKMODEL-MIG-1g.300gb", "time-slicing", 300, gi=1, ci=2)),
    ("mig mixed appends shared", "mig-1g.1gb", 1,
     TimeSlicing((("gpu", 2, True), ("mig-1g.1gb", 2, False)), mig_names=MIG_1G_1GB),
     mig_labels("mig-1g.1gb", 1, 2, SHARED_300, "time-slicing", 300, gi=1, ci=2)),
    ("mig mixed rename does not append", "mig-1g.1gb", 1,
     TimeSlicing((("mig-1g.1gb", 2, True),), mig_names=MIG_1G_1GB),
     mig_labels("mig-1g.1gb", 1, 2, "MOCKMODEL-MIG-1g.300gb", "time-slicing", 300, gi=1, ci=2)),
]  # fmt: skip


@pytest.mark.parametrize(("resource", "count", "sharing", "expected"), table(MIG_RESOURCE_LABELER))
def test_mig_resource_labeler(
    resource: str, count: int, sharing: TimeSlicing, expected: dict[str, str]
) -> None:
    devices = [mig_enabled_device(*[MIG_300] * count)] if count else []
    strategy = "single" if resource == "gpu" else "mixed"
    labels = labels_of(manager(*devices), strategy, sharing.config())
    assert one_resource(labels, resource) == ns(expected)


# =========================================================================================
# internal/lm/nvml_test.go, TestMigCapabilityLabeler (newMigCapabilityLabeler)

MIG_CAPABILITY = [
    ("no devices returns empty labels", (), {}),
    ("single non-mig capable device returns mig.capable as false", (full_gpu(),), "false"),
    ("multiple non-mig capable devices returns mig.capable as false", (full_gpu(), full_gpu()),
     "false"),
    ("single mig capable device returns mig.capable as true", (mig_enabled_device(),), "true"),
    ("one mig capable device among multiple returns mig.capable as true",
     (full_gpu(), mig_enabled_device()), "true"),
]  # fmt: skip


@pytest.mark.parametrize(("devices", "expected"), table(MIG_CAPABILITY))
def test_mig_capability_labeler(devices: tuple[Mock, ...], expected: Any) -> None:
    labels = only(labels_of(manager(*devices), "none", Config()), "mig.capable")
    assert labels == ({} if expected == {} else ns({"mig.capable": expected}))


# =========================================================================================
# internal/lm/nvml_test.go, TestSharingLabeler (newSharingLabeler).  The last row: newer
# upstream (internal/lm/nvml.go, isMPSCapable) fails with errMPSSharingNotSupported "for
# mig devices" where the stored table still expected "false"; SPEC §5.1 makes it the fatal
# ConfigError "MPS sharing is not supported for MIG devices".

SHARING_LABELER = [
    ("nil config", (full_gpu(),), NO_SHARING, "false"),
    ("empty config", (full_gpu(),), TimeSlicing(), "false"),
    ("config with timeslicing replicas", (full_gpu(),), GPU_TIMES_2, "false"),
    ("config with no mps replicas", (full_gpu(),), TimeSlicing((("gpu", 1, False),), mps=True),
     "false"),
    ("config with mps replicas no-mig-devices", (full_gpu(),),
     TimeSlicing((("gpu", 2, False),), mps=True), "true"),
    ("config with mps replicas mig-devices", (mig_enabled_device(),),
     TimeSlicing((("gpu", 2, False),), mps=True), ConfigError),
]  # fmt: skip


@pytest.mark.parametrize(("devices", "sharing", "expected"), table(SHARING_LABELER))
def test_sharing_labeler(devices: tuple[Mock, ...], sharing: TimeSlicing, expected: Any) -> None:
    if expected is ConfigError:
        with pytest.raises(ConfigError, match="MPS sharing is not supported for MIG devices"):
            labels_of(manager(*devices), "none", sharing.config())
        return
    labels = only(labels_of(manager(*devices), "none", sharing.config()), "mps.capable")
    assert labels == ns({"mps.capable": expected})


# =========================================================================================
# internal/lm/nvml.go, newGPUModeLabeler / getModeForClasses: the set of PCI classes of
# all devices; one class 0x030000 graphics, 0x030200 compute, anything else (several
# classes, another class, a class that cannot be read) unknown

GPU_MODE = [
    ("one graphics device", (GRAPHICS,), "graphics"),
    ("one compute device", (COMPUTE,), "compute"),
    ("two compute devices", (COMPUTE, COMPUTE), "compute"),
    ("graphics and compute devices", (GRAPHICS, COMPUTE), "unknown"),
    ("compute and graphics devices", (COMPUTE, GRAPHICS), "unknown"),
    ("another display class", (0x038000,), "unknown"),
    ("class unreadable", (None,), "unknown"),
    ("one class unreadable", (COMPUTE, None), "unknown"),
    ("MIG-enabled devices count too", (COMPUTE, "mig-graphics"), "unknown"),
]


@pytest.mark.parametrize(("classes", "expected"), table(GPU_MODE))
def test_gpu_mode_labeler(classes: tuple[Any, ...], expected: str) -> None:
    mig_graphics = Mock(mig=Mig(True, ()), cc=(0, 0), pci_class=GRAPHICS)
    devices = [mig_graphics if c == "mig-graphics" else full_gpu(pci_class=c) for c in classes]
    labels = only(labels_of(manager(*devices), "none", Config()), "gpu.mode")
    assert labels == ns({"gpu.mode": expected})


# =========================================================================================
# internal/lm/nvml.go, newVersionLabeler: the driver version split on "." (two or three
# parts; revision empty for two), the CUDA driver version as major.minor


def cuda_labels(major: str, minor: str, rev: str, full: str, cmaj: str, cmin: str) -> dict:
    return {
        "cuda.driver.major": major, "cuda.driver.minor": minor, "cuda.driver.rev": rev,
        "cuda.runtime.major": cmaj, "cuda.runtime.minor": cmin, "cuda.driver-version.major": major,
        "cuda.driver-version.minor": minor, "cuda.driver-version.revision": rev,
        "cuda.driver-version.full": full, "cuda.runtime-version.major": cmaj,
        "cuda.runtime-version.minor": cmin, "cuda.runtime-version.full": f"{cmaj}.{cmin}",
    }  # fmt: skip


CUDA_KEYS = tuple(cuda_labels("", "", "", "", "", ""))


VERSIONS = [
    ("the manager mock", Driver("400.300", 8000),
     cuda_labels("400", "300", "", "400.300", "8", "0")),
    ("three parts", Driver("550.54.15", 12040),
     cuda_labels("550", "54", "15", "550.54.15", "12", "4")),
    ("leading zeros kept", Driver("535.129.03", 12020),
     cuda_labels("535", "129", "03", "535.129.03", "12", "2")),
    ("CUDA 13.0", Driver("580.65.06", 13000),
     cuda_labels("580", "65", "06", "580.65.06", "13", "0")),
]  # fmt: skip


@pytest.mark.parametrize(("driver", "expected"), table(VERSIONS))
def test_version_labeler(driver: Driver, expected: dict[str, str]) -> None:
    snapshot = Snapshot(driver=driver, gpus=manager(full_gpu()).gpus)
    assert only(labels_of(snapshot, "none", Config()), *CUDA_KEYS) == ns(expected)


# =========================================================================================
# internal/lm/imex.go, newImexLabeler / getFabricIDs: gpu.clique = <cluster>.<clique> when
# the fabric-attached devices agree on both, nothing otherwise

CLUSTER_A = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
CLUSTER_B = "0c0ffee0-1111-4222-8333-944455556666"

IMEX = [
    ("no device attached", (None, None), {}),
    ("all attached alike", (Fabric(CLUSTER_A, 1), Fabric(CLUSTER_A, 1)), f"{CLUSTER_A}.1"),
    ("only some attached", (Fabric(CLUSTER_A, 3), None), f"{CLUSTER_A}.3"),
    ("cluster UUIDs are non-unique", (Fabric(CLUSTER_A, 1), Fabric(CLUSTER_B, 1)), {}),
    ("clique IDs are non-unique", (Fabric(CLUSTER_A, 1), Fabric(CLUSTER_A, 2)), {}),
    ("clique 0", (Fabric(CLUSTER_A, 0),), f"{CLUSTER_A}.0"),
]


@pytest.mark.parametrize(("fabrics", "expected"), table(IMEX))
def test_imex_labeler(fabrics: tuple[Fabric | None, ...], expected: Any) -> None:
    snapshot = manager(*[full_gpu(fabric=fabric) for fabric in fabrics])
    labels = only(labels_of(snapshot, "none", Config()), "gpu.clique")
    assert labels == ({} if expected == {} else ns({"gpu.clique": expected}))


# =========================================================================================
# internal/lm/machine-type.go, newMachineTypeLabeler: the file's content, trimmed (our
# snapshot keeps it trimmed), sanitised; "unknown" for an empty path or an unreadable file
# (our snapshot: null)

MACHINE = [
    ("no path or unreadable", None, "unknown"),
    ("main_test.go's file", "product-name", "product-name"),
    ("spaces joined", "DGXA100 920-23687-2530-000", "DGXA100-920-23687-2530-000"),
    ("characters deleted", "PowerEdge (R750xa)", "PowerEdge-R750xa"),
    ("empty file", "", ""),
]


@pytest.mark.parametrize(("machine", "expected"), table(MACHINE))
def test_machine_type_labeler(machine: str | None, expected: str) -> None:
    labels = only(labels_of(manager(full_gpu(), machine=machine), "none", Config()), "gpu.machine")
    assert labels == ns({"gpu.machine": expected})


# =========================================================================================
# internal/lm/vgpu.go, vgpuLabeler: present, and the host driver of the last vGPU device
# (SPEC §5.1: present=false when the scan found none, nothing when the scan failed)

VGPU = [
    ("scan failed", None, {}),
    ("no vGPU device", Vgpu(), {"vgpu.present": "false"}),
    ("one vGPU device", Vgpu((VgpuDevice("460.16", "r460_00"),)),
     {"vgpu.present": "true", "vgpu.host-driver-version": "460.16",
      "vgpu.host-driver-branch": "r460_00"}),
    ("the last device wins",
     Vgpu((VgpuDevice("460.16", "r460_00"), VgpuDevice("535.129.03", "r535_00"))),
     {"vgpu.present": "true", "vgpu.host-driver-version": "535.129.03",
      "vgpu.host-driver-branch": "r535_00"}),
]  # fmt: skip


@pytest.mark.parametrize(("vgpu", "expected"), table(VGPU))
def test_vgpu_labeler(vgpu: Vgpu | None, expected: dict[str, str]) -> None:
    keys = ("vgpu.present", "vgpu.host-driver-version", "vgpu.host-driver-branch")
    labels = only(labels_of(manager(full_gpu(), vgpu=vgpu), "none", Config()), *keys)
    assert labels == ns(expected)


# =========================================================================================
# internal/lm/timestamp.go, NewTimestampLabeler: gfd.timestamp = Unix seconds, none with
# --no-timestamp


@pytest.mark.parametrize(("timestamp", "expected"), [(None, {}), (1700000000, "1700000000")])
def test_timestamp_labeler(timestamp: int | None, expected: Any) -> None:
    labels = only(labels_of(manager(full_gpu()), "none", Config(), timestamp), "gfd.timestamp")
    assert labels == ({} if expected == {} else ns({"gfd.timestamp": expected}))
