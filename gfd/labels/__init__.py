"""The labelling engine: pure functions from (snapshot, settings) to labels.

Nothing here does I/O, reads the clock or imports pynvml/kubernetes; the run's timestamp
is passed in.  ``build`` composes the node-wide labels and the per-resource labels; every
key and value it returns is a valid Kubernetes label (SPEC §5.4)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from gfd.config import Config
from gfd.echo import describe
from gfd.errors import ConfigError, LabelError
from gfd.labels import devices, interconnect, keys, node, partitioning
from gfd.labels.resources import (
    DEFAULT_GPU_RESOURCE,
    Contribution,
    combine,
    default_mig_resource,
    resource_name_for,
    unused_entries,
)
from gfd.labels.sanitize import is_valid_label_name, is_valid_label_value, valid_label_value
from gfd.snapshot import Gpu, MigDevice, Snapshot

__all__ = ["LabelSet", "build"]


@dataclass(frozen=True, slots=True)
class LabelSet:
    """Full label keys (``nvidia.com/...``) to values, sorted by key, plus what was odd
    (``warnings``) and what is only worth a debug line (``notes``)."""

    labels: dict[str, str]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: config entries that apply to nothing on this node: the same on every pass until the
    #: config or the node changes, so the caller reports them when they change
    unused: tuple[str, ...] = ()


def _full_gpu_contributions(
    gpus: list[Gpu], config: Config, machine_type: str | None
) -> dict[str, list[Contribution]]:
    """One contribution per device type (GPU name) of every full-GPU resource.

    Within a type the labels are upstream's (internal/lm/mig-strategy.go, newGPULabelers):
    the MIG-enabled GPUs of that name are labelled by one of them with sharing disabled
    (replicas 0, sharing-strategy none, no -SHARED), the others by one of them with the
    sharing configuration, the second over the first; in both groups the last GPU in
    index order speaks for the group (a Go map assignment in a loop), and the count is
    every GPU of the name."""
    by_resource: dict[str, list[Gpu]] = defaultdict(list)
    for gpu in gpus:
        by_resource[resource_name_for(gpu.name, config.gpu_patterns, DEFAULT_GPU_RESOURCE)].append(
            gpu
        )
    machine = devices.machine(machine_type)
    result: dict[str, list[Contribution]] = {}
    for resource, members in by_resource.items():
        resource_wide = {keys.MACHINE: machine, keys.MODE: devices.mode(members)}
        by_type: dict[str, list[Gpu]] = defaultdict(list)
        for gpu in members:
            by_type[gpu.name].append(gpu)
        contributions = []
        for same_type in by_type.values():
            mig_enabled = [gpu for gpu in same_type if gpu.mig_enabled]
            full = [gpu for gpu in same_type if not gpu.mig_enabled]
            labels: dict[str, str] = {}
            if mig_enabled:
                labels.update(devices.full_gpu_labels(mig_enabled[-1], resource, config.sharing, 0))
            if full:
                replicas = devices.configured_replicas(resource, config.sharing)
                labels.update(devices.full_gpu_labels(full[-1], resource, config.sharing, replicas))
            labels.update(resource_wide)
            contributions.append(Contribution(len(same_type), labels))
        result[resource] = contributions
    return result


def _mig_contributions(
    gpus: list[Gpu], config: Config, default_name: str | None
) -> dict[str, list[Contribution]]:
    """One contribution per MIG device type (parent name + profile) of every MIG resource,
    labelled like upstream by the first device of the type (newMigStrategy*Labeler keep the
    first device of each profile) and counting them all.  ``default_name`` None means
    upstream's mixed naming (``mig-<profile>``)."""
    first: dict[tuple[str, str, str], tuple[Gpu, MigDevice]] = {}
    counts: Counter[tuple[str, str, str]] = Counter()
    for gpu in gpus:
        if gpu.mig is None or not gpu.mig.enabled:
            continue
        for device in gpu.mig.devices:
            fallback = default_name or default_mig_resource(device.profile)
            resource = resource_name_for(device.profile, config.mig_patterns, fallback)
            device_type = (resource, gpu.name, device.profile)
            first.setdefault(device_type, (gpu, device))
            counts[device_type] += 1
    result: dict[str, list[Contribution]] = defaultdict(list)
    for device_type, (parent, device) in first.items():
        resource = device_type[0]
        labels = devices.mig_device_labels(parent, device, resource, config.sharing)
        result[resource].append(Contribution(counts[device_type], labels))
    return result


