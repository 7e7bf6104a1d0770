"""Lost GPUs under hostile input: snapshots whose lost entries contradict
themselves or the GPUs, PCI functions NVML never lists, sysfs entries that are not files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from gfd import snapshot as snapshot_io
from gfd.discovery import discover, sysfs
from gfd.errors import SnapshotError
from gfd.settings import Settings
from tests.process import run_gfd_here

from .fakes.fake_nvml import FakeGpu, FakeNvml
from .fakes.fake_sysfs import FakeSysfs

A100_BYTES = 40960 * 2**20
DGX = Path(__file__).resolve().parent.parent / "examples" / "snapshots" / "dgx-a100.yaml"


def document_with(lost: list[dict[str, Any]]) -> dict[str, Any]:
    document = snapshot_io.to_dict(snapshot_io.load(str(DGX)))
    document["lost_gpus"] = lost
    return document


@pytest.mark.parametrize(
    ("lost", "where"),
    [
        pytest.param([{"index": 9, "reason": "a"}, {"index": 9, "reason": "b"}],
                     "lost_gpus[1].index", id="same-index-twice"),
        pytest.param([{"pci_bus_id": "0000:c1:00.0"}, {"pci_bus_id": "0000:C1:00.0"}],
                     "lost_gpus[1].pci_bus_id", id="same-bus-twice"),
        pytest.param(
            [{"pci_bus_id": "0000:07:00.0"}],  # GPU 0 of the DGX A100 answers
            "lost_gpus[0].pci_bus_id",
            id="bus-of-an-answering-gpu",
        ),
    ],
)  # fmt: skip
def test_contradictory_lost_entries_are_snapshot_errors(
    lost: list[dict[str, Any]], where: str, tmp_path: Path
) -> None:
    with pytest.raises(SnapshotError, match=re.escape(where)):
        snapshot_io.from_dict(document_with(lost))
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document_with(lost)))
    result = run_gfd_here("--oneshot", "--snapshot-file", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and where in lines[0]


def test_thousands_of_lost_entries_are_served(tmp_path: Path) -> None:
    lost = [{"pci_bus_id": f"0001:{i // 256:02x}:{i % 256:02x}.0"} for i in range(5000)]
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(document_with(lost)))
    result = run_gfd_here("--oneshot", "--no-timestamp", "--snapshot-file", str(path))
    assert result.returncode == 0, result.stderr[-500:]
    assert "nvidia.com/gpu.lost=5000\n" in result.stdout


# ------------------------------------------------------------------ sysfs


def gpu(index: int) -> FakeGpu:
    return FakeGpu(
        uuid=f"GPU-{index}", name="NVIDIA A100-SXM4-40GB", bus_id=f"00000000:{index:02X}:00.0",
        memory_total=A100_BYTES,
    )  # fmt: skip


def bind(device: Path, driver: str) -> None:
    drivers = device.parent.parent / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    (device / "driver").symlink_to(drivers)


def test_functions_nvml_never_lists_are_not_lost(settings: Settings) -> None:
    """A GPU passed through to a VM (vfio-pci) and a vGPU host's SR-IOV virtual functions
    are NVIDIA 3D controllers on the bus that NVML never lists: counting them labelled
    every such node gpu.lost for good."""
    fake_sysfs = FakeSysfs(Path(settings.sysfs_root))
    bind(fake_sysfs.add_device("0000:01:00.0"), "nvidia")
    bind(fake_sysfs.add_device("0000:02:00.0"), "vfio-pci")
    virtual = fake_sysfs.add_device("0000:01:00.4")
    (virtual / "physfn").symlink_to(Path("..") / "0000:01:00.0")
    bind(fake_sysfs.add_device("0000:03:00.0"), "nouveau")
    found = discover(settings, nvml=FakeNvml([gpu(1)]).module)
    assert found.lost == ()


def test_a_gpu_bound_to_nvidia_or_unbound_that_nvml_misses_is_still_lost(
    settings: Settings,
) -> None:
    fake_sysfs = FakeSysfs(Path(settings.sysfs_root))
    bind(fake_sysfs.add_device("0000:01:00.0"), "nvidia")
    bind(fake_sysfs.add_device("0000:02:00.0"), "nvidia")
    fake_sysfs.add_device("0000:03:00.0")  # unbound: the driver may have failed its probe
    found = discover(settings, nvml=FakeNvml([gpu(1)]).module)
    assert sorted(g.pci_bus_id for g in found.lost) == ["0000:02:00.0", "0000:03:00.0"]


def test_a_fifo_in_sysfs_is_never_waited_on(settings: Settings) -> None:
    fake_sysfs = FakeSysfs(Path(settings.sysfs_root))
    device = fake_sysfs.add_device("0000:01:00.0")
    (device / "vendor").unlink()
    os.mkfifo(device / "vendor")
    numa = fake_sysfs.add_device("0000:02:00.0") / "numa_node"
    os.mkfifo(numa)
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(
            (sysfs.nvidia_gpu_functions(settings.sysfs_root), sysfs.read_attribute(str(numa)))
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=30)  # a hang guard only
    blocked = worker.is_alive()
    for fifo in (device / "vendor", numa):  # release a blocked reader, if any
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not blocked
    assert result == [(("0000:02:00.0",), None)]
