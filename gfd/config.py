"""The config file's model (SPEC §4.1): resource patterns, sharing and partitions, their
parsers and their limits.  The labelling engine (gfd/labels) reads this model; the
``flags`` section, which feeds the option table, is read by gfd.settings."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gfd.documents import as_list
from gfd.echo import clip, describe
from gfd.errors import ConfigError
from gfd.grammar import (
    LONGEST_RESOURCE_SUFFIX,
    PREFIX,
    is_resource_name,
    is_valid_label_name,
    wildcard_match,
)
from gfd.partition_table import parse_table
from gfd.values import parse_bool

if TYPE_CHECKING:
    from gfd.partition_table import PartitionTable

#: the most ``resources.gpus`` or ``resources.mig`` patterns, and the longest one
MAX_PATTERNS = 1000
MAX_PATTERN_CHARS = 1024
#: the most replicas of a shared resource (a Go int32, as far beyond any node as needed)
MAX_REPLICAS = 2**31 - 1
#: the most entries in one ``sharing.*.resources`` list
MAX_SHARED_RESOURCES = 1000
#: keys the device plugin reads from the same file; the labeller accepts and ignores them
_IGNORED_TOP_KEYS = {"imex"}
#: the most warnings one load reports one by one: a config of 100,000 unknown keys is one
#: mistake, not 100,000 log lines at every start and every reload
MAX_WARNINGS = 20
#: a key longer than this is not a typo of a known key: no suggestion is looked for
_LONGEST_TYPO = 64


def warn_unknown(warnings: list[str], prefix: str, key: Any, known: Iterable[str]) -> None:
    """Add the warning for an unknown key, naming the closest known key when one is close
    (as click does for a mistyped flag).  Only the warnings that will be shown one by one
    (:data:`MAX_WARNINGS`) look for a suggestion: the rest are only counted."""
    hint = suggestion(prefix, key, known) if len(warnings) < MAX_WARNINGS else ""
    warnings.append(f"{prefix}{clip(str(key))}: unknown key, ignored{hint}")


def suggestion(prefix: str, key: Any, known: Iterable[str]) -> str:
    """`` (did you mean <prefix><closest>?)``, or empty when no known key is close."""
    text = str(key)
    if len(text) > _LONGEST_TYPO:
        return ""
    close = difflib.get_close_matches(text, list(known), n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


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


class LazyPattern:
    """A regex compiled on first use: only a config file's resource names need these."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return re.fullmatch(self.pattern, text)  # re caches the compiled pattern