def _single_strategy_problem(gpus: list[Gpu]) -> str | None:
    """Why the MIG devices do not form one uniform set (None when they do)."""
    if not all(gpu.mig_enabled for gpu in gpus):
        return "MIG is enabled on some GPUs but not all"
    if any(gpu.mig is not None and not gpu.mig.devices for gpu in gpus):
        return "a MIG-enabled GPU has no MIG devices"
    profiles = {d.profile for gpu in gpus if gpu.mig is not None for d in gpu.mig.devices}
    if len(profiles) != 1:
        return "more than one MIG profile in use (" + ", ".join(sorted(profiles)) + ")"
    return None


def _resource_labels(
    gpus: list[Gpu],
    mig_strategy: str,
    config: Config,
    machine_type: str | None,
    warnings: list[str],
) -> dict[str, dict[str, str]]:
    contributions = _full_gpu_contributions(gpus, config, machine_type)
    if mig_strategy == "mixed":
        for resource, items in _mig_contributions(gpus, config, None).items():
            contributions.setdefault(resource, []).extend(items)
    resources = {name: combine(items) for name, items in contributions.items()}
    if mig_strategy != "single":
        return resources

    enabled = [gpu for gpu in gpus if gpu.mig_enabled]
    if not enabled:
        return resources
    problem = _single_strategy_problem(gpus)
    if problem is not None:
        first = enabled[0]
        target = resource_name_for(first.name, config.gpu_patterns, DEFAULT_GPU_RESOURCE)
        warnings.append(f"mig-strategy single: {problem}; labelling {target} as MIG-INVALID")
        resources[target].update(
            {
                keys.COUNT: "0",
                keys.REPLICAS: "0",
                keys.MEMORY: "0",
                # SPEC §5.2 (single) and upstream's invalid labeler: empty, whatever the
                # sharing configuration says
                keys.SHARING_STRATEGY: "",
            }
        )
        invalid = devices.product_name((first.name, "MIG", "INVALID"))
        if invalid is None:
            resources[target].pop(keys.PRODUCT, None)
        else:
            resources[target][keys.PRODUCT] = invalid
        return resources
    for resource, items in _mig_contributions(gpus, config, DEFAULT_GPU_RESOURCE).items():
        mig = combine(items)
        base = resources.setdefault(resource, {})
        for suffix in keys.SINGLE_MIG_OVERRIDES:
            base.pop(suffix, None)
            if suffix in mig:
                base[suffix] = mig[suffix]
    return resources


def _mig_profiles(gpus: list[Gpu], mig_strategy: str) -> set[str]:
    """The profiles of the MIG devices the strategy labels."""
    if mig_strategy == "none":
        return set()
    return {d.profile for gpu in gpus if gpu.mig and gpu.mig.enabled for d in gpu.mig.devices}


def _publishable(labels: dict[str, str], warnings: list[str]) -> dict[str, str]:
    """Full keys to values, sorted by key: only valid label keys, and values that fit (a
    name-like value made valid, anything else left out rather than cut)."""
    published: dict[str, str] = {}
    for name in sorted(labels):
        if not is_valid_label_name(name):
            warnings.append(f"label {keys.PREFIX}{name} is not a valid label key; left out")
            continue
        if not keys.is_name_valued(name):
            # numbers, versions, UUIDs: a cut value would be a wrong fact on the node
            if not is_valid_label_value(labels[name]):
                warnings.append(
                    f"label {keys.PREFIX}{name}: value {describe(labels[name])} does not fit a "
                    "label value; left out (such a value is never cut)"
                )
                continue
            published[keys.full_key(name)] = labels[name]
            continue
        value, changed = valid_label_value(labels[name])
        if changed and name.endswith(f".{keys.MACHINE}"):
            # the machine type is a file's content, and what a path leads to is never shown
            warnings.append(
                f"label {keys.PREFIX}{name}: a value of {len(labels[name])} characters is not "
                "a valid label value; published cut to fit"
            )
        elif changed:
            warnings.append(
                f"label {keys.PREFIX}{name}: value {describe(labels[name])} is not a valid label "
                f"value; published as {value!r}"
            )
        published[keys.full_key(name)] = value
    return published


