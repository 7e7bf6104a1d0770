"""MIG profile names from raw NVML values (go-nvlib's formula), on the fake and on its own."""

from __future__ import annotations

from dataclasses import replace

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfd.discovery import discover, mig_profile
from gfd.settings import Settings

from .fakes.fake_nvml import PROFILE_ENUMS, FakeGpu, FakeMigDevice, FakeNvml, expected_gb

A100_40GB_BYTES = 42949672960  # nvmlDeviceGetMemoryInfo().total of an A100-SXM4-40GB

# (name, GPU-instance profile enum, GI slices, CI slices, memorySizeMB, SMs) as an
# A100-SXM4-40GB reports them.
A100_40GB_TABLE = [
    ("1g.5gb", pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 4864, 14),
    ("1g.5gb+me", pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 1, 4864, 14),
    ("1g.10gb", pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1, 1, 9856, 14),
    ("2g.10gb", pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 2, 2, 9856, 28),
    ("3g.20gb", pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 3, 3, 19968, 42),
    ("4g.20gb", pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 4, 4, 19968, 56),
    ("7g.40gb", pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 7, 7, 40192, 98),
    ("1c.2g.10gb", pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 2, 1, 9856, 14),
    ("1c.3g.20gb", pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 3, 1, 19968, 14),
    ("2c.7g.40gb", pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 7, 2, 40192, 28),
]


def test_enum_values_are_nvmls() -> None:
    for name in dir(mig_profile):
        if name.startswith("GPU_INSTANCE_PROFILE_"):
            assert getattr(mig_profile, name) == getattr(pynvml, "NVML_" + name), name


@pytest.mark.parametrize(("name", "enum", "gi", "ci", "memory", "sms"), A100_40GB_TABLE)
def test_a100_40gb_profile_names(
    name: str, enum: int, gi: int, ci: int, memory: int, sms: int
) -> None:
    assert mig_profile.profile_name(enum, ci, memory, A100_40GB_BYTES) == name


def test_a100_40gb_table_through_discovery() -> None:
    """The whole table as MIG devices of one A100 (GPU instances with real profile ids)."""
    slots = {
        slot * 2: FakeMigDevice(
            gi_id=slot + 1, gi_profile_enum=enum, memory_mib=memory, multiprocessors=sms,
            gi_slices=gi, ci_slices=ci,
        )
        for slot, (_name, enum, gi, ci, memory, sms) in enumerate(A100_40GB_TABLE)
    }  # fmt: skip
    gpu = FakeGpu(
        uuid="GPU-1", name="NVIDIA A100-SXM4-40GB", bus_id="00000000:07:00.0",
        memory_total=A100_40GB_BYTES, mig_mode=1, max_mig_devices=2 * len(slots), mig_slots=slots,
        supported_profile_enums=frozenset(e for _n, e, *_ in A100_40GB_TABLE),
    )  # fmt: skip
    fake = FakeNvml([gpu])
    settings = replace(Settings(), sysfs_root="/nonexistent", machine_type_file="")
    found = discover(settings, nvml=fake.module)
    mig = found.gpus[0].mig
    assert mig is not None and mig.enabled
    assert [d.profile for d in mig.devices] == [row[0] for row in A100_40GB_TABLE]
    assert [d.memory_mib for d in mig.devices] == [row[4] for row in A100_40GB_TABLE]
    assert found.gpus[0].memory_mib == 40960


@pytest.mark.parametrize(("enum", "suffix"), [
    (pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, "+me.all"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, "+me.all"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX, "+gfx"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX, "+gfx"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX, "+gfx"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, "-me"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, "-me"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1, "+me"),
    (pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, ""),
])  # fmt: skip
def test_suffixes(enum: int, suffix: str) -> None:
    slices = mig_profile.GPU_INSTANCE_PROFILES[enum].slices
    name = mig_profile.profile_name(enum, slices, 23808, 196608 * 2**20)  # a B200-like GPU
    assert name.endswith("gb" + suffix)
    assert name.startswith(f"{slices}g.")


def test_names_on_bigger_gpus() -> None:
    # Memory sizes of the kind an 80 GB (H100-like) and a 180 GB (B200-like) GPU report.
    h100 = 81559 * 2**20
    assert mig_profile.profile_name(0, 1, 9984, h100) == "1g.10gb"
    assert mig_profile.profile_name(9, 1, 19968, h100) == "1g.20gb"
    assert mig_profile.profile_name(4, 7, 80384, h100) == "7g.80gb"
    b200 = 183359 * 2**20
    assert mig_profile.profile_name(0xF, 1, 22784, b200) == "1g.23gb+me.all"


def test_go_rounding_is_half_away_from_zero() -> None:
    # 1/8 of a 4 GiB GPU is 0.5 GB: Go's math.Round gives 1, Python's round() would give 0.
    assert mig_profile.memory_size_gb(512, 4 * 2**30) == 1
    assert mig_profile.memory_size_gb(1536, 4 * 2**30) == 2  # 1.5 -> 2 (round() agrees)
    assert mig_profile.memory_size_gb(2560, 4 * 2**30) == 3  # 2.5 -> 3, round() gives 2


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="unknown GPU instance profile"):
        mig_profile.profile_name(99, 1, 4864, A100_40GB_BYTES)
    with pytest.raises(ValueError, match="positive"):
        mig_profile.profile_name(0, 1, 4864, 0)


def test_candidate_enums_try_matching_slices_first() -> None:
    order = mig_profile.candidate_enums(2)
    assert sorted(order) == sorted(mig_profile.GPU_INSTANCE_PROFILES)
    first = order[: len([p for p in mig_profile.GPU_INSTANCE_PROFILES.values() if p.slices == 2])]
    assert all(mig_profile.GPU_INSTANCE_PROFILES[e].slices == 2 for e in first)
    assert first[0] == pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE


def test_fake_table_agrees_with_ours() -> None:
    for (slices, suffix), enum in PROFILE_ENUMS.items():
        profile = mig_profile.GPU_INSTANCE_PROFILES[enum]
        assert (profile.slices, profile.suffix) == (slices, suffix)


@given(
    total_mib=st.integers(min_value=1024, max_value=400_000),
    share=st.integers(min_value=1, max_value=1000),
)
def test_float_formula_matches_exact_arithmetic(total_mib: int, share: int) -> None:
    mig_mib = max(1, total_mib * share // 1000)
    total = total_mib * 2**20
    assert mig_profile.memory_size_gb(mig_mib, total) == expected_gb(mig_mib, total)
