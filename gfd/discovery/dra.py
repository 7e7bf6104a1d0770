"""The node's facts from the NVIDIA DRA driver's ResourceSlices, without NVML.

NVIDIA's DRA driver (driver name ``gpu.nvidia.com``) publishes one pool per node of
``resource.k8s.io/v1`` ResourceSlices.  :func:`select_pool` picks the slices of the node's
pool that describe its current state (the highest generation, and only once every one of
its ``resourceSliceCount`` slices is there); :func:`to_snapshot` maps their devices onto the
same :class:`~gfd.snapshot.Snapshot` the NVML path fills, so every label rule, sharing and
MIG strategy applies unchanged.  README "DRA nodes" has the mapping table with the driver
source it follows and the labels slices cannot carry.

Pure functions over the API's JSON (dicts as the API server returns them): no I/O here.
A slice is input from the cluster, so it is checked like any snapshot: the result goes
through the snapshot loader's bounds (:func:`gfd.snapshot.from_dict`) and anything out of
shape is a :class:`~gfd.errors.DiscoveryError` of one line naming the device and the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gfd.echo import describe
from gfd.errors import DiscoveryError, SnapshotError
from gfd.snapshot import (
    ComputeCapability,
    Driver,
    Gpu,
    Mig,
    MigDevice,
    MigEngines,
    MigSlices,
    Snapshot,
    from_dict,
    to_dict,
)

#: the driver name NVIDIA's GPU kubelet plugin publishes under
DRIVER_NAME = "gpu.nvidia.com"
#: the attribute that names the PCI address: the Kubernetes standard one (v25.12.0), and
#: the driver's own name before it (v25.3.x, v25.8.x)
PCI_BUS_ID_ATTRIBUTES = ("resource.kubernetes.io/pciBusID", "pcieBusID")
#: a quantity string longer than this is not a number any device has
_MAX_QUANTITY_CHARS = 64
#: the driver announces capacities with resource.NewQuantity(int64(..)): nothing past int64
_QUANTITY_MAX = 2**63 - 1
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d{1,3})?$"
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_PROFILE = re.compile(r"^(?:(?P<ci>\d+)c\.)?(?P<gi>\d+)g\.")
_SEMVER = re.compile(r"^v?(?P<major>\d{1,9})(?:\.(?P<minor>\d{1,9}))?(?:\.(?P<patch>\d{1,9}))?")
#: MIG engine capacities (deviceinfo.go GetDevice of a MIG device) → MigEngines fields
_ENGINES = {
    "copyEngines": "copy",
    "decoders": "decoder",
    "encoders": "encoder",
    "jpegEngines": "jpeg",
    "ofaEngines": "ofa",
}


@dataclass(frozen=True, slots=True)
class PoolState:
    """What the node's slices say now.  ``complete`` is False while a generation is still
    being written (fewer slices than ``resourceSliceCount``): then ``slices`` is empty and
    the caller keeps the last complete state."""

    complete: bool
    slices: tuple[Mapping[str, Any], ...] = ()
    generation: int | None = None
    reason: str = ""


def _spec(item: Any) -> Mapping[str, Any]:
    spec = item.get("spec") if isinstance(item, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _slice_name(item: Any) -> str:
    meta = item.get("metadata") if isinstance(item, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return describe(name if isinstance(name, str) else "<unnamed>")


def node_of(item: Any) -> Any:
    """The ``spec.nodeName`` of a slice (None: none)."""
    return _spec(item).get("nodeName")


def is_driver_slice(item: Any) -> bool:
    """Whether ``item`` is a slice of NVIDIA's driver."""
    return _spec(item).get("driver") == DRIVER_NAME


def select_pool(items: Iterable[Any], node: str) -> PoolState:
    """The slices of ``node``'s pools of driver ``gpu.nvidia.com``, each pool at its highest
    generation; incomplete when any such generation lacks slices (the driver is mid-update)."""
    pools: dict[str, list[Mapping[str, Any]]] = {}
    for item in items:
        spec = _spec(item)
        if not is_driver_slice(item) or node_of(item) != node:
            continue
        pool = spec.get("pool")
        name = pool.get("name") if isinstance(pool, Mapping) else None
        if not isinstance(name, str):
            raise DiscoveryError(f"resourceslice {_slice_name(item)}: spec.pool.name is missing")
        pools.setdefault(name, []).append(item)
    chosen: list[Mapping[str, Any]] = []
    generation: int | None = None
    for name in sorted(pools):
        newest = max(_pool_int(item, "generation") for item in pools[name])
        current = [item for item in pools[name] if _pool_int(item, "generation") == newest]
        wanted = {_pool_int(item, "resourceSliceCount") for item in current}
        if len(wanted) != 1 or len(current) != wanted.pop():
            return PoolState(
                False,
                generation=newest,
                reason=f"pool {describe(name)} generation {newest}: "
                f"{len(current)} slices, not all of its resourceSliceCount",
            )
        chosen.extend(current)
        generation = newest if generation is None else max(generation, newest)
    return PoolState(True, tuple(chosen), generation)


