"""Every config README shows and every file in examples/configs/, run against the bundled
snapshot README names beside it: the labels README says it produces are the labels gfd
publishes, and nothing in the config applies to nothing (a config that does nothing looks
like one that works).  Also: a config entry that applies to nothing is named, once."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd import labels as labelling
from gfd.agent import Agent
from gfd.config import Config, ReplicatedResource, ResourcePattern, Sharing, wildcard_regex
from gfd.settings import parse_config_text, resolve
from tests.helpers import gpu, mig, node
from tests.loop import drive
from tests.process import run_gfd_here

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CONFIG_SECTION = README[README.index("\n## Config file\n") :]
CONFIG_SECTION = CONFIG_SECTION[: CONFIG_SECTION.index("\n## ", 1)]
_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)
_CONFIG_TOP_KEYS = ("version:", "flags:", "resources:", "sharing:", "partitions:")


def _labels_of(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def _run(config: Path, snapshot: str) -> dict[str, str]:
    result = run_gfd_here(
        "--oneshot", "--no-timestamp", "--snapshot-file", snapshot, "--config-file", str(config)
    )
    assert result.returncode == 0, result.stderr
    # the example applies, all of it: no unknown key, no entry that names nothing here
    assert "warning" not in result.stderr, result.stderr
    return _labels_of(result.stdout)


def _readme_example() -> tuple[str, str, dict[str, str]]:
    """README's config example, the snapshot it names, and the labels it lists."""
    blocks = list(_BLOCK.finditer(CONFIG_SECTION))
    config = next(b for b in blocks if b.group(1) == "yaml")
    text = next(b for b in blocks if b.group(1) == "text" and b.start() > config.end())
    between = CONFIG_SECTION[config.end() : text.start()]
    snapshot = re.search(r"`(examples/snapshots/[\w.-]+\.yaml)`", between)
    assert snapshot is not None, "README names no snapshot for its config example"
    return config.group(2), snapshot.group(1), _labels_of(text.group(2))


def test_readme_config_example_gives_the_labels_readme_lists(tmp_path: Path) -> None:
    config, snapshot, expected = _readme_example()
    assert expected, "README lists no labels for its config example"
    path = tmp_path / "config.yaml"
    path.write_text(config)
    published = _run(path, snapshot)
    assert {key: published.get(key) for key in expected} == expected


def _table_rows() -> list[tuple[str, str, dict[str, str]]]:
    rows = []
    for line in CONFIG_SECTION.splitlines():
        cells = re.findall(r"`([^`]+)`", line)
        if line.startswith("| `examples/configs/") and len(cells) >= 3:
            rows.append((cells[0], cells[1], _labels_of("\n".join(cells[2:]))))
    return rows


def test_readme_names_every_bundled_config() -> None:
    """A config added to examples/configs/ is listed with what it gives, or this fails."""
    listed = {config for config, _, _ in _table_rows()}
    bundled = {f"examples/configs/{p.name}" for p in (ROOT / "examples/configs").glob("*.yaml")}
    assert bundled and listed == bundled


@pytest.mark.parametrize(("config", "snapshot", "expected"), _table_rows(), ids=lambda v: str(v))
def test_bundled_config_gives_the_labels_readme_lists(
    config: str, snapshot: str, expected: dict[str, str]
) -> None:
    assert expected
    published = _run(ROOT / config, snapshot)
    assert {key: published.get(key) for key in expected} == expected


def test_every_config_fragment_in_readme_loads_without_a_warning() -> None:
    fragments = [
        b.group(2) for b in _BLOCK.finditer(README)
        if b.group(1) == "yaml" and b.group(2).lstrip().startswith(_CONFIG_TOP_KEYS)
    ]  # fmt: skip
    assert len(fragments) >= 2  # the config example and the partitions table
    for fragment in fragments:
        assert yaml.safe_load(fragment)
        assert parse_config_text(fragment, "README").warnings == ()


# ----------------------------------------------------------------- entries that apply to nothing


def _pattern(text: str, name: str) -> ResourcePattern:
    return ResourcePattern(text, name, wildcard_regex(text))


def _shared(*names: str) -> Sharing:
    return Sharing("time-slicing", tuple(ReplicatedResource(n, 4, False) for n in names))


