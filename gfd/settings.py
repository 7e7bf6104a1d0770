"""Settings: the flag/env/config table (one source of truth), the v1 config file, and the
frozen :class:`Settings` the rest of gfd reads.

Precedence is command line > environment > config file > default (SPEC §4).  Every bad
value becomes a :class:`UsageError` or :class:`ConfigError` whose message names the flag,
variable or key and the value.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gfd.config_choice import check_label_key, parse_fallbacks
from gfd.documents import as_list, parse_yaml, read_text
from gfd.echo import clip, clip_path, describe
from gfd.errors import ConfigError, UsageError
from gfd.files import file_kind
from gfd.grammar import (
    LONGEST_RESOURCE_SUFFIX,
    PREFIX,
    is_resource_name,
    is_valid_label_name,
    wildcard_match,
)
from gfd.output_kinds import output_kind_of

if TYPE_CHECKING:
    from gfd.config_choice import ConfigChoice
    from gfd.partition_table import PartitionTable

# gfd.durations and gfd.nodeconfig are imported where a value is parsed or checked: a run
# that gives no duration and no config directory (every plain oneshot) never loads them.

NFD_FEATURES_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
#: the default expiry horizon of the features file: max(1 hour, 4 sleep intervals)
DEFAULT_MIN_EXPIRY_HORIZON = 3600.0
EXPIRY_INTERVALS = 4
#: an explicit horizon must leave a renewing daemon this many passes
MIN_EXPIRY_INTERVALS = 3
#: and never be shorter than nfd-worker's default re-read (sleepInterval 60s): a shorter
#: expiry (1ns, 0.5s) is dead on arrival, the labels dropped before NFD reads them
MIN_EXPIRY_HORIZON = 60.0
MIG_STRATEGIES = ("none", "single", "mixed")
DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra", "vfio")
#: upstream's default for --driver-root-ctr-path (api/config/v1/consts.go)
DEFAULT_DRIVER_ROOT = "/driver-root"
#: the node label whose value picks the entry of --config-file-srcdir (gfd.nodeconfig)
DEFAULT_NODE_LABEL = "nvidia.com/device-plugin.config"
#: the Kubernetes client's rate limit: upstream's defaults (internal/flags/kubeclient.go)
DEFAULT_KUBE_API_QPS = 5.0
DEFAULT_KUBE_API_BURST = 10
LOG_FORMATS = ("json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")

#: the longest string any option takes (Linux's PATH_MAX)
MAX_OPTION_CHARS = 4096
#: the most ``resources.gpus`` or ``resources.mig`` patterns, and the longest one
MAX_PATTERNS = 1000
MAX_PATTERN_CHARS = 1024
#: the most replicas of a shared resource (a Go int32, as far beyond any node as needed)
MAX_REPLICAS = 2**31 - 1
#: the most entries in one ``sharing.*.resources`` list
MAX_SHARED_RESOURCES = 1000

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


# ----------------------------------------------------------------- value parsers
# Each takes the raw value (a string from argv/env, or a YAML value from the config file)
# and returns the typed value or raises ValueError with a short reason.


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return True
    if isinstance(value, str) and value.strip().lower() in _FALSE:
        return False
    raise ValueError("expected true/false, 1/0 or yes/no")


def _parse_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    if len(value) > MAX_OPTION_CHARS:
        raise ValueError(f"longer than {MAX_OPTION_CHARS} characters")
    if "\0" in value:  # no path or name holds one (a JSON config can write "\u0000")
        raise ValueError("contains a NUL character")
    return value


def _parse_optional_str(value: Any) -> str | None:
    return _parse_str(value)


def _choice(*allowed: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = _parse_str(value).strip().lower()
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse


def _parse_interval(value: Any) -> float | None:
    from gfd.durations import MAX_SECONDS, check_seconds, parse_duration

    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int):
        if value > MAX_SECONDS:  # before float(): a huge int does not convert
            raise ValueError("longer than the longest duration, 2562047h (use infinite)")
        return check_seconds(float(value))
    if isinstance(value, float):
        return check_seconds(value)
    return parse_duration(_parse_str(value))


def _parse_horizon(value: Any) -> float:
    """``--expiry-horizon``: a duration, or ``never`` (no expiry directive: infinity)."""
    if isinstance(value, str) and value.strip().lower() in ("never", "infinite"):
        return math.inf
    seconds = _parse_interval(value)
    return math.inf if seconds is None else seconds


def _parse_label_key(value: Any) -> str:
    text = _parse_str(value).strip()
    problem = check_label_key(text)
    if problem:
        raise ValueError(problem)
    return text


def _parse_fallbacks(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return parse_fallbacks([_parse_str(item) for item in value])
    return parse_fallbacks(_parse_str(value))


def split_address(text: str) -> tuple[str, int]:
    """``host:port`` → (host, port); an empty host means every interface; ``[::1]:9`` is IPv6.

    Raises ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected host:port (e.g. :8080 or 0.0.0.0:8080), or empty for off")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def _parse_qps(value: Any) -> float:
    """``--kube-api-qps``: a finite number (client-go: 0 means its default, 5; a negative
    number turns the client-side limit off)."""
    if isinstance(value, bool):
        raise ValueError("expected a number")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        try:
            number = float(_parse_str(value).strip())
        except ValueError:
            raise ValueError("expected a number (requests per second)") from None
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


