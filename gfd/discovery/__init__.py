"""Discovery: the host (NVML and sysfs) into a :class:`~gfd.snapshot.Snapshot`.

The only code in gfd that imports ``pynvml`` or reads ``/sys``.  Two entry points:

``discover(settings)``
    Full discovery: NVML (driver, GPUs, MIG devices, fabric), then sysfs (PCI class of each
    GPU, the vGPU scan) and the machine-type file.  NVML is initialised and shut down within
    the call, so a driver that appears later is picked up by the next call.

    - :class:`~gfd.errors.NvmlUnavailableError` when NVML cannot be used at all (bindings
      missing, ``libnvidia-ml.so.1`` not loadable, ``nvmlInit`` failing); its message is one
      line saying what failed and what to check.
    - :class:`~gfd.errors.DiscoveryError` when NVML works but a query fails mid-pass (e.g. a
      GPU is lost); the message names the GPU and the NVML call.

``discover_host_only(settings)``
    What can be known without NVML: ``driver=None``, no GPUs, the machine type and the vGPU
    scan — the minimal label set when NVML is unavailable and ``--no-fail-on-init-error``.

``--device-discovery-strategy``: ``nvml`` and ``auto`` both read NVML (``auto`` means NVML
when ``libnvidia-ml.so.1`` loads, and NVML is the only backend gfd has).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gfd.discovery import nvml as nvml_source
from gfd.discovery import sysfs
from gfd.discovery import topology as topology_source
from gfd.errors import UsageError
from gfd.settings import DISCOVERY_STRATEGIES, Settings
from gfd.snapshot import Snapshot

__all__ = ["discover", "discover_host_only"]


def discover(settings: Settings, *, nvml: Any = None) -> Snapshot:
    """Full discovery of this node.

    ``nvml`` is the NVML bindings module to use (tests pass a fake); by default ``pynvml``.
    """
    if settings.device_discovery_strategy not in DISCOVERY_STRATEGIES:
        raise UsageError(
            f"--device-discovery-strategy {settings.device_discovery_strategy!r}: "
            f"must be one of {', '.join(DISCOVERY_STRATEGIES)}"
        )
    module = nvml_source.load_module() if nvml is None else nvml
    topology = None
    if settings.wants_topology:
        driver, gpus, topology = nvml_source.read_with_topology(module)
    else:
        driver, gpus = nvml_source.read(module)
    gpus = tuple(
        dataclasses.replace(
            gpu, pci_class=sysfs.read_pci_class(settings.sysfs_root, gpu.pci_bus_id)
        )
        for gpu in gpus
    )
    return Snapshot(
        driver=driver,
        machine=sysfs.read_machine_type(settings.machine_type_file),
        vgpu=sysfs.scan_vgpu(settings.sysfs_root),
        gpus=gpus,
        topology=None
        if topology is None
        else topology_source.with_numa_nodes(topology, gpus, settings.sysfs_root),
    )


def discover_host_only(settings: Settings) -> Snapshot:
    """The snapshot of a node whose GPUs cannot be read: machine type and vGPU scan only."""
    return Snapshot(
        driver=None,
        machine=sysfs.read_machine_type(settings.machine_type_file),
        vgpu=sysfs.scan_vgpu(settings.sysfs_root),
        gpus=(),
    )
