"""The agent in-process: reload semantics that are awkward to reach through signals."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.agent import EXIT_USAGE, Agent, AgentExit
from gfd.outputs.file import FileOutput, split_features_file
from gfd.settings import Settings, resolve

MIG_NODE = "examples/snapshots/dgx-a100-mig-mixed.yaml"


def settings_for(tmp_path: Path, config_text: str) -> Settings:
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    return resolve(
        {
            "snapshot_file": MIG_NODE,
            "output_file": str(tmp_path / "gfd"),
            "config_file": str(config),
            "no_timestamp": True,
        },
        {},
    )


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
