"""Per-node configuration as upstream's config-manager (v0.20.0 cmd/config-manager/main.go): entries
are the files less ``..`` names (477-492); a missing labelled entry is an error (351-357); no
label: DEFAULT_CONFIG (359-366), then named / single / empty (368-392). A change applies through
the SIGHUP reload; what cannot apply keeps the config in force with one error line."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from gfd.agent import Agent
from gfd.config_choice import ConfigChoice
from gfd.errors import PublishError, UsageError
from gfd.nodeconfig import NodeConfigError, choose, choose_for, list_entries
from gfd.options import DEFAULT_NODE_LABEL
from gfd.outputs.file import split_features_file
from gfd.settings import Settings, resolve
from tests.helpers import table

LABEL = DEFAULT_NODE_LABEL
MIG_NODE = "examples/snapshots/dgx-a100-mig-mixed.yaml"
ENTRIES = frozenset({"default", "mig-single", "mig-mixed"})


# ----------------------------------------------------------------- choosing (pure)

CHOICES: list[tuple[str, str | None, frozenset[str], str, tuple[str, ...], str | None]] = [
    # description, label value, entries, default, fallbacks, chosen entry
    ("the label names an entry", "mig-mixed", ENTRIES, "", ("named",), "mig-mixed"),
    ("the label wins over the default", "mig-single", ENTRIES, "default", (), "mig-single"),
    ("no label: the default config", None, ENTRIES, "mig-mixed", ("named",), "mig-mixed"),
    ("an empty label is no label", "", ENTRIES, "mig-mixed", (), "mig-mixed"),
    ("no label, no default: named", None, ENTRIES, "", ("named", "single"), "default"),
    ("named without 'default': single", None, frozenset({"a"}), "", ("named", "single"), "a"),
    ("fallbacks in order", None, frozenset({"default"}), "", ("single", "named"), "default"),
    ("empty: no config file", None, frozenset({"a", "b"}), "", ("named", "empty"), None),
]


@pytest.mark.parametrize(("value", "entries", "default", "fallbacks", "chosen"), table(CHOICES))
def test_choose_follows_upstream_config_manager(
    value: str | None, entries: frozenset[str], default: str, fallbacks: tuple, chosen: str | None
) -> None:
    choice = choose(LABEL, value, entries, default, fallbacks)
    assert choice.entry == chosen
    assert choice.reason  # the log line says why


REFUSALS: list[tuple[str, str | None, frozenset[str], str, tuple[str, ...], str]] = [
    ("a label naming no entry is not a fallback", "mig-7g", ENTRIES, "default", ("named",),
     "no such config entry"),
    ("a missing default is an error", None, ENTRIES, "nope", ("named",), "default config"),
    ("no fallback applies", None, frozenset({"a", "b"}), "", ("named", "single"),
     "no fallback strategy applies"),
    ("no fallbacks at all", None, ENTRIES, "", (), "no fallback strategy applies"),
    ("a path is never an entry", "../../etc/passwd", ENTRIES, "", ("named",), "not a label value"),
    ("a dot-dot name is never an entry", "..data", ENTRIES | {"..data"}, "", (),
     "not a label value"),
    ("a huge value", "a" * 10_000_000, ENTRIES, "", ("named",), "not a label value"),
    ("64 characters", "a" * 64, ENTRIES | {"a" * 64}, "", ("named",), "not a label value"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "entries", "default", "fallbacks", "message"), table(REFUSALS))
def test_choose_refuses_with_a_message_naming_the_label(
    value: str | None, entries: frozenset[str], default: str, fallbacks: tuple, message: str
) -> None:
    with pytest.raises(NodeConfigError) as caught:
        choose(LABEL, value, entries, default, fallbacks)
    text = str(caught.value)
    assert message in text
    assert LABEL in text
    assert len(text) < 1000  # a hostile value is clipped, never echoed whole


def config_dir(tmp_path: Path, entries: Mapping[str, str]) -> Path:
    """A config directory laid out as a ConfigMap volume: each entry a link into a
    ``..<timestamp>`` directory, ``..data`` linking to that."""
    root = tmp_path / "available-configs"
    data = root / "..2026_11_25_00_00_00.1"
    data.mkdir(parents=True)
    for name, text in entries.items():
        (data / name).write_text(text)
        (root / name).symlink_to(Path("..data") / name)
    (root / "..data").symlink_to(data.name)
    return root


def test_entries_are_the_configmap_files_without_its_bookkeeping(tmp_path: Path) -> None:
    root = config_dir(tmp_path, {"default": "version: v1\n", "mig-mixed": "version: v1\n"})
    (root / "a-directory").mkdir()
    assert list_entries(str(root)) == {"default", "mig-mixed"}


def test_an_empty_or_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NodeConfigError, match="no config entries"):
        list_entries(str(tmp_path))
    with pytest.raises(NodeConfigError, match="cannot list it"):
        list_entries(str(tmp_path / "absent"))


def test_a_label_cannot_reach_a_file_outside_the_directory(tmp_path: Path) -> None:
    """The value is compared with the listing, never joined to a path: an entry-like name
    that exists outside the directory (or a link out of it) selects nothing."""
    root = config_dir(tmp_path, {"default": "version: v1\n"})
    (tmp_path / "outside").write_text("version: v1\nflags: {migStrategy: mixed}\n")
    settings = srcdir_settings(root, default_config="", fallbacks="named")
    for value in ("../outside", "..data", "...", "outside", "/etc/passwd", "default/.."):
        with pytest.raises(NodeConfigError):
            choose_for(settings, value)


# ----------------------------------------------------------------- settings


def srcdir_settings(
    root: Path, *, default_config: str = "", fallbacks: str = "named,single", **env: str
) -> Settings:
    environ = {"CONFIG_FILE_SRCDIR": str(root), "DEFAULT_CONFIG": default_config,
               "FALLBACK_STRATEGIES": fallbacks, "NODE_NAME": "n1", **env}  # fmt: skip
    return resolve({"snapshot_file": MIG_NODE, "output_file": "-", "no_timestamp": True}, environ)


def test_upstream_environment_names_are_accepted(tmp_path: Path) -> None:
    """The env block of upstream's config-manager container (deployments/helm/
    nvidia-device-plugin/templates/daemonset-gfd.yml:104-128) configures gfd itself."""
    root = config_dir(tmp_path, {"default": "version: v1\n"})
    settings = srcdir_settings(
        root, default_config="default", fallbacks="named,single", NODE_LABEL="example.com/cfg"
    )
    assert settings.config_file_srcdir == str(root)
    assert settings.node_label == "example.com/cfg"
    assert settings.default_config == "default"
    assert settings.fallback_strategies == ("named", "single")
    assert settings.config_file is None  # nothing read before the label chose an entry


def test_the_chosen_entry_is_the_config_file(tmp_path: Path) -> None:
    root = config_dir(tmp_path, {"mixed": "version: v1\nflags: {migStrategy: mixed}\n"})
    base = srcdir_settings(root)
    choice = choose_for(base, "mixed")
    settings = resolve(
        {"snapshot_file": MIG_NODE, "output_file": "-"},
        {"CONFIG_FILE_SRCDIR": str(root), "NODE_NAME": "n1"}, config_choice=choice,
    )  # fmt: skip
    assert settings.config_file == os.path.join(str(root), "mixed")
    assert settings.mig_strategy == "mixed"
    assert settings.config_choice == choice


def test_config_file_is_ignored_with_a_warning_next_to_a_srcdir(tmp_path: Path) -> None:
    """An upstream manifest's gfd container also sets CONFIG_FILE (the file config-manager
    links to); the entry is read directly instead."""
    root = config_dir(tmp_path, {"default": "version: v1\n"})
    settings = srcdir_settings(root, CONFIG_FILE="/config/config.yaml")
    assert settings.config_file is None
    assert any("CONFIG_FILE: ignored" in warning for warning in settings.warnings)


@pytest.mark.parametrize(("env", "message"), [
    ({"FALLBACK_STRATEGIES": "named,first"}, "FALLBACK_STRATEGIES='named,first'"),
    ({"NODE_LABEL": "not a key"}, "NODE_LABEL='not a key'"),
    ({"NODE_LABEL": "bad_prefix/x"}, "NODE_LABEL='bad_prefix/x'"),
    ({"NODE_NAME": ""}, "--node-name (or NODE_NAME) is required with --config-file-srcdir"),
    ({"NODE_NAME": "../nodes/other"}, "NODE_NAME='../nodes/other': not a valid node name"),
])  # fmt: skip
def test_bad_node_config_settings_are_usage_errors(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    root = config_dir(tmp_path, {"default": "version: v1\n"})
    with pytest.raises(UsageError) as caught:
        srcdir_settings(root, **env)
    assert message in str(caught.value)


# ----------------------------------------------------------------- the agent


class Node:
    """The node label as the agent reads it; ``None`` for no label, an exception to raise."""

    def __init__(self, value: str | None) -> None:
        self.value: str | Exception | None = value
        self.reads = 0

    def __call__(self) -> str | None:
        self.reads += 1
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


MIXED = "version: v1\nflags: {migStrategy: mixed}\n"
SINGLE = "version: v1\nflags: {migStrategy: single}\n"
MPS = "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: 2}\n"


def start_agent(
    tmp_path: Path, entries: Mapping[str, str], node: Node
) -> tuple[Agent, Path, Callable[[], dict[str, str]]]:
    """An agent as the CLI starts it: the entry for the node's label chosen first."""
    root = config_dir(tmp_path, entries)
    features = tmp_path / "gfd"
    cli = {"snapshot_file": MIG_NODE, "output_file": str(features), "no_timestamp": True}
    environ = {
        "CONFIG_FILE_SRCDIR": str(root), "FALLBACK_STRATEGIES": "named,single", "NODE_NAME": "n1",
    }  # fmt: skip

    def load(config_choice: ConfigChoice | None = None) -> Settings:
        return resolve(cli, environ, config_choice=config_choice)

    settings = load(choose_for(load(), node()))
    agent = Agent(settings, reload_settings=load, node_label=node)

    def labels() -> dict[str, str]:
        lines = split_features_file(features.read_text())[1].splitlines()
        return dict(line.split("=", 1) for line in lines)

    return agent, root, labels


