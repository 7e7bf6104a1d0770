"""Settings: the resolution of the option table (gfd.options) into the frozen
:class:`Settings` the rest of gfd reads, and the loading of the config file (its ``flags``
section here, its model in gfd.config).

Precedence is command line > environment > config file > default (SPEC §4).  Every bad
value becomes a :class:`UsageError` or :class:`ConfigError` whose message names the flag,
variable or key and the value.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gfd.config import (
    DNS_SUBDOMAIN,
    KNOWN_TOP_KEYS,
    MAX_WARNINGS,
    Config,
    LazyPattern,
    as_mapping,
    check_document,
    parse_model,
    warn_unknown,
)
from gfd.documents import parse_yaml, read_text
from gfd.durations import format_duration
from gfd.echo import clip, clip_path, describe
from gfd.errors import ConfigError, UsageError
from gfd.files import file_kind

# the option table's names that modules outside the settings read from here
from gfd.options import DEFAULT_KUBE_API_BURST as DEFAULT_KUBE_API_BURST
from gfd.options import DEFAULT_KUBE_API_QPS as DEFAULT_KUBE_API_QPS
from gfd.options import DEFAULT_NODE_LABEL as DEFAULT_NODE_LABEL
from gfd.options import DISCOVERY_STRATEGIES as DISCOVERY_STRATEGIES
from gfd.options import NFD_FEATURES_FILE as NFD_FEATURES_FILE
from gfd.options import OPTIONS as OPTIONS
from gfd.options import OPTIONS_BY_NAME
from gfd.options import Option as Option
from gfd.output_kinds import output_kind_of
from gfd.pathpolicy import refusal
from gfd.values import parse_bool as parse_bool
from gfd.values import split_address as split_address

if TYPE_CHECKING:
    from gfd.config_choice import ConfigChoice

# gfd.durations is imported where a value is checked: a run that gives no duration
# never loads it.

#: the default expiry horizon of the features file: max(1 hour, 4 sleep intervals)
DEFAULT_MIN_EXPIRY_HORIZON = 3600.0
EXPIRY_INTERVALS = 4
#: an explicit horizon must leave a renewing daemon this many passes
MIN_EXPIRY_INTERVALS = 3
#: and never be shorter than nfd-worker's default re-read (sleepInterval 60s): a shorter
#: expiry (1ns, 0.5s) is dead on arrival, the labels dropped before NFD reads them
MIN_EXPIRY_HORIZON = 60.0

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
_describe = describe


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: Config
    flags: Mapping[str, Any]  # option name -> typed value, from the `flags` section
    warnings: tuple[str, ...]


def _known_keys(by_key: Mapping[tuple[str, ...], Option], prefix: tuple[str, ...]) -> set[str]:
    """The keys the ``flags`` section knows one level below ``prefix``."""
    known = {path[len(prefix)] for path in by_key if path[: len(prefix)] == prefix}
    if prefix == ("flags",):
        known |= {"gfd", "plugin"} | _IGNORED_FLAG_KEYS
    return known


def _parse_flags(value: Any, warnings: list[str]) -> dict[str, Any]:
    section = as_mapping(value, "flags")
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
                visit(as_mapping(raw, dotted), path)
            elif path == ("flags", "plugin"):
                # the device plugin's own section: only the keys the table names are read
                for plugin_key, plugin_raw in as_mapping(raw, dotted).items():
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
                warn_unknown(warnings, ".".join(prefix) + ".", key, _known_keys(by_key, prefix))

    visit(section, ("flags",))
    return result


def parse_config_text(text: str, source: str) -> LoadedConfig:
    source = clip_path(source)
    document = parse_yaml(text, f"config file {source}", ConfigError)
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigError(f"config file {source}: expected a mapping, got {_describe(document)}")
    snapshot_keys = [key for key in _SNAPSHOT_KEYS if key in document]
    if snapshot_keys and not any(key in document for key in KNOWN_TOP_KEYS if key != "version"):
        raise ConfigError(
            f"config file {source}: this looks like a gfd snapshot (version "
            f"{clip(str(document.get('version')), 20)} with {'/'.join(snapshot_keys)}), "
            "not a config file"
        )
    try:
        return _parse_config(document)
    except ConfigError as exc:
        raise ConfigError(f"config file {source}: {exc}") from None


#: the top-level keys of a snapshot (gfd.snapshot), none of which a config file has
_SNAPSHOT_KEYS = ("driver", "machine", "vgpu", "gpus", "lost", "topology", "discovery")


def capped_warnings(warnings: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The first :data:`MAX_WARNINGS` warnings, then one line counting the rest."""
    if len(warnings) <= MAX_WARNINGS:
        return tuple(warnings)
    rest = len(warnings) - MAX_WARNINGS
    return (*warnings[:MAX_WARNINGS], f"... and {rest} more warnings like these")


def _parse_config(document: Mapping[str, Any]) -> LoadedConfig:
    warnings: list[str] = []
    check_document(document, warnings)
    flags = _parse_flags(document.get("flags"), warnings)
    config = parse_model(document, warnings)
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
    #: what named the kubeconfig (the flag, or the KUBECONFIG variable): errors name it
    kubeconfig_origin: str = "--kubeconfig"
    kube_api_qps: float = _DEFAULTS["kube_api_qps"]
    kube_api_burst: int = _DEFAULTS["kube_api_burst"]
    use_node_labels: bool = _DEFAULTS["use_node_labels"]
    snapshot_file: str | None = _DEFAULTS["snapshot_file"]
    metrics_address: str = _DEFAULTS["metrics_address"]
    topology_labels: bool = _DEFAULTS["topology_labels"]
    dra_drift_check: bool = _DEFAULTS["dra_drift_check"]
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

        return format_duration(self.sleep_interval)


