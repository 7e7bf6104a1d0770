"""Settings: precedence flags > env > config file > defaults, and every validation rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gfd.config import MAX_WARNINGS
from gfd.durations import parse_duration
from gfd.errors import ConfigError, UsageError
from gfd.options import NFD_FEATURES_FILE, OPTIONS
from gfd.settings import parse_config_text, resolve


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


#: the daemon's default output is the NodeFeature API, which needs the node's name; tests
#: about other settings give it one (or choose the features file) rather than fail on that
NODE = {"NODE_NAME": "node-1"}
FEATURES_FILE: dict[str, object] = {"use_node_feature_api": False}


def test_defaults() -> None:
    # upstream v0.20.0's default output is the NodeFeature API (SPEC §4): the daemon needs
    # the node's name, and names the way to the features file when it is missing
    with pytest.raises(UsageError, match=r"--node-name \(or NODE_NAME\) is required.*=false"):
        resolve({}, {})
    settings = resolve({}, {"NODE_NAME": "node-1"})
    assert settings.output_kind == "nodefeature"
    assert settings.mig_strategy == "none"
    assert settings.fail_on_init_error is True
    assert settings.sleep_interval == 60.0
    assert settings.machine_type_file == "/sys/class/dmi/id/product_name"
    assert settings.namespace == "default"
    assert settings.kube_api_qps == 5.0 and settings.kube_api_burst == 10
    assert settings.driver_root_ctr_path == "/driver-root"
    assert settings.device_discovery_strategy == "auto"
    features_file = resolve({"use_node_feature_api": False}, {})
    assert features_file.effective_output_file == NFD_FEATURES_FILE
    assert features_file.output_kind == "file"


def test_oneshot_defaults_to_stdout_and_dash_means_stdout() -> None:
    assert resolve({"oneshot": True}, {}).effective_output_file is None
    assert resolve({"output_file": "-"}, {}).effective_output_file is None
    assert resolve({"output_file": ""}, {}).effective_output_file is None
    assert resolve({"oneshot": True, "output_file": "/tmp/x"}, {}).effective_output_file == "/tmp/x"


def test_precedence_flag_over_env_over_config_over_default(tmp_path: Path) -> None:
    config = write(
        tmp_path, "version: v1\nflags:\n  migStrategy: single\n  gfd:\n    sleepInterval: 5m\n"
    )
    from_config = resolve({"config_file": config}, NODE)
    assert from_config.mig_strategy == "single" and from_config.sleep_interval == 300
    from_env = resolve({"config_file": config}, {"MIG_STRATEGY": "mixed", **NODE})
    assert from_env.mig_strategy == "mixed"
    from_flag = resolve(
        {"config_file": config, "mig_strategy": "none"}, {"MIG_STRATEGY": "mixed", **NODE}
    )
    assert from_flag.mig_strategy == "none"
    assert resolve({}, {"GFD_CONFIG_FILE": config, **NODE}).mig_strategy == "single"
    assert resolve({}, {"CONFIG_FILE": config, **NODE}).mig_strategy == "single"


def test_first_listed_env_var_wins() -> None:
    env = {"GFD_MIG_STRATEGY": "single", "MIG_STRATEGY": "mixed", "NODE_NAME": "node-1"}
    assert resolve({}, env).mig_strategy == "single"


# urfave/cli: a boolean variable set empty is false (flag_bool.go:122-127 at v2.27.7)
TRUE_WORDS, FALSE_WORDS = ("true", "TRUE", "1", "Yes", "T"), ("false", "0", "no", "f", "")


@pytest.mark.parametrize(
    ("raw", "value"), [*((w, True) for w in TRUE_WORDS), *((w, False) for w in FALSE_WORDS)]
)
def test_env_booleans(raw: str, value: bool) -> None:
    assert resolve({}, {"GFD_ONESHOT": raw, **NODE}).oneshot is value


# urfave/cli ignores a duration or number variable set empty: the flag keeps its default
# and is not set, so the config file's value applies (vendor/github.com/urfave/cli/v2 at
# v2.27.7: flag_generic.go:82-90, flag_float64.go:51-61, flag_int.go:52-63)
@pytest.mark.parametrize(("variable", "key", "value"), [
    ("GFD_SLEEP_INTERVAL", "sleep_interval", 300.0),
    ("GFD_EXPIRY_HORIZON", "expiry_horizon", 7200.0),
    ("KUBE_API_QPS", "kube_api_qps", 5.0),
    ("KUBE_API_BURST", "kube_api_burst", 10),
])  # fmt: skip
def test_a_duration_or_number_variable_set_empty_is_not_set(
    tmp_path: Path, variable: str, key: str, value: float
) -> None:
    config = write(tmp_path, "version: v1\nflags:\n  gfd: {sleepInterval: 5m, expiryHorizon: 2h}\n")
    settings = resolve({}, {variable: "", "GFD_CONFIG_FILE": config, **NODE})
    assert getattr(settings, key) == value


@pytest.mark.parametrize("raw", ["maybe", "2", "on", "tRuE"])
def test_bad_env_boolean_names_the_variable(raw: str) -> None:
    with pytest.raises(UsageError, match=f"GFD_NO_TIMESTAMP={raw!r}"):
        resolve({}, {"GFD_NO_TIMESTAMP": raw})


DURATIONS = {"90s": 90, "1m30s": 90, "500ms": 0.5, "1h": 3600, "45": 45, "1.5": 1.5, "2h45m": 9900}


@pytest.mark.parametrize(("text", "seconds"), list(DURATIONS.items()))
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_infinite_interval() -> None:
    assert parse_duration("infinite") is None
    assert resolve({"sleep_interval": "infinite"}, NODE).sleep_interval is None


@pytest.mark.parametrize("text", ["0s", "-5s", "0", "abc", "5x", "1m30", "", "s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(UsageError, match="--sleep-interval"):
        resolve({"sleep_interval": text}, {})


def test_bad_mig_strategy_names_flag_and_value() -> None:
    with pytest.raises(UsageError, match="--mig-strategy 'bogus'"):
        resolve({"mig_strategy": "bogus"}, {})


def test_both_api_outputs_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="choose at most one"):
        resolve({"use_node_feature_api": True, "use_node_labels": True, "node_name": "n"}, {})


@pytest.mark.parametrize("flag", ["use_node_feature_api", "use_node_labels"])
def test_api_outputs_need_a_node_name(flag: str) -> None:
    with pytest.raises(UsageError, match="--node-name"):
        resolve({flag: True}, {})
    assert resolve({flag: True}, {"NODE_NAME": "node-1"}).node_name == "node-1"


# ----------------------------------------------------------------- config file


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v2\n", "unsupported config version 'v2'"),
        ("version: v1\nflags: [\n", "not valid YAML"),
        ("version: v1\nflags:\n  migStrategy: bogus\n", "flags.migStrategy: 'bogus'"),
        ("version: v1\nflags:\n  gfd:\n    sleepInterval: 0s\n", "flags.gfd.sleepInterval"),
        ("version: v1\nflags:\n  failOnInitError: maybe\n", "flags.failOnInitError"),
        ("sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 1}\n",
         "sharing.timeSlicing.resources[0].replicas: must be at least 2, got 1"),
        ("sharing:\n  timeSlicing:\n    resources: []\n", "no resources specified"),
        ("sharing:\n  mps:\n    resources:\n    - {replicas: 2}\n", "resources[0].name: required"),
        ("sharing:\n  mps:\n    resources:\n    - {name: gpu}\n",
         "resources[0].replicas: required"),
        ("sharing:\n  timeSlicing:\n    resources:\n    - {name: Bad_Name, replicas: 2}\n",
         "must be a DNS subdomain"),
        ("resources:\n  gpus:\n  - {pattern: '*', name: A100}\n",
         "resources.gpus[0].name: invalid resource name 'A100'"),
        ("resources:\n  gpus:\n  - {pattern: '*', name: " + "a" * 50 + "}\n",
         "longer than 63 characters"),
        ("resources:\n  mig:\n  - {name: small}\n", "resources.mig[0].pattern"),
        ("- just\n- a list\n", "expected a mapping"),
    ],
)  # fmt: skip
def test_bad_config_is_one_line_naming_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, "cfg.yaml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_empty_version_means_v1_and_plugin_keys_are_ignored_silently() -> None:
    loaded = parse_config_text(
        "version: ''\nflags:\n  plugin: {passDeviceSpecs: true}\n  nvidiaDriverRoot: /\nimex: {}\n",
        "cfg.yaml",
    )
    assert loaded.warnings == ()


def test_unknown_keys_are_warnings_naming_the_key() -> None:
    loaded = parse_config_text(
        "version: v1\nflags:\n  migStrateg: mixed\n  gfd: {onesHot: true}\n", "c"
    )
    assert loaded.warnings == (
        "flags.migStrateg: unknown key, ignored (did you mean flags.migStrategy?)",
        "flags.gfd.onesHot: unknown key, ignored (did you mean flags.gfd.oneshot?)",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sharng: {}\n", "sharng: unknown key, ignored (did you mean sharing?)"),
        ("resources: {gpu: []}\n",
         "resources.gpu: unknown key, ignored (did you mean resources.gpus?)"),
        ("sharing: {timeSlice: {resources: [{name: gpu, replicas: 2}]}}\n",
         "sharing.timeSlice: unknown key, ignored (did you mean sharing.timeSlicing?)"),
        (
            "sharing: {timeSlicing: {renameByDefualt: true, "
            "resources: [{name: gpu, replicas: 2}]}}\n",
            "sharing.timeSlicing.renameByDefualt: unknown key, ignored "
            "(did you mean sharing.timeSlicing.renameByDefault?)",
        ),
        (
            "sharing: {timeSlicing: {resources: [{name: gpu, replica: 2, replicas: 2}]}}\n",
            "sharing.timeSlicing.resources[0].replica: unknown key, ignored "
            "(did you mean sharing.timeSlicing.resources[0].replicas?)",
        ),
        ("flags: {plugins: {}}\n",
         "flags.plugins: unknown key, ignored (did you mean flags.plugin?)"),
        ("zzzzzz: 1\n", "zzzzzz: unknown key, ignored"),
    ],
)  # fmt: skip
def test_an_unknown_config_key_names_the_closest_known_key(text: str, expected: str) -> None:
    """A typo in the config is caught like a typo in a flag: the warning names the key
    that was probably meant, and says nothing when no known key is close."""
    assert parse_config_text(text, "c").warnings == (expected,)


def test_an_unknown_pattern_key_is_refused_naming_the_closest_key() -> None:
    suggestion = r"\[0\]\.patern: unknown key \(did you mean resources\.gpus\[0\]\.pattern\?\)"
    with pytest.raises(ConfigError, match=r"resources\.gpus" + suggestion):
        parse_config_text("resources: {gpus: [{patern: '*', name: x}]}\n", "c")


def test_only_the_warnings_shown_one_by_one_look_for_a_suggestion() -> None:
    """A hostile config of many unknown keys costs no fuzzy matching past the shown ones."""
    text = "".join(f"sharin{i}: 1\n" for i in range(MAX_WARNINGS + 5))
    warnings = parse_config_text(text, "c").warnings
    assert sum("did you mean" in w for w in warnings) == MAX_WARNINGS
    assert warnings[-1] == f"sharin{MAX_WARNINGS + 4}: unknown key, ignored"


def test_devices_other_than_all_is_a_warning() -> None:
    loaded = parse_config_text(
        "sharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: gpu, replicas: 2, devices: [0, 1]}\n",
        "c",
    )
    assert any("devices" in w for w in loaded.warnings)
    assert loaded.config.sharing.replication("gpu") is not None


def test_active_sharing_strategy_prefers_mps() -> None:
    both = (
        "sharing:\n"
        "  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 2}\n"
        "  mps:\n    resources:\n    - {name: gpu, replicas: 3}\n"
    )
    sharing = parse_config_text(both, "c").config.sharing
    assert sharing.strategy == "mps"
    replication = sharing.replication("gpu")
    assert replication is not None and replication.replicas == 3
    assert parse_config_text("version: v1\n", "c").config.sharing.strategy == "none"


def test_missing_config_file_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--config-file: cannot read"):
        resolve({"config_file": "/nonexistent.yaml"}, {})


def test_every_config_key_in_the_table_is_parsed(tmp_path: Path) -> None:
    """The config schema is derived from the option table: each key reaches its setting."""
    # each value reaches its setting as it is, but the two durations, read to seconds; what a
    # config file may name as machine_type_file is confined (gfd/pathpolicy.py, SECURITY.md)
    samples: dict[str, object] = {
        "mig_strategy": "mixed", "fail_on_init_error": False, "oneshot": True,
        "no_timestamp": True, "output_file": "/tmp/out", "use_node_feature_api": False,
        "machine_type_file": "/sys/class/dmi/id/board_name", "device_discovery_strategy": "nvml",
        "driver_root_ctr_path": "/host", "use_node_labels": False, "snapshot_file": "/tmp/s.yaml",
        "metrics_address": ":9400", "topology_labels": True, "dra_drift_check": True,
        "koordlet_device_infos_dir": "/tmp/koord", "sleep_interval": "2m", "expiry_horizon": "2h",
    }  # fmt: skip
    converted = {"sleep_interval": 120.0, "expiry_horizon": 7200.0}
    with_config = [o for o in OPTIONS if o.config_key is not None]
    assert {o.name for o in with_config} == set(samples)
    for option in with_config:
        assert option.config_key is not None
        raw = samples[option.name]
        expected = converted.get(option.name, raw)
        document: dict[str, object] = {"version": "v1"}
        node = document
        for key in option.config_key[:-1]:
            node = node.setdefault(key, {})  # type: ignore[assignment]
        node[option.config_key[-1]] = raw
        config = write(tmp_path, yaml.safe_dump(document))
        settings = resolve({"config_file": config}, NODE)
        assert getattr(settings, option.name) == expected, option.name


# ----------------------------------------------------------------- expiry horizon


@pytest.mark.parametrize(
    ("cli", "env", "horizon"),
    [
        ({}, {}, 3600.0),  # max(1h, 4 x 60s)
        ({"sleep_interval": "30m"}, {}, 7200.0),  # max(1h, 4 x 30m)
        ({"oneshot": True}, {}, None),  # nothing would renew it
        ({"sleep_interval": "infinite"}, {}, None),
        ({"expiry_horizon": "90m"}, {}, 5400.0),
        ({}, {"GFD_EXPIRY_HORIZON": "2h"}, 7200.0),
        ({"expiry_horizon": "never"}, {}, None),
        ({"oneshot": True, "expiry_horizon": "10m"}, {}, 600.0),  # a CronJob's oneshot
        ({"sleep_interval": "infinite", "expiry_horizon": "never"}, {}, None),
    ],
)
def test_expiry_horizon_rule(
    cli: dict[str, object], env: dict[str, str], horizon: float | None
) -> None:
    # the horizon is the features file's: that output, chosen explicitly
    assert resolve({**FEATURES_FILE, **cli}, env).effective_expiry_horizon == horizon


@pytest.mark.parametrize(("cli", "message"), [
    ({"expiry_horizon": "2m"}, "must be at least 3 x --sleep-interval (60s)"),
    ({"sleep_interval": "infinite", "expiry_horizon": "1h"}, "nothing renews"),
    ({"expiry_horizon": "soon"}, "--expiry-horizon 'soon'"),
    ({"expiry_horizon": "0s"}, "greater than zero"),
])  # fmt: skip
def test_expiry_horizon_errors(cli: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        resolve({**FEATURES_FILE, **cli}, {})


# ------------------------------------------------- a resource shared twice (device plugin form)

TWICE = """\
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      devices: [0, 1]
      replicas: 4
    - name: gpu
      devices: [2, 3]
      replicas: 2
