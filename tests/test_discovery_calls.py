"""How many NVML calls one discovery makes: a bound per GPU, per MIG slot, per MIG device.

The bound is what the facts need and no more; it fails as soon as a change adds calls per
device (the agent repeats discovery every pass, on nodes with up to 8 GPUs x 7 MIG devices)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gfd import snapshot as snapshot_io
from gfd.discovery import discover
from gfd.settings import Settings

from .fakes.fake_nvml import FakeNvml, dgx_a100_mig_node

# nvmlInit, nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion, nvmlDeviceGetCount,
# nvmlShutdown.
PER_PASS = 5
# GetHandleByIndex, GetUUID, GetName, GetPciInfo, GetMemoryInfo, GetCudaComputeCapability,
# GetMigMode, GetGpuFabricInfoV; and GetMaxMigDeviceCount on a MIG-enabled GPU.
PER_GPU = 9
PER_MIG_SLOT = 1  # GetMigDeviceHandleByIndex
PER_MIG_DEVICE = 2  # GetAttributes, GetGpuInstanceId
PER_GPU_INSTANCE = 2  # GetGpuInstanceById, GpuInstanceGetInfo (once per instance)
PER_GPU_PROFILE_LOOKUP = 1  # GetGpuInstanceProfileInfo: 1g.5gb is the first candidate


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return replace(Settings(), sysfs_root=str(tmp_path), machine_type_file="")


def bound(gpus: int, slots: int, devices: int, instances: int) -> int:
    return (
        PER_PASS + PER_GPU * gpus + PER_MIG_SLOT * slots + PER_MIG_DEVICE * devices
        + PER_GPU_INSTANCE * instances + PER_GPU_PROFILE_LOOKUP * gpus
    )  # fmt: skip


def test_dgx_a100_with_56_mig_devices(settings: Settings) -> None:
    fake = dgx_a100_mig_node(gpu_count=8, migs_per_gpu=7)
    found = discover(settings, nvml=fake.module)
    assert sum(len(g.mig.devices) for g in found.gpus if g.mig) == 56
    assert fake.total_calls <= bound(gpus=8, slots=56, devices=56, instances=56), fake.calls
    assert fake.calls["nvmlDeviceGetAttributes"] == 56
    assert fake.calls["nvmlDeviceGetGpuInstanceId"] == 56
    assert fake.calls["nvmlDeviceGetGpuInstanceProfileInfo"] == 8
    assert fake.calls["nvmlInit"] == fake.calls["nvmlShutdown"] == 1


def test_calls_grow_linearly_with_gpus(settings: Settings) -> None:
    counts = []
    for gpus in (1, 2, 4, 8):
        fake = dgx_a100_mig_node(gpu_count=gpus, migs_per_gpu=7)
        discover(settings, nvml=fake.module)
        counts.append(fake.total_calls)
    per_gpu = counts[1] - counts[0]
    assert counts == [counts[0] + per_gpu * (n - 1) for n in (1, 2, 4, 8)]
    assert per_gpu <= bound(gpus=1, slots=7, devices=7, instances=7) - PER_PASS


def test_empty_slots_cost_one_call_each(settings: Settings) -> None:
    fake = dgx_a100_mig_node(gpu_count=8, migs_per_gpu=2)
    discover(settings, nvml=fake.module)
    assert fake.total_calls <= bound(gpus=8, slots=56, devices=16, instances=16)


def test_plain_gpus(settings: Settings) -> None:
    fake = dgx_a100_mig_node(gpu_count=8, migs_per_gpu=0)
    for gpu in fake.gpus:
        gpu.mig_mode = None  # not MIG-capable: no MaxMigDeviceCount, no slots
    discover(settings, nvml=fake.module)
    assert fake.total_calls <= PER_PASS + (PER_GPU - 1) * 8


def test_mixed_profiles_are_looked_up_once_per_gpu(settings: Settings) -> None:
    """dgx-a100-mig-varied-like: several profiles per GPU, each profile enum queried once."""
    path = Path(__file__).resolve().parent.parent / "examples/snapshots/dgx-a100-mig-varied.yaml"
    if not path.exists():
        pytest.skip("example snapshot missing")
    snap = snapshot_io.load(str(path))
    fake = FakeNvml.from_snapshot(snap)
    discover(settings, nvml=fake.module)
    devices = sum(len(g.mig.devices) for g in snap.gpus if g.mig)
    distinct = sum(len({d.profile for d in g.mig.devices}) for g in snap.gpus if g.mig)
    queried = fake.calls["nvmlDeviceGetGpuInstanceProfileInfo"]
    # Each distinct (GPU, profile) costs the candidates tried up to the right one: 1 for
    # the plain profiles, 2 for 1g.5gb+me, 3 for 1g.10gb (see mig_profile.candidate_enums).
    assert queried <= distinct * 3
    assert fake.calls["nvmlDeviceGetAttributes"] == devices