def _from_env(option: Option, environ: Mapping[str, str]) -> tuple[str | None, Any]:
    """(the variable that set the option, its typed value), or (None, None)."""
    for env in option.envs:
        if env in environ:
            raw = environ[env]
            if option.empty_env_unset and raw == "":
                return None, None  # urfave/cli: such a variable set empty is not set
            if option.is_bool and raw == "":
                return env, False  # urfave/cli: a variable set empty turns a boolean off
            try:
                return env, option.parse(raw)
            except ValueError as exc:
                raise UsageError(f"environment variable {env}={_describe(raw)}: {exc}") from None
    return None, None


# Names that go into API request paths (SPEC §4): a node and a pod are named by a DNS
# subdomain, a namespace by a DNS label (Kubernetes' own validation of those objects).
_DNS_1123_LABEL = LazyPattern(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NAME_RULES: dict[str, tuple[str, int, LazyPattern]] = {
    "node_name": ("not a valid node name (a lowercase DNS subdomain)", 253, DNS_SUBDOMAIN),
    "pod_name": ("not a valid pod name (a lowercase DNS subdomain)", 253, DNS_SUBDOMAIN),
    "namespace": ("not a valid namespace (a lowercase DNS label)", 63, _DNS_1123_LABEL),
}


def _check_config_paths(
    from_file: Mapping[str, Any],
    trusted: tuple[Mapping[str, Any], ...],
    config_file: str | None,
    values: Mapping[str, Any],
) -> None:
    """Refuse a path the config file names where its option's rule forbids (gfd.pathpolicy):
    the one place a value from the file (or the node's entry) is judged as a path.  A value
    the command line or the environment set wins over the file's, which is then not used."""
    # the kubeconfig files in use, and the running user's kubectl folder
    credentials = [*str(values.get("kubeconfig") or "").split(os.pathsep), "~/.kube"]
    credentials = [os.path.expanduser(path) for path in credentials if path]
    for option in OPTIONS:
        rule = option.config_paths
        if rule is None or option.name not in from_file:
            continue
        if any(option.name in layer for layer in trusted):
            continue
        value = from_file[option.name]
        reason = refusal(rule, value, credentials) if isinstance(value, str) else None
        if reason:
            key = ".".join(option.config_key or ())
            raise ConfigError(
                f"config file {clip_path(str(config_file))}: {key}: {describe(value)}: {reason}"
            )


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
    ``--dump-partitions``).  ``--use-node-feature-api=false`` set explicitly writes
    upstream's features file, oneshot or not, unless an output file is named.
    ``--use-node-feature-api`` set explicitly keeps the API:
    with ``--use-node-labels`` as well that is a usage error (output_kind_of), and an
    ``--output-file`` beside it is ignored, as upstream ignores it, with a warning."""
    if "use_node_feature_api" in explicit:
        if not values["use_node_feature_api"] and "output_file" not in explicit:
            # upstream writes its features file whenever the API is turned off, oneshot too
            values["output_file"] = NFD_FEATURES_FILE
        if values["use_node_feature_api"] and "output_file" in explicit:
            warnings.append(
                "--output-file is ignored: --use-node-feature-api is set, so the labels go "
                "to the NodeFeature object (set --use-node-feature-api=false for the file)"
            )
        return
    if values["use_node_labels"] or "output_file" in explicit or values["oneshot"] or action:
        values["use_node_feature_api"] = False


def _read_sources(
    cli_values: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(typed command-line values, typed environment values, option name -> where its
    value came from), each source parsed and checked on its own."""
    from_env: dict[str, Any] = {}
    origins: dict[str, str] = {}
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
    return parsed_cli, from_env, origins


def _merge(layers: tuple[Mapping[str, Any], ...], values: dict[str, Any]) -> set[str]:
    """Fill ``values`` from the first layer that sets each option, else its default; return
    the options set explicitly (on the command line, in the environment or the file)."""
    explicit: set[str] = set()
    for option in OPTIONS:
        layer = next((layer for layer in layers if option.name in layer), None)
        if layer is None:
            values[option.name] = option.default
            continue
        values[option.name] = layer[option.name]
        explicit.add(option.name)
    return explicit


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
    parsed_cli, from_env, origins = _read_sources(cli_values, env)
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
    loaded = load_config_file(config_file) if config_file else LoadedConfig(Config(), {}, ())

    values: dict[str, Any] = {}
    explicit = _merge((parsed_cli, from_env, loaded.flags), values)
    _check_config_paths(loaded.flags, (parsed_cli, from_env), config_file, values)
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
        kubeconfig_origin=origins.get("kubeconfig", "--kubeconfig"),
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
        # a missing file is the client's to name (it knows client-go's list rules)
        for part in settings.kubeconfig.split(os.pathsep):
            path = os.path.expanduser(part)
            kind = _special_file_kind(path) if path else None
            if kind:
                raise UsageError(f"{origin} {describe(part)}: is {kind}, not a regular file")
            if path and os.path.isfile(path):
                # the kubernetes client reads it with PyYAML, unbounded: read it first
                # with the bounded reader (size, nesting, aliases, duplicate keys)
                parse_yaml(
                    read_text(path, origin, UsageError), f"{origin} {clip_path(path)}", UsageError
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
    if settings.dra_drift_check and not settings.node_name and not settings.dump_snapshot:
        raise UsageError(
            "--dra-drift-check true: --node-name (or NODE_NAME) is required: the node's "
            "ResourceSlices are selected by it"
        )
    if settings.dump_snapshot and settings.cleanup:
        raise UsageError("--dump-snapshot and --cleanup: choose one")
    if settings.dump_partitions and (settings.dump_snapshot or settings.cleanup):
        raise UsageError("--dump-partitions, --dump-snapshot and --cleanup: choose one")
