"""Node-wide labels (SPEC §5.1): driver and CUDA versions, MIG/MPS capability, the fabric
clique and vGPU.  Pure functions of the snapshot."""

from __future__ import annotations

import re

from gfd.echo import describe
from gfd.errors import LabelError
from gfd.labels import keys
from gfd.snapshot import Driver, Gpu, Vgpu

_VERSION_PART = re.compile(r"[A-Za-z0-9]+")


def driver_labels(driver: Driver) -> dict[str, str]:
    parts = driver.version.split(".")
    if len(parts) not in (2, 3) or not all(_VERSION_PART.fullmatch(p) for p in parts):
        raise LabelError(
            f"driver version {describe(driver.version)} is not of the form X.Y or X.Y.Z; "
            "cannot label the CUDA driver version"
        )
    major, minor = parts[0], parts[1]
    revision = parts[2] if len(parts) == 3 else ""
    runtime_major = str(driver.cuda // 1000)
    runtime_minor = str((driver.cuda % 1000) // 10)
    return {
        keys.CUDA_DRIVER_MAJOR: major,
        keys.CUDA_DRIVER_MINOR: minor,
        keys.CUDA_DRIVER_REV: revision,
        keys.CUDA_DRIVER_VERSION_MAJOR: major,
        keys.CUDA_DRIVER_VERSION_MINOR: minor,
        keys.CUDA_DRIVER_VERSION_REVISION: revision,
        keys.CUDA_DRIVER_VERSION_FULL: driver.version,
        keys.CUDA_RUNTIME_MAJOR: runtime_major,
        keys.CUDA_RUNTIME_MINOR: runtime_minor,
        keys.CUDA_RUNTIME_VERSION_MAJOR: runtime_major,
        keys.CUDA_RUNTIME_VERSION_MINOR: runtime_minor,
        keys.CUDA_RUNTIME_VERSION_FULL: f"{runtime_major}.{runtime_minor}",
    }


def bool_label(value: bool) -> str:
    return "true" if value else "false"


def clique_label(gpus: tuple[Gpu, ...], warnings: list[str]) -> dict[str, str]:
    """``gpu.clique`` when every fabric-attached GPU agrees on cluster and clique."""
    attached = [g for g in gpus if g.fabric is not None]
    values = {f"{g.fabric.cluster_uuid}.{g.fabric.clique_id}" for g in attached if g.fabric}
    if not values:
        return {}
    if len(values) > 1:
        warnings.append(
            "fabric-attached GPUs disagree on cluster/clique ("
            + ", ".join(sorted(values))
            + "); gpu.clique omitted"
        )
        return {}
    return {keys.GPU_CLIQUE: values.pop()}


def vgpu_labels(vgpu: Vgpu | None) -> dict[str, str]:
    if vgpu is None:
        return {}
    labels = {keys.VGPU_PRESENT: bool_label(bool(vgpu.devices))}
    if vgpu.devices:
        last = vgpu.devices[-1]
        labels[keys.VGPU_HOST_DRIVER_VERSION] = last.host_driver_version
        labels[keys.VGPU_HOST_DRIVER_BRANCH] = last.host_driver_branch
    return labels
