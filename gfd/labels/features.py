"""Raw node features for NFD's NodeFeature ``spec.features`` (a pure function of the
snapshot): what NodeFeatureRules can match to derive labels of their own.

The shape is NFD's ``Features`` type (api/nfd/v1alpha1: ``flags``, ``attributes``,
``instances``; every value a string).  Names follow NFD's ``<domain>.<feature>`` form, in
lower case (NFD lower-cases the feature name of a rule before looking it up, and splits it
at the first dot for templates, so ``{{ .nvidia.gpu }}`` reaches the GPUs):

- ``nvidia.gpu`` (instances), one element per GPU that answered: ``index``, ``uuid``,
  ``name`` (as NVML reports it), ``product`` (the sanitised name of ``gpu.product``),
  ``memory_mib`` and ``memory_gib`` (nearest GiB: an 80 GB H100 reports 81559 MiB),
  ``compute_capability`` (``8.0``: matches with ``type: version``), ``compute_major``,
  ``compute_minor``, ``family``, ``mig_mode`` (``enabled``, ``disabled`` or
  ``unsupported``), ``mig_profiles`` (the profiles of its MIG devices, sorted, comma
  separated), ``mig_devices`` (how many), ``pci_bus_id``, ``pci_class`` (``0302``, as NFD's
  ``pci.device``), ``numa_node`` where the snapshot knows it; an attribute whose fact is
  unknown is left out;
- ``nvidia.mig`` (instances), one element per MIG device: ``gpu_index``, ``gpu_uuid``,
  ``profile``, ``memory_mib``, ``multiprocessors``, ``slices_gi``, ``slices_ci``;
- ``nvidia.driver`` (attributes): ``version``, ``major``, ``minor``, ``revision``,
  ``cuda`` (``12.4``), ``cuda_major``, ``cuda_minor``;
- ``nvidia.node`` (attributes): ``gpu_count`` (GPUs that answered), ``gpus_lost``, and
  ``omitted`` when instances were left out to keep the object small (past
  :data:`MAX_FEATURES_BYTES`: ``nvidia.mig``, then ``nvidia.mig,nvidia.gpu``).

Nothing at all (NFD's empty ``Features``) when the node has no driver.
"""

from __future__ import annotations

import json
from typing import Any

from gfd.labels.devices import family, product_name
from gfd.snapshot import Gpu, Snapshot

GPU_FEATURE = "nvidia.gpu"
MIG_FEATURE = "nvidia.mig"
DRIVER_FEATURE = "nvidia.driver"
NODE_FEATURE = "nvidia.node"
#: the most JSON ``spec.features`` may take: the NodeFeature must stay far below what the
#: API server stores (etcd's 1.5 MiB an object; its request limit is 3 MiB), with the
#: labels beside it.  An 8-GPU node with 56 MIG devices takes about 20 KiB.
MAX_FEATURES_BYTES = 512 * 1024

Features = dict[str, Any]


def empty() -> Features:
    """NFD's ``NewFeatures()``: the three maps, empty."""
    return {"flags": {}, "attributes": {}, "instances": {}}


def _mig_mode(gpu: Gpu) -> str:
    if gpu.mig is None:
        return "unsupported"
    return "enabled" if gpu.mig.enabled else "disabled"


def _numa_nodes(snapshot: Snapshot) -> dict[int, int]:
    """GPU index -> NUMA node, from the snapshot's topology section where it has one."""
    topology = getattr(snapshot, "topology", None)
    found: dict[int, int] = {}
    for entry in getattr(topology, "gpus", None) or ():
        index, numa = getattr(entry, "index", None), getattr(entry, "numa_node", None)
        if isinstance(index, int) and isinstance(numa, int) and numa >= 0:
            found[index] = numa
    return found


def _non_empty(values: dict[str, str]) -> dict[str, str]:
    """``values`` without empty strings (see the module's note on kube-apiserver v1.20)."""
    return {key: value for key, value in values.items() if value != ""}