def build(
    snapshot: Snapshot,
    mig_strategy: str,
    config: Config,
    timestamp: int | None,
    *,
    topology_labels: bool = False,
) -> LabelSet:
    """All labels for the node described by ``snapshot``.

    Raises LabelError when the snapshot cannot be labelled (e.g. a malformed driver version)
    and ConfigError when the configuration cannot apply to this node (MPS with MIG)."""
    warnings: list[str] = []
    notes: list[str] = []
    unused: list[str] = []
    labels: dict[str, str] = {}
    if timestamp is not None:
        labels[keys.TIMESTAMP] = str(timestamp)
    labels.update(node.vgpu_labels(snapshot.vgpu))
    if snapshot.lost:
        labels[keys.GPU_LOST] = str(len(snapshot.lost))

    gpus = []
    for gpu in sorted(snapshot.gpus, key=lambda gpu: (gpu.index, gpu.uuid)):
        if devices.is_skipped_device(gpu.name):
            # a snapshot written by hand or by an older gfd may still list it
            notes.append(f"GPU {gpu.index} ({gpu.name}) is a display device; not labelled")
            continue
        gpus.append(gpu)
    if gpus:
        gpu_labels, unused = _gpu_labels(
            snapshot, gpus, mig_strategy, config, topology_labels, warnings
        )
        labels.update(gpu_labels)
    published = _publishable(labels, warnings)
    return LabelSet(published, tuple(warnings), tuple(notes), tuple(unused))


def _gpu_labels(
    snapshot: Snapshot,
    gpus: list[Gpu],
    mig_strategy: str,
    config: Config,
    topology_labels: bool,
    warnings: list[str],
) -> tuple[dict[str, str], list[str]]:
    """The labels of a node with GPUs to label (short keys, before they are checked), and the
    config entries that apply to nothing on it."""
    if snapshot.driver is None:
        raise LabelError("the snapshot lists GPUs but no driver version")
    if config.sharing.strategy == "mps" and any(gpu.mig_enabled for gpu in gpus):
        raise ConfigError("sharing.mps: MPS sharing is not supported for MIG devices")
    labels = node.driver_labels(snapshot.driver)
    capable = any(gpu.mig_capable for gpu in gpus)
    # DRA slices of GPUs with MIG off do not say whether MIG could be enabled: no answer
    # rather than an invented "false"
    if capable or snapshot.discovery != "dra":
        labels[keys.MIG_CAPABLE] = node.bool_label(capable)
    if mig_strategy != "none":
        labels[keys.MIG_STRATEGY] = mig_strategy
    labels[keys.MPS_CAPABLE] = node.bool_label(config.sharing.strategy == "mps")
    labels.update(node.clique_label(tuple(gpus), warnings))
    if topology_labels:
        graph = partitioning.link_graph(snapshot)
        table = partitioning.partition_table(snapshot, config.partitions)
        labels.update(interconnect.topology_labels(snapshot, graph, table))
    resources = _resource_labels(gpus, mig_strategy, config, snapshot.machine, warnings)
    warnings.extend(devices.product_warnings(gpus, config.sharing.strategy != "none"))
    unused = unused_entries(
        config, {gpu.name for gpu in gpus}, _mig_profiles(gpus, mig_strategy), resources
    )
    for resource in sorted(resources):
        for suffix, value in resources[resource].items():
            labels[keys.resource_key(resource, suffix)] = value
    return labels, unused
