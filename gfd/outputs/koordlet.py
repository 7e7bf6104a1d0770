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
directories, but would read — and fail on — a half-written dot-file), then ``os.replace``;
nothing planted inside the directory is followed (:class:`KoordletDeviceInfos`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from typing import Any

from gfd.echo import clip_path
from gfd.errors import PublishError
from gfd.files import UnreadableFileError, read_regular
from gfd.observability import get_logger
from gfd.partitions import PartitionTable
from gfd.snapshot import Snapshot

FILE_NAME = "gfd-nvidia-gpus.json"
#: the file is read back (to see whether it still holds what gfd wrote) up to this size
MAX_FILE_BYTES = 4 * 1024 * 1024
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
        """Remove the file if it is there and a regular file (what gfd writes)."""
        try:
            directory = _open_directory(self.directory)
        except OSError:
            self._written = None
            return  # no directory: no file
        try:
            if self._kind(directory) == "missing":
                self._written = None
                return
            self._refuse_special(directory)
            os.unlink(FILE_NAME, dir_fd=directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PublishError(f"cannot remove {self.shown}: {exc.strerror or exc}") from None
        finally:
            os.close(directory)
        self._written = None

    # ------------------------------------------------------------- internals

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
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(name, flags | getattr(os, "O_CLOEXEC", 0), 0o644, dir_fd=temp_dir)
            try:
                with os.fdopen(fd, "wb") as handle:
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