def _parse_burst(value: Any) -> int:
    """``--kube-api-burst``: a whole number of requests (client-go: 0 means its default, 10;
    a negative burst is refused here, as client-go refuses it when it builds the client)."""
    if isinstance(value, bool):
        raise ValueError("expected a whole number")
    if isinstance(value, int):
        number = value
    else:
        text = _parse_str(value).strip()
        if not re.fullmatch(r"[+-]?[0-9]{1,10}", text):
            raise ValueError("expected a whole number")
        number = int(text)
    if number < 0 or number > 2**31 - 1:
        raise ValueError("must be from 0 to 2147483647")
    return number


def _parse_address(value: Any) -> str:
    text = _parse_str(value).strip()
    if text:
        split_address(text)
    return text


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


OPTIONS: tuple[Option, ...] = (
    Option(
        "mig_strategy",
        "--mig-strategy",
        ("GFD_MIG_STRATEGY", "MIG_STRATEGY"),
        ("flags", "migStrategy"),
        "none",
        _choice(*MIG_STRATEGIES),
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
        _parse_interval,
        "time between passes: 60s, 1m30s, 500ms, seconds, or infinite",
    ),
    Option(
        "expiry_horizon",
        "--expiry-horizon",
        ("GFD_EXPIRY_HORIZON",),
        ("flags", "gfd", "expiryHorizon"),
        None,
        _parse_horizon,
        "how far ahead the features file's NFD expiry-time lies, renewed when half has passed "
        "(a duration, or never; default: max(1h, 4 x --sleep-interval) for the daemon, "
        "never with --oneshot or an infinite interval)",
    ),
    Option(
        "output_file",
        "--output-file",
        ("GFD_OUTPUT_FILE",),
        ("flags", "gfd", "outputFile"),
        None,
        _parse_optional_str,
        f"write the labels to this file instead of the NodeFeature API ('' or - for stdout; "
        f"with --use-node-feature-api=false and not set: stdout with --oneshot, else "
        f"{NFD_FEATURES_FILE})",
        short="-o",
        aliases=("--output",),
    ),
    Option(
        "machine_type_file",
        "--machine-type-file",
        ("GFD_MACHINE_TYPE_FILE",),
        ("flags", "gfd", "machineTypeFile"),
        "/sys/class/dmi/id/product_name",
        _parse_str,
        "file holding the machine type",
    ),
    Option(
        "config_file",
        "--config-file",
        ("GFD_CONFIG_FILE", "CONFIG_FILE"),
        None,
        None,
        _parse_optional_str,
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
        _parse_optional_str,
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
        _parse_str,
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
        _choice(*DISCOVERY_STRATEGIES),
        "how devices are discovered: auto, nvml, tegra (CUDA on Jetson/IGX) or vfio "
        "(GPUs bound to vfio-pci, from PCI sysfs)",
    ),
    Option(
        "driver_root_ctr_path",
        "--driver-root-ctr-path",
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        # upstream's key for it in the shared file (api/config/v1/flags.go, the device
        # plugin's section); GFD upstream reads it there and uses it for nothing
        ("flags", "plugin", "containerDriverRoot"),
        DEFAULT_DRIVER_ROOT,
        _parse_str,
        "where the NVIDIA driver root is mounted in the container: libnvidia-ml.so.1 and "
        "libcuda.so.1 are loaded from its library directories when found there",
        aliases=("--container-driver-root",),
    ),
    Option(
        "node_name",
        "--node-name",
        ("NODE_NAME",),
        None,
        None,
        _parse_optional_str,
        "this node's name (required by the API outputs and by --config-file-srcdir)",
    ),
    Option(
        "namespace",
        "--namespace",
        ("NAMESPACE",),
        None,
        "default",
        _parse_str,
        "namespace of the NodeFeature object",
    ),
    Option(
        "pod_name",
        "--pod-name",
        ("POD_NAME",),
        None,
        None,
        _parse_optional_str,
        "this pod's name (owner references of the NodeFeature object)",
    ),
    Option(
        "kubeconfig",
        "--kubeconfig",
        ("KUBECONFIG",),
        None,
        None,
        _parse_optional_str,
        "kubeconfig file (default: in-cluster config)",
    ),
    Option(
        "kube_api_qps",
        "--kube-api-qps",
        ("KUBE_API_QPS",),
        None,
        DEFAULT_KUBE_API_QPS,
        _parse_qps,
        "requests per second to the API server (client-side limit; 0: 5, negative: no limit)",
    ),
    Option(
        "kube_api_burst",
        "--kube-api-burst",
        ("KUBE_API_BURST",),
        None,
        DEFAULT_KUBE_API_BURST,
        _parse_burst,
        "requests the API client may send at once before --kube-api-qps applies (0: 10)",
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
        _parse_optional_str,
        "label this snapshot instead of discovering through NVML",
    ),
    Option(
        "metrics_address",
        "--metrics-address",
        ("GFD_METRICS_ADDRESS",),
        ("flags", "gfd", "metricsAddress"),
        "",
        _parse_address,
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
        "koordlet_device_infos_dir",
        "--koordlet-device-infos-dir",
        ("GFD_KOORDLET_DEVICE_INFOS_DIR",),
        ("flags", "gfd", "koordletDeviceInfosDir"),
        "",
        _parse_str,
        "also write koordlet device-info JSON (GPUs and NVLink partitions) into this "
        "directory, koordlet's --xpu-device-infos-dir (/var/run/koordlet/xpu-device-infos "
        "by default); empty: off",
    ),
    Option(
        "log_format",
        "--log-format",
        ("GFD_LOG_FORMAT",),
        None,
        None,
        _choice(*LOG_FORMATS),
        "json or console (default: json unless stderr is a terminal)",
    ),
    Option(
        "log_level",
        "--log-level",
        ("GFD_LOG_LEVEL",),
        None,
        "info",
        _choice(*LOG_LEVELS),
        "debug, info, warning or error",
    ),
)

OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}

# Keys the device plugin reads from the same file; the labeller accepts and ignores them.
_IGNORED_FLAG_KEYS = {
    "plugin",
    "nvidiaDriverRoot",
    "nvidiaDevRoot",
    "nvidiaCTKPath",
    "containerDriverRoot",
    "mpsRoot",
    "gdsEnabled",
    "mofedEnabled",
}
_IGNORED_TOP_KEYS = {"imex"}


# ----------------------------------------------------------------- config file model


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """``resources.gpus[]`` / ``resources.mig[]``: the first matching pattern names the resource."""

    pattern: str
    name: str
    regex: re.Pattern[str] = field(compare=False, repr=False)

    def matches(self, text: str) -> bool:
        # linear-time matching (gfd.grammar); ``regex`` is kept for callers that want the
        # pattern as a regular expression, never for matching names
        return wildcard_match(self.pattern, text)


def wildcard_regex(pattern: str) -> re.Pattern[str]:
    """``*`` matches any run of characters; nothing else is special; anchored at both ends."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


@dataclass(frozen=True, slots=True)
class ReplicatedResource:
    name: str  # full name, e.g. "nvidia.com/gpu"
    replicas: int
    renamed: bool


@dataclass(frozen=True, slots=True)
class Sharing:
    strategy: str = "none"  # "none", "time-slicing" or "mps"
    resources: tuple[ReplicatedResource, ...] = ()

    def replication(self, resource: str) -> ReplicatedResource | None:
        full = resource if resource.startswith(PREFIX) else PREFIX + resource
        for entry in self.resources:
            if entry.name == full:
                return entry
        return None


@dataclass(frozen=True, slots=True)
class Config:
    gpu_patterns: tuple[ResourcePattern, ...] = ()
    mig_patterns: tuple[ResourcePattern, ...] = ()
    sharing: Sharing = field(default_factory=Sharing)
    partitions: PartitionTable | None = None  # `partitions:`: replaces the computed table


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: Config
    flags: Mapping[str, Any]  # option name -> typed value, from the `flags` section
    warnings: tuple[str, ...]


class _Pattern:
    """A regex compiled on first use: only a config file's resource names need these."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return re.fullmatch(self.pattern, text)  # re caches the compiled pattern