def gpu_attributes(gpu: Gpu, numa_node: int | None = None) -> dict[str, str]:
    cc = gpu.compute_capability
    devices = gpu.mig.devices if gpu.mig is not None and gpu.mig.enabled else ()
    attributes = {
        "index": str(gpu.index),
        "uuid": gpu.uuid,
        "name": gpu.name,
        "product": product_name((gpu.name,)) or "",
        "compute_capability": f"{cc.major}.{cc.minor}",
        "compute_major": str(cc.major),
        "compute_minor": str(cc.minor),
        "family": family(cc),
        "mig_mode": _mig_mode(gpu),
        "mig_profiles": ",".join(sorted({device.profile for device in devices})),
        "mig_devices": str(len(devices)),
    }
    if gpu.memory_mib:
        attributes["memory_mib"] = str(gpu.memory_mib)
        attributes["memory_gib"] = str((gpu.memory_mib + 512) // 1024)
    if gpu.pci_bus_id:
        attributes["pci_bus_id"] = gpu.pci_bus_id
    if gpu.pci_class is not None:
        attributes["pci_class"] = f"{gpu.pci_class >> 8:04x}"
    if numa_node is not None:
        attributes["numa_node"] = str(numa_node)
    return _non_empty(attributes)


def node_features(snapshot: Snapshot) -> Features:
    """The ``spec.features`` of this node's NodeFeature object."""
    features = empty()
    driver = snapshot.driver
    if driver is None:
        return features
    gpus = sorted(snapshot.gpus, key=lambda gpu: (gpu.index, gpu.uuid))
    numa = _numa_nodes(snapshot)
    features["instances"][GPU_FEATURE] = {
        "elements": [{"attributes": gpu_attributes(gpu, numa.get(gpu.index))} for gpu in gpus]
    }
    features["instances"][MIG_FEATURE] = {
        "elements": [
            {
                "attributes": {
                    "gpu_index": str(gpu.index),
                    "gpu_uuid": gpu.uuid,
                    "profile": device.profile,
                    "memory_mib": str(device.memory_mib),
                    "multiprocessors": str(device.multiprocessors),
                    "slices_gi": str(device.slices.gi),
                    "slices_ci": str(device.slices.ci),
                }
            }
            for gpu in gpus
            if gpu.mig is not None and gpu.mig.enabled
            for device in gpu.mig.devices
        ]
    }
    parts = driver.version.split(".")
    cuda_major, cuda_minor = driver.cuda // 1000, (driver.cuda % 1000) // 10
    features["attributes"][DRIVER_FEATURE] = {
        "elements": _non_empty(
            {
                "version": driver.version,
                "major": parts[0],
                "minor": parts[1] if len(parts) > 1 else "",
                "revision": parts[2] if len(parts) > 2 else "",
                "cuda": f"{cuda_major}.{cuda_minor}",
                "cuda_major": str(cuda_major),
                "cuda_minor": str(cuda_minor),
            }
        )
    }
    features["attributes"][NODE_FEATURE] = {
        "elements": {"gpu_count": str(len(gpus)), "gpus_lost": str(len(snapshot.lost))}
    }
    return _within_budget(features)


def _size(features: Features) -> int:
    return len(json.dumps(features, separators=(",", ":")))


def _within_budget(features: Features) -> Features:
    """Features that fit :data:`MAX_FEATURES_BYTES`: past it the per-MIG-device instances,
    then the per-GPU ones, are left out whole (a partial list would make a rule count
    wrong) and ``nvidia.node`` says which in ``omitted``; the labels are never at risk."""
    omitted = []
    for kind in (MIG_FEATURE, GPU_FEATURE):
        if _size(features) <= MAX_FEATURES_BYTES:
            break
        features["instances"][kind] = {"elements": []}
        omitted.append(kind)
    if omitted:
        features["attributes"][NODE_FEATURE]["elements"]["omitted"] = ",".join(omitted)
    return features
