"""koordlet device-info files: the GPUs and the partition table, for Koordinator.

Every claim below is about koordinator-sh/koordinator at commit
a7a1b76bbf81abd26f9c377de1f31a60dd965f6e (README "GPU topology and partitions").

The scheduler's deviceshare plugin takes the partition table from the annotation
``scheduling.koordinator.sh/gpu-partitions`` on the node's ``Device`` object
(``apis/extension/device_share.go``, ``GetGPUPartitionTable``), or, when there is none, from
its built-in table for nodes labelled H100, H800 or H20 (``GetDesignatedGPUPartitionIndexer``
in ``pkg/scheduler/plugins/deviceshare/allocator_gpu_helper.go``).  koordlet owns the
Device object and rewrites its labels and annotations on every report, so the way in is
koordlet's XPU path (feature gate ``Accelerators``):

- ``pkg/koordlet/metricsadvisor/devices/xpu/collector_xpu.go`` (``GetXPUDevice``) reads
  every entry of the directory ``--xpu-device-infos-dir`` but directories (default
  ``/var/run/koordlet/xpu-device-infos/``, ``pkg/koordlet/util/system/config.go``) as a
  JSON list of ``XPUDeviceInfo`` (``pkg/koordlet/util/device.go``); one entry that is not
  such a list fails the whole read;
- ``pkg/koordlet/statesinformer/impl/states_device_linux.go``:
  ``getPartitionTableFromXPUDevices`` skips a device without ``topology.p2pLinks``, turns
  each p2pLink (``peerMinor`` a comma-separated list, ``type`` the link type; an empty
  one is refused) into one partition -- the peers plus the device's own minor, sorted,
  each set once -- with ``allocationScore`` 1 and no ``ringBusBandwidth``;
  ``buildXPUDeviceLabels`` labels the Device ``node.koordinator.sh/gpu-partition-policy``
  from the *first* device alone: ``Prefer`` when its ``p2pLinks`` is present (an empty
  list counts), ``Honor`` when it also says ``mustHonorPartition``;
  ``getXPUDeviceTopology`` publishes ``nodeID`` (absent: -1), ``pcieID`` and ``busID``.

So gfd writes:

- each partition of size >= 2 once, on its lowest-minor GPU, as one p2pLink whose
  ``peerMinor`` is the other members (``"1,2,3"``), and ``"p2pLinks": []`` on every other
  GPU (the first GPU then always carries the field: the label says ``Prefer``); with no
  partition the field is left out everywhere, and koordlet publishes no table and no label;
- never ``mustHonorPartition``: koordlet cannot carry size-1 partitions or a bandwidth,
  and under ``Honor`` every pod on the node goes through ``allocateByPartition``
  (``pkg/scheduler/plugins/deviceshare/allocator_gpu.go``), which refuses 1-GPU pods
  ("Unsupported number of GPU requests");
- ``pcieID`` as koordlet's own GPU and RDMA collectors write it (``pci0000:3a``,
  ``pkg/koordlet/metricsadvisor/devices/helper/topology.go``, ``ParsePCIInfo``): the
  scheduler puts a GPU and an RDMA NIC under one PCIe root by comparing these strings;
  left out when unknown;
- ``nodeID`` always: the GPU's NUMA node, or ``0`` when the kernel gives none (-1) or gfd
  could not read it -- what koordlet's own collectors publish for -1 (``getNUMANodeID``).
  A -1 would take the GPU out of the scheduler's NUMA topology (``newNUMATopology`` in
  ``numa_topology.go`` skips it), so a pod with a designated allocation on a node with NUMA
  alignment would be refused (``generateDesignatedHints``, ``topology_hint.go``), and the
  GPU would no longer share a (NUMA node, PCIe root) with koordlet's RDMA NICs.

What the table loses on this path (``ringBusBandwidth``, gfd's scores, size 1) stays in
gfd's own Node annotation (:mod:`gfd.outputs.topology_extras`).  Once koordlet finds device infos
it stops reporting GPUs from NVML itself (and with them the
``node.koordinator.sh/gpu-driver-version`` label and its XID health checks): the files
carry each GPU's UUID, minor, model, memory, NUMA node, PCIe root and bus id instead.

The file is written atomically: a temporary file in a sub-directory (koordlet skips
directories, but would read -- and fail on -- a half-written file), then ``os.replace``;
nothing planted inside the directory is followed (:class:`KoordletDeviceInfos`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
from typing import Any

from gfd.echo import clip_path
from gfd.errors import PublishError
from gfd.files import UnreadableFileError, hold_while_written, read_regular, reclaim_abandoned
from gfd.observability import get_logger
from gfd.partition_table import PartitionTable
from gfd.snapshot import Snapshot

FILE_NAME = "gfd-nvidia-gpus.json"
#: the file is read back (to see whether it still holds what gfd wrote) up to this size
MAX_FILE_BYTES = 4 * 1024 * 1024
TEMP_DIR = ".gfd-tmp"
#: the names gfd gives its temporary files there: those a killed gfd left are reclaimed
TEMPORARY_NAMES = re.compile(r"gfd-[0-9]+-[0-9a-f]{8}")
VENDOR = "nvidia"
GPU_CORE = "koordinator.sh/gpu-core"
GPU_MEMORY = "koordinator.sh/gpu-memory"
#: the NUMA node written when the kernel gives none or it is unknown: koordlet's own
#: collectors turn the kernel's -1 into 0 (module docstring)
UNKNOWN_NUMA_NODE = 0
#: koordlet's default device-info directory (``XPUDeviceInfosDir``, koordinator
#: ``pkg/koordlet/util/system/config.go``, since v1.7.0): what the manifests mount
DEFAULT_DIR = "/var/run/koordlet/xpu-device-infos"


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
        numa = entry.numa_node if entry is not None else None
        topology["nodeID"] = str(UNKNOWN_NUMA_NODE if numa is None else numa)
        if entry is not None and entry.pcie_root is not None:
            topology["pcieID"] = entry.pcie_root
        if gpu.pci_bus_id:
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


def _open_directory(path: str, *, follow: bool = True, dir_fd: int | None = None) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= os.O_NOFOLLOW
    return os.open(path, flags, dir_fd=dir_fd)


class KoordletDeviceInfos:
    """Writes the device-info file when its content changes; removes it on ``cleanup``.

    The directory named by the operator is followed wherever it leads; inside it nothing
    is: the file is replaced only when it is missing or a regular file (a symlink, FIFO,
    device or directory planted at its name is refused, never written through, renamed
    over or removed), and the temporary directory is used only when it is a real
    directory (a symlink there would make gfd write elsewhere)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        #: the paths as messages show them
        self.shown = clip_path(self.path)
        self.shown_temp = clip_path(os.path.join(directory, TEMP_DIR))
        self._written: str | None = None
        self._reclaimed = False
        self._log = get_logger(output="koordlet-device-infos", path=self.shown)

    def publish(self, snapshot: Snapshot, table: PartitionTable) -> bool:
        """True when the file was (re)written."""
        if not snapshot.gpus:
            self.cleanup()
            return False
        text = json.dumps(device_infos(snapshot, table), indent=2) + "\n"
        try:
            directory = _open_directory(self.directory)
        except OSError as exc:
            raise PublishError(
                f"cannot write koordlet device infos {self.shown}: no directory "
                f"{clip_path(self.directory)} ({exc.strerror})"
            ) from None
        try:
            if text == self._written and self._content(directory) == text.encode():
                return False
            self._write(directory, text.encode())
        except OSError as exc:
            raise PublishError(
                f"cannot write koordlet device infos {self.shown}: {exc.strerror or exc}"
            ) from None
        finally:
            os.close(directory)
        self._written = text
        self._log.info("wrote koordlet device infos", gpus=len(snapshot.gpus))
        return True

    def cleanup(self) -> None:
        """Remove the file if it is there and a regular file, and gfd's working directory
        beside it when it is an empty real directory (what gfd made)."""
        try:
            directory = _open_directory(self.directory)
        except OSError:
            self._written = None
            return  # no directory: no file
        try:
            if self._kind(directory) != "missing":
                self._refuse_special(directory)
                os.unlink(FILE_NAME, dir_fd=directory)
            self._remove_temp_dir(directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PublishError(f"cannot remove {self.shown}: {exc.strerror or exc}") from None
        finally:
            os.close(directory)
        self._written = None

    # ------------------------------------------------------------- internals

    @staticmethod
    def _remove_temp_dir(directory: int) -> None:
        """Remove the working directory when it is a real directory of gfd's: the
        temporary files a killed gfd left in it first (only regular files named as gfd
        names them), then the directory (rmdir never follows a symlink and leaves a
        directory someone else filled)."""
        with contextlib.suppress(OSError):
            temp_dir = _open_directory(TEMP_DIR, follow=False, dir_fd=directory)
            try:
                if os.fstat(temp_dir).st_uid != os.geteuid():
                    return  # not gfd's
                for name in os.listdir(temp_dir):
                    mode = os.stat(name, dir_fd=temp_dir, follow_symlinks=False).st_mode
                    if name.startswith("gfd-") and stat.S_ISREG(mode):
                        os.unlink(name, dir_fd=temp_dir)
            finally:
                os.close(temp_dir)
            os.rmdir(TEMP_DIR, dir_fd=directory)

    @staticmethod
    def _kind(directory: int) -> str:
        try:
            mode = os.stat(FILE_NAME, dir_fd=directory, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return "missing"
        return "file" if stat.S_ISREG(mode) else "special"

    def _refuse_special(self, directory: int) -> None:
        if self._kind(directory) == "special":
            raise PublishError(
                f"{self.shown} is not a regular file (a symlink, FIFO, device or directory); "
                "gfd only replaces or removes its own regular file: remove it by hand"
            )

    def _content(self, directory: int) -> bytes | None:
        try:
            return read_regular(FILE_NAME, MAX_FILE_BYTES, dir_fd=directory, follow=False)
        except UnreadableFileError:
            return None

    def _write(self, directory: int, data: bytes) -> None:
        self._refuse_special(directory)
        with contextlib.suppress(FileExistsError):
            os.mkdir(TEMP_DIR, 0o700, dir_fd=directory)
        try:
            temp_dir = _open_directory(TEMP_DIR, follow=False, dir_fd=directory)
        except OSError as exc:
            raise PublishError(
                f"cannot write koordlet device infos {self.shown}: "
                f"{self.shown_temp} is not a directory gfd can use "
                f"({exc.strerror}); remove it by hand"
            ) from None
        name = f"gfd-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            status = os.fstat(temp_dir)
            if status.st_uid != os.geteuid():
                # another user could swap the file between its write and its rename
                raise PublishError(
                    f"cannot write koordlet device infos {self.shown}: "
                    f"{self.shown_temp} belongs to another user; "
                    "remove it by hand"
                )
            if status.st_mode & 0o077:  # ours, but others may write in it: private first
                os.fchmod(temp_dir, 0o700)
            if not self._reclaimed:
                self._reclaimed = True
                reclaim_abandoned(temp_dir, TEMPORARY_NAMES)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(name, flags | getattr(os, "O_CLOEXEC", 0), 0o644, dir_fd=temp_dir)
            try:
                with os.fdopen(fd, "wb") as handle:
                    hold_while_written(fd)  # to its rename: a killed gfd's file is reclaimed
                    handle.write(data)
                    handle.flush()
                    os.fchmod(handle.fileno(), 0o644)
                    os.fsync(handle.fileno())
                    os.replace(name, FILE_NAME, src_dir_fd=temp_dir, dst_dir_fd=directory)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=temp_dir)
                raise
        finally:
            os.close(temp_dir)