_DNS_SUBDOMAIN = _Pattern(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


_describe = describe


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {_describe(value)}")
    return value


def _sequence(value: Any, where: str) -> list[Any]:
    return as_list(value, where, ConfigError)


def _resource_name_error(name: str) -> str | None:
    if not is_resource_name(name):
        return "must be a lowercase DNS label ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)"
    longest = f"{name}.{LONGEST_RESOURCE_SUFFIX}"
    if not is_valid_label_name(longest):
        # the name itself is quoted once already, by the caller
        return (
            f"makes the label key {PREFIX}<name>.{LONGEST_RESOURCE_SUFFIX} longer than 63 "
            f"characters ({len(longest)})"
        )
    return None


def _parse_patterns(value: Any, where: str) -> tuple[ResourcePattern, ...]:
    patterns = []
    entries = _sequence(value, where)
    if len(entries) > MAX_PATTERNS:
        raise ConfigError(
            f"{where}: {len(entries)} patterns, more than the limit of {MAX_PATTERNS}"
        )
    for i, entry in enumerate(entries):
        item_where = f"{where}[{i}]"
        entry_map = _mapping(entry, item_where)
        for key in entry_map:
            if key not in ("pattern", "name"):
                raise ConfigError(f"{item_where}.{clip(str(key))}: unknown key")
        pattern = entry_map.get("pattern")
        name = entry_map.get("name")
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(
                f"{item_where}.pattern: expected a non-empty string, got {_describe(pattern)}"
            )
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ConfigError(
                f"{item_where}.pattern: {_describe(pattern)} is longer than the limit of "
                f"{MAX_PATTERN_CHARS} characters"
            )
        if not isinstance(name, str):
            raise ConfigError(f"{item_where}.name: expected a string, got {_describe(name)}")
        reason = _resource_name_error(name)
        if reason:
            raise ConfigError(
                f"{item_where}.name: invalid resource name {_describe(name)}: {reason}"
            )
        patterns.append(ResourcePattern(pattern, name, wildcard_regex(pattern)))
    return tuple(patterns)


def _full_resource_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {_describe(value)}")
    full = value if value.startswith(PREFIX) else PREFIX + value
    short = full[len(PREFIX) :]
    if len(full) > 63:
        raise ConfigError(f"{where}: resource name {_describe(value)} is longer than 63 characters")
    if "/" in short or not _DNS_SUBDOMAIN.fullmatch(short):
        raise ConfigError(
            f"{where}: invalid resource name {_describe(value)}: the part after "
            f"{PREFIX} must be a DNS subdomain"
        )
    return full


def _parse_replicated(value: Any, where: str, warnings: list[str]) -> list[ReplicatedResource]:
    section = _mapping(value, where)
    known = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
    for key in section:
        if key not in known:
            warnings.append(f"{where}.{clip(str(key))}: unknown key, ignored")
    rename_by_default = _config_bool(
        section.get("renameByDefault", False), f"{where}.renameByDefault"
    )
    _config_bool(
        section.get("failRequestsGreaterThanOne", False), f"{where}.failRequestsGreaterThanOne"
    )
    raw = _sequence(section.get("resources"), f"{where}.resources")
    if not raw:
        raise ConfigError(f"{where}.resources: no resources specified")
    if len(raw) > MAX_SHARED_RESOURCES:
        raise ConfigError(
            f"{where}.resources: {len(raw)} entries, more than the limit of {MAX_SHARED_RESOURCES}"
        )
    resources = []
    first_entry: dict[str, int] = {}
    for i, entry in enumerate(raw):
        item_where = f"{where}.resources[{i}]"
        item = _mapping(entry, item_where)
        for key in item:
            if key not in ("name", "rename", "replicas", "devices"):
                warnings.append(f"{item_where}.{clip(str(key))}: unknown key, ignored")
        if "name" not in item:
            raise ConfigError(f"{item_where}.name: required field is missing")
        name = _full_resource_name(item["name"], f"{item_where}.name")
        duplicate_of = first_entry.setdefault(name, i)
        if duplicate_of != i:
            # The device plugin accepts a resource listed twice (with disjoint `devices`
            # lists), and upstream GFD labels it from its first entry (internal/lm/
            # resource.go, replicationInfo returns the first match): the same here, said.
            warnings.append(
                f"{item_where}.name: {name} is listed again (first at {where}.resources"
                f"[{duplicate_of}]); its labels come from the first entry"
            )
        rename = item.get("rename")
        if rename is not None and rename != "":
            _full_resource_name(rename, f"{item_where}.rename")
        if "replicas" not in item:
            raise ConfigError(f"{item_where}.replicas: required field is missing")
        replicas = item["replicas"]
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise ConfigError(
                f"{item_where}.replicas: expected an integer, got {_describe(replicas)}"
            )
        if replicas < 2:
            raise ConfigError(
                f"{item_where}.replicas: must be at least 2, got {_describe(replicas)}"
            )
        if replicas > MAX_REPLICAS:
            raise ConfigError(
                f"{item_where}.replicas: {_describe(replicas)} is more than the limit of "
                f"{MAX_REPLICAS}"
            )
        devices = item.get("devices", "all")
        if devices != "all" and devices is not None:
            warnings.append(
                f"{item_where}.devices: only 'all' is supported by the labeller; "
                f"{_describe(devices)} is treated as 'all'"
            )
        if rename:
            # Upstream GFD clears an explicit rename (and forces <name>.shared under
            # renameByDefault) before labelling, so only renameByDefault decides -SHARED.
            warnings.append(
                f"{item_where}.rename: setting 'rename' is not supported by the labeller; "
                "only renameByDefault affects the labels"
            )
        renamed = rename_by_default
        if duplicate_of == i:
            resources.append(ReplicatedResource(name=name, replicas=replicas, renamed=renamed))
    return resources


def _config_bool(value: Any, where: str) -> bool:
    try:
        return parse_bool(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {_describe(value)}: {exc}") from None


def _parse_sharing(value: Any, warnings: list[str]) -> Sharing:
    section = _mapping(value, "sharing")
    for key in section:
        if key not in ("timeSlicing", "mps"):
            warnings.append(f"sharing.{clip(str(key))}: unknown key, ignored")
    mps: list[ReplicatedResource] = []
    time_slicing: list[ReplicatedResource] = []
    if section.get("mps") is not None:
        mps = _parse_replicated(section["mps"], "sharing.mps", warnings)
    if section.get("timeSlicing") is not None:
        time_slicing = _parse_replicated(section["timeSlicing"], "sharing.timeSlicing", warnings)
    if any(r.replicas > 1 for r in mps):
        return Sharing("mps", tuple(mps))
    if any(r.replicas > 1 for r in time_slicing):
        return Sharing("time-slicing", tuple(time_slicing))
    return Sharing()


def _parse_flags(value: Any, warnings: list[str]) -> dict[str, Any]:
    section = _mapping(value, "flags")
    by_key: dict[tuple[str, ...], Option] = {
        option.config_key: option for option in OPTIONS if option.config_key is not None
    }
    result: dict[str, Any] = {}

    def visit(mapping: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for key, raw in mapping.items():
            path = (*prefix, clip(str(key)))
            dotted = ".".join(path)
            option = by_key.get(path)
            if option is not None:
                if raw is None:
                    continue
                try:
                    result[option.name] = option.parse(raw)
                except ValueError as exc:
                    raise ConfigError(f"{dotted}: {_describe(raw)}: {exc}") from None
            elif path == ("flags", "gfd"):
                visit(_mapping(raw, dotted), path)
            elif path == ("flags", "plugin"):
                # the device plugin's own section: only the keys the table names are read
                for plugin_key, plugin_raw in _mapping(raw, dotted).items():
                    plugin_option = by_key.get((*path, clip(str(plugin_key))))
                    if plugin_option is not None and plugin_raw is not None:
                        try:
                            result[plugin_option.name] = plugin_option.parse(plugin_raw)
                        except ValueError as exc:
                            raise ConfigError(
                                f"{dotted}.{clip(str(plugin_key))}: {_describe(plugin_raw)}: {exc}"
                            ) from None
            elif len(path) == 2 and key in _IGNORED_FLAG_KEYS:
                continue
            else:
                warnings.append(f"{dotted}: unknown key, ignored")

    visit(section, ("flags",))
    return result


def parse_config_text(text: str, source: str) -> LoadedConfig:
    source = clip_path(source)
    document = parse_yaml(text, f"config file {source}", ConfigError)
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigError(f"config file {source}: expected a mapping, got {_describe(document)}")
    try:
        return _parse_config(document)
    except ConfigError as exc:
        raise ConfigError(f"config file {source}: {exc}") from None


_KNOWN_TOP_KEYS = ("version", "flags", "resources", "sharing", "partitions")


def _parse_partitions(value: Any) -> PartitionTable | None:
    if value is None:
        return None
    try:
        # decimal and the table's types load only for a config that has a `partitions:`
        from gfd.partition_table import parse_table

        return parse_table(value, "partitions")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


#: the most warnings one load reports one by one: a config of 100,000 unknown keys is one
#: mistake, not 100,000 log lines at every start and every reload
MAX_WARNINGS = 20


def capped_warnings(warnings: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The first :data:`MAX_WARNINGS` warnings, then one line counting the rest."""
    if len(warnings) <= MAX_WARNINGS:
        return tuple(warnings)
    rest = len(warnings) - MAX_WARNINGS
    return (*warnings[:MAX_WARNINGS], f"... and {rest} more warnings like these")


def _parse_config(document: Mapping[str, Any]) -> LoadedConfig:
    warnings: list[str] = []
    version = document.get("version")
    if version not in (None, "", "v1"):
        raise ConfigError(f"version: unsupported config version {_describe(version)} (expected v1)")
    for key in document:
        if key not in _KNOWN_TOP_KEYS and key not in _IGNORED_TOP_KEYS:
            warnings.append(f"{clip(str(key))}: unknown key, ignored")
    flags = _parse_flags(document.get("flags"), warnings)
    resources = _mapping(document.get("resources"), "resources")
    for key in resources:
        if key not in ("gpus", "mig"):
            warnings.append(f"resources.{clip(str(key))}: unknown key, ignored")
    config = Config(
        gpu_patterns=_parse_patterns(resources.get("gpus"), "resources.gpus"),
        mig_patterns=_parse_patterns(resources.get("mig"), "resources.mig"),
        sharing=_parse_sharing(document.get("sharing"), warnings),
        partitions=_parse_partitions(document.get("partitions")),
    )
    return LoadedConfig(config=config, flags=flags, warnings=tuple(warnings))


def load_config_file(path: str) -> LoadedConfig:
    return parse_config_text(read_text(path, "--config-file", ConfigError), path)


# ----------------------------------------------------------------- settings


#: the defaults of the options, from the OPTIONS table (their one home)
_DEFAULTS: dict[str, Any] = {option.name: option.default for option in OPTIONS}


@dataclass(frozen=True, slots=True)
class Settings:
    mig_strategy: str = _DEFAULTS["mig_strategy"]
    fail_on_init_error: bool = _DEFAULTS["fail_on_init_error"]
    oneshot: bool = _DEFAULTS["oneshot"]
    no_timestamp: bool = _DEFAULTS["no_timestamp"]
    sleep_interval: float | None = _DEFAULTS["sleep_interval"]  # None: infinite
    expiry_horizon: float | None = _DEFAULTS["expiry_horizon"]  # None: the default rule; inf: never
    output_file: str | None = _DEFAULTS["output_file"]  # None: not set anywhere
    machine_type_file: str = _DEFAULTS["machine_type_file"]
    config_file: str | None = _DEFAULTS["config_file"]
    config_file_srcdir: str | None = _DEFAULTS["config_file_srcdir"]
    node_label: str = _DEFAULTS["node_label"]
    default_config: str = _DEFAULTS["default_config"]
    fallback_strategies: tuple[str, ...] = _DEFAULTS["fallback_strategies"]
    # the output resolve() chose (the option's default applies only where nothing else
    # chooses one: see _choose_output), so a Settings built in code selects no API
    use_node_feature_api: bool = False
    device_discovery_strategy: str = _DEFAULTS["device_discovery_strategy"]
    driver_root_ctr_path: str = _DEFAULTS["driver_root_ctr_path"]
    node_name: str | None = _DEFAULTS["node_name"]
    namespace: str = _DEFAULTS["namespace"]
    pod_name: str | None = _DEFAULTS["pod_name"]
    kubeconfig: str | None = _DEFAULTS["kubeconfig"]
    kube_api_qps: float = _DEFAULTS["kube_api_qps"]
    kube_api_burst: int = _DEFAULTS["kube_api_burst"]
    use_node_labels: bool = _DEFAULTS["use_node_labels"]
    snapshot_file: str | None = _DEFAULTS["snapshot_file"]
    metrics_address: str = _DEFAULTS["metrics_address"]
    topology_labels: bool = _DEFAULTS["topology_labels"]
    koordlet_device_infos_dir: str = _DEFAULTS["koordlet_device_infos_dir"]
    log_format: str | None = _DEFAULTS["log_format"]
    log_level: str = _DEFAULTS["log_level"]
    # actions (command line only)
    dump_snapshot: bool = False
    cleanup: bool = False
    dump_partitions: bool = False
    # test seam: where sysfs is mounted (GFD_SYSFS_ROOT); not a public option
    sysfs_root: str = "/sys"
    #: the entry of config_file_srcdir in force, and why (None: not chosen yet, or no srcdir)
    config_choice: ConfigChoice | None = None
    config: Config = field(default_factory=Config)
    warnings: tuple[str, ...] = ()

    @property
    def output_kind(self) -> str:
        return output_kind_of(self).name

    @property
    def effective_output_file(self) -> str | None:
        """The features file to write, or None for stdout."""
        if self.output_file is None:
            return None if self.oneshot else NFD_FEATURES_FILE
        if self.output_file in ("", "-"):
            return None
        return self.output_file

    @property
    def effective_expiry_horizon(self) -> float | None:
        """Seconds between a features-file write and its NFD ``expiry-time``; None: none.

        Default: a daemon that renews the file uses ``max(1h, 4 x interval)`` (renewed when
        less than half is left, so at least two passes remain before it lapses); a oneshot
        run or an infinite interval never renews, so by default writes no expiry."""
        horizon = self.expiry_horizon
        if horizon is None:
            if self.oneshot or self.sleep_interval is None:
                return None
            return max(DEFAULT_MIN_EXPIRY_HORIZON, EXPIRY_INTERVALS * self.sleep_interval)
        return None if math.isinf(horizon) else horizon

    @property
    def wants_topology(self) -> bool:
        """Discovery reads the interconnect only when something will use it."""
        return self.topology_labels or self.dump_partitions or bool(self.koordlet_device_infos_dir)

    @property
    def sleep_interval_text(self) -> str:
        from gfd.durations import format_duration

        return format_duration(self.sleep_interval)


def _from_env(option: Option, environ: Mapping[str, str]) -> tuple[str | None, Any]:
    """(the variable that set the option, its typed value), or (None, None)."""
    for env in option.envs:
        if env in environ:
            raw = environ[env]
            try:
                return env, option.parse(raw)
            except ValueError as exc:
                raise UsageError(f"environment variable {env}={_describe(raw)}: {exc}") from None
    return None, None


# Names that go into API request paths (SPEC §4): a node and a pod are named by a DNS
# subdomain, a namespace by a DNS label (Kubernetes' own validation of those objects).
_DNS_1123_LABEL = _Pattern(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NAME_RULES: dict[str, tuple[str, int, _Pattern]] = {
    "node_name": ("not a valid node name (a lowercase DNS subdomain)", 253, _DNS_SUBDOMAIN),
    "pod_name": ("not a valid pod name (a lowercase DNS subdomain)", 253, _DNS_SUBDOMAIN),
    "namespace": ("not a valid namespace (a lowercase DNS label)", 63, _DNS_1123_LABEL),
}


def _check_names(values: Mapping[str, Any], origins: Mapping[str, str]) -> None:
    """Refuse a node, pod or namespace name that is not a Kubernetes name.

    A name given on the command line is always checked; one from the environment only when
    an API output will put it into a request path (``NODE_NAME`` is also set by CI systems
    for their own purposes, and a file or stdout run never uses it)."""
    api_output = bool(
        values.get("use_node_feature_api")
        or values.get("use_node_labels")
        or values.get("config_file_srcdir")  # the node's config label is read from the API
    )
    for name, (reason, longest, pattern) in _NAME_RULES.items():
        value = values.get(name)
        origin = origins.get(name)
        if not value or origin is None or not (api_output or origin.startswith("--")):
            continue
        if len(value) > longest or not pattern.fullmatch(value):
            shown = (
                f"{origin} {describe(value)}"
                if origin.startswith("--")
                else (f"{origin}={describe(value)}")
            )
            raise UsageError(f"{shown}: {reason}")


def _choose_output(
    values: dict[str, Any], explicit: set[str], warnings: list[str], *, action: bool
) -> None:
    """Apply upstream's default output, the NodeFeature API, only where nothing else chose.

    An output named on purpose (anywhere: command line, environment or config file) wins
    over a default: ``--use-node-labels``, ``--output-file`` (``-`` for stdout) and
    ``--oneshot`` (which prints to stdout, as ``make run`` and every preview rely on) each
    turn the default off, and so do the actions that publish nothing (``--dump-snapshot``,
    ``--dump-partitions``).  ``--use-node-feature-api`` set explicitly keeps the API:
    with ``--use-node-labels`` as well that is a usage error (output_kind_of), and an
    ``--output-file`` beside it is ignored, as upstream ignores it, with a warning."""
    if "use_node_feature_api" in explicit:
        if values["use_node_feature_api"] and "output_file" in explicit:
            warnings.append(
                "--output-file is ignored: --use-node-feature-api is set, so the labels go "
                "to the NodeFeature object (set --use-node-feature-api=false for the file)"
            )
        return
    if values["use_node_labels"] or "output_file" in explicit or values["oneshot"] or action:
        values["use_node_feature_api"] = False


def resolve(
    cli_values: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    *,
    dump_snapshot: bool = False,
    cleanup: bool = False,
    dump_partitions: bool = False,
    config_choice: ConfigChoice | None = None,
) -> Settings:
    """Merge command line > environment > config file > defaults into validated Settings.

    ``cli_values`` maps option names to raw command-line strings (or bools for flags);
    options not given on the command line are absent.  With ``--config-file-srcdir`` the
    config file is ``config_choice``'s entry of that directory (gfd/nodeconfig.py chooses
    it from the node label); without a choice yet, no config file is read.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    from_env: dict[str, Any] = {}
    origins: dict[str, str] = {}  # option name -> where its value came from
    for option in OPTIONS:
        variable, value = _from_env(option, env)
        if variable is not None:
            from_env[option.name] = value
            origins[option.name] = f"environment variable {variable}"
    parsed_cli: dict[str, Any] = {}
    for name, raw in cli_values.items():
        option = OPTIONS_BY_NAME[name]
        origins[name] = str(option.flag)
        try:
            parsed_cli[name] = option.parse(raw)
        except ValueError as exc:
            raise UsageError(f"{option.flag} {_describe(raw)}: {exc}") from None

    config_file = parsed_cli.get("config_file", from_env.get("config_file"))
    srcdir = parsed_cli.get("config_file_srcdir", from_env.get("config_file_srcdir"))
    ignored_config_file = bool(srcdir and config_file)
    if srcdir:
        # the node's entry replaces --config-file (upstream's CONFIG_FILE names the file
        # config-manager links the entry to, which gfd reads here directly)
        entry = config_choice.entry if config_choice is not None else None
        config_file = os.path.join(srcdir, entry) if entry is not None else None
    else:
        config_choice = None
    loaded = LoadedConfig(Config(), {}, ())
    if config_file:
        loaded = load_config_file(config_file)

    explicit: set[str] = set()  # options set on the command line, in the environment or file
    for option in OPTIONS:
        if option.name in parsed_cli:
            values[option.name] = parsed_cli[option.name]
        elif option.name in from_env:
            values[option.name] = from_env[option.name]
        elif option.name in loaded.flags:
            values[option.name] = loaded.flags[option.name]
        else:
            values[option.name] = option.default
            continue
        explicit.add(option.name)
    values["config_file"] = config_file
    warnings = list(loaded.warnings)
    if ignored_config_file:
        warnings.insert(
            0,
            f"{origins['config_file']}: ignored, the config is the entry of "
            "--config-file-srcdir that the node label chooses",
        )
    _choose_output(values, explicit, warnings, action=dump_snapshot or dump_partitions)
    _check_names(values, origins)

    settings = Settings(
        **values,
        dump_snapshot=dump_snapshot,
        cleanup=cleanup,
        dump_partitions=dump_partitions,
        sysfs_root=env.get("GFD_SYSFS_ROOT", "/sys"),
        config=loaded.config,
        config_choice=config_choice,
        warnings=capped_warnings(warnings),
    )
    _validate(settings)
    _check_files(settings, origins)
    return settings


def _check_files(settings: Settings, origins: Mapping[str, str]) -> None:
    """Paths that must be regular files, checked without opening them (README "Limits").

    The features file is replaced by an atomic rename, which would put a regular file in
    place of a FIFO or a device node (``-o /dev/null`` as root): refused, use ``-`` for
    stdout.  A kubeconfig that is a FIFO or a device would block or never end."""
    if settings.output_kind == "file" and not settings.dump_snapshot:
        path = settings.effective_output_file
        assert path is not None
        kind = _special_file_kind(path)
        if kind:
            raise UsageError(
                f"{origins.get('output_file', '--output-file')} {describe(path)}: is {kind}, "
                "not a regular file (gfd replaces the features file; use - for stdout)"
            )
    if settings.kubeconfig and settings.output_kind in ("nodefeature", "node-labels"):
        origin = origins.get("kubeconfig", "--kubeconfig")
        for part in settings.kubeconfig.split(os.pathsep):
            path = os.path.expanduser(part)
            kind = _special_file_kind(path) if path else None
            if kind:
                raise UsageError(f"{origin} {describe(part)}: is {kind}, not a regular file")
            if path and os.path.isfile(path):
                # the kubernetes client reads it with PyYAML, unbounded: read it first
                # with the bounded reader (size, nesting, aliases, duplicate keys)
                parse_yaml(
                    read_text(path, origin, UsageError), f"{origin} {clip_path(part)}", UsageError
                )


def _special_file_kind(path: str) -> str | None:
    """What ``path`` is when it exists and is not a regular file, else None."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) else file_kind(mode)


def _check_horizon(horizon: float, settings: Settings) -> None:
    """An explicit ``--expiry-horizon``: long enough for NFD to read the file before it
    lapses, and for a running gfd to renew it."""
    from gfd.durations import format_duration

    if horizon < MIN_EXPIRY_HORIZON:
        raise UsageError(
            f"--expiry-horizon {format_duration(horizon)}: must be at least "
            f"{format_duration(MIN_EXPIRY_HORIZON)} (a shorter expiry lapses before NFD reads "
            "the features file)"
        )
    if not math.isinf(horizon) and not settings.oneshot:
        interval = settings.sleep_interval
        if interval is None:
            raise UsageError(
                f"--expiry-horizon {format_duration(horizon)}: with an infinite "
                "--sleep-interval nothing renews the features file; use --expiry-horizon never"
            )
        if horizon < MIN_EXPIRY_INTERVALS * interval:
            raise UsageError(
                f"--expiry-horizon {format_duration(horizon)}: must be at least "
                f"{MIN_EXPIRY_INTERVALS} x --sleep-interval ({format_duration(interval)}) so a "
                "running gfd renews the features file before it expires"
            )


def _validate(settings: Settings) -> None:
    output_kind_of(settings)  # one output selected, with what it needs
    if settings.expiry_horizon is not None:
        _check_horizon(settings.expiry_horizon, settings)
    if settings.config_file_srcdir and not settings.node_name and not settings.dump_snapshot:
        raise UsageError(
            "--node-name (or NODE_NAME) is required with --config-file-srcdir: the node's "
            f"label {settings.node_label} chooses its config"
        )
    if settings.dump_snapshot and settings.cleanup:
        raise UsageError("--dump-snapshot and --cleanup: choose one")
    if settings.dump_partitions and (settings.dump_snapshot or settings.cleanup):
        raise UsageError("--dump-partitions, --dump-snapshot and --cleanup: choose one")
