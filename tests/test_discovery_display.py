"""Discovery skips a DGX Station's display adapter, as go-nvlib does for upstream GFD.

go-nvlib's ``device.New`` defaults to ``WithSkippedDevices("DGX Display", "NVIDIA DGX
Display")`` (pkg/nvlib/device/api.go) and ``VisitDevices`` skips a device whose
``nvmlDeviceGetName`` is one of them, before anything else is asked of it
(pkg/nvlib/device/device.go, ``isSkipped``)."""

from __future__ import annotations

import json

import pytest

from gfd import labels
from gfd.config import Config
from gfd.discovery import discover
from gfd.settings import Settings
from tests.process import run_gfd_here

from .fakes.fake_nvml import FakeGpu, FakeNvml

A100_80GB_BYTES = 81920 * 2**20


def station(display_name: str = "NVIDIA DGX Display") -> FakeNvml:
    """A DGX Station A100 as nvidia-smi lists it: the display at index 3, among the A100s."""
    buses = ["01", "47", "81", "C1", "C2"]
    gpus = []
    for index, bus in enumerate(buses):
        if index == 3:
            gpus.append(
                FakeGpu(
                    uuid=f"GPU-{index}", name=display_name, bus_id=f"00000000:{bus}:00.0",
                    memory_total=4096 * 2**20, compute_capability=(7, 5),
                )
            )  # fmt: skip
        else:
            gpus.append(
                FakeGpu(
                    uuid=f"GPU-{index}", name="NVIDIA A100-SXM4-80GB",
                    bus_id=f"00000000:{bus}:00.0", memory_total=A100_80GB_BYTES, mig_mode=0,
                )
            )  # fmt: skip
    return FakeNvml(gpus)


@pytest.mark.parametrize("display_name", ["NVIDIA DGX Display", "DGX Display"])
def test_discovery_leaves_out_the_display(settings: Settings, display_name: str) -> None:
    fake = station(display_name)
    found = discover(settings, nvml=fake.module)
    assert [gpu.index for gpu in found.gpus] == [0, 1, 2, 4]  # NVML's own indices
    assert {gpu.name for gpu in found.gpus} == {"NVIDIA A100-SXM4-80GB"}
    buses = [gpu.pci_bus_id for gpu in found.gpus]
    assert buses == ["0000:01:00.0", "0000:47:00.0", "0000:81:00.0", "0000:c2:00.0"]
    # nothing beyond its name is asked of the display
    assert fake.calls["nvmlDeviceGetName"] == 5
    assert fake.calls["nvmlDeviceGetUUID"] == 4
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 4


def test_a_look_alike_name_is_discovered(settings: Settings) -> None:
    found = discover(settings, nvml=station("NVIDIA DGX Display 2").module)
    assert len(found.gpus) == 5


def test_discovered_station_labels_like_upstream(settings: Settings) -> None:
    found = discover(settings, nvml=station().module)
    built = labels.build(found, "none", Config(), None).labels
    assert built["nvidia.com/gpu.count"] == "4"
    assert built["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert built["nvidia.com/gpu.memory"] == "81920"
    assert built["nvidia.com/gpu.family"] == "ampere"
    assert built["nvidia.com/mig.capable"] == "true"


def test_a_listed_display_is_logged_at_debug_only() -> None:
    """A snapshot that still lists the display (hand-written, or from an older gfd) labels
    like upstream and says so in one debug line."""
    args = ["--oneshot", "--no-timestamp", "--snapshot-file"]
    args += ["examples/snapshots/dgx-station-a100.yaml", "--log-format", "json"]
    debug = run_gfd_here(*args, "--log-level", "debug")
    assert debug.returncode == 0, debug.stderr
    assert "nvidia.com/gpu.count=4\n" in debug.stdout
    events = [json.loads(line) for line in debug.stderr.splitlines() if line.startswith("{")]
    notes = [e for e in events if e.get("event") == "label note"]
    assert [(n["level"], n["detail"]) for n in notes] == [
        ("debug", "GPU 3 (NVIDIA DGX Display) is a display device; not labelled")
    ]
    quiet = run_gfd_here(*args)
    assert quiet.stdout == debug.stdout
    assert "display device" not in quiet.stderr
