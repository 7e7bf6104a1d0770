"""ResourceSlices shaped as NVIDIA's DRA driver publishes them, from the facts it reads.

The driver (kubernetes-sigs/dra-driver-nvidia-gpu, ``cmd/gpu-kubelet-plugin``) reads a GPU
through NVML and announces it; this builds the same objects from a gfd snapshot of the same
GPUs (the facts NVML gave gfd), following the driver's code at the tag named:

- v25.12.0 (commit 9c2e721b): a full GPU is ``deviceinfo.go:159-179`` GetDevice with the
  attributes of ``partitions.go:35-66`` PartDevAttributes (``type: gpu``, ``uuid``,
  ``productName``, ``brand``, ``architecture``, versions made semver by
  ``semver.MustParse(..).String()``, the standard ``resource.kubernetes.io/pciBusID``) and a
  ``memory`` capacity in bytes; a MIG device is ``deviceinfo.go:181-267`` (``type: mig``,
  ``parentUUID``, ``profile``, engine capacities, ``memory`` = MemorySizeMB * 2^20); with MIG
  enabled only the MIG devices are announced, not their parent (``nvlib.go:280-292``); the
  device name is ``gpu-<minor>`` (``deviceinfo.go:113-115``), a MIG device's
  ``gpu-<minor>-mig-<profile>-<id>-<start>`` (``mig.go:104-107``).  The partitionable form
  (``partitions.go:83-120``) gives the full GPU ``consumesCounters`` and the largest MIG
  profile's capacities, and offers MIG placements without a ``uuid`` (``partitions.go:194-230``).
- v25.3.0 (commit c1f854d5): ``deviceinfo.go:95-133`` adds ``minor`` and ``index`` and names
  the PCI address ``pcieBusID``; MIG devices add ``index`` and ``parentIndex`` (:143-181).
- v25.8.0 (commit 2fbf1c9f): ``deviceinfo.go:85-116``, ``pcieBusID`` still, no index/minor.

The cudaDriverVersion is ``major.minor`` of NVML's integer (``nvlib.go:557``)."""

from __future__ import annotations

import re
from typing import Any

from gfd.snapshot import Gpu, MigDevice, Snapshot

DRIVER = "gpu.nvidia.com"
ARCHITECTURES = {
    3: "Kepler", 5: "Maxwell", 6: "Pascal", 7: "Volta", 8: "Ampere", 9: "Hopper", 10: "Blackwell",
    12: "Blackwell",
}  # fmt: skip


def semver(text: str) -> str:
    """Masterminds/semver (v1) NewVersion(..).String(): numbers re-printed, leading zeros lost."""
    parts = [int(part) for part in re.findall(r"\d+", text)[:3]]
    parts += [0] * (3 - len(parts))
    return ".".join(str(part) for part in parts)


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _common(gpu: Gpu, snapshot: Snapshot, release: str) -> dict[str, Any]:
    assert snapshot.driver is not None
    cuda = snapshot.driver.cuda
    cc = gpu.compute_capability
    pci = "resource.kubernetes.io/pciBusID" if release == "v25.12.0" else "pcieBusID"
    return {
        "productName": _string(gpu.name), "brand": _string("Nvidia"),
        "architecture": _string(ARCHITECTURES.get(cc.major, "Unknown")),
        "cudaComputeCapability": {"version": semver(f"{cc.major}.{cc.minor}")},
        "driverVersion": {"version": semver(snapshot.driver.version)},
        "cudaDriverVersion": {"version": semver(f"{cuda // 1000}.{(cuda % 1000) // 10}")},
        pci: _string(gpu.pci_bus_id),
    }  # fmt: skip


def gpu_device(gpu: Gpu, snapshot: Snapshot, release: str, partitionable: bool) -> dict[str, Any]:
    attributes = {"type": _string("gpu"), "uuid": _string(gpu.uuid)}
    attributes.update(_common(gpu, snapshot, release))
    if release == "v25.3.0":
        attributes["minor"] = {"int": gpu.index}
        attributes["index"] = {"int": gpu.index}
    memory = (gpu.memory_mib or 0) << 20
    device: dict[str, Any] = {
        "name": f"gpu-{gpu.index}", "attributes": attributes,
        "capacity": {"memory": {"value": str(memory)}},
    }  # fmt: skip
    if partitionable:
        # the largest MIG profile's capacities, not the GPU's total memory
        device["capacity"] = {"memory": {"value": str(memory - (1 << 30))}}
        device["consumesCounters"] = [
            {"counterSet": f"gpu-{gpu.index}-counter-set", "counters": {"memory": {"value": "1"}}}
        ]
    return device


def mig_device(
    gpu: Gpu, device: MigDevice, position: int, snapshot: Snapshot, release: str
) -> dict[str, Any]:
    attributes = {
        "type": _string("mig"), "uuid": _string(f"MIG-{gpu.uuid[4:]}-{position}"),
        "parentUUID": _string(gpu.uuid), "profile": _string(device.profile),
    }  # fmt: skip
    attributes.update(_common(gpu, snapshot, release))
    engines = device.engines
    capacity = {
        "multiprocessors": device.multiprocessors, "copyEngines": engines.copy,
        "decoders": engines.decoder, "encoders": engines.encoder, "jpegEngines": engines.jpeg,
        "ofaEngines": engines.ofa, "memory": device.memory_mib << 20,
    }  # fmt: skip
    profile = device.profile.replace(".", "")
    return {
        "name": f"gpu-{gpu.index}-mig-{profile}-{position}-{position}", "attributes": attributes,
        "capacity": {name: {"value": str(value)} for name, value in capacity.items()},
    }  # fmt: skip


def devices_for(
    snapshot: Snapshot, release: str = "v25.12.0", partitionable: bool = False
) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    for gpu in snapshot.gpus:
        if gpu.mig_enabled and not partitionable:
            assert gpu.mig is not None
            devices.extend(
                mig_device(gpu, device, position, snapshot, release)
                for position, device in enumerate(gpu.mig.devices)
            )
            continue
        devices.append(gpu_device(gpu, snapshot, release, partitionable))
    return devices


def slices_for(
    snapshot: Snapshot, node: str, *, release: str = "v25.12.0", partitionable: bool = False,
    generation: int = 1, split: int = 1, count: int | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The node's pool (named after the node, as the kubelet plugin names it) in ``split``
    slices; ``count`` overrides resourceSliceCount (an incomplete generation)."""
    devices = devices_for(snapshot, release, partitionable)
    chunks = [devices[part::split] for part in range(split)]
    pool = {"name": node, "generation": generation,
            "resourceSliceCount": split if count is None else count}  # fmt: skip
    return [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"{node}-{DRIVER}-g{generation}-{part}"},
         "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, "devices": chunk}}
        for part, chunk in enumerate(chunks)
    ]  # fmt: skip