"""


def test_a_resource_listed_twice_is_labelled_from_its_first_entry() -> None:
    """The device plugin accepts disjoint ``devices`` lists for one resource; upstream GFD
    labels from the first entry (internal/lm/resource.go:239-250, replicationInfo)."""
    loaded = parse_config_text(TWICE, "c")
    replication = loaded.config.sharing.replication("gpu")
    assert replication is not None and replication.replicas == 4
    assert loaded.config.sharing.strategy == "time-slicing"
    assert any(
        "sharing.timeSlicing.resources[1].name: nvidia.com/gpu is listed again "
        "(first at sharing.timeSlicing.resources[0])" in warning
        for warning in loaded.warnings
    )


def test_a_resource_listed_twice_through_the_command(tmp_path: Path) -> None:
    from tests.process import run_gfd_here

    config = write(tmp_path, TWICE)
    result = run_gfd_here(
        "--oneshot", "--no-timestamp", "--config-file", config,
        "--snapshot-file", "examples/snapshots/dgx-a100.yaml", "--log-format", "console",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.replicas=4\n" in result.stdout
    assert "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-SHARED\n" in result.stdout
    assert "nvidia.com/gpu is listed again" in result.stderr


def test_the_driver_root_is_read_from_the_device_plugins_section(tmp_path: Path) -> None:
    """Upstream keeps it under flags.plugin.containerDriverRoot (api/config/v1/flags.go:81);
    the section's other keys stay the device plugin's, ignored without a word."""
    text = (
        "version: v1\nflags:\n  plugin:\n    containerDriverRoot: /host\n"
        "    passDeviceSpecs: true\n"
    )
    loaded = parse_config_text(text, "c")
    assert loaded.flags == {"driver_root_ctr_path": "/host"} and loaded.warnings == ()
    config = write(tmp_path, text)
    assert resolve({"config_file": config}, NODE).driver_root_ctr_path == "/host"
    from_env = resolve({"config_file": config}, {**NODE, "CONTAINER_DRIVER_ROOT": "/run/nvidia"})
    assert from_env.driver_root_ctr_path == "/run/nvidia"
    with pytest.raises(
        ConfigError, match=r"flags\.plugin\.containerDriverRoot: 5: expected a string"
    ):
        parse_config_text("version: v1\nflags:\n  plugin:\n    containerDriverRoot: 5\n", "c")