def one_pass(agent: Agent) -> bool:
    """What the loop does before each pass after the first, then the pass."""
    agent._follow_node_config()
    return agent.run_pass()


def test_a_relabelled_node_gets_the_new_config_and_labels_in_one_pass(tmp_path: Path) -> None:
    node = Node("mig-mixed")
    agent, _, labels = start_agent(tmp_path, {"mig-mixed": MIXED, "mig-single": SINGLE}, node)
    assert agent.run_pass() is True
    assert labels()["nvidia.com/mig.strategy"] == "mixed"

    node.value = "mig-single"
    with capture_logs() as logs:
        assert one_pass(agent) is True
    assert labels()["nvidia.com/mig.strategy"] == "single"
    assert agent.settings.config_choice == ConfigChoice(
        "mig-single", f"node label {LABEL}=mig-single"
    )
    chosen = [entry for entry in logs if entry["event"] == "node config chosen"]
    assert chosen == [
        {
            "node": "n1", "output": "file", "event": "node config chosen", "log_level": "info",
            "entry": "mig-single", "reason": f"node label {LABEL}=mig-single",
            "previous": "mig-mixed",
        }
    ]  # fmt: skip


def test_an_unchanged_label_reloads_nothing(tmp_path: Path) -> None:
    node = Node("mig-mixed")
    agent, _, _ = start_agent(tmp_path, {"mig-mixed": MIXED, "mig-single": SINGLE}, node)
    agent.run_pass()
    settings, timestamp = agent.settings, agent.timestamp
    for _ in range(3):
        one_pass(agent)
    assert agent.settings is settings and agent.timestamp == timestamp
    assert node.reads == 4  # one read at start, one before each later pass


