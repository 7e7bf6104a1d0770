"""Per-device labels (SPEC §5.2) for full GPUs and MIG devices."""

from __future__ import annotations

from collections.abc import Sequence

from gfd.config import Sharing
from gfd.echo import describe
from gfd.labels import keys
from gfd.labels.sanitize import MAX_LENGTH, fit_name, sanitize_name
from gfd.snapshot import ComputeCapability, Gpu, MigDevice

PCI_CLASS_COMPUTE = 0x030200
PCI_CLASS_GRAPHICS = 0x030000

#: Devices that are not GPUs to label: the display adapter of a DGX Station.  go-nvlib
#: (pkg/nvlib/device: New() defaults to WithSkippedDevices("DGX Display", "NVIDIA DGX
#: Display"); VisitDevices skips a device whose nvmlDeviceGetName is one of them, exactly)
#: drops them before upstream GFD labels anything.
SKIPPED_DEVICE_NAMES = frozenset({"DGX Display", "NVIDIA DGX Display"})


def is_skipped_device(name: str) -> bool:
    """True for a device that upstream never sees (exact, case-sensitive name match)."""
    return name in SKIPPED_DEVICE_NAMES


def family(cc: ComputeCapability) -> str:
    major, minor = cc.major, cc.minor
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }.get(major, "undefined")


def mode(gpus: list[Gpu]) -> str:
    classes = {gpu.pci_class for gpu in gpus}
    if classes == {PCI_CLASS_COMPUTE}:
        return "compute"
    if classes == {PCI_CLASS_GRAPHICS}:
        return "graphics"
    return "unknown"


def machine(machine_type: str | None) -> str:
    return "unknown" if machine_type is None else sanitize_name(machine_type)


def product_name(parts: Sequence[str], shared: bool = False) -> str | None:
    """The product value: every non-empty part sanitised on its own (upstream's
    getProductName), ``SHARED`` appended when shared, joined with ``-``; too long for a
    label, only the model (the first part) is shortened (:func:`fit_name`).  Empty when
    there is no part; None when the qualifiers leave no room for the model."""
    kept = [sanitize_name(part) for part in parts if part != ""]
    if not kept:
        return ""
    if shared:
        kept.append("SHARED")
    return fit_name(kept[0], kept[1:])


def sharing_labels(
    resource: str, sharing: Sharing, product_parts: Sequence[str], replicas: int
) -> dict[str, str]:
    """product (with -SHARED when shared and not renamed), replicas and sharing-strategy."""
    replication = sharing.replication(resource)
    renamed = replication is not None and replication.renamed
    shared = replicas > 1
    labels = {
        keys.REPLICAS: str(replicas),
        keys.SHARING_STRATEGY: sharing.strategy if shared else "none",
    }
    product = product_name(product_parts, shared and not renamed)
    if product is not None:  # a value that names no model is left out, never guessed
        labels[keys.PRODUCT] = product
    return labels


def configured_replicas(resource: str, sharing: Sharing) -> int:
    replication = sharing.replication(resource)
    return 1 if replication is None else replication.replicas


def architecture_labels(cc: ComputeCapability) -> dict[str, str]:
    if cc.major == 0:
        return {}
    if cc.major < 0:
        # unknown (a vfio GPU): upstream labels family "undefined" and compute.major/minor
        # "-1" (internal/lm/resource.go, newArchitectureLabels), which is no valid label
        # value: NFD drops those two before they reach the node, so they are left out here
        return {keys.FAMILY: family(cc)}
    return {
        keys.FAMILY: family(cc),
        keys.COMPUTE_MAJOR: str(cc.major),
        keys.COMPUTE_MINOR: str(cc.minor),
    }


def full_gpu_labels(gpu: Gpu, resource: str, sharing: Sharing, replicas: int) -> dict[str, str]:
    """Labels of one full GPU; ``replicas`` is decided per device type by the caller."""
    labels = sharing_labels(resource, sharing, (gpu.name,), replicas)
    if gpu.memory_mib:
        labels[keys.MEMORY] = str(gpu.memory_mib)
    labels.update(architecture_labels(gpu.compute_capability))
    return labels


def mig_product_parts(parent_name: str, profile: str) -> tuple[str, str, str]:
    """Upstream names a MIG device by its profile with ``+`` turned into ``.``
    (internal/resource/nvml-mig-device.go, GetName)."""
    return (parent_name, "MIG", profile.replace("+", "."))


def mig_device_labels(
    parent: Gpu, device: MigDevice, resource: str, sharing: Sharing
) -> dict[str, str]:
    replicas = configured_replicas(resource, sharing)
    parts = mig_product_parts(parent.name, device.profile)
    labels = sharing_labels(resource, sharing, parts, replicas)
    engines = device.engines
    labels.update(
        {
            keys.MEMORY: str(device.memory_mib),
            keys.MULTIPROCESSORS: str(device.multiprocessors),
            keys.SLICES_GI: str(device.slices.gi),
            keys.SLICES_CI: str(device.slices.ci),
            keys.ENGINES_COPY: str(engines.copy),
            keys.ENGINES_DECODER: str(engines.decoder),
            keys.ENGINES_ENCODER: str(engines.encoder),
            keys.ENGINES_JPEG: str(engines.jpeg),
            keys.ENGINES_OFA: str(engines.ofa),
        }
    )
    return labels


def product_warnings(gpus: Sequence[Gpu], shared: bool) -> list[str]:
    """One warning per device type whose product value had to be shortened."""
    types: dict[tuple[str, ...], None] = {}
    for gpu in gpus:
        types[(gpu.name,)] = None
        if gpu.mig is not None and gpu.mig.enabled:
            for device in gpu.mig.devices:
                types[mig_product_parts(gpu.name, device.profile)] = None
    warnings = []
    for parts in types:
        kept = [sanitize_name(part) for part in parts if part != ""]
        if shared:
            kept.append("SHARED")
        full = "-".join(kept)
        if len(full) > MAX_LENGTH:
            fitted = product_name(parts, shared)
            outcome = "left out" if fitted is None else f"shortened to {fitted!r}"
            warnings.append(
                f"product value {describe(full)} is longer than {MAX_LENGTH} characters; "
                f"{outcome} (only the model part is shortened)"
            )
    return warnings
