"""The gfd command on a node: NVML failure modes, live discovery, --dump-snapshot.

Two kinds of run:
- with the real ``pynvml`` on this machine, which has no NVIDIA driver (skipped where
  ``libnvidia-ml.so.1`` does load);
- with the fake NVML standing in for ``pynvml``: in a real process a ``sitecustomize`` on
  ``PYTHONPATH`` builds it from a snapshot and puts it in ``sys.modules`` before gfd
  starts, so the CLI, the agent and discovery run unchanged (a flag file loses a GPU);
  in-process the test puts it in ``sys.modules`` itself (``fake_nvml_here``).

Most runs call the command line in-process (tests/process.py: ``run_gfd_here``); real
processes stay for the exit status 1 of a failed pass (no driver; a GPU lost, through the
shim) and for the GPU lost while a process dumps its snapshot."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd import snapshot as snapshot_io

from .fakes.fake_nvml import FakeNvml
from .fakes.fake_sysfs import FakeSysfs, build_from_snapshot, config_with_capabilities
from .fakes.fake_sysfs import vgpu_capability as vgpu_cap
from .process import ROOT, run_gfd, run_gfd_here

VARIED = Path(ROOT) / "examples" / "snapshots" / "dgx-a100-mig-varied.yaml"
MESSAGE = (
    "NVML is unavailable: libnvidia-ml.so.1 could not be loaded; check that the NVIDIA "
    "driver is installed on the host, that the container runs with the NVIDIA container "
    "runtime, and that NVIDIA_VISIBLE_DEVICES is set (e.g. to 'all')"
)

SITECUSTOMIZE = '''\
"""Process tests: the fake NVML of tests/fakes stands in for pynvml."""
import os
import sys
import sys

if os.environ.get("FAKE_NVML_SNAPSHOT"):
    sys.path.insert(0, os.environ["FAKE_NVML_REPO"])
    from gfd import snapshot
    from tests.fakes.fake_nvml import FakeNvml

    fake = FakeNvml.from_snapshot(snapshot.load(os.environ["FAKE_NVML_SNAPSHOT"]))
    lost_flag = os.environ.get("FAKE_NVML_LOST_FLAG")  # GPU 1 lost while it exists
    real_init = fake.module.nvmlInit

    def nvmlInit():
        fake.recover_gpus()
        if lost_flag and os.path.exists(lost_flag):
            fake.lose_gpu(1, after_calls=2)
        real_init()

    fake.module.nvmlInit = nvmlInit
    raw_name = os.environ.get("FAKE_NVML_NAME_HEX")  # every GPU's name as the driver wrote it
    for gpu in fake.gpus if raw_name else ():
        gpu.name = bytes.fromhex(raw_name)
    sys.modules["pynvml"] = fake.module
'''


def has_nvidia_driver() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


no_driver_here = pytest.mark.skipif(has_nvidia_driver(), reason="an NVIDIA driver is installed")


def assert_one_clean_line(stderr: str, text: str) -> None:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if text in line]
    assert lines, stderr
    assert lines[0].startswith("gfd: error: ") or '"error"' in lines[0], stderr


# ------------------------------------------------------------------ this machine: no driver


@no_driver_here
def test_oneshot_without_driver_exits_1_with_the_message() -> None:
    result = run_gfd("--oneshot")
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"gfd: error: {MESSAGE}\n" in result.stderr
    assert "Traceback" not in result.stderr


@no_driver_here
def test_oneshot_without_driver_and_no_fail_on_init_error() -> None:
    result = run_gfd_here("--oneshot", "--no-fail-on-init-error", "--no-timestamp")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "nvidia.com/vgpu.present=false\n"


@no_driver_here
def test_no_fail_on_init_error_from_the_environment() -> None:
    result = run_gfd_here("--oneshot", "--no-timestamp", env={"GFD_FAIL_ON_INIT_ERROR": "false"})
    assert (result.returncode, result.stdout) == (0, "nvidia.com/vgpu.present=false\n")


@no_driver_here
def test_dump_snapshot_without_driver() -> None:
    result = run_gfd_here("--dump-snapshot")
    assert result.returncode == 1
    assert result.stdout == ""
    assert_one_clean_line(result.stderr, MESSAGE)


@no_driver_here
@pytest.mark.parametrize("strategy", ["auto", "nvml"])
def test_both_strategies_without_driver(strategy: str) -> None:
    result = run_gfd_here("--oneshot", "--device-discovery-strategy", strategy)
    assert result.returncode == 1
    assert MESSAGE in result.stderr


@no_driver_here
def test_minimal_labels_of_a_vgpu_guest(tmp_path: Path) -> None:
    """No NVML, but the PCI scan finds a vGPU: vgpu.* labels from the host driver record."""
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.add_device("0000:00:00.0", vendor="0x8086")
    sysfs.add_device("0000:07:00.0", config=config_with_capabilities([vgpu_cap("535.54", "r535")]))
    result = run_gfd_here(
        "--oneshot", "--no-fail-on-init-error", "--no-timestamp",
        env={"GFD_SYSFS_ROOT": str(sysfs.root)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "nvidia.com/vgpu.host-driver-branch=r535\n"
        "nvidia.com/vgpu.host-driver-version=535.54\n"
        "nvidia.com/vgpu.present=true\n"
    )


@no_driver_here
def test_minimal_labels_when_not_privileged(tmp_path: Path) -> None:
    """A short config read: no vgpu.* labels at all, and a warning to run privileged."""
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.add_device("0000:07:00.0", config=bytes(64))
    result = run_gfd_here(
        "--oneshot", "--no-fail-on-init-error", "--no-timestamp", "--log-format", "json",
        env={"GFD_SYSFS_ROOT": str(sysfs.root)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "run privileged for vGPU detection" in result.stderr


# ------------------------------------------------------------------ the fake NVML


@pytest.fixture
def fake_node(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Environment and flags for a gfd process on the fake node of VARIED."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
    snap = snapshot_io.load(str(VARIED))
    overrides = build_from_snapshot(tmp_path / "node", snap)
    yield {
        "snapshot": snap,
        "env": {
            "PYTHONPATH": f"{shim}{os.pathsep}{ROOT}", "FAKE_NVML_REPO": ROOT,
            "FAKE_NVML_SNAPSHOT": str(VARIED), "GFD_SYSFS_ROOT": overrides["sysfs_root"],
        },
        "flags": ["--machine-type-file", overrides["machine_type_file"]],
    }  # fmt: skip


@pytest.fixture
def fake_nvml_here(fake_node: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake NVML of the fake node in place of pynvml in this process (what the
    sitecustomize shim does in a gfd process)."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml.from_snapshot(fake_node["snapshot"]).module)


@pytest.mark.usefixtures("fake_nvml_here")
def test_dump_snapshot_is_the_node(fake_node: dict[str, Any], tmp_path: Path) -> None:
    result = run_gfd_here("--dump-snapshot", *fake_node["flags"], env=fake_node["env"])
    assert result.returncode == 0, result.stderr
    assert snapshot_io.loads(result.stdout) == fake_node["snapshot"]


@pytest.mark.usefixtures("fake_nvml_here")
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_snapshot_file_of_the_dump_gives_the_live_labels(
    fake_node: dict[str, Any], tmp_path: Path, strategy: str
) -> None:
    flags = [*fake_node["flags"], "--mig-strategy", strategy]
    dump = run_gfd_here("--dump-snapshot", *flags, env=fake_node["env"])
    assert dump.returncode == 0, dump.stderr
    dumped = tmp_path / "node.yaml"
    dumped.write_text(dump.stdout)
    live = run_gfd_here("--oneshot", "--no-timestamp", *flags, env=fake_node["env"])
    offline = run_gfd_here("--oneshot", "--no-timestamp", "--snapshot-file", str(dumped), *flags)
    assert live.returncode == offline.returncode == 0, live.stderr + offline.stderr
    assert "nvidia.com/mig.capable=true\n" in live.stdout
    assert live.stdout == offline.stdout


def test_gpu_lost_fails_the_oneshot_pass(fake_node: dict[str, Any], tmp_path: Path) -> None:
    lost = tmp_path / "lost"
    lost.touch()
    env = {**fake_node["env"], "FAKE_NVML_LOST_FLAG": str(lost)}
    result = run_gfd("--oneshot", "--log-format", "json", *fake_node["flags"], env=env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert "NVML error on GPU 1 in " in result.stderr and "GPU is lost" in result.stderr


@pytest.mark.parametrize(
    "action", [["--dump-snapshot"], ["--oneshot", "--no-timestamp"]], ids=["dump", "oneshot"]
)
def test_a_gpu_name_that_is_not_utf8_is_read_not_a_traceback(
    fake_node: dict[str, Any], action: list[str]
) -> None:
    env = {**fake_node["env"], "FAKE_NVML_NAME_HEX": b"NVIDIA A100\xff\x1b[2J".hex()}
    result = run_gfd(*action, *fake_node["flags"], env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    if action == ["--dump-snapshot"]:
        assert snapshot_io.loads(result.stdout).gpus[0].name == "NVIDIA A100\ufffd\x1b[2J"
    else:
        assert "nvidia.com/gpu.product=NVIDIA-A1002J\n" in result.stdout


def test_dump_snapshot_records_a_lost_gpu(fake_node: dict[str, Any], tmp_path: Path) -> None:
    lost = tmp_path / "lost"
    lost.touch()
    env = {**fake_node["env"], "FAKE_NVML_LOST_FLAG": str(lost)}
    result = run_gfd("--dump-snapshot", *fake_node["flags"], env=env)
    assert result.returncode == 0, result.stderr
    dumped = snapshot_io.loads(result.stdout)
    assert [gone.index for gone in dumped.lost] == [1]
    assert len(dumped.gpus) == len(fake_node["snapshot"].gpus) - 1
    recorded = tmp_path / "node.yaml"
    recorded.write_text(result.stdout)
    labels = run_gfd_here("--oneshot", "--no-timestamp", "--snapshot-file", str(recorded))
    assert labels.returncode == 0, labels.stderr  # a record is labelled as it says
    assert "nvidia.com/gpu.lost=1\n" in labels.stdout