def test_a_removed_label_falls_back(tmp_path: Path) -> None:
    node = Node("mig-mixed")
    agent, _, labels = start_agent(tmp_path, {"mig-mixed": MIXED, "default": SINGLE}, node)
    agent.run_pass()
    node.value = None
    assert one_pass(agent) is True
    assert agent.settings.config_choice is not None
    assert agent.settings.config_choice.entry == "default"
    assert labels()["nvidia.com/mig.strategy"] == "single"


@pytest.mark.parametrize("value", [
    "no-such-entry", "../../etc/passwd", "x" * 100_000,
], ids=["missing entry", "path traversal", "huge value"])  # fmt: skip
def test_a_label_naming_no_entry_keeps_the_config_with_one_error_line(
    tmp_path: Path, value: str
) -> None:
    node = Node("mig-mixed")
    agent, _, labels = start_agent(tmp_path, {"mig-mixed": MIXED, "mig-single": SINGLE}, node)
    agent.run_pass()
    before = labels()
    settings = agent.settings
    node.value = value
    with capture_logs() as logs:
        for _ in range(3):
            assert one_pass(agent) is True
    assert agent.settings is settings
    assert labels() == before
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert len(errors) == 1, errors
    assert errors[0]["event"] == "node config not applied; the config in force stays"
    assert errors[0]["config"] == "mig-mixed"
    assert len(errors[0]["error"]) < 1000

    node.value = "mig-single"  # a good label again: followed at once
    assert one_pass(agent) is True
    assert labels()["nvidia.com/mig.strategy"] == "single"


