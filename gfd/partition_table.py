"""The GPU partition table in Koordinator's shape, as plain data (no I/O).

Koordinator reads ``GPUPartitionTable`` (``map[int][]GPUPartition``,
``apis/extension/device_share.go`` at koordinator commit
a7a1b76bbf81abd26f9c377de1f31a60dd965f6e; proposal "GPU Partitioning APIs") from JSON:
keys are the partition sizes as strings ("1", "2", ...), each partition has ``minors``
(ints), ``gpuLinkType`` ("NVLink"), ``ringBusBandwidth`` (a Kubernetes quantity) and
``allocationScore`` (a JSON int: Go's ``int`` rejects a string).  This module holds the
value types, the quantity text, the JSON form and the validation of an operator's own table
(config file ``partitions:``).  The table computed from the topology is in
:mod:`gfd.labels.partitioning`.

gfd publishes the table under its own Node annotation ``nvidia.com/gfd.gpu-partitions``
(:mod:`gfd.outputs.topology_extras`), never under Koordinator's
``scheduling.koordinator.sh/gpu-partitions``: that key lives on koordlet's ``Device``
object, which koordlet rewrites (:mod:`gfd.outputs.koordlet` is the way in).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from gfd.echo import clip, describe

NVLINK = "NVLink"


@dataclass(frozen=True, slots=True)
class Partition:
    minors: tuple[int, ...]
    allocation_score: int = 1
    gpu_link_type: str = NVLINK
    ring_bus_bandwidth: str | None = None  # a Kubernetes quantity, bytes per second


#: size -> partitions of that size, sizes ascending, partitions ordered by minors
PartitionTable = Mapping[int, tuple[Partition, ...]]

_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_SIZE = re.compile(r"[0-9]{1,6}")
_LINK_TYPE = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,62}")

#: what an operator's table may hold (README "Limits"): Go's ``int`` on every platform for
#: minors and scores (Koordinator reads them as ``int``; a bigger number fails its whole
#: JSON), a bandwidth that fits a quantity's int64, sizes up to the topology GPU limit, and
#: at most 64 KiB of JSON (a Node's annotations hold 256 KiB in all; the largest computed
#: table, 256 GPUs on NVSwitch, is 43 KiB)
MAX_INT = 2**31 - 1
MAX_BANDWIDTH = 2**63 - 1
MAX_QUANTITY_CHARS = 32
MAX_SIZE = 256
MAX_TABLE_BYTES = 64 * 1024


def format_quantity(value: int) -> str:
    """Bytes as Kubernetes writes a decimal quantity: ``450000000000`` -> ``450G``."""
    if value < 0:
        raise ValueError("a bandwidth is never negative")
    for suffix in ("E", "P", "T", "G", "M", "k"):
        scale = _SUFFIXES[suffix]
        if value and value % scale == 0:
            return f"{value // scale}{suffix}"
    return str(value)


def parse_quantity(text: str) -> int:
    """A quantity with an optional SI or binary suffix, as a whole number of bytes."""
    match = _QUANTITY.match(text.strip()) if len(text) <= MAX_QUANTITY_CHARS else None
    if match is None:
        raise ValueError(f"{describe(text)} is not a quantity like 450G or 400Gi")
    number, suffix = match.groups()
    try:
        value = Decimal(number) * _SUFFIXES[suffix or ""]
    except InvalidOperation:
        raise ValueError(f"{describe(text)} is not a quantity") from None
    if value != value.to_integral_value():
        raise ValueError(f"{describe(text)} is not a whole number of bytes")
    return int(value)


def to_json_document(table: PartitionTable) -> dict[str, list[dict[str, Any]]]:
    document: dict[str, list[dict[str, Any]]] = {}
    for size in sorted(table):
        entries = []
        for partition in table[size]:
            entry: dict[str, Any] = {
                "minors": list(partition.minors),
                "gpuLinkType": partition.gpu_link_type,
            }
            if partition.ring_bus_bandwidth is not None:
                entry["ringBusBandwidth"] = partition.ring_bus_bandwidth
            entry["allocationScore"] = partition.allocation_score
            entries.append(entry)
        document[str(size)] = entries
    return document


def dumps(table: PartitionTable, *, pretty: bool = False) -> str:
    """The table as Koordinator's JSON: compact (an annotation value), or ``pretty`` with
    one partition per line (``--dump-partitions``)."""

    document = to_json_document(table)
    if not pretty:
        return json.dumps(document, separators=(",", ":"))
    if not document:
        return "{}"
    sizes = []
    for size, entries in document.items():
        rows = ",\n".join(f"    {json.dumps(entry)}" for entry in entries)
        sizes.append(f'  "{size}": [\n{rows}\n  ]')
    return "{\n" + ",\n".join(sizes) + "\n}"


def parse_table(value: Any, where: str) -> dict[int, tuple[Partition, ...]]:
    """An operator's table (config ``partitions:``), checked for shape; ValueError names
    the exact place.  Whether the minors exist is checked against the node at label time
    (:func:`check_against_minors`)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping of sizes to lists, got {describe(value)}")
    table: dict[int, tuple[Partition, ...]] = {}
    for key, raw in value.items():
        text = str(key)
        key_where = f"{where}.{clip(text)}"
        if isinstance(key, bool) or not _SIZE.fullmatch(text) or not 1 <= int(text) <= MAX_SIZE:
            got = describe(key)
            raise ValueError(
                f"{key_where}: a size is a positive integer (up to {MAX_SIZE}), got {got}"
            )
        size = int(text)
        if size in table:
            raise ValueError(f"{key_where}: size {size} is given twice")
        if not isinstance(raw, list):
            raise ValueError(f"{key_where}: expected a list of partitions, got {describe(raw)}")
        parsed = []
        seen: dict[tuple[int, ...], int] = {}
        for i, item in enumerate(raw):
            partition = _parse_partition(item, f"{key_where}[{i}]", size)
            if partition.minors in seen:
                first = f"{key_where}[{seen[partition.minors]}]"
                raise ValueError(f"{key_where}[{i}].minors: the same GPUs as {first}")
            seen[partition.minors] = i
            parsed.append(partition)
        table[size] = tuple(parsed)
    result = dict(sorted(table.items()))
    length = len(dumps(result))
    if length > MAX_TABLE_BYTES:
        raise ValueError(
            f"{where}: the table takes {length} bytes of JSON, more than the {MAX_TABLE_BYTES} "
            "a node annotation may take"
        )
    return result


