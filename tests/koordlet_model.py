"""koordlet's reading of device-info files, as its source says, for the contract tests.

A Python reading of koordinator-sh/koordinator at commit
a7a1b76bbf81abd26f9c377de1f31a60dd965f6e (koordinator cannot be built here: it is not on
the Go module proxy in a usable form).  Each function names the Go function it follows:

- :func:`read_dir`: ``GetXPUDevice`` and ``readDeviceInfosFromFile``
  (``pkg/koordlet/metricsadvisor/devices/xpu/collector_xpu.go``);
- :func:`decode_devices`: Go's ``encoding/json`` decoding into ``XPUDevices``, with the
  field names and types of ``XPUDeviceInfo``, ``DeviceTopology``, ``DeviceP2PLink`` and
  ``DeviceStatus`` (``pkg/koordlet/util/device.go``);
- :func:`partition_table`, :func:`policy_label`, :func:`device_topology`:
  ``getPartitionTableFromXPUDevices``, ``buildXPUDeviceLabels`` and
  ``getXPUDeviceTopology`` (``pkg/koordlet/statesinformer/impl/states_device_linux.go``);
- :func:`allocate_by_partition`: the outcome of ``allocateByPartition``
  (``pkg/scheduler/plugins/deviceshare/allocator_gpu.go``) on an idle node."""

from __future__ import annotations

import json
import os
import re
from typing import Any

COMMIT = "a7a1b76bbf81abd26f9c377de1f31a60dd965f6e"

#: the Go types, field by field: JSON key -> "string" | "bool" | "map" (map[string]string)
#: | a nested struct (pointer: null allowed) | ("list", struct) (a slice)
P2P_LINK = {"peerMinor": "string", "type": "string"}
TOPOLOGY = {
    "p2pLinks": ("list", P2P_LINK), "mustHonorPartition": "bool", "socketID": "string",
    "nodeID": "string", "pcieID": "string", "busID": "string",
}  # fmt: skip
STATUS = {"healthy": "bool", "errCode": "string", "errMessage": "string"}
XPU_DEVICE_INFO = {
    "vendor": "string", "model": "string", "uuid": "string", "minor": "string", "resources": "map",
    "topology": TOPOLOGY, "status": STATUS,
}  # fmt: skip

#: pkg/koordlet/metricsadvisor/devices/helper/topology.go, pcieRegexp
PCIE_REGEXP = re.compile(r"pci\d{4}:[0-9a-fA-F]{2}")

ERR_UNSUPPORTED = "node(s) Unsupported number of GPU requests"
ERR_INSUFFICIENT = "Insufficient Partitioned GPU Devices"


class DecodeError(Exception):
    """What json.Decoder.Decode would return: the whole read fails."""


def _decode(value: Any, kind: Any, path: str, strict: bool) -> Any:
    """One value as Go decodes it into ``kind``; ``strict`` also refuses what Go accepts
    but would silently drop or match loosely (an unknown key, a key in another case)."""
    if value is None:
        return None  # a null leaves the Go zero value (nil pointer, nil slice, "")
    if kind == "string":
        if not isinstance(value, str):
            raise DecodeError(f"{path}: cannot unmarshal {type(value).__name__} into string")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise DecodeError(f"{path}: cannot unmarshal {type(value).__name__} into bool")
        return value
    if kind == "map":
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise DecodeError(f"{path}: cannot unmarshal into map[string]string")
        return dict(value)
    if isinstance(kind, tuple):
        if not isinstance(value, list):
            raise DecodeError(f"{path}: cannot unmarshal {type(value).__name__} into a slice")
        return [_decode(item, kind[1], f"{path}[{i}]", strict) for i, item in enumerate(value)]
    if not isinstance(value, dict):
        raise DecodeError(f"{path}: cannot unmarshal {type(value).__name__} into a struct")
    fields: dict[str, Any] = {}
    for key, item in value.items():
        # encoding/json matches a key to a field name exactly, else case-insensitively
        name = key if key in kind else next((k for k in kind if k.lower() == key.lower()), None)
        if strict and name != key:
            raise DecodeError(f"{path}.{key}: not a field of the Go struct (exactly)")
        if name is not None:
            fields[name] = _decode(item, kind[name], f"{path}.{key}", strict)
    return fields