DNS_SUBDOMAIN = LazyPattern(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


_describe = describe


def as_mapping(value: Any, where: str) -> Mapping[str, Any]:
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
        entry_map = as_mapping(entry, item_where)
        for key in entry_map:
            if key not in ("pattern", "name"):
                hint = suggestion(f"{item_where}.", key, ("pattern", "name"))
                raise ConfigError(f"{item_where}.{clip(str(key))}: unknown key{hint}")
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
    if "/" in short or not DNS_SUBDOMAIN.fullmatch(short):
        raise ConfigError(
            f"{where}: invalid resource name {_describe(value)}: the part after "
            f"{PREFIX} must be a DNS subdomain"
        )
    return full


_REPLICATED_KEYS = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_REPLICATED_ENTRY_KEYS = ("name", "rename", "replicas", "devices")


def _parse_replicas(item: Mapping[str, Any], item_where: str) -> int:
    if "replicas" not in item:
        raise ConfigError(f"{item_where}.replicas: required field is missing")
    replicas = item["replicas"]
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ConfigError(f"{item_where}.replicas: expected an integer, got {_describe(replicas)}")
    if replicas < 2:
        raise ConfigError(f"{item_where}.replicas: must be at least 2, got {_describe(replicas)}")
    if replicas > MAX_REPLICAS:
        raise ConfigError(
            f"{item_where}.replicas: {_describe(replicas)} is more than the limit of {MAX_REPLICAS}"
        )
    return replicas


def _unsupported_fields(item: Mapping[str, Any], item_where: str, warnings: list[str]) -> None:
    """``devices`` and ``rename``: read by the device plugin, not by the labels."""
    devices = item.get("devices", "all")
    if devices != "all" and devices is not None:
        warnings.append(
            f"{item_where}.devices: only 'all' is supported by the labeller; "
            f"{_describe(devices)} is treated as 'all'"
        )
    if item.get("rename"):
        # Upstream GFD clears an explicit rename (and forces <name>.shared under
        # renameByDefault) before labelling, so only renameByDefault decides -SHARED.
        warnings.append(
            f"{item_where}.rename: setting 'rename' is not supported by the labeller; "
            "only renameByDefault affects the labels"
        )


def _replicated_entries(section: Mapping[str, Any], where: str) -> list[Any]:
    raw = _sequence(section.get("resources"), f"{where}.resources")
    if not raw:
        raise ConfigError(f"{where}.resources: no resources specified")
    if len(raw) > MAX_SHARED_RESOURCES:
        raise ConfigError(
            f"{where}.resources: {len(raw)} entries, more than the limit of {MAX_SHARED_RESOURCES}"
        )
    return raw


def _parse_replicated(value: Any, where: str, warnings: list[str]) -> list[ReplicatedResource]:
    section = as_mapping(value, where)
    for key in section:
        if key not in _REPLICATED_KEYS:
            warn_unknown(warnings, f"{where}.", key, _REPLICATED_KEYS)
    rename_by_default = _config_bool(
        section.get("renameByDefault", False), f"{where}.renameByDefault"
    )
    _config_bool(
        section.get("failRequestsGreaterThanOne", False), f"{where}.failRequestsGreaterThanOne"
    )
    resources = []
    first_entry: dict[str, int] = {}
    for i, entry in enumerate(_replicated_entries(section, where)):
        item_where = f"{where}.resources[{i}]"
        item = as_mapping(entry, item_where)
        for key in item:
            if key not in _REPLICATED_ENTRY_KEYS:
                warn_unknown(warnings, f"{item_where}.", key, _REPLICATED_ENTRY_KEYS)
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
        replicas = _parse_replicas(item, item_where)
        _unsupported_fields(item, item_where, warnings)
        if duplicate_of == i:
            resources.append(ReplicatedResource(name, replicas, renamed=rename_by_default))
    return resources


def _config_bool(value: Any, where: str) -> bool:
    try:
        return parse_bool(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {_describe(value)}: {exc}") from None


def _parse_sharing(value: Any, warnings: list[str]) -> Sharing:
    section = as_mapping(value, "sharing")
    for key in section:
        if key not in ("timeSlicing", "mps"):
            warn_unknown(warnings, "sharing.", key, ("timeSlicing", "mps"))
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


#: the top-level keys of a v1 config file (``flags`` is read by gfd.settings)
KNOWN_TOP_KEYS = ("version", "flags", "resources", "sharing", "partitions")


def _parse_partitions(value: Any) -> PartitionTable | None:
    if value is None:
        return None
    try:
        return parse_table(value, "partitions")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_document(document: Mapping[str, Any], warnings: list[str]) -> None:
    """The version and the top-level keys, before any section is read."""
    version = document.get("version")
    if version not in (None, "", "v1"):
        raise ConfigError(f"version: unsupported config version {_describe(version)} (expected v1)")
    for key in document:
        if key not in KNOWN_TOP_KEYS and key not in _IGNORED_TOP_KEYS:
            warn_unknown(warnings, "", key, KNOWN_TOP_KEYS)


def parse_model(document: Mapping[str, Any], warnings: list[str]) -> Config:
    """The ``resources``, ``sharing`` and ``partitions`` sections as a :class:`Config`."""
    resources = as_mapping(document.get("resources"), "resources")
    for key in resources:
        if key not in ("gpus", "mig"):
            warn_unknown(warnings, "resources.", key, ("gpus", "mig"))
    return Config(
        gpu_patterns=_parse_patterns(resources.get("gpus"), "resources.gpus"),
        mig_patterns=_parse_patterns(resources.get("mig"), "resources.mig"),
        sharing=_parse_sharing(document.get("sharing"), warnings),
        partitions=_parse_partitions(document.get("partitions")),
    )