def _parse_partition(value: Any, where: str, size: int) -> Partition:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a mapping with minors, got {describe(value)}")
    known = {"minors", "gpuLinkType", "ringBusBandwidth", "allocationScore"}
    for key in value:
        if key not in known:
            raise ValueError(f"{where}.{clip(str(key))}: unknown key")
    minors = value.get("minors")
    if not isinstance(minors, list) or not all(
        isinstance(m, int) and not isinstance(m, bool) and 0 <= m <= MAX_INT for m in minors
    ):
        raise ValueError(
            f"{where}.minors: expected a list of GPU minors (0 to {MAX_INT}), "
            f"got {describe(minors)}"
        )
    if len(minors) != size or len(set(minors)) != len(minors):
        raise ValueError(
            f"{where}.minors: expected {size} different minors, got {describe(minors)}"
        )
    link_type = value.get("gpuLinkType", NVLINK)
    if not isinstance(link_type, str) or not _LINK_TYPE.fullmatch(link_type):
        raise ValueError(
            f"{where}.gpuLinkType: expected a name like NVLink (up to 63 letters, digits, "
            f"'-', '_', '.'), got {describe(link_type)}"
        )
    score = value.get("allocationScore", 1)
    if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= MAX_INT:
        raise ValueError(
            f"{where}.allocationScore: expected an integer from 1 (best) to {MAX_INT}, "
            f"got {describe(score)}"
        )
    bandwidth = value.get("ringBusBandwidth")
    if bandwidth is not None:
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, str)):
            raise ValueError(f"{where}.ringBusBandwidth: expected a quantity like 450G")
        too_big = isinstance(bandwidth, int) and bandwidth > MAX_BANDWIDTH
        text = "..." if too_big else str(bandwidth)
        try:
            amount = MAX_BANDWIDTH + 1 if too_big else parse_quantity(text)
        except ValueError as exc:
            raise ValueError(f"{where}.ringBusBandwidth: {exc}") from None
        if amount > MAX_BANDWIDTH:
            raise ValueError(
                f"{where}.ringBusBandwidth: {clip(text)} is more than a quantity holds "
                f"({MAX_BANDWIDTH} bytes per second)"
            )
        bandwidth = text
    return Partition(
        minors=tuple(sorted(minors)),
        allocation_score=score,
        gpu_link_type=link_type,
        ring_bus_bandwidth=bandwidth,
    )


def check_against_minors(table: PartitionTable, minors: set[int]) -> str | None:
    """Why an operator's table does not fit a node with these GPU minors (None: it fits)."""
    for size in sorted(table):
        if size > len(minors):
            return f"partitions.{size}: the node has only {len(minors)} GPUs"
        for i, partition in enumerate(table[size]):
            unknown = sorted(set(partition.minors) - minors)
            if unknown:
                return f"partitions.{size}[{i}].minors: no GPU has minor {unknown[0]}"
    return None
