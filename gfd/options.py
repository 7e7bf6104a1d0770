"""The option table (SPEC §4): every option's flag, environment variables, config key,
default, parser and help, in one place.  The command line (gfd.cli), the resolution
(gfd.settings), the config file's ``flags`` section and README's table all derive from it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gfd.config_choice import check_label_key, parse_fallbacks
from gfd.pathpolicy import PathRule
from gfd.values import (
    choice,
    parse_address,
    parse_bool,
    parse_burst,
    parse_horizon,
    parse_interval,
    parse_optional_str,
    parse_qps,
    parse_str,
)

NFD_FEATURES_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
MIG_STRATEGIES = ("none", "single", "mixed")
DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra", "vfio", "dra")
#: upstream's default for --driver-root-ctr-path (api/config/v1/consts.go)
DEFAULT_DRIVER_ROOT = "/driver-root"
#: the node label whose value picks the entry of --config-file-srcdir (gfd.nodeconfig)
DEFAULT_NODE_LABEL = "nvidia.com/device-plugin.config"
#: the Kubernetes client's rate limit: upstream's defaults (internal/flags/kubeclient.go)
DEFAULT_KUBE_API_QPS = 5.0
DEFAULT_KUBE_API_BURST = 10
LOG_FORMATS = ("json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")


def _parse_label_key(value: Any) -> str:
    text = parse_str(value).strip()
    problem = check_label_key(text)
    if problem:
        raise ValueError(problem)
    return text


def _parse_fallbacks(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return parse_fallbacks([parse_str(item) for item in value])
    return parse_fallbacks(parse_str(value))


@dataclass(frozen=True, slots=True)
class Option:
    """One row of the SPEC §4 table."""

    name: str  # attribute of Settings
    flag: str | None  # long flag, e.g. "--mig-strategy" (None: no flag)
    envs: tuple[str, ...]  # first one set wins
    config_key: tuple[str, ...] | None  # path under the config file, e.g. ("flags", "migStrategy")
    default: Any
    parse: Callable[[Any], Any]
    help: str
    is_bool: bool = False
    short: str | None = None
    #: upstream's other long names for the flag (e.g. ``--output`` for ``--output-file``)
    aliases: tuple[str, ...] = ()
    #: a path-valued option with a config key: what the config file may name (gfd.pathpolicy)
    config_paths: PathRule | None = None
    #: a duration or a number: its variable set empty leaves it unset, as urfave/cli's
    #: duration, float and int flags do (a boolean's is false, a string's is "")
    empty_env_unset: bool = False


OPTIONS: tuple[Option, ...] = (
    Option(
        "mig_strategy",
        "--mig-strategy",
        ("GFD_MIG_STRATEGY", "MIG_STRATEGY"),
        ("flags", "migStrategy"),
        "none",
        choice(*MIG_STRATEGIES),
        "how MIG devices are exposed: none, single or mixed",
    ),
    Option(
        "fail_on_init_error",
        "--fail-on-init-error",
        ("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"),
        ("flags", "failOnInitError"),
        True,
        parse_bool,
        "exit 1 when NVML cannot be initialised (else publish the minimal labels and retry)",
        is_bool=True,
    ),
    Option(
        "oneshot",
        "--oneshot",
        ("GFD_ONESHOT",),
        ("flags", "gfd", "oneshot"),
        False,
        parse_bool,
        "label once and exit",
        is_bool=True,
    ),
    Option(
        "no_timestamp",
        "--no-timestamp",
        ("GFD_NO_TIMESTAMP",),
        ("flags", "gfd", "noTimestamp"),
        False,
        parse_bool,
        "leave out the nvidia.com/gfd.timestamp label",
        is_bool=True,
    ),
    Option(
        "sleep_interval",
        "--sleep-interval",
        ("GFD_SLEEP_INTERVAL",),
        ("flags", "gfd", "sleepInterval"),
        60.0,
        parse_interval,
        "time between passes: 60s, 1m30s, 500ms, seconds, or infinite",
        empty_env_unset=True,
    ),
    Option(
        "expiry_horizon",
        "--expiry-horizon",
        ("GFD_EXPIRY_HORIZON",),
        ("flags", "gfd", "expiryHorizon"),
        None,
        parse_horizon,
        "how far ahead the features file's NFD expiry-time lies, renewed when half has passed "
        "(a duration, or never; default: max(1h, 4 x --sleep-interval) for the daemon, "
        "never with --oneshot or an infinite interval)",
        empty_env_unset=True,
    ),
    Option(
        "output_file",
        "--output-file",
        ("GFD_OUTPUT_FILE",),
        ("flags", "gfd", "outputFile"),
        None,
        parse_optional_str,
        f"write the labels to this file instead of the NodeFeature API ('' or - for stdout; "
        f"not set: {NFD_FEATURES_FILE} where the API is turned off, stdout for a --oneshot "
        f"that chooses no output)",
        short="-o",
        aliases=("--output",),
        config_paths=PathRule(may_name=(os.path.dirname(NFD_FEATURES_FILE),), values=("", "-")),
    ),
    Option(
        "machine_type_file",
        "--machine-type-file",
        ("GFD_MACHINE_TYPE_FILE",),
        ("flags", "gfd", "machineTypeFile"),
        "/sys/class/dmi/id/product_name",
        parse_str,
        "file holding the machine type",
        config_paths=PathRule(may_name=("/sys/class/dmi/id",), values=("",), confined=True),
    ),
    Option(
        "config_file",
        "--config-file",
        ("GFD_CONFIG_FILE", "CONFIG_FILE"),
        None,
        None,
        parse_optional_str,
        "v1 config file (YAML or JSON), shared with the device plugin",
    ),
    # Per-node configuration (gfd/nodeconfig.py): upstream's config-manager flags and
    # variables.  No config key: they choose the config file.
    Option(
        "config_file_srcdir",
        "--config-file-srcdir",
        ("CONFIG_FILE_SRCDIR",),
        None,
        None,
        parse_optional_str,
        "directory of config entries (a mounted ConfigMap); the node label --node-label "
        "picks the node's entry, which replaces --config-file",
    ),
    Option(
        "node_label",
        "--node-label",
        ("NODE_LABEL",),
        None,
        DEFAULT_NODE_LABEL,
        _parse_label_key,
        "the node label naming the entry of --config-file-srcdir to use",
    ),
    Option(
        "default_config",
        "--default-config",
        ("DEFAULT_CONFIG",),
        None,
        "",
        parse_str,
        "the entry of --config-file-srcdir to use when the node label is not set",
    ),
    Option(
        "fallback_strategies",
        "--fallback-strategies",
        ("FALLBACK_STRATEGIES",),
        None,
        (),
        _parse_fallbacks,
        "without the label and --default-config, try in order: named (the entry 'default'), "
        "single (the only entry), empty (no config file); comma-separated",
    ),
    Option(
        "use_node_feature_api",
        "--use-node-feature-api",
        ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"),
        ("flags", "useNodeFeatureAPI"),
        # upstream v0.20.0's default (cmd/gpu-feature-discovery/main.go, the flag's Value);
        # resolve() applies it only where nothing else chose the output
        True,
        parse_bool,
        "publish an NFD NodeFeature object (the default unless --use-node-labels, "
        "--output-file or --oneshot chooses otherwise; =false: the features file)",
        is_bool=True,
    ),
    Option(
        "device_discovery_strategy",
        "--device-discovery-strategy",
        ("DEVICE_DISCOVERY_STRATEGY",),
        ("flags", "deviceDiscoveryStrategy"),
        "auto",
        choice(*DISCOVERY_STRATEGIES),
        "how devices are discovered: auto, nvml, tegra (CUDA on Jetson/IGX), vfio "
        "(GPUs bound to vfio-pci, from PCI sysfs) or dra (this node's ResourceSlices of "
        "NVIDIA's DRA driver, from the API server; no NVML)",
    ),
    Option(
        "driver_root_ctr_path",
        "--driver-root-ctr-path",
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        # upstream's key for it in the shared file (api/config/v1/flags.go, the device
        # plugin's section); GFD upstream reads it there and uses it for nothing
        ("flags", "plugin", "containerDriverRoot"),
        DEFAULT_DRIVER_ROOT,
        parse_str,
        "where the NVIDIA driver root is mounted in the container: libnvidia-ml.so.1 and "
        "libcuda.so.1 are loaded from its library directories when found there",
        aliases=("--container-driver-root",),
        config_paths=PathRule(values=("", "/")),
    ),
    Option(
        "node_name",
        "--node-name",
        ("NODE_NAME",),
        None,
        None,
        parse_optional_str,
        "this node's name (required by the API outputs and by --config-file-srcdir)",
    ),
    Option(
        "namespace",
        "--namespace",
        ("NAMESPACE",),
        None,
        "default",
        parse_str,
        "namespace of the NodeFeature object",
    ),
    Option(
        "pod_name",
        "--pod-name",
        ("POD_NAME",),
        None,
        None,
        parse_optional_str,
        "this pod's name (owner references of the NodeFeature object)",
    ),
    Option(
        "kubeconfig",
        "--kubeconfig",
        ("KUBECONFIG",),
        None,
        None,
        parse_optional_str,
        "kubeconfig file (default: in-cluster config)",
    ),
    Option(
        "kube_api_qps",
        "--kube-api-qps",
        ("KUBE_API_QPS",),
        None,
        DEFAULT_KUBE_API_QPS,
        parse_qps,
        "requests per second to the API server (client-side limit; 0: 5, negative: no limit)",
        empty_env_unset=True,
    ),
    Option(
        "kube_api_burst",
        "--kube-api-burst",
        ("KUBE_API_BURST",),
        None,
        DEFAULT_KUBE_API_BURST,
        parse_burst,
        "requests the API client may send at once before --kube-api-qps applies (0: 10)",
        empty_env_unset=True,
    ),
    Option(
        "use_node_labels",
        "--use-node-labels",
        ("GFD_USE_NODE_LABELS",),
        ("flags", "gfd", "useNodeLabels"),
        False,
        parse_bool,
        "patch the labels straight onto the Node object (no NFD)",
        is_bool=True,
    ),
    Option(
        "snapshot_file",
        "--snapshot-file",
        ("GFD_SNAPSHOT_FILE",),
        ("flags", "gfd", "snapshotFile"),
        None,
        parse_optional_str,
        "label this snapshot instead of discovering through NVML",
        # SPEC names flags.gfd.snapshotFile: the config file may name a snapshot anywhere
        # but the kernel's trees and the credentials, as it may name the outputs
        config_paths=PathRule(),
    ),
    Option(
        "metrics_address",
        "--metrics-address",
        ("GFD_METRICS_ADDRESS",),
        ("flags", "gfd", "metricsAddress"),
        "",
        parse_address,
        "host:port for /metrics, /healthz and /readyz (empty: off)",
    ),
    Option(
        "topology_labels",
        "--topology-labels",
        ("GFD_TOPOLOGY_LABELS",),
        ("flags", "gfd", "topologyLabels"),
        False,
        parse_bool,
        "discover the GPU interconnect and publish the nvidia.com/gpu.interconnect, "
        "gpu.nvlink.*, gpu.partition-sizes and gpu.numa.* labels",
        is_bool=True,
    ),
    Option(
        "dra_drift_check",
        "--dra-drift-check",
        ("GFD_DRA_DRIFT_CHECK",),
        ("flags", "gfd", "draDriftCheck"),
        False,
        parse_bool,
        "beside NVML, compare its labels with this node's ResourceSlices of NVIDIA's DRA "
        "driver on the labels slices carry: the gfd_dra_drift metrics, one line per change",
        is_bool=True,
    ),
    Option(
        "koordlet_device_infos_dir",
        "--koordlet-device-infos-dir",
        ("GFD_KOORDLET_DEVICE_INFOS_DIR",),
        ("flags", "gfd", "koordletDeviceInfosDir"),
        "",
        parse_str,
        "also write koordlet device-info JSON (GPUs and NVLink partitions) into this "
        "directory, koordlet's --xpu-device-infos-dir (/var/run/koordlet/xpu-device-infos "
        "by default); empty: off",
        config_paths=PathRule(values=("",)),
    ),
    Option(
        "log_format",
        "--log-format",
        ("GFD_LOG_FORMAT",),
        None,
        None,
        choice(*LOG_FORMATS),
        "json or console (default: json unless stderr is a terminal)",
    ),
    Option(
        "log_level",
        "--log-level",
        ("GFD_LOG_LEVEL",),
        None,
        "info",
        choice(*LOG_LEVELS),
        "debug, info, warning or error",
    ),
)

OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}