def test_readme_old_example_is_named_as_applying_to_nothing() -> None:
    """The mistake README once shipped: a pattern without NVML's ``NVIDIA `` prefix, and
    time-slicing on ``gpu`` where the second pattern renames every A100 to ``a100``."""
    snapshot = node(gpu(0, name="NVIDIA A100-SXM4-40GB"), gpu(1, name="NVIDIA A100-SXM4-40GB"))
    config = Config(
        gpu_patterns=(_pattern("A100-*-40GB", "a100-40gb"), _pattern("*A100*", "a100")),
        sharing=_shared("nvidia.com/gpu"),
    )
    result = labelling.build(snapshot, "none", config, None)
    assert result.unused == (
        "resources.gpus[0]: pattern 'A100-*-40GB' matches no GPU on this node "
        "(its GPUs: 'NVIDIA A100-SXM4-40GB')",
        "sharing.timeSlicing: nvidia.com/gpu applies to no resource on this node "
        "(its resources: 'nvidia.com/a100')",
    )
    assert result.labels["nvidia.com/a100.replicas"] == "1"  # the labels are unchanged
    assert not any("applies to no" in w or "matches no" in w for w in result.warnings)


def test_a_shadowed_pattern_and_mig_patterns_are_named() -> None:
    snapshot = node(
        gpu(0, name="NVIDIA A100-SXM4-40GB", mig=mig("1g.5gb")),
        gpu(1, name="NVIDIA A100-SXM4-40GB"),
    )
    config = Config(
        gpu_patterns=(_pattern("*A100*", "a100"), _pattern("NVIDIA A100*", "never")),
        mig_patterns=(_pattern("1g.*", "small"), _pattern("2g.*", "medium")),
    )
    mixed = labelling.build(snapshot, "mixed", config, None)
    assert mixed.unused == (
        "resources.gpus[1]: pattern 'NVIDIA A100*' names no GPU on this node: every GPU it "
        "matches is named by an earlier pattern",
        "resources.mig[1]: pattern '2g.*' matches no MIG profile on this node "
        "(its MIG profiles: '1g.5gb')",
    )
    # MIG mode changes at run time: where no MIG device is labelled, MIG patterns wait
    assert labelling.build(snapshot, "none", config, None).unused == mixed.unused[:1]
    no_mig = node(gpu(0, name="NVIDIA A100-SXM4-40GB"))
    assert labelling.build(no_mig, "mixed", config, None).unused == mixed.unused[:1]


def test_a_config_that_applies_everywhere_names_nothing() -> None:
    snapshot = node(gpu(0, name="NVIDIA A100-SXM4-40GB"), gpu(1, name="NVIDIA H100 80GB HBM3"))
    config = Config(
        gpu_patterns=(_pattern("*A100*", "a100"),),
        sharing=_shared("nvidia.com/a100", "nvidia.com/gpu"),
    )
    assert labelling.build(snapshot, "none", config, None).unused == ()


def test_an_entry_that_applies_to_nothing_is_warned_once_per_change(
    tmp_path: Path, log_events: Callable[[str], list[Any]]
) -> None:
    """Every pass labels the same node with the same config: the daemon says it at the first
    pass, not at each; a reload that changes what applies to nothing says it again, and a
    reload that fixes it says nothing more."""
    config = tmp_path / "config.yaml"
    wrong = "resources:\n  gpus:\n  - {pattern: 'A100-*', name: a100}\n"
    config.write_text(wrong)
    cli = {
        "sleep_interval": "1s", "output_file": str(tmp_path / "gfd"), "no_timestamp": True,
        "snapshot_file": "examples/snapshots/dgx-a100.yaml", "config_file": str(config),
    }  # fmt: skip

    def said(expected: int) -> Callable[[Agent], None]:
        def check(agent: Agent) -> None:
            assert len(log_events("config applies to nothing")) == expected

        return check

    def rewrite(text: str) -> Callable[[Agent], None]:
        def step(agent: Agent) -> None:
            assert not log_events("config applies to nothing")  # nothing new since the check
            config.write_text(text)
            agent.request_reload()

        return step

    other = wrong + "sharing: {timeSlicing: {resources: [{name: h100, replicas: 2}]}}\n"
    fixed = "resources:\n  gpus:\n  - {pattern: 'NVIDIA A100-*', name: a100}\n"
    steps = [said(1), said(0), said(0), rewrite(other), said(2), said(0), rewrite(fixed), said(0)]
    run = drive(resolve(cli, {}), steps, reload_settings=lambda: resolve(cli, {}))
    assert run.metrics.passes.count("success") == len(steps) + 1
