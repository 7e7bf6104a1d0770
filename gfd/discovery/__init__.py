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

``read_snapshot(settings, first_pass=, metrics=)``
    What one agent pass labels: the ``--snapshot-file`` document, or the host.  With NVML
    unavailable it raises :class:`~gfd.errors.NvmlUnavailableError` on the first pass under
    ``--fail-on-init-error`` (the agent exits 1), a DiscoveryError on later ones, and
    otherwise gives the host-only snapshot (NVML is tried again next pass).

``--device-discovery-strategy`` (upstream internal/resource/factory.go): ``nvml`` reads
NVML; ``vfio`` reads PCI sysfs for GPUs bound to vfio-pci (gfd.discovery.vfio); ``tegra``
asks the CUDA driver library (gfd.discovery.cuda); ``auto`` resolves as upstream's
resolveMode over go-nvlib's ResolvePlatform (pkg/nvlib/info/resolver.go): tegra when the
Tegra files are there and NVML's library is not, or when NVML lists an integrated GPU
(a name holding ``(nvgpu)`` or ``NVIDIA Thor``); NVML otherwise (a WSL host is NVML too).
``auto`` never picks vfio.  With neither NVML nor Tegra files upstream finds no platform;
here that is NVML being unavailable, with the same consequences (exit 1 under
``--fail-on-init-error``, else the minimal label set).  ``dra`` reads no host at all: this
node's ResourceSlices of NVIDIA's DRA driver from the API server (gfd.dra_source).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from gfd import snapshot
from gfd.discovery import cuda as cuda_source
from gfd.discovery import gpu_links as topology_source
from gfd.discovery import nvml as nvml_source
from gfd.discovery import sysfs, vfio
from gfd.echo import describe
from gfd.errors import (
    DiscoveryError,
    NvmlLibraryMissingError,
    NvmlUnavailableError,
    UsageError,
)
from gfd.observability import Metrics, get_logger
from gfd.settings import DISCOVERY_STRATEGIES, Settings
from gfd.snapshot import Driver, Gpu, LostGpu, Snapshot, Topology

__all__ = ["discover", "discover_host_only", "read_snapshot"]


def read_snapshot(settings: Settings, *, first_pass: bool, metrics: Metrics) -> Snapshot:
    """The node's snapshot for one pass: from ``--snapshot-file`` or from the host."""
    if settings.snapshot_file:
        return snapshot.load(settings.snapshot_file)
    try:
        found = discover(settings)
    except NvmlUnavailableError as exc:
        metrics.nvml_up(False)
        if settings.fail_on_init_error and first_pass:
            raise
        if settings.fail_on_init_error:
            raise DiscoveryError(str(exc)) from None
        get_logger().warning("nvml unavailable; publishing the minimal label set", error=str(exc))
        return discover_host_only(settings)
    metrics.nvml_up(True)
    metrics.gpus_lost(len(found.lost))
    return found


#: go-nvlib's Tegra markers (pkg/nvlib/info/property-extractor.go, HasTegraFiles): the
#: release file, or a SoC family that starts with "tegra"
TEGRA_RELEASE_FILE = "/etc/nv_tegra_release"
TEGRA_FAMILY_FILE = os.path.join("devices", "soc0", "family")  # under the sysfs root


def has_tegra_files(sysfs_root: str) -> bool:
    if os.path.isfile(TEGRA_RELEASE_FILE):
        return True
    family = sysfs.read_attribute(os.path.join(sysfs_root, TEGRA_FAMILY_FILE))
    return family is not None and family.lower().startswith("tegra")


def is_integrated_gpu_name(name: str) -> bool:
    """go-nvlib's IsIntegratedGPUName: Orin reports ``Orin (nvgpu)``, Thor ``NVIDIA Thor``."""
    return "(nvgpu)" in name or "NVIDIA Thor" in name