def _pool_int(item: Mapping[str, Any], key: str) -> int:
    value = _spec(item).get("pool", {}).get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise DiscoveryError(
            f"resourceslice {_slice_name(item)}: spec.pool.{key}: expected a non-negative "
            f"integer, got {describe(value)}"
        )
    return value


# --------------------------------------------------------------------------- values


def parse_quantity(value: Any, where: str) -> int:
    """A Kubernetes quantity (``80Gi``, ``85899345920``, ``1e3``) as a whole number."""
    text = value.get("value") if isinstance(value, Mapping) else value
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or len(text) > _MAX_QUANTITY_CHARS:
        raise DiscoveryError(f"{where}: expected a quantity, got {describe(text)}")
    match = _QUANTITY.match(text)
    if match is None:
        raise DiscoveryError(f"{where}: expected a quantity, got {describe(text)}")
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        number *= 2 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        number *= Fraction(10) ** _DECIMAL[suffix]
    elif suffix:
        number *= Fraction(10) ** int(suffix[1:])
    if number < 0 or number.denominator != 1 or number > _QUANTITY_MAX:
        raise DiscoveryError(
            f"{where}: expected a whole quantity from 0 to {_QUANTITY_MAX}, got {describe(text)}"
        )
    return int(number)


def _attribute(device: Mapping[str, Any], names: tuple[str, ...], where: str) -> Any:
    """The value of the first of ``names`` the device carries (``None``: none of them).
    A DeviceAttribute holds exactly one of string, version, int or bool."""
    attributes = device.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        raise DiscoveryError(f"{where}.attributes: expected a mapping")
    for name in names:
        attribute = attributes.get(name)
        if attribute is None:
            continue
        if not isinstance(attribute, Mapping) or len(attribute) != 1:
            raise DiscoveryError(f"{where}.attributes.{name}: expected one typed value")
        return next(iter(attribute.values()))
    return None


def _string(device: Mapping[str, Any], where: str, *names: str, required: bool = True) -> str:
    value = _attribute(device, names, where)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise DiscoveryError(
            f"{where}.attributes.{names[0]}: expected a string, got {describe(value)}"
        )
    return value


def _version(text: str, where: str) -> tuple[int, int, int]:
    match = _SEMVER.match(text)
    if match is None:
        raise DiscoveryError(f"{where}: expected a version, got {describe(text)}")
    return int(match["major"]), int(match["minor"] or 0), int(match["patch"] or 0)


def _int_attribute(device: Mapping[str, Any], where: str, name: str) -> int | None:
    value = _attribute(device, (name,), where)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise DiscoveryError(
            f"{where}.attributes.{name}: expected an integer, got {describe(value)}"
        )
    return value


def _capacity(device: Mapping[str, Any], where: str, name: str) -> int | None:
    capacity = device.get("capacity") or {}
    if not isinstance(capacity, Mapping):
        raise DiscoveryError(f"{where}.capacity: expected a mapping")
    if name not in capacity:
        return None
    return parse_quantity(capacity[name], f"{where}.capacity.{name}")


# --------------------------------------------------------------------------- devices


@dataclass(frozen=True, slots=True)
class _Common:
    """What every device of a physical GPU repeats: the GPU's own facts."""

    name: str
    pci_bus_id: str
    capability: ComputeCapability
    driver: Driver


def _common(device: Mapping[str, Any], where: str) -> _Common:
    cc, cuda = "cudaComputeCapability", "cudaDriverVersion"
    major, minor, _ = _version(_string(device, where, cc), f"{where}.attributes.{cc}")
    cuda_major, cuda_minor, _ = _version(_string(device, where, cuda), f"{where}.attributes.{cuda}")
    return _Common(
        name=_string(device, where, "productName"),
        pci_bus_id=_string(device, where, *PCI_BUS_ID_ATTRIBUTES, required=False).lower(),
        capability=ComputeCapability(major, minor),
        driver=Driver(
            version=_string(device, where, "driverVersion"),
            cuda=cuda_major * 1000 + cuda_minor * 10,
        ),
    )


def _mig_device(device: Mapping[str, Any], where: str) -> MigDevice:
    profile = _string(device, where, "profile")
    match = _PROFILE.match(profile)
    if match is None:
        raise DiscoveryError(f"{where}.attributes.profile: not a MIG profile: {describe(profile)}")
    gi = int(match["gi"])
    memory = _capacity(device, where, "memory")
    engines = {
        field: _capacity(device, where, capacity) or 0 for capacity, field in _ENGINES.items()
    }
    return MigDevice(
        profile=profile,
        memory_mib=0 if memory is None else memory >> 20,
        multiprocessors=_capacity(device, where, "multiprocessors") or 0,
        slices=MigSlices(gi=gi, ci=int(match["ci"] or gi)),
        engines=MigEngines(**engines),
    )


@dataclass
class _GpuParts:
    common: _Common
    index: int | None = None
    minor: int | None = None
    memory_mib: int | None = None
    partitionable: bool = False
    mig: list[MigDevice] | None = None


