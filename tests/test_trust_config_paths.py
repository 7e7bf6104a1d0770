"""What a channel names inherits its trust: the paths the config file names.

The config file is a ConfigMap (and so is the node's entry of ``--config-file-srcdir``);
each of its path-valued keys may not lead into ``/proc``, ``/sys`` or ``/dev`` beyond the
option's own tree, nor to a credential -- named outright, through a symbolic link or a
``..`` traversal.  A refused key is one line naming the key and the value (exit 2 at start;
on a reload, one error line and the settings in force kept), and what the path leads to is
never read: a canary put there appears in no label and no log line.
"""

from __future__ import annotations

import ast
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from structlog.testing import capture_logs

from gfd import labels as labelling
from gfd import snapshot as snapshot_io
from gfd.agent import Agent
from gfd.config import Config
from gfd.config_choice import ConfigChoice
from gfd.discovery import sysfs
from gfd.errors import ConfigError
from gfd.options import OPTIONS, Option
from gfd.outputs.file import split_features_file
from gfd.pathpolicy import EXEC_CREDENTIAL_PREFIX, refusal
from gfd.settings import Settings, resolve
from gfd.snapshot import MAX_STRING_CHARS
from tests.process import ROOT, Daemon, assert_refused, run_gfd

CANARY = "canary-3f9c1e7a5b"
DGX = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")
#: every option the config file can set to a path: derived from the table, so a new one
#: is covered here without a word
PATH_OPTIONS = [option for option in OPTIONS if option.config_paths is not None]


def nested(key: tuple[str, ...], value: str) -> dict[str, object]:
    document: dict[str, object] = {"version": "v1"}
    place = document
    for part in key[:-1]:
        place = place.setdefault(part, {})  # type: ignore[assignment]
    place[key[-1]] = value
    return document


@pytest.fixture
def here(tmp_path: Path) -> Iterator[Path]:
    """A short directory holding the credentials and links the targets need."""
    (tmp_path / "kubeconfig").write_text(f"token: {CANARY}\n")
    exec_folder = tmp_path / f"{EXEC_CREDENTIAL_PREFIX}x1"
    exec_folder.mkdir()
    (exec_folder / "client.key").write_text(CANARY)
    (tmp_path / "to-environ").symlink_to("/proc/self/environ")
    (tmp_path / "to-token").symlink_to(tmp_path / "kubeconfig")
    yield tmp_path


#: where a hostile config points: (name, the path given the fixture's directory)
TARGETS: dict[str, Callable[[Path], str]] = {
    "proc-environ": lambda here: "/proc/self/environ",
    "token-file": lambda here: str(here / "kubeconfig"),
    "exec-credential": lambda here: str(here / f"{EXEC_CREDENTIAL_PREFIX}x1" / "client.key"),
    "symlink-to-proc": lambda here: str(here / "to-environ"),
    "symlink-to-token": lambda here: str(here / "to-token"),
    "traversal": lambda here: str(here) + "/.." * 40 + "/proc/self/environ",
    # relative to the working directory, whatever it is
    "relative-traversal": lambda here: "../" * 40 + "proc/self/environ",
}


def hostile_env(here: Path) -> dict[str, str]:
    """The canary in the environment (so in /proc/self/environ) and the kubeconfig in use."""
    return {**os.environ, "TRUST_CANARY": CANARY, "KUBECONFIG": str(here / "kubeconfig")}


def args_for(option: Option, config: Path) -> list[str]:
    """A oneshot whose only source for ``option`` is the config file."""
    args = ["--oneshot", "--config-file", str(config)]
    if option.name != "snapshot_file":
        args += ["--snapshot-file", DGX]
    if option.name != "output_file":
        args += ["-o", "-"]
    return args


# ------------------------------------------------------------ the config file, at start


def each_option_and_target(test: Callable[..., None]) -> Callable[..., None]:
    """Run ``test`` for every path option the config file can set and every hostile target."""
    test = pytest.mark.parametrize("option", PATH_OPTIONS, ids=lambda option: option.name)(test)
    return pytest.mark.parametrize("target", sorted(TARGETS))(test)