def discover(settings: Settings, *, nvml: Any = None, cuda: Any = None) -> Snapshot:
    """Full discovery of this node.

    ``nvml`` is the NVML bindings module to use (tests pass a fake); by default ``pynvml``.
    ``cuda`` is the CUDA driver library for the tegra strategy (tests pass a fake); by
    default ``libcuda.so.1`` through ctypes.
    """
    strategy = settings.device_discovery_strategy
    if strategy not in DISCOVERY_STRATEGIES:
        raise UsageError(
            f"--device-discovery-strategy {describe(strategy)}: "
            f"must be one of {', '.join(DISCOVERY_STRATEGIES)}"
        )
    if strategy == "dra":
        raise UsageError(
            "--device-discovery-strategy dra reads the API server, not the host "
            "(gfd.dra_source); it has no host discovery"
        )
    if strategy == "vfio":
        return _host_snapshot(settings, *vfio.read(settings.sysfs_root), "vfio")
    if strategy == "tegra":
        return _discover_tegra(settings, cuda)
    try:
        module = nvml_source.load_module(settings.driver_root_ctr_path) if nvml is None else nvml
        topology = None
        if settings.wants_topology:
            reading, topology = nvml_source.read_with_topology(module)
        else:
            reading = nvml_source.read(module)
    except NvmlLibraryMissingError:
        if strategy == "auto" and has_tegra_files(settings.sysfs_root):
            return _discover_tegra(settings, cuda)
        raise
    if strategy == "auto" and any(is_integrated_gpu_name(gpu.name) for gpu in reading.gpus):
        return _discover_tegra(settings, cuda)
    gpus = tuple(
        replace(gpu, pci_class=sysfs.read_pci_class(settings.sysfs_root, gpu.pci_bus_id))
        for gpu in reading.gpus
    )
    return Snapshot(
        driver=reading.driver,
        machine=sysfs.read_machine_type(settings.machine_type_file),
        vgpu=sysfs.scan_vgpu(settings.sysfs_root),
        gpus=gpus,
        topology=None if topology is None else _with_numa_nodes(topology, gpus, settings),
        lost=reading.lost + missing_from_nvml(settings.sysfs_root, reading, gpus),
    )


def _discover_tegra(settings: Settings, cuda: Any) -> Snapshot:

    library = cuda_source.load_library(settings.driver_root_ctr_path) if cuda is None else cuda
    return _host_snapshot(settings, *cuda_source.read(library), "tegra")


def _host_snapshot(
    settings: Settings, driver: Driver, gpus: tuple[Gpu, ...], discovery: str
) -> Snapshot:
    """A vfio or tegra node: the backend's GPUs plus the machine type and the vGPU scan,
    which upstream labels whatever the backend (internal/lm/labeler.go, nvml.go)."""
    return Snapshot(
        driver=driver,
        machine=sysfs.read_machine_type(settings.machine_type_file),
        vgpu=sysfs.scan_vgpu(settings.sysfs_root),
        gpus=gpus,
        discovery=discovery,
    )


def _with_numa_nodes(topology: Topology, gpus: tuple[Gpu, ...], settings: Settings) -> Topology:

    return topology_source.with_numa_nodes(topology, gpus, settings.sysfs_root)


def missing_from_nvml(
    sysfs_root: str, reading: nvml_source.NvmlReading, gpus: tuple[Gpu, ...]
) -> tuple[LostGpu, ...]:
    """GPUs the PCI bus shows but NVML does not list at all (a GPU that fell off the bus
    can drop out of nvmlDeviceGetCount): one entry per NVIDIA display/3D function beyond
    what NVML accounts for.  Only when the container sees every GPU
    (NVIDIA_VISIBLE_DEVICES unset or ``all``): with a subset, NVML rightly lists fewer."""
    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "all").strip().lower()
    if visible not in ("all", ""):
        return ()
    on_bus = sysfs.nvidia_gpu_functions(sysfs_root)
    if on_bus is None:
        return ()
    missing = len(on_bus) - reading.device_count
    if missing <= 0:
        return ()
    known = {gpu.pci_bus_id for gpu in gpus} | {gone.pci_bus_id for gone in reading.lost}
    unknown = [address for address in on_bus if address not in known]
    # name the functions only when exactly the missing ones are unaccounted for
    addresses = unknown if len(unknown) == missing else [""] * missing
    return tuple(
        LostGpu(pci_bus_id=address, reason="on the PCI bus but not listed by NVML")
        for address in addresses
    )


def discover_host_only(settings: Settings) -> Snapshot:
    """The snapshot of a node whose GPUs cannot be read: machine type and vGPU scan only."""
    return Snapshot(
        driver=None,
        machine=sysfs.read_machine_type(settings.machine_type_file),
        vgpu=sysfs.scan_vgpu(settings.sysfs_root),
        gpus=(),
    )
