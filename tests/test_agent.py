"""The agent in-process: reload semantics that are awkward to reach through signals."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.agent import EXIT_USAGE, Agent, AgentExit
from gfd.errors import PublishError
from gfd.outputs import Output
from gfd.outputs.file import FileOutput, split_features_file
from gfd.settings import Settings, resolve

MIG_NODE = "examples/snapshots/dgx-a100-mig-mixed.yaml"


def settings_for(tmp_path: Path, config_text: str) -> Settings:
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    return resolve(
        {
            "snapshot_file": MIG_NODE, "output_file": str(tmp_path / "gfd"),
            "config_file": str(config), "no_timestamp": True,
        },
        {},
    )  # fmt: skip


MPS = "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n"


def test_reloaded_config_that_cannot_apply_reverts_to_the_previous_one(tmp_path: Path) -> None:
    good = settings_for(tmp_path, "version: v1\nflags: {migStrategy: mixed}\n")
    agent = Agent(good, reload_settings=lambda: settings_for(tmp_path, MPS))
    assert agent.run_pass() is True
    published = (tmp_path / "gfd").read_text()
    assert "mig-1g.5gb.count=56" in published

    agent._reload()  # what SIGHUP triggers
    assert agent.run_pass() is False  # MPS with MIG-enabled GPUs: a config error
    assert agent.settings is good  # ...so the previous settings are back in force
    assert agent.run_pass() is True
    assert (tmp_path / "gfd").read_text() == published


def test_config_error_at_start_stops_the_agent_with_status_2(tmp_path: Path) -> None:
    agent = Agent(settings_for(tmp_path, MPS), reload_settings=lambda: settings_for(tmp_path, MPS))
    with pytest.raises(AgentExit) as caught:
        agent.run_pass()
    assert caught.value.status == EXIT_USAGE
    assert not (tmp_path / "gfd").exists()


def test_unloadable_reload_keeps_settings(tmp_path: Path) -> None:
    good = settings_for(tmp_path, "version: v1\n")

    def broken() -> Settings:
        return settings_for(tmp_path, "version: v9\n")

    agent = Agent(good, reload_settings=broken)
    agent.run_pass()
    timestamp = agent.timestamp
    agent._reload()
    assert agent.settings is good and agent.timestamp == timestamp


def test_failing_passes_still_renew_the_features_file_expiry(tmp_path: Path) -> None:
    """SPEC §7 keeps the last labels through failed passes; with an expiring features file
    that means renewing it: only a gfd that is gone lets its labels age out."""
    snapshot = tmp_path / "node.yaml"
    snapshot.write_text(Path(MIG_NODE).read_text())
    settings = resolve({"snapshot_file": str(snapshot), "output_file": str(tmp_path / "gfd")}, {})
    now = [1_800_000_000.0]
    agent = Agent(settings, reload_settings=lambda: settings)
    agent.output = FileOutput(
        str(tmp_path / "gfd"), remove_on_exit=False, expiry_horizon=3600, clock=lambda: now[0]
    )
    assert agent.run_pass() is True
    labels = split_features_file((tmp_path / "gfd").read_text())[1]
    snapshot.write_text("version: v1\ngpus: {}\n")  # every pass from now on fails
    now[0] += 1801
    assert agent.run_pass() is False
    expires_at, body = split_features_file((tmp_path / "gfd").read_text())
    assert body == labels and expires_at == 1_800_000_000 + 1801 + 3600


# ------------------------------------------------------------------ switching the output


def file_settings(tmp_path: Path, path: str, **values: object) -> Settings:
    given = {"snapshot_file": MIG_NODE, "output_file": path, "use_node_feature_api": False,
             "no_timestamp": True, **values}  # fmt: skip
    return resolve(given, {})


def test_a_reload_to_another_file_removes_the_old_one_after_writing_the_new_one(
    tmp_path: Path,
) -> None:
    old, new = tmp_path / "a", tmp_path / "b"
    agent = Agent(
        file_settings(tmp_path, str(old)), reload_settings=lambda: file_settings(tmp_path, str(new))
    )
    assert agent.run_pass()
    agent._reload()
    assert old.exists() and not new.exists()  # nothing moves until the new settings publish
    assert agent.run_pass()
    assert new.exists() and not old.exists()


def test_a_reload_that_keeps_the_place_retires_nothing(tmp_path: Path) -> None:
    """A new interval (the output is built anew) and the same file spelled another way:
    one place, so nothing is removed."""
    path = tmp_path / "gfd"
    first = file_settings(tmp_path, str(path))
    again = file_settings(tmp_path, f"{tmp_path}/./gfd", sleep_interval="5s")
    agent = Agent(first, reload_settings=lambda: again)
    assert agent.run_pass()
    output = agent.output
    agent._reload()
    assert agent.output is not output
    assert agent.run_pass() and agent.run_pass()
    assert path.exists() and not agent._retiring


def test_the_koordlet_file_moves_without_a_gap(tmp_path: Path) -> None:
    from gfd.outputs.koordlet import FILE_NAME

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    snapshot = "examples/snapshots/a100-pcie-nvlink-bridges.yaml"
    values = {
        "output_file": "-", "use_node_feature_api": False, "snapshot_file": snapshot,
        "oneshot": False,
    }  # fmt: skip
    first = resolve({**values, "koordlet_device_infos_dir": str(old)}, {})
    moved = resolve({**values, "koordlet_device_infos_dir": str(new)}, {})
    agent = Agent(first, reload_settings=lambda: moved)
    assert agent.run_pass()
    agent._reload()
    assert (old / FILE_NAME).exists() and not (new / FILE_NAME).exists()
    assert agent.run_pass()
    assert (new / FILE_NAME).exists() and not (old / FILE_NAME).exists()


class Unremovable(Output):
    """An output whose removal fails until ``removable`` is set."""

    kind = "unremovable"

    def __init__(self) -> None:
        self.removable = False
        self.removed = False

    def publish(self, labels: object) -> None:
        pass

    def cleanup(self) -> None:
        if not self.removable:
            raise PublishError("the API server said no")
        self.removed = True


def test_a_retirement_that_fails_is_counted_and_tried_after_each_pass(tmp_path: Path) -> None:
    from tests.loop import RecordedMetrics

    old = Unremovable()
    metrics = RecordedMetrics()
    other = file_settings(tmp_path, str(tmp_path / "gfd"))
    agent = Agent(
        file_settings(tmp_path, str(tmp_path / "first")), reload_settings=lambda: other, output=old,
        metrics=metrics,
    )  # fmt: skip
    assert agent.run_pass()
    agent._reload()
    assert agent.run_pass() and agent.run_pass()
    assert metrics.retires == [("unremovable", "error")] * 2
    assert metrics.passes == ["success"] * 3  # retiring is not publishing
    old.removable = True
    assert agent.run_pass()
    assert old.removed and metrics.retires[-1] == ("unremovable", "success")
    assert agent.run_pass()
    assert len(metrics.retires) == 3  # done: never tried again