def hostile_document(option: Option, target: str, here: Path) -> str:
    """A config document whose only key is ``option``'s, set to ``target``."""
    assert option.config_key is not None
    return yaml.safe_dump(nested(option.config_key, TARGETS[target](here)))


@each_option_and_target
def test_a_config_file_naming_a_forbidden_path_is_refused(
    option: Option, target: str, here: Path
) -> None:
    assert option.config_key is not None
    config = here / "config.yaml"
    config.write_text(hostile_document(option, target, here))
    result = run_gfd(*args_for(option, config), env=hostile_env(here))
    assert_refused(result, option.config_key[-1], "may not name")
    assert CANARY not in result.stderr + result.stdout


@pytest.mark.parametrize("option", PATH_OPTIONS, ids=lambda option: option.name)
def test_the_pod_spec_may_name_what_the_config_file_may_not(option: Option, here: Path) -> None:
    """The command line wins, and the file's value is then not judged: flags and the
    environment are the pod spec, trusted with the node."""
    assert option.config_key is not None
    config = here / "config.yaml"
    config.write_text(yaml.safe_dump(nested(option.config_key, "/proc/self/environ")))
    trusted = {option.name: str(here / "own")}
    assert resolve({"config_file": str(config), "oneshot": True, **trusted}, {})


def test_the_paths_each_option_exists_for_stay_allowed(here: Path) -> None:
    config = here / "config.yaml"
    config.write_text(
        "version: v1\nflags:\n  plugin: {containerDriverRoot: /}\n  gfd:\n"
        "    machineTypeFile: /sys/class/dmi/id/product_name\n"
        "    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd\n"
        "    koordletDeviceInfosDir: ''\n"
    )
    settings = resolve({"config_file": str(config), "snapshot_file": DGX}, {})
    assert settings.machine_type_file == "/sys/class/dmi/id/product_name"
    assert settings.effective_output_file == "/etc/kubernetes/node-feature-discovery/features.d/gfd"


# ------------------------------------------------------------ the node's config entry


def entry_dir(tmp_path: Path, entries: dict[str, str]) -> Path:
    root = tmp_path / "available-configs"
    root.mkdir(exist_ok=True)
    for name, text in entries.items():
        (root / name).write_text(text)
    return root


@each_option_and_target
def test_a_node_entry_naming_a_forbidden_path_is_refused(
    option: Option, target: str, here: Path
) -> None:
    assert option.config_key is not None
    root = entry_dir(here, {"hostile": hostile_document(option, target, here)})
    environ = {"CONFIG_FILE_SRCDIR": str(root), "NODE_NAME": "n1"}
    environ["KUBECONFIG"] = str(here / "kubeconfig")
    with pytest.raises(ConfigError) as raised:
        resolve({"oneshot": True}, environ, config_choice=ConfigChoice("hostile", "label"))
    message = str(raised.value)
    assert "\n" not in message and option.config_key[-1] in message
    assert "may not name" in message and CANARY not in message


def test_a_relabelled_node_whose_entry_names_a_credential_keeps_its_config(here: Path) -> None:
    good = "version: v1\nflags: {migStrategy: single}\n"
    hostile = f"version: v1\nflags:\n  gfd: {{machineTypeFile: {here / 'to-token'}}}\n"
    root = entry_dir(here, {"good": good, "hostile": hostile})
    features = here / "gfd"
    cli = {"snapshot_file": DGX, "output_file": str(features), "no_timestamp": True}
    environ = {"CONFIG_FILE_SRCDIR": str(root), "NODE_NAME": "n1"}
    label = ["good"]

    def load(config_choice: ConfigChoice | None = None) -> Settings:
        return resolve(cli, environ, config_choice=config_choice)

    settings = load(ConfigChoice("good", "label"))
    agent = Agent(settings, reload_settings=load, node_label=lambda: label[0])
    assert agent.run_pass() is True
    before = features.read_text()
    label[0] = "hostile"
    with capture_logs() as logs:
        agent._follow_node_config()
        agent.run_pass()
    assert agent.settings.config_choice == settings.config_choice
    assert split_features_file(features.read_text())[1] == split_features_file(before)[1]
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert errors and "may not name" in str(errors)
    assert CANARY not in str(logs) + features.read_text()