def _device_where(item: Mapping[str, Any], position: int, device: Any) -> str:
    name = device.get("name") if isinstance(device, Mapping) else None
    label = describe(name) if isinstance(name, str) else f"devices[{position}]"
    return f"resourceslice {_slice_name(item)} device {label}"


def _collect(slices: Iterable[Mapping[str, Any]]) -> dict[str, _GpuParts]:
    """The devices of every slice grouped per physical GPU (keyed by its UUID).

    A GPU or MIG device (by its UUID) published twice -- twice in a slice, in two slices of
    the pool, or in a second pool of the driver on the node -- is refused, naming both
    places: counted twice it would label capacity the node does not have."""
    gpus: dict[str, _GpuParts] = {}
    seen: dict[str, str] = {}  # UUID -> where it was published first
    for item in slices:
        devices = _spec(item).get("devices") or []
        if not isinstance(devices, list):
            raise DiscoveryError(
                f"resourceslice {_slice_name(item)}: spec.devices: expected a list"
            )
        for position, device in enumerate(devices):
            where = _device_where(item, position, device)
            if not isinstance(device, Mapping):
                raise DiscoveryError(f"{where}: expected a mapping")
            uuid = _add_device(gpus, device, where)
            if uuid is None:
                continue
            if uuid in seen:
                raise DiscoveryError(
                    f"{where}: device {describe(uuid)} is published twice (also as {seen[uuid]})"
                )
            seen[uuid] = where
    return gpus


def _add_device(gpus: dict[str, _GpuParts], device: Mapping[str, Any], where: str) -> str | None:
    """Add ``device`` to its GPU's parts; the UUID of the GPU or MIG device it is (None: a
    placement offered, or a kind that is no GPU)."""
    kind = _string(device, where, "type")
    if kind == "gpu":
        uuid = _string(device, where, "uuid")
        parts = gpus.setdefault(uuid, _GpuParts(_common(device, where)))
        parts.common = _common(device, where)
        parts.index = _int_attribute(device, where, "index")
        parts.minor = _int_attribute(device, where, "minor")
        memory = _capacity(device, where, "memory")
        parts.partitionable = bool(device.get("consumesCounters"))
        # a partitionable GPU's "memory" is the largest MIG profile's, not the GPU's total
        parts.memory_mib = None if memory is None or parts.partitionable else memory >> 20
        return uuid
    if kind != "mig":
        return None  # vfio functions and kinds this release does not know are no GPUs
    parent = _string(device, where, "parentUUID")
    parts = gpus.setdefault(parent, _GpuParts(_common(device, where)))
    if _attribute(device, ("uuid",), where) is None:
        parts.partitionable = True  # an offered placement, not a MIG device that exists
        return None
    if parts.mig is None:
        parts.mig = []
    parts.mig.append(_mig_device(device, where))
    return _string(device, where, "uuid")


# --------------------------------------------------------------------------- snapshot


def _gpu(uuid: str, index: int, parts: _GpuParts) -> Gpu:
    if parts.mig is not None:
        mig: Mig | None = Mig(enabled=True, devices=tuple(parts.mig))
    elif parts.partitionable:
        mig = Mig(enabled=False)
    else:
        mig = None
    return Gpu(
        index=index,
        uuid=uuid,
        name=parts.common.name,
        pci_bus_id=parts.common.pci_bus_id,
        memory_mib=parts.memory_mib,
        compute_capability=parts.common.capability,
        mig=mig,
    )


def _ordered(gpus: dict[str, _GpuParts]) -> list[tuple[str, _GpuParts]]:
    """NVML's order: by the ``index`` attribute where the release published one, else by
    PCI bus id (NVML enumerates by bus id), then minor, then UUID."""
    return sorted(
        gpus.items(),
        key=lambda entry: (
            entry[1].index if entry[1].index is not None else 2**63,
            entry[1].common.pci_bus_id,
            entry[1].minor if entry[1].minor is not None else 2**63,
            entry[0],
        ),
    )


def to_snapshot(slices: Iterable[Mapping[str, Any]]) -> Snapshot:
    """The snapshot the slices describe (``discovery: dra``); no slices: no driver, no GPUs.

    Facts slices do not carry stay unknown: machine type (None), PCI class (None), vGPU
    (None: no ``vgpu.*`` labels), fabric (None: no ``gpu.clique``), topology (None)."""
    gpus = _collect(slices)
    ordered = _ordered(gpus)
    drivers = {parts.common.driver for _, parts in ordered}
    if len(drivers) > 1:
        raise DiscoveryError(
            f"resourceslices: the devices name {len(drivers)} different driver versions"
        )
    snapshot = Snapshot(
        driver=drivers.pop() if drivers else None,
        machine=None,
        vgpu=None,
        gpus=tuple(_gpu(uuid, index, parts) for index, (uuid, parts) in enumerate(ordered)),
        discovery="dra",
    )
    try:
        from_dict(to_dict(snapshot))
    except SnapshotError as exc:
        raise DiscoveryError(f"resourceslices: {exc}") from None
    return snapshot
