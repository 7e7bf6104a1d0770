"""Canonical MIG profile names, computed as go-nvlib does (``pkg/nvlib/device/mig_profile.go``).

A MIG device's profile name is ``<G>g.<GB>gb`` when its compute-instance slice count C equals
its GPU-instance slice count G, else ``<C>c.<G>g.<GB>gb``; a suffix comes from the GPU-instance
profile (``+me``, ``+me.all``, ``+gfx``, ``-me``).  ``GB`` is the device's share of the parent's
memory rounded up to eighths, times the parent's memory in whole GiB, rounded::

    >>> profile_name(GPU_INSTANCE_PROFILE_1_SLICE, 1, 4864, 40960 * 2**20)
    '1g.5gb'
    >>> profile_name(GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 4864, 40960 * 2**20)
    '1g.5gb+me'
    >>> profile_name(GPU_INSTANCE_PROFILE_7_SLICE, 2, 40192, 40960 * 2**20)
    '2c.7g.40gb'

Pure arithmetic: no NVML here.  The enum values are NVML's ``NVML_GPU_INSTANCE_PROFILE_*``
(nvml.h); a test checks them against ``pynvml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GPU_INSTANCE_PROFILE_1_SLICE = 0x0
GPU_INSTANCE_PROFILE_2_SLICE = 0x1
GPU_INSTANCE_PROFILE_3_SLICE = 0x2
GPU_INSTANCE_PROFILE_4_SLICE = 0x3
GPU_INSTANCE_PROFILE_7_SLICE = 0x4
GPU_INSTANCE_PROFILE_8_SLICE = 0x5
GPU_INSTANCE_PROFILE_6_SLICE = 0x6
GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
GPU_INSTANCE_PROFILE_1_SLICE_GFX = 0xA
GPU_INSTANCE_PROFILE_2_SLICE_GFX = 0xB
GPU_INSTANCE_PROFILE_4_SLICE_GFX = 0xC
GPU_INSTANCE_PROFILE_1_SLICE_NO_ME = 0xD
GPU_INSTANCE_PROFILE_2_SLICE_NO_ME = 0xE
GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME = 0xF
GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME = 0x10
GPU_INSTANCE_PROFILE_3_SLICE_GFX = 0x11
GPU_INSTANCE_PROFILE_COUNT = 0x12

_MIB = 1 << 20
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class GpuInstanceProfile:
    """What a GPU-instance profile enum means for the name: its slices and its suffix."""

    enum: int
    slices: int
    suffix: str = ""


# Suffixes as go-nvlib: REV1 = media extensions (+me), ALL_ME = +me.all, GFX = +gfx,
# NO_ME = -me.  3_SLICE_GFX is newer than go-nvlib's table; it follows the other GFX ids.
GPU_INSTANCE_PROFILES: dict[int, GpuInstanceProfile] = {
    p.enum: p
    for p in (
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_1_SLICE, 1),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_2_SLICE, 2),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_3_SLICE, 3),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_4_SLICE, 4),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_7_SLICE, 7),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_8_SLICE, 8),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_6_SLICE, 6),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, "+me"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_2_SLICE_REV1, 2, "+me"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_1_SLICE_GFX, 1, "+gfx"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_2_SLICE_GFX, 2, "+gfx"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_4_SLICE_GFX, 4, "+gfx"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 1, "-me"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, 2, "-me"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 1, "+me.all"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, 2, "+me.all"),
        GpuInstanceProfile(GPU_INSTANCE_PROFILE_3_SLICE_GFX, 3, "+gfx"),
    )
}


def candidate_enums(gi_slices: int) -> list[int]:
    """Profile enums to try for a GPU instance of ``gi_slices`` slices, most common first.

    Discovery looks a GPU instance's profile id up by querying the parent's profile info one
    enum at a time; trying the enums with the right slice count first keeps that to one or
    two NVML calls per GPU.  The remaining enums follow, in case the attributes disagree.
    """
    matching = [e for e, p in GPU_INSTANCE_PROFILES.items() if p.slices == gi_slices]
    others = [e for e in GPU_INSTANCE_PROFILES if e not in matching]
    return matching + others


def _go_round(value: float) -> int:
    """Go's math.Round: half away from zero (Python's round() is half to even)."""
    whole = math.trunc(value)
    if abs(value - whole) >= 0.5:
        whole += 1 if value > 0 else -1
    return whole


def memory_size_gb(mig_memory_mib: int, parent_total_bytes: int) -> int:
    """The ``GB`` of a profile name (go-nvlib ``getMigMemorySizeGB``, same float steps)."""
    if parent_total_bytes <= 0:
        raise ValueError("the parent GPU's total memory must be positive")
    fraction = (mig_memory_mib * _MIB) / parent_total_bytes
    fraction = math.ceil(fraction * 8) / 8
    total_gb = (parent_total_bytes + _GIB - 1) // _GIB
    return _go_round(fraction * total_gb)


def profile_name(
    gi_profile_enum: int, ci_slices: int, mig_memory_mib: int, parent_total_bytes: int
) -> str:
    """The canonical name of a MIG device.

    ``gi_profile_enum`` is the ``NVML_GPU_INSTANCE_PROFILE_*`` value of its GPU instance,
    ``ci_slices`` its compute-instance slice count, ``mig_memory_mib`` its
    ``memorySizeMB`` attribute, ``parent_total_bytes`` the parent GPU's total memory.
    Raises ValueError for an unknown enum or a non-positive parent memory.
    """
    profile = GPU_INSTANCE_PROFILES.get(gi_profile_enum)
    if profile is None:
        raise ValueError(f"unknown GPU instance profile {gi_profile_enum}")
    gb = memory_size_gb(mig_memory_mib, parent_total_bytes)
    if ci_slices == profile.slices:
        return f"{profile.slices}g.{gb}gb{profile.suffix}"
    return f"{ci_slices}c.{profile.slices}g.{gb}gb{profile.suffix}"
