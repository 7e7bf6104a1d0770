"""The daemon loop in-process (SPEC §7): publish-on-change, reload, repair, and surviving
failed passes, the Agent's waits scripted (tests/loop.py); real processes: test_daemon.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gfd import discovery
from gfd import snapshot as snapshot_io
from gfd.agent import Agent
from gfd.outputs.file import split_features_file
from gfd.settings import Settings, resolve
from tests.fakes.fake_nvml import FakeNvml
from tests.fakes.fake_sysfs import build_from_snapshot
from tests.loop import drive, recorded
from tests.process import ROOT

DGX = "examples/snapshots/dgx-a100.yaml"
TWO_MODELS = "examples/snapshots/two-models.yaml"
VARIED = Path(ROOT) / "examples" / "snapshots" / "dgx-a100-mig-varied.yaml"


def settings(**cli: Any) -> Settings:
    return resolve({"sleep_interval": "1s", **cli}, {})


def test_bad_config_on_reload_keeps_the_running_settings(
    tmp_path: Path, log_events: Callable[[str], list[Any]]
) -> None:
    out = tmp_path / "gfd"
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: mixed\n")
    cli = {
        "output_file": str(out), "no_timestamp": True, "snapshot_file": DGX,
        "config_file": str(config),
    }  # fmt: skip
    first = settings(**cli)
    published: list[str] = []

    def break_config_and_reload(agent: Agent) -> None:
        published.append(out.read_text())
        config.write_text("version: v1\nflags:\n  migStrategy: [broken\n")
        agent.request_reload()

    def unchanged(agent: Agent) -> None:
        assert agent.settings is first
        assert out.read_text() == published[0]

    run = drive(
        first, [break_config_and_reload, unchanged], reload_settings=lambda: settings(**cli)
    )
    failures = log_events("reload failed; keeping the settings in force")
    assert len(failures) == 1 and "not valid YAML" in failures[0]["error"]
    assert run.metrics.passes == ["success", "success", "success"]
    assert run.status == 0
    assert out.read_text() == published[0]  # kept on exit: its NFD expiry ages it out


def test_snapshot_change_is_published_at_the_next_pass(tmp_path: Path) -> None:
    snapshot = tmp_path / "node.yaml"
    snapshot.write_text(Path(DGX).read_text())
    out = tmp_path / "gfd"
    good: list[str] = []

    def change_the_node(agent: Agent) -> None:
        assert recorded(agent).writes == 1
        snapshot.write_text(Path(TWO_MODELS).read_text())

    def break_the_snapshot(agent: Agent) -> None:
        assert recorded(agent).writes == 2
        good.append(out.read_text())
        assert "nvidia.com/cuda.driver.major=570\n" in good[0]
        snapshot.write_text("version: v1\ngpus: {}\n")

    def failed_but_kept(agent: Agent) -> None:
        assert agent.last_error is not None and "gpus" in agent.last_error
        assert out.read_text() == good[0]

    run = drive(
        settings(output_file=str(out), snapshot_file=str(snapshot)),
        [change_the_node, break_the_snapshot, failed_but_kept],
    )
    assert run.metrics.passes == ["success", "success", "error", "error"]
    assert run.status == 0


def test_steady_passes_do_not_rewrite_the_file(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    inodes: list[tuple[int, int]] = []

    def remember(agent: Agent) -> None:
        stat = out.stat()
        inodes.append((stat.st_ino, stat.st_mtime_ns))

    run = drive(settings(output_file=str(out), snapshot_file=DGX), [remember] * 3)
    assert run.metrics.passes == ["success"] * 4
    assert run.metrics.writes == 1
    assert len(set(inodes)) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gfd-")]


def test_deleted_features_file_is_restored(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    content: list[str] = []

    def delete(agent: Agent) -> None:
        content.append(out.read_text())
        out.unlink()

    def restored(agent: Agent) -> None:
        # the labels come back; the expiry line is the time of the new write
        assert split_features_file(out.read_text())[1] == split_features_file(content[0])[1]

    run = drive(settings(output_file=str(out), snapshot_file=DGX), [delete, restored])
    assert run.metrics.writes == 2


def test_missing_output_directory_fails_the_pass_not_the_process(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "gfd"

    def create_the_directory(agent: Agent) -> None:
        assert agent.last_error is not None and "does not exist" in agent.last_error
        out.parent.mkdir()

    def written(agent: Agent) -> None:
        assert out.exists()

    run = drive(settings(output_file=str(out), snapshot_file=DGX), [create_the_directory, written])
    assert run.metrics.passes == ["error", "success", "success"]
    assert run.metrics.publishes[0] == ("file", "error")
    assert run.status == 0


# ------------------------------------------------------------------ the fake NVML


@dataclass
class FakeNode:
    nvml: FakeNvml
    overrides: dict[str, str]  # sysfs_root and machine_type_file

    def settings(self, out: Path, **cli: Any) -> Settings:
        return resolve({
            "sleep_interval": "1s", "output_file": str(out), "no_timestamp": True,
            "machine_type_file": self.overrides["machine_type_file"], **cli,
        }, {"GFD_SYSFS_ROOT": self.overrides["sysfs_root"]})  # fmt: skip


@pytest.fixture
def fake_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    """The node of VARIED: its NVML in place of pynvml, its sysfs and machine-type file."""
    node = snapshot_io.load(str(VARIED))
    fake = FakeNvml.from_snapshot(node)
    monkeypatch.setitem(sys.modules, "pynvml", fake.module)
    return FakeNode(fake, build_from_snapshot(tmp_path / "node", node))


def test_daemon_picks_up_a_driver_that_appears(fake_node: FakeNode, tmp_path: Path) -> None:
    """SPEC §7 (beyond upstream): minimal labels while NVML is missing, full ones once it
    loads — NVML is retried every pass, no restart."""
    out = tmp_path / "gfd"
    fake_node.nvml.library_missing = True

    def load_the_driver(agent: Agent) -> None:
        assert split_features_file(out.read_text())[1] == "nvidia.com/vgpu.present=false\n"
        fake_node.nvml.library_missing = False

    def full_labels(agent: Agent) -> None:
        assert "nvidia.com/gpu.count=8\n" in out.read_text()

    run = drive(
        fake_node.settings(out, fail_on_init_error=False), [load_the_driver, full_labels],
        read_snapshot=discovery.read_snapshot,
    )  # fmt: skip
    assert run.metrics.nvml == [False, True, True]
    assert run.metrics.passes == ["success"] * 3


def test_daemon_keeps_its_labels_while_a_gpu_is_lost(fake_node: FakeNode, tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    published: list[str] = []

    def lose_a_gpu(agent: Agent) -> None:
        published.append(out.read_text())
        assert "nvidia.com/gpu.count=8\n" in published[0]
        fake_node.nvml.lose_gpu(1, after_calls=2)

    def recover(agent: Agent) -> None:
        assert agent.last_error is not None
        assert "1 GPU(s) lost" in agent.last_error and "GPU is lost" in agent.last_error
        assert out.read_text() == published[0]
        fake_node.nvml.recover_gpus()

    run = drive(
        fake_node.settings(out), [lose_a_gpu, recover], read_snapshot=discovery.read_snapshot
    )
    assert run.metrics.passes == ["success", "error", "success"]
    assert run.metrics.writes == 1  # the recovered pass found nothing to change
    assert run.status == 0


def test_a_loss_seen_twice_labels_the_answering_gpus(fake_node: FakeNode, tmp_path: Path) -> None:
    """The first pass that finds GPU 1 lost keeps the last labels (SPEC §7); the
    second in a row labels the seven GPUs that answer and counts the lost one; when the
    GPU answers again the full labels come back."""
    out = tmp_path / "gfd"
    published: list[str] = []

    def lose_a_gpu(agent: Agent) -> None:
        published.append(out.read_text())
        assert "nvidia.com/gpu.count=8\n" in published[0] and "gpu.lost" not in published[0]
        fake_node.nvml.lose_gpu(1, after_calls=2)

    def first_sight_kept(agent: Agent) -> None:
        assert agent.last_error is not None and "1 GPU(s) lost" in agent.last_error
        assert out.read_text() == published[0]

    def confirmed(agent: Agent) -> None:
        text = out.read_text()
        assert "nvidia.com/gpu.count=7\n" in text and "nvidia.com/gpu.lost=1\n" in text
        fake_node.nvml.recover_gpus()

    def back(agent: Agent) -> None:
        text = out.read_text()
        assert "nvidia.com/gpu.count=8\n" in text and "gpu.lost" not in text

    run = drive(
        fake_node.settings(out), [lose_a_gpu, first_sight_kept, confirmed, back],
        read_snapshot=discovery.read_snapshot,
    )  # fmt: skip
    assert run.metrics.passes == ["success", "error", "success", "success", "success"]
    assert run.metrics.writes == 3
    assert run.metrics.lost == [0, 1, 1, 0, 0]
