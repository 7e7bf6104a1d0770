"""koordlet device-info files: the GPUs and the partition table, for Koordinator.

Koordinator's scheduler reads the partition table only from the annotation
``scheduling.koordinator.sh/gpu-partitions`` on the node's ``Device`` object, and koordlet
owns that object (it rewrites its labels and annotations on every report).  The way in is
koordlet's XPU path (koordinator ``pkg/koordlet/metricsadvisor/devices/xpu``, feature gate
``Accelerators``): it reads every regular file of ``/etc/kubernetes/koordlet/device-infos/``
as a JSON list of ``XPUDeviceInfo`` (``pkg/koordlet/util/device.go``) and, in
``statesinformer/impl/states_device_linux.go`` (``getPartitionTableFromXPUDevices``), turns
each ``topology.p2pLinks[]`` entry of a device into one partition: the link's
``peerMinor`` list plus the device's own minor, ``allocationScore`` 1.  So:

- each partition of size >= 2 is written once, on its lowest-minor GPU, as one p2pLink whose
  ``peerMinor`` is the other members (``"1,2,3"``); every other GPU gets ``"p2pLinks": []``
  (a GPU without the field makes koordlet drop the whole table);
- what koordlet cannot carry is lost: ``ringBusBandwidth``, our ``allocationScore`` (all
  become 1) and size-1 entries (an empty ``peerMinor`` is rejected);
- with no NVLink partition the ``p2pLinks`` field is left out on every GPU, so koordlet
  publishes no table and no ``gpu-partition-policy`` label.

Once koordlet finds device infos it stops reporting GPUs from NVML itself (and with them the
``node.koordinator.sh/gpu-driver-version`` label and its XID health checks): the files carry
each GPU's UUID, minor, model, memory, NUMA node and bus id instead (README).

The file is written atomically: a temporary file in a sub-directory (koordlet skips
directories, but would read — and fail on — a half-written dot-file), then ``os.replace``.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from gfd.errors import PublishError
from gfd.observability import get_logger
from gfd.outputs.file import remove_file
from gfd.partitions import PartitionTable
from gfd.snapshot import Snapshot

FILE_NAME = "gfd-nvidia-gpus.json"
TEMP_DIR = ".gfd-tmp"
VENDOR = "nvidia"
GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"


def model(name: str) -> str:
    """The model as koordlet's own NVML path writes it: no ``NVIDIA `` prefix, dashes."""
    return name.removeprefix("NVIDIA ").replace(" ", "-")


def device_infos(snapshot: Snapshot, table: PartitionTable) -> list[dict[str, Any]]:
    """The ``XPUDeviceInfo`` list for this node (pure)."""
    entries = {e.index: e for e in (snapshot.topology.gpus if snapshot.topology else ())}
    known = {gpu.index: entries[gpu.index].minor for gpu in snapshot.gpus if gpu.index in entries}
    minors: dict[int, int] = {i: m for i, m in known.items() if m is not None}
    if len(minors) != len(snapshot.gpus) or len(set(minors.values())) != len(minors):
        minors = {gpu.index: gpu.index for gpu in snapshot.gpus}  # as the table names them
    links: dict[int, list[dict[str, str]]] = {}
    for size in sorted(table):
        if size < 2:
            continue
        for partition in table[size]:
            first, *peers = sorted(partition.minors)
            links.setdefault(first, []).append(
                {"peerMinor": ",".join(str(p) for p in peers), "type": partition.gpu_link_type}
            )
    infos = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        minor = minors[gpu.index]
        resources = {GPU_CORE: "100"}
        if gpu.memory_mib:
            resources[GPU_MEMORY] = f"{gpu.memory_mib}Mi"
        topology: dict[str, Any] = {}
        if links:
            topology["p2pLinks"] = links.get(minor, [])
        entry = entries.get(gpu.index)
        if entry is not None and entry.numa_node is not None:
            topology["nodeID"] = str(entry.numa_node)
        if gpu.pci_bus_id:  # pcieID (the PCIe switch koordlet's NVML path finds) is unknown
            topology["busID"] = gpu.pci_bus_id
        infos.append(
            {
                "vendor": VENDOR,
                "model": model(gpu.name),
                "uuid": gpu.uuid,
                "minor": str(minor),
                "resources": resources,
                "topology": topology,
                "status": {"healthy": True},
            }
        )
    return infos


class KoordletDeviceInfos:
    """Writes the device-info file when its content changes; removes it on ``cleanup``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        self._written: str | None = None
        self._log = get_logger(output="koordlet-device-infos", path=self.path)

    def publish(self, snapshot: Snapshot, table: PartitionTable) -> bool:
        """True when the file was (re)written."""
        if not snapshot.gpus:
            self.cleanup()
            return False
        text = json.dumps(device_infos(snapshot, table), indent=2) + "\n"
        if text == self._written and os.path.exists(self.path):
            return False
        try:
            if not os.path.isdir(self.directory):  # koordlet's directory, mounted from the host
                raise FileNotFoundError(f"no directory {self.directory}")
            temp_dir = os.path.join(self.directory, TEMP_DIR)
            os.makedirs(temp_dir, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=temp_dir, prefix="gfd-")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.chmod(temp, 0o644)
                os.replace(temp, self.path)
            except BaseException:
                if os.path.exists(temp):
                    os.unlink(temp)
                raise
        except OSError as exc:
            raise PublishError(f"cannot write koordlet device infos {self.path}: {exc}") from None
        self._written = text
        self._log.info("wrote koordlet device infos", gpus=len(snapshot.gpus))
        return True

    def cleanup(self) -> None:
        remove_file(self.path)
        self._written = None
