"""Every flag, alias, environment variable and default of upstream gpu-feature-discovery v0.20.0
(main.go's ``config.flags``, then internal/flags/kubeclient.go and node.go, main.go:121-122; each
row cites its lines), proven through gfd's real command line in Go's and click's spelling,
booleans in every form Go accepts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gfd.cli
from gfd.options import NFD_FEATURES_FILE, OPTIONS
from gfd.settings import Settings, resolve

UPSTREAM_FEATURES_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"


@dataclass(frozen=True)
class Row:
    where: str  # upstream v0.20.0 file:lines of the flag's definition
    name: str  # upstream's flag name
    aliases: tuple[str, ...]  # upstream's Aliases (one letter: a short option)
    envs: tuple[str, ...]  # upstream's EnvVars, in order
    attribute: str  # the Settings attribute it sets
    default: Any  # upstream's Value, as gfd holds it
    sample: str | None  # a value to pass (None: a boolean flag)
    expected: Any = None  # what the sample becomes


UPSTREAM_FLAGS = (
    Row("cmd/gpu-feature-discovery/main.go:52-57", "mig-strategy", (),
        ("GFD_MIG_STRATEGY", "MIG_STRATEGY"), "mig_strategy", "none", "mixed", "mixed"),
    Row("cmd/gpu-feature-discovery/main.go:58-63", "fail-on-init-error", (),
        ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"), "fail_on_init_error", True, None),
    Row("cmd/gpu-feature-discovery/main.go:64-69", "oneshot", (),
        ("GFD_ONESHOT",), "oneshot", False, None),
    Row("cmd/gpu-feature-discovery/main.go:70-75", "no-timestamp", (),
        ("GFD_NO_TIMESTAMP",), "no_timestamp", False, None),
    Row("cmd/gpu-feature-discovery/main.go:76-81", "sleep-interval", (),
        ("GFD_SLEEP_INTERVAL",), "sleep_interval", 60.0, "90s", 90.0),
    Row("cmd/gpu-feature-discovery/main.go:82-87", "output-file", ("output", "o"),
        ("GFD_OUTPUT_FILE",), "effective_output_file", UPSTREAM_FEATURES_FILE,
        "/run/gfd-labels", "/run/gfd-labels"),
    Row("cmd/gpu-feature-discovery/main.go:88-93", "machine-type-file", (),
        ("GFD_MACHINE_TYPE_FILE",), "machine_type_file", "/sys/class/dmi/id/product_name",
        "/run/product_name", "/run/product_name"),
    Row("cmd/gpu-feature-discovery/main.go:94-99", "config-file", (),
        ("GFD_CONFIG_FILE", "CONFIG_FILE"), "config_file", None, "<config>", "<config>"),
    Row("cmd/gpu-feature-discovery/main.go:100-105", "use-node-feature-api", (),
        ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"), "use_node_feature_api", True,
        None),
    Row("cmd/gpu-feature-discovery/main.go:106-111", "device-discovery-strategy", (),
        ("DEVICE_DISCOVERY_STRATEGY",), "device_discovery_strategy", "auto", "vfio", "vfio"),
    # the default is spec.DefaultContainerDriverRoot, api/config/v1/consts.go:61
    Row("cmd/gpu-feature-discovery/main.go:112-118", "driver-root-ctr-path",
        ("container-driver-root",), ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        "driver_root_ctr_path", "/driver-root", "/host", "/host"),
    Row("internal/flags/kubeclient.go:44-50", "kubeconfig", (), ("KUBECONFIG",),
        "kubeconfig", None, "/nonexistent/kubeconfig", "/nonexistent/kubeconfig"),
    Row("internal/flags/kubeclient.go:51-58", "kube-api-qps", (), ("KUBE_API_QPS",),
        "kube_api_qps", 5.0, "2.5", 2.5),
    Row("internal/flags/kubeclient.go:59-66", "kube-api-burst", (), ("KUBE_API_BURST",),
        "kube_api_burst", 10, "20", 20),
    Row("internal/flags/node.go:33-38", "namespace", (), ("NAMESPACE",), "namespace",
        "default", "gpu-operator", "gpu-operator"),
    Row("internal/flags/node.go:39-44", "node-name", (), ("NODE_NAME",), "node_name", None,
        "node-7", "node-7"),
    Row("internal/flags/node.go:45-50", "pod-name", (), ("POD_NAME",), "pod_name", None,
        "gfd-x7k2p", "gfd-x7k2p"),
)  # fmt: skip

#: Go's strconv.ParseBool words, the ones urfave/cli accepts in a flag and a variable
#: (vendor/github.com/urfave/cli/v2/flag_bool.go:30-41 and :113-127)
GO_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
GO_FALSE = {"0", "f", "F", "false", "FALSE", "False"}

ALL_ENVS = {env for row in UPSTREAM_FLAGS for env in row.envs} | {
    env for option in OPTIONS for env in option.envs
}
#: the daemon's default output (the NodeFeature API) needs a node name; every run here
#: has one unless the row is about the node name itself
BASE_ENV = {"NODE_NAME": "base-node"}


def _option_name(name: str, via: str = "gnu") -> str:
    return f"-{name}" if len(name) == 1 or via == "go" else f"--{name}"


@pytest.fixture
def parse(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """Run gfd's command line on ``args`` with exactly ``env``; the resolved Settings.

    ``gfd.cli.run`` is replaced by one that resolves and stops: nothing is published."""
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    captured: list[Settings] = []

    def fake_run(cli_values: dict[str, Any], **actions: Any) -> int:
        import os

        captured.append(resolve(cli_values, os.environ, **actions))
        return 0

    monkeypatch.setattr(gfd.cli, "run", fake_run)

    def run(args: Sequence[str], env: dict[str, str], via: str = "main") -> Settings:
        for name in ALL_ENVS:
            monkeypatch.delenv(name, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value.replace("<config>", str(config)))
        args = [arg.replace("<config>", str(config)) for arg in args]
        captured.clear()
        with pytest.raises(SystemExit) as exit_info:
            gfd.cli.main(args)
        assert exit_info.value.code == 0
        assert len(captured) == 1
        return captured[0]

    yield run, config


def _expected(row: Row, value: Any, config: Path) -> Any:
    return str(config) if value == "<config>" else value


#: upstream's spelling (Go's flag package: one dash) and gfd's (click's: two dashes)
VIAS = ("go", "gnu")


@pytest.mark.parametrize("row", UPSTREAM_FLAGS, ids=lambda row: row.name)
def test_upstream_default(parse: Any, row: Row, via: str = "main") -> None:
    run, _ = parse
    if row.name == "node-name":
        settings = run(["--use-node-feature-api=false"], {}, via)
    elif row.name == "output-file":
        # upstream's Value is the NFD features file; gfd writes it when the NodeFeature
        # API is turned off and nothing else is said (SPEC §4)
        settings = run(["--use-node-feature-api=false"], BASE_ENV, via)
        assert UPSTREAM_FEATURES_FILE == NFD_FEATURES_FILE
    else:
        settings = run([], BASE_ENV, via)
    assert getattr(settings, row.attribute) == row.default, row.where


def _name_cases() -> Iterator[Any]:
    for row in UPSTREAM_FLAGS:
        for name in (row.name, *row.aliases):
            yield pytest.param(row, name, id=f"{row.name}:{name}")


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize(("row", "name"), list(_name_cases()))
def test_every_name_and_alias_is_accepted(parse: Any, row: Row, name: str, via: str) -> None:
    run, config = parse
    flag = _option_name(name, via)
    if row.sample is None:
        forms = {(flag,): True, (f"{flag}=true",): True, (f"{flag}=false",): False}
        forms |= {(f"{flag}={word}",): word in GO_TRUE for word in GO_TRUE | GO_FALSE}
        for args, value in forms.items():
            settings = run(list(args), BASE_ENV, via)
            assert getattr(settings, row.attribute) is value, (row.where, args)
        return
    for args in ([flag, row.sample], [f"{flag}={row.sample}"] if len(name) > 1 else []):
        if not args:
            continue
        settings = run(args, BASE_ENV, via)
        assert getattr(settings, row.attribute) == _expected(row, row.expected, config), (
            row.where, args,
        )  # fmt: skip


def _env_cases() -> Iterator[Any]:
    for row in UPSTREAM_FLAGS:
        for env in row.envs:
            yield pytest.param(row, env, id=f"{row.name}:{env}")


@pytest.mark.parametrize(("row", "env"), list(_env_cases()))
def test_every_environment_variable_is_read(parse: Any, row: Row, env: str) -> None:
    run, config = parse
    if row.sample is None:
        for raw in sorted(GO_TRUE | GO_FALSE | {"yes", "no"}):
            value = raw in GO_TRUE or raw == "yes"
            settings = run([], {**BASE_ENV, env: raw}, "main")
            assert getattr(settings, row.attribute) is value, (row.where, env, raw)
        return
    settings = run([], {**BASE_ENV, env: row.sample}, "main")
    assert getattr(settings, row.attribute) == _expected(row, row.expected, config), row.where


@pytest.mark.parametrize("row", [row for row in UPSTREAM_FLAGS if len(row.envs) > 1])
def test_the_first_listed_environment_variable_wins(parse: Any, row: Row) -> None:
    """urfave/cli reads EnvVars in order; the first one set wins."""
    run, config = parse
    first, second = row.envs[0], row.envs[1]
    if row.sample is None:
        env = {**BASE_ENV, first: "false", second: "true"}
        assert getattr(run([], env, "main"), row.attribute) is False
        return
    other = {"mig-strategy": "single", "config-file": "<config>", "driver-root-ctr-path": "/b"}
    env = {**BASE_ENV, first: row.sample, second: other[row.name]}
    if row.name == "config-file":  # both name the one file: the second must not be read
        env[second] = "/nonexistent/second.yaml"
    settings = run([], env, "main")
    assert getattr(settings, row.attribute) == _expected(row, row.expected, config), row.where


def test_the_table_is_upstreams_whole_flag_list() -> None:
    """Every upstream flag has a gfd option of the same name taking the same variables
    (gfd's extra variables, e.g. GFD_OUTPUT_FILE's companions, may follow them)."""
    by_flag = {option.flag: option for option in OPTIONS}
    for row in UPSTREAM_FLAGS:
        option = by_flag[f"--{row.name}"]
        assert option.envs[: len(row.envs)] == row.envs, row.where
        names = {option.flag, *option.aliases, option.short}
        assert {_option_name(alias) for alias in row.aliases} <= names, row.where


# ------------------------------------------------- the NodeFeature default and other outputs
# README "Migrating from upstream": an output chosen on purpose beats the default.


NFD = UPSTREAM_FEATURES_FILE

# README "Migrating from upstream", the output table: one row each, in its order
# (kind, the file written: None for stdout or an API output)
OUTPUT_ROWS = [
    pytest.param([], BASE_ENV, "nodefeature", None, id="nothing"),
    pytest.param(["--oneshot"], {}, "stdout", None, id="oneshot"),
    pytest.param(["--oneshot"], BASE_ENV, "stdout", None, id="oneshot-node-name-set"),
    pytest.param(["--oneshot", "--use-node-feature-api"], BASE_ENV, "nodefeature", None,
                 id="oneshot-api"),
    pytest.param(["--oneshot"], {**BASE_ENV, "USE_NODE_FEATURE_API": "true"}, "nodefeature",
                 None, id="oneshot-api-env"),
    pytest.param(["--use-node-labels"], BASE_ENV, "node-labels", None, id="node-labels"),
    pytest.param(["--output-file", "/run/labels"], {}, "file", "/run/labels", id="output-file"),
    pytest.param(["-o", "-"], {}, "stdout", None, id="output-file-dash"),
    pytest.param([], {"GFD_OUTPUT_FILE": "/run/labels"}, "file", "/run/labels",
                 id="output-file-env"),
    pytest.param(["--use-node-feature-api=false"], {}, "file", NFD, id="api-off"),
    pytest.param([], {"USE_NODE_FEATURE_API": "false"}, "file", NFD, id="api-off-env"),
    pytest.param(["--oneshot", "--use-node-feature-api=false"], {}, "file", NFD,
                 id="oneshot-api-off"),
    pytest.param(["-oneshot"], {"USE_NODE_FEATURE_API": "F"}, "file", NFD,
                 id="oneshot-api-off-env"),
    pytest.param(["--oneshot", "--use-node-feature-api=false", "-o", "/run/l"], {}, "file",
                 "/run/l", id="api-off-output-file"),
    pytest.param(["--oneshot", "--use-node-feature-api=false", "-o", ""], {}, "stdout", None,
                 id="api-off-output-file-empty"),
    # explicit API and explicit file: the API, as upstream (the file is ignored)
    pytest.param(["--use-node-feature-api", "--output-file", "/run/labels"], BASE_ENV,
                 "nodefeature", None, id="api-and-output-file"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "env", "kind", "path"), OUTPUT_ROWS)
def test_how_an_explicit_output_combines_with_the_default(
    parse: Any, args: list[str], env: dict[str, str], kind: str, path: str | None
) -> None:
    run, _ = parse
    settings = run(args, env, "main")
    assert settings.output_kind == kind
    if kind in ("file", "stdout"):
        assert settings.effective_output_file == path


def test_both_api_outputs_explicit_is_a_usage_error() -> None:
    from tests.process import run_gfd_here

    result = run_gfd_here("--use-node-feature-api", "--use-node-labels", "--node-name", "n")
    assert result.returncode == 2 and "choose at most one output" in result.stderr


def test_an_upstream_oneshot_job_writes_the_features_file(parse: Any, tmp_path: Path) -> None:
    """A config file saying useNodeFeatureAPI: false is as explicit as the flag."""
    run, _ = parse
    off = tmp_path / "off.yaml"
    off.write_text("version: v1\nflags:\n  useNodeFeatureAPI: false\n")
    settings = run(["-oneshot", "-config-file", str(off)], BASE_ENV, "main")
    assert settings.output_kind == "file" and settings.effective_output_file == NFD


def test_a_config_file_choice_counts_as_explicit(parse: Any, tmp_path: Path) -> None:
    run, _ = parse
    chosen = tmp_path / "api.yaml"
    chosen.write_text("version: v1\nflags:\n  useNodeFeatureAPI: true\n")
    settings = run(["--oneshot", "--config-file", str(chosen)], BASE_ENV, "main")
    assert settings.output_kind == "nodefeature"
    to_file = tmp_path / "file.yaml"
    to_file.write_text("version: v1\nflags:\n  gfd:\n    outputFile: /run/labels\n")
    assert run(["--config-file", str(to_file)], {}, "main").output_kind == "file"


def test_an_ignored_output_file_is_warned_about(parse: Any) -> None:
    run, _ = parse
    settings = run(["--use-node-feature-api", "-o", "/run/labels"], BASE_ENV, "main")
    assert any("--output-file is ignored" in warning for warning in settings.warnings)
    assert not run(["-o", "/run/labels"], {}, "main").warnings


def test_actions_that_publish_nothing_need_no_node_name(parse: Any) -> None:
    run, _ = parse
    for action in ("--dump-snapshot", "--dump-partitions"):
        # resolved without a node name: the default API output is not applied
        assert run([action], {}, "main").output_kind not in ("nodefeature", "node-labels")


def test_the_daemon_without_a_node_name_stops_with_one_line() -> None:
    """Upstream's default output needs a node name; a daemon without one exits 2 at once,
    naming the variable and the ways to another output, and publishes nothing."""
    from tests.process import run_gfd

    result = run_gfd("--snapshot-file", "examples/snapshots/dgx-a100.yaml")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "--node-name (or NODE_NAME) is required with --use-node-feature-api" in lines[0]
    assert "--use-node-feature-api=false" in lines[0]


def test_make_run_prints_labels_even_where_node_name_is_set() -> None:
    """README's ``make run``: a oneshot prints, whatever NODE_NAME says."""
    from tests.process import run_gfd_here

    args = ("--oneshot", "--no-timestamp", "--snapshot-file", "examples/snapshots/dgx-a100.yaml")
    for env in ({}, {"NODE_NAME": "ci-runner-7"}):
        result = run_gfd_here(*args, env=env)
        assert result.returncode == 0, result.stderr
        assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\n" in result.stdout


@pytest.mark.parametrize(("args", "env", "named"), [
    (["--kube-api-qps", "fast"], {}, "--kube-api-qps 'fast'"),
    (["--kube-api-qps=inf"], {}, "--kube-api-qps 'inf'"),
    (["--kube-api-burst", "-1"], {}, "--kube-api-burst '-1'"),
    (["--kube-api-burst", "2.5"], {}, "--kube-api-burst '2.5'"),
    ([], {"KUBE_API_QPS": "nan"}, "KUBE_API_QPS='nan'"),
    ([], {"KUBE_API_BURST": "many"}, "KUBE_API_BURST='many'"),
    (["--device-discovery-strategy", "cuda"], {}, "--device-discovery-strategy 'cuda'"),
    (["--use-node-feature-api=maybe"], {}, "--use-node-feature-api 'maybe'"),
])  # fmt: skip
def test_bad_values_are_one_line_naming_the_flag(
    args: list[str], env: dict[str, str], named: str
) -> None:
    from tests.process import run_gfd_here

    result = run_gfd_here("--oneshot", *args, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
