"""Label key names: the one place they are spelled."""

from __future__ import annotations

# the prefix and the sharing-strategy suffix are part of the label grammar that settings
# checks resource names against; they are spelled there (gfd/grammar.py)
from gfd.grammar import PREFIX as PREFIX
from gfd.grammar import SHARING_STRATEGY as SHARING_STRATEGY
from gfd.grammar import is_resource_name

TIMESTAMP = "gfd.timestamp"
MIG_CAPABLE = "mig.capable"
MIG_STRATEGY = "mig.strategy"
MPS_CAPABLE = "mps.capable"
GPU_CLIQUE = "gpu.clique"
#: how many GPUs did not answer (NVML GPU_IS_LOST, or missing from NVML but on the PCI bus)
GPU_LOST = "gpu.lost"
VGPU_PRESENT = "vgpu.present"
VGPU_HOST_DRIVER_VERSION = "vgpu.host-driver-version"
VGPU_HOST_DRIVER_BRANCH = "vgpu.host-driver-branch"

CUDA_DRIVER_MAJOR = "cuda.driver.major"
CUDA_DRIVER_MINOR = "cuda.driver.minor"
CUDA_DRIVER_REV = "cuda.driver.rev"
CUDA_DRIVER_VERSION_MAJOR = "cuda.driver-version.major"
CUDA_DRIVER_VERSION_MINOR = "cuda.driver-version.minor"
CUDA_DRIVER_VERSION_REVISION = "cuda.driver-version.revision"
CUDA_DRIVER_VERSION_FULL = "cuda.driver-version.full"
CUDA_RUNTIME_MAJOR = "cuda.runtime.major"
CUDA_RUNTIME_MINOR = "cuda.runtime.minor"
CUDA_RUNTIME_VERSION_MAJOR = "cuda.runtime-version.major"
CUDA_RUNTIME_VERSION_MINOR = "cuda.runtime-version.minor"
CUDA_RUNTIME_VERSION_FULL = "cuda.runtime-version.full"

# Per-resource suffixes: the key is "<resource>.<suffix>".
PRODUCT = "product"
COUNT = "count"
REPLICAS = "replicas"
MEMORY = "memory"
MACHINE = "machine"
MODE = "mode"
FAMILY = "family"
COMPUTE_MAJOR = "compute.major"
COMPUTE_MINOR = "compute.minor"
MULTIPROCESSORS = "multiprocessors"
SLICES_GI = "slices.gi"
SLICES_CI = "slices.ci"
ENGINES_COPY = "engines.copy"
ENGINES_DECODER = "engines.decoder"
ENGINES_ENCODER = "engines.encoder"
ENGINES_JPEG = "engines.jpeg"
ENGINES_OFA = "engines.ofa"

#: the per-resource suffixes that describe a MIG device's shape (SMs, slices, engines)
MIG_SHAPE = (
    MULTIPROCESSORS,
    SLICES_GI,
    SLICES_CI,
    ENGINES_COPY,
    ENGINES_DECODER,
    ENGINES_ENCODER,
    ENGINES_JPEG,
    ENGINES_OFA,
)

#: what a valid MIG configuration under the single strategy overrides on the full-GPU resource
SINGLE_MIG_OVERRIDES = (PRODUCT, COUNT, REPLICAS, SHARING_STRATEGY, MEMORY, *MIG_SHAPE)


#: per-resource labels whose values are built from a name (model, machine type): too long,
#: they are shortened (product: the model part only); every other value is a fact a cut
#: would falsify (a number, a version, a UUID), so a value that does not fit is left out
NAME_VALUED_SUFFIXES = (PRODUCT, MACHINE)


def is_name_valued(name: str) -> bool:
    """True for a ``<resource>.product`` or ``<resource>.machine`` label name."""
    return any(name.endswith("." + suffix) for suffix in NAME_VALUED_SUFFIXES)


def resource_key(resource: str, suffix: str) -> str:
    return f"{resource}.{suffix}"


def full_key(name: str) -> str:
    return PREFIX + name


# Interconnect labels, published only with --topology-labels (README "GPU topology").
GPU_INTERCONNECT = "gpu.interconnect"
GPU_NVLINK_VERSION = "gpu.nvlink.version"
GPU_NVLINK_LINKS = "gpu.nvlink.links"
GPU_NVLINK_LARGEST_GROUP = "gpu.nvlink.largest-group"
GPU_PARTITION_SIZES = "gpu.partition-sizes"
GPU_NUMA_NODES = "gpu.numa.nodes"
GPU_NUMA_GPUS_PER_NODE = "gpu.numa.gpus-per-node"


# ----------------------------------------------------------------- what gfd can produce
# The one definition of "a key gfd can produce", used to decide what gfd may ever own
# (node-labels output) and mirrored, key for key, by the admission policy in manifests/
# (tests/test_manifests.py checks the two agree).

#: every node-wide key (name after the prefix)
NODE_WIDE = (
    TIMESTAMP,
    MIG_CAPABLE,
    MIG_STRATEGY,
    MPS_CAPABLE,
    GPU_CLIQUE,
    VGPU_PRESENT,
    VGPU_HOST_DRIVER_VERSION,
    VGPU_HOST_DRIVER_BRANCH,
    CUDA_DRIVER_MAJOR,
    CUDA_DRIVER_MINOR,
    CUDA_DRIVER_REV,
    CUDA_DRIVER_VERSION_MAJOR,
    CUDA_DRIVER_VERSION_MINOR,
    CUDA_DRIVER_VERSION_REVISION,
    CUDA_DRIVER_VERSION_FULL,
    CUDA_RUNTIME_MAJOR,
    CUDA_RUNTIME_MINOR,
    CUDA_RUNTIME_VERSION_MAJOR,
    CUDA_RUNTIME_VERSION_MINOR,
    CUDA_RUNTIME_VERSION_FULL,
    GPU_LOST,
    GPU_INTERCONNECT,
    GPU_NVLINK_VERSION,
    GPU_NVLINK_LINKS,
    GPU_NVLINK_LARGEST_GROUP,
    GPU_PARTITION_SIZES,
    GPU_NUMA_NODES,
    GPU_NUMA_GPUS_PER_NODE,
)

#: every per-resource suffix: a key is "<resource>.<suffix>"
PER_RESOURCE = (
    PRODUCT,
    COUNT,
    REPLICAS,
    SHARING_STRATEGY,
    MEMORY,
    MACHINE,
    MODE,
    FAMILY,
    COMPUTE_MAJOR,
    COMPUTE_MINOR,
    *MIG_SHAPE,
)

#: names other NVIDIA components control (GPU Operator, device plugin, MIG manager): never
#: gfd's, even where a renamed resource could spell them
FOREIGN_NAMES = ("gpu.present", "device-plugin.config", "mig.config")
FOREIGN_NAME_PREFIXES = ("gpu.deploy.", "mig.config.", "device-plugin.", "gfd.managed-labels")


def can_produce(key: str) -> bool:
    """Whether ``key`` (``nvidia.com/...``) is a label key gfd itself can publish."""
    if not key.startswith(PREFIX):
        return False
    name = key[len(PREFIX) :]
    if name in FOREIGN_NAMES or name.startswith(FOREIGN_NAME_PREFIXES):
        return False
    if name in NODE_WIDE:
        return True
    return any(
        name.endswith("." + suffix) and is_resource_name(name[: -len(suffix) - 1])
        for suffix in PER_RESOURCE
    )