def decode_devices(text: str, *, strict: bool = False) -> list[dict[str, Any]]:
    """A file's content decoded into ``XPUDevices`` (``[]XPUDeviceInfo``)."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise DecodeError(str(exc)) from None
    decoded = _decode(document, ("list", XPU_DEVICE_INFO), "$", strict)
    return [] if decoded is None else [d or {} for d in decoded]


def read_dir(directory: str) -> list[dict[str, Any]]:
    """``GetXPUDevice``: every entry but directories, in name order (``os.ReadDir``), each
    a JSON list; one that fails to decode fails the whole read."""
    devices: list[dict[str, Any]] = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isdir(path):
            continue
        with open(path, encoding="utf-8") as handle:
            devices.extend(decode_devices(handle.read()))
    return devices


def _go_int(text: str, bits: int = 64) -> int | None:
    """``strconv.Atoi`` / ``ParseInt(text, 10, bits)``: None when Go returns an error."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    number = int(text)
    return number if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1) else None


def partition_table(devices: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """``getPartitionTableFromXPUDevices``: size -> partitions, in the order koordlet
    appends them."""
    table: dict[int, list[dict[str, Any]]] = {}
    seen: set[tuple[int, ...]] = set()
    for device in devices:
        topology = device.get("topology")
        if topology is None or topology.get("p2pLinks") is None:
            continue
        for link in topology["p2pLinks"]:
            link = link or {}
            if not link.get("peerMinor") or not link.get("type"):
                continue  # "has invalid p2p link"
            minors = set()
            for text in [*link["peerMinor"].split(","), device.get("minor") or ""]:
                number = _go_int(text)
                if number is not None:  # an unparsable minor is logged and left out
                    minors.add(number)
            key = tuple(sorted(minors))
            if key in seen:
                continue
            seen.add(key)
            table.setdefault(len(key), []).append(
                {"minors": list(key), "gpuLinkType": link["type"], "allocationScore": 1}
            )
    return table


def annotation(devices: list[dict[str, Any]]) -> str | None:
    """``buildXPUDeviceAnnotations``: the table as koordlet marshals it (Go's map keys
    sorted as strings; ``ringBusBandwidth`` a nil pointer, left out), None when empty."""
    table = partition_table(devices)
    if not table:
        return None
    return json.dumps({str(k): table[k] for k in sorted(table, key=str)}, separators=(",", ":"))


def policy_label(devices: list[dict[str, Any]]) -> str | None:
    """``buildXPUDeviceLabels``: ``node.koordinator.sh/gpu-partition-policy`` from the
    first device alone."""
    if not devices:
        return None
    topology = devices[0].get("topology")
    if topology is None or topology.get("p2pLinks") is None:
        return None
    return "Honor" if topology.get("mustHonorPartition") else "Prefer"


def device_topology(device: dict[str, Any]) -> dict[str, Any] | None:
    """``getXPUDeviceTopology``: what the Device object's entry says (None: no topology)."""
    topology = device.get("topology")
    if topology is None:
        return None
    text = topology.get("nodeID") or ""
    node = -1 if text == "" else (_go_int(text, 32) or 0)  # a parse error leaves 0
    return {
        "socketID": -1, "nodeID": node, "pcieID": topology.get("pcieID") or "",
        "busID": topology.get("busID") or "",
    }  # fmt: skip


def allocate_by_partition(
    table: dict[int, list[dict[str, Any]]] | None, gpus: int, bandwidth: int | None = None
) -> tuple[list[int] | None, str | None]:
    """The outcome of ``allocateByPartition`` for a pod with a
    ``scheduling.koordinator.sh/gpu-partition-spec`` (so the partition is honoured) asking
    ``gpus`` whole GPUs and at least ``bandwidth`` bytes/s (allocatePolicy BestEffort, the
    default), on an idle node:
    (the minors given, None) or (None, the reason)."""
    from gfd.partition_table import parse_quantity

    if table is None:
        return None, "node(s) missing GPU Partition Table"
    candidates = table.get(gpus)
    if not candidates:
        return None, ERR_UNSUPPORTED
    for score in sorted({p.get("allocationScore", 0) for p in candidates}):
        for partition in candidates:
            if partition.get("allocationScore", 0) != score:
                continue
            if bandwidth is not None:
                given = partition.get("ringBusBandwidth")
                if given is None or parse_quantity(str(given)) < bandwidth:
                    continue
            return list(partition["minors"]), None
    return None, ERR_INSUFFICIENT