def test_an_invalid_entry_keeps_the_config_with_one_error_line(tmp_path: Path) -> None:
    node = Node("mig-mixed")
    entries = {"mig-mixed": MIXED, "broken": "version: v9\n", "mps": MPS}
    agent, _, labels = start_agent(tmp_path, entries, node)
    agent.run_pass()
    before = labels()
    settings = agent.settings
    for bad in ("broken", "mps"):  # unreadable; readable but impossible on a MIG node
        node.value = bad
        with capture_logs() as logs:
            for _ in range(4):
                one_pass(agent)
        assert agent.settings.config_choice == settings.config_choice
        assert labels() == before
        errors = [entry for entry in logs if entry["log_level"] == "error"]
        assert len([e for e in errors if "rejected" in e["event"] or "failed" in e["event"]]) >= 1
        # the refused entry is not loaded again while the label stays
        assert len([e for e in logs if e["event"] == "node config chosen"]) == 1


def test_the_node_cannot_be_read_keeps_the_config(tmp_path: Path) -> None:
    node = Node("mig-mixed")
    agent, _, _labels = start_agent(tmp_path, {"mig-mixed": MIXED, "mig-single": SINGLE}, node)
    agent.run_pass()
    settings = agent.settings
    node.value = PublishError("read label of node n1: connection refused")
    with capture_logs() as logs:
        assert one_pass(agent) is True  # the labels of the config in force are published
    assert agent.settings is settings
    assert [entry["event"] for entry in logs if entry["log_level"] == "error"] == [
        "cannot read the node's config label; the config in force stays"
    ]


def test_sighup_rereads_the_entry_in_force(tmp_path: Path) -> None:
    node = Node("mig-mixed")
    agent, root, labels = start_agent(tmp_path, {"mig-mixed": MIXED, "mig-single": SINGLE}, node)
    agent.run_pass()
    data = root / "..data" / "mig-mixed"
    data.write_text(SINGLE)  # the ConfigMap entry edited in place
    agent._reload()
    assert agent.settings.config_choice is not None
    assert agent.settings.config_choice.entry == "mig-mixed"
    assert agent.run_pass() is True
    assert labels()["nvidia.com/mig.strategy"] == "single"


def test_the_agent_reads_the_label_with_one_get_of_its_own_node(
    api: Any, kubeconfig: str, tmp_path: Path
) -> None:
    """The default reader: GET /api/v1/nodes/<node>, nothing else (RBAC: nodes get)."""
    from gfd.nodeconfig import NodeLabelReader

    api.add_node("n1", labels={LABEL: "mig-mixed"})
    api.add_node("n2", labels={LABEL: "other"})
    settings = resolve({}, {"NODE_NAME": "n1", "KUBECONFIG": kubeconfig, "GFD_OUTPUT_FILE": "-"})
    reader = NodeLabelReader(settings)
    api.clear_requests()
    assert reader() == "mig-mixed"
    assert [(request.method, request.path) for request in api.requests] == [
        ("GET", "/api/v1/nodes/n1")
    ]
    api.edit("Node", "n1", "", lambda node: node["metadata"]["labels"].pop(LABEL))
    assert reader() is None
    reader.close()
