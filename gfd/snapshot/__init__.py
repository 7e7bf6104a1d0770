"""The node snapshot: every host fact the labels depend on, as plain frozen data.

A snapshot is written by ``gfd --dump-snapshot`` and read back by ``--snapshot-file``
(SPEC §3, format ``v1``).  Loading is strict: an unknown key, a value of the wrong type or
a missing required field is a :class:`SnapshotError` whose message names the path inside the
document, e.g. ``gpus[3].mig.devices[0].slices.gi: expected an integer, got 'x'``.

The records and their fields are declared once in :mod:`gfd.snapshot.model`; reading and
writing them is derived (:mod:`gfd.snapshot.fields`).  This module adds what is about the
document as a whole: its version, the facts that tie records together (one GPU per index,
UUID and bus id; a topology naming only listed GPUs), and the YAML and JSON text.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from gfd.documents import parse_yaml, read_text
from gfd.echo import clip, clip_path, describe
from gfd.errors import SnapshotError
from gfd.snapshot.fields import (
    MAX_STRING_CHARS,
    Flow,
    HexInt,
    Reader,
    parse_text,
    read_record,
    write_record,
)
from gfd.snapshot.model import (
    DISCOVERY_KINDS,
    MAX_GPUS,
    MAX_MIG_DEVICES,
    MAX_MIG_DEVICES_PER_GPU,
    MAX_NVLINKS,
    MAX_TOPOLOGY_GPUS,
    MAX_TOPOLOGY_NUMBER,
    MAX_VGPU_DEVICES,
    NVLINK_REMOTES,
    PCIE_LEVELS,
    PCIE_ROOT,
    ComputeCapability,
    Driver,
    Fabric,
    Gpu,
    GpuPair,
    GpuTopology,
    LostGpu,
    Mig,
    MigDevice,
    MigEngines,
    MigSlices,
    NvLink,
    Snapshot,
    Topology,
    Vgpu,
    VgpuDevice,
)

if TYPE_CHECKING:
    import yaml

__all__ = [
    "DISCOVERY_KINDS",
    "MAX_GPUS",
    "MAX_MIG_DEVICES",
    "MAX_MIG_DEVICES_PER_GPU",
    "MAX_NVLINKS",
    "MAX_STRING_CHARS",
    "MAX_TOPOLOGY_GPUS",
    "MAX_TOPOLOGY_NUMBER",
    "MAX_VGPU_DEVICES",
    "NVLINK_REMOTES",
    "PCIE_LEVELS",
    "PCIE_ROOT",
    "SNAPSHOT_VERSION",
    "ComputeCapability",
    "Driver",
    "Fabric",
    "Gpu",
    "GpuPair",
    "GpuTopology",
    "LostGpu",
    "Mig",
    "MigDevice",
    "MigEngines",
    "MigSlices",
    "NvLink",
    "Snapshot",
    "Topology",
    "Vgpu",
    "VgpuDevice",
    "dumps",
    "dumps_json",
    "from_dict",
    "load",
    "loads",
    "to_dict",
]

SNAPSHOT_VERSION = "v1"

#: the top-level keys of a snapshot, and those of a config file (which a snapshot never
#: has): a file with only the second kind is a config file given in a snapshot's place
_SNAPSHOT_KEYS = ("driver", "machine", "vgpu", "gpus", "lost", "topology", "discovery")
_CONFIG_KEYS = ("flags", "resources", "sharing", "partitions")


# --------------------------------------------------------------------------- loading


def from_dict(document: Any) -> Snapshot:
    """Validate a parsed YAML/JSON document and build the snapshot it describes."""
    reader = Reader(document, "")
    version = reader.required("version", parse_text)
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"version: unsupported snapshot version {describe(version)} (expected 'v1')"
        )
    snapshot: Snapshot = read_record(Snapshot, reader)
    if snapshot.gpus and snapshot.driver is None:
        raise SnapshotError("driver: required when the snapshot lists GPUs")
    _check_unique(snapshot.gpus)
    _check_lost(snapshot)
    if snapshot.topology is not None:
        if len(snapshot.gpus) > MAX_TOPOLOGY_GPUS:
            raise SnapshotError(
                f"topology: a snapshot with a topology section lists at most "
                f"{MAX_TOPOLOGY_GPUS} GPUs, this one {len(snapshot.gpus)}"
            )
        _check_topology(snapshot.topology, {gpu.index for gpu in snapshot.gpus})
    return snapshot


def _check_unique(gpus: tuple[Gpu, ...]) -> None:
    """One GPU per index, UUID and PCI bus id; MIG devices in all within the limit."""
    seen: dict[tuple[str, Any], int] = {}
    mig_devices = 0
    for position, gpu in enumerate(gpus):
        for field_name, value in (
            ("index", gpu.index),
            ("uuid", gpu.uuid),
            ("pci_bus_id", gpu.pci_bus_id.lower()),
        ):
            if value == "":
                continue  # an unknown bus id (optional field) is not a duplicate
            first = seen.setdefault((field_name, value), position)
            if first != position:
                raise SnapshotError(
                    f"gpus[{position}].{field_name}: duplicate {field_name} "
                    f"{describe(getattr(gpu, field_name))} (also gpus[{first}])"
                )
        mig_devices += len(gpu.mig.devices) if gpu.mig else 0
        if mig_devices > MAX_MIG_DEVICES:
            raise SnapshotError(
                f"gpus[{position}].mig.devices: more than the limit of {MAX_MIG_DEVICES} MIG "
                "devices in all"
            )


def _check_lost(snapshot: Snapshot) -> None:
    """A lost GPU is neither a listed GPU nor another lost one (by index or bus id)."""
    indices = {gpu.index for gpu in snapshot.gpus}
    buses = {gpu.pci_bus_id.lower(): "gpus" for gpu in snapshot.gpus if gpu.pci_bus_id}
    lost_indices: dict[int, int] = {}
    for position, gone in enumerate(snapshot.lost):
        if gone.index is not None and gone.index in indices:
            raise SnapshotError(
                f"lost_gpus[{position}].index: GPU {gone.index} is also listed in gpus"
            )
        if gone.index is not None:
            if gone.index in lost_indices:
                raise SnapshotError(
                    f"lost_gpus[{position}].index: GPU {gone.index} is listed twice "
                    f"(also lost_gpus[{lost_indices[gone.index]}])"
                )
            lost_indices[gone.index] = position
        bus = gone.pci_bus_id.lower()
        if bus:
            if bus in buses:
                raise SnapshotError(
                    f"lost_gpus[{position}].pci_bus_id: {describe(gone.pci_bus_id)} is also "
                    f"listed in {buses[bus]}"
                )
            buses[bus] = f"lost_gpus[{position}]"
    if snapshot.lost and snapshot.driver is None:
        raise SnapshotError("driver: required when the snapshot lists lost GPUs")


def _check_topology(topology: Topology, indices: set[int]) -> None:
    """Every GPU the topology names is one of ``gpus``, once per entry kind."""
    seen: set[int] = set()
    for i, gpu in enumerate(topology.gpus):
        where = f"topology.gpus[{i}].index"
        if gpu.index not in indices:
            raise SnapshotError(f"{where}: no GPU has index {gpu.index}")
        if gpu.index in seen:
            raise SnapshotError(f"{where}: duplicate index {gpu.index}")
        seen.add(gpu.index)
    pairs: set[tuple[int, int]] = set()
    for i, pair in enumerate(topology.pairs):
        where = f"topology.pairs[{i}].gpus"
        missing = [end for end in pair.gpus if end not in indices]
        if missing:
            raise SnapshotError(f"{where}: no GPU has index {missing[0]}")
        if pair.gpus in pairs:
            raise SnapshotError(f"{where}: duplicate pair {list(pair.gpus)}")
        pairs.add(pair.gpus)


def loads(text: str, source: str = "<snapshot>") -> Snapshot:
    """Parse snapshot YAML or JSON text."""
    source = clip_path(source)
    document = parse_yaml(text, source, SnapshotError)
    if document is None:
        raise SnapshotError(f"{source}: the snapshot is empty")
    if isinstance(document, dict):
        config_keys = [key for key in _CONFIG_KEYS if key in document]
        if config_keys and not any(key in document for key in _SNAPSHOT_KEYS):
            raise SnapshotError(
                f"{source}: this looks like a gfd config file (version "
                f"{clip(str(document.get('version')), 20)} with {'/'.join(config_keys)}), "
                "not a snapshot"
            )
    try:
        return from_dict(document)
    except SnapshotError as exc:
        raise SnapshotError(f"{source}: {exc}") from None


def load(path: str) -> Snapshot:
    """Read a snapshot file; every failure is a :class:`SnapshotError` naming the file."""
    return loads(read_text(path, "--snapshot-file", SnapshotError), source=path)


# --------------------------------------------------------------------------- dumping


def _represent_hex(dumper: yaml.SafeDumper, value: HexInt) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:int", f"0x{int(value):06x}")


def _represent_flow(dumper: yaml.SafeDumper, value: Flow) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", value, flow_style=True)


# Characters PyYAML writes raw in plain or single-quoted scalars but reads back as line
# breaks; a string holding one must be double-quoted (escaped) to survive a round trip.
_LINE_BREAKS = ("\x85", "\u2028", "\u2029")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if any(c in value for c in _LINE_BREAKS):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    return dumper.represent_str(value)


@functools.cache
def _yaml_dumper() -> type[yaml.SafeDumper]:
    """The dumper with gfd's representers, built on first use: loading never needs it.
    libyaml's emitter where PyYAML was built with it, else PyYAML's own (same output)."""
    import yaml

    class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        pass

    _Dumper.add_representer(HexInt, _represent_hex)
    _Dumper.add_representer(Flow, _represent_flow)
    _Dumper.add_representer(str, _represent_str)
    return _Dumper


def to_dict(snapshot: Snapshot, *, hex_class: bool = False) -> dict[str, Any]:
    """The snapshot as plain data in the v1 layout: ``version`` first, then every field
    as :mod:`gfd.snapshot.model` declares it (``hex_class``: dressed for YAML, PCI class
    codes in hex)."""
    return {"version": SNAPSHOT_VERSION, **write_record(snapshot, hex_class)}


def dumps(snapshot: Snapshot) -> str:
    """The snapshot as v1 YAML; ``loads(dumps(s)) == s``."""
    import yaml

    return yaml.dump(
        to_dict(snapshot, hex_class=True),
        Dumper=_yaml_dumper(),
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        # one line a value: PyYAML would fold a long string at 80 columns
        width=1 << 30,
    )


def dumps_json(snapshot: Snapshot) -> str:

    return json.dumps(to_dict(snapshot), indent=2) + "\n"