# ------------------------------------------------------------ SIGHUP


@pytest.mark.timeout(90)
def test_a_reloaded_config_naming_proc_is_reported_and_the_previous_kept(here: Path) -> None:
    config = here / "config.yaml"
    config.write_text("version: v1\nflags: {migStrategy: none}\n")
    features = here / "features"
    daemon = Daemon(
        "--sleep-interval", "100ms", "--snapshot-file", DGX, "--no-timestamp",
        "--config-file", str(config), "-o", str(features), env=hostile_env(here),
    )  # fmt: skip
    try:
        daemon.wait_for("pass finished")
        before = features.read_text()
        config.write_text(
            "version: v1\nflags:\n  migStrategy: mixed\n"
            f"  gfd: {{machineTypeFile: {here / 'to-environ'}}}\n"
        )
        daemon.process.send_signal(signal.SIGHUP)
        failed = daemon.wait_for("reload failed; keeping the settings in force")[0]
        assert "machineTypeFile" in failed["error"] and "may not name" in failed["error"]
        daemon.wait_for("pass finished", count=2)
        assert features.read_text() == before
    finally:
        assert daemon.stop() == 0
    assert CANARY not in daemon.log() + features.read_text()


# ------------------------------------------------------------ what a machine-type file holds


def test_a_machine_type_file_is_never_shown_in_a_log_line(tmp_path: Path) -> None:
    """Even a path the pod spec names: its content reaches the ``machine`` label only as
    a product name (sanitised, cut to a label value) and no warning quotes it -- neither
    the reader's (over its bound) nor the labeller's (a value cut to fit)."""
    path = tmp_path / "product_name"
    path.write_text(CANARY * (MAX_STRING_CHARS // len(CANARY) + 1))
    sysfs._warned.clear()
    with capture_logs() as logs:
        assert sysfs.read_machine_type(str(path)) is None
    assert logs and logs[0]["event"] == "machine type unknown"
    assert CANARY not in str(logs)

    long_name = "eyJ" + CANARY * 10  # a token-like value: fits the bound, not a label
    path.write_text(long_name)
    machine = sysfs.read_machine_type(str(path))
    snapshot = snapshot_io.load(DGX)
    result = labelling.build(replace(snapshot, machine=machine), "none", Config(), None)
    assert result.labels["nvidia.com/gpu.machine"].startswith("eyJ" + CANARY)
    assert len(result.labels["nvidia.com/gpu.machine"]) <= 63
    assert any("gpu.machine" in warning for warning in result.warnings)
    assert CANARY not in str(result.warnings)


# ------------------------------------------------------------ the invariants, by source


def test_every_path_valued_config_key_declares_what_the_file_may_name() -> None:
    """An option whose value is a file or a directory and that the config file can set
    carries a rule: a new one cannot slip in without."""
    for option in OPTIONS:
        if option.config_key is None:
            continue
        looks_like_a_path = option.name.endswith(("_file", "_dir", "_path", "_root"))
        assert (option.config_paths is not None) == looks_like_a_path, option.name


def test_the_config_files_values_are_judged_in_one_place() -> None:
    """Only gfd/settings.py reads the ``flags`` the config file gave (LoadedConfig.flags),
    and it calls the path rule there: no other module takes a value from the file."""
    readers = []
    for path in Path(ROOT, "gfd").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "flags":
                readers.append(path.name)
    assert set(readers) <= {"settings.py"}, readers
    source = Path(ROOT, "gfd", "settings.py").read_text()
    assert source.count("refusal(") == 1
    assert refusal.__module__ == "gfd.pathpolicy"
