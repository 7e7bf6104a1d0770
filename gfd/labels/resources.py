"""Resource naming and the common-label rule (SPEC §5.3).

Devices are named by the first matching ``resources`` pattern; every device contributes a
small label mapping, and the devices of one resource are combined: ``count`` is summed and
every other key is kept only when all devices agree on its value.  A disagreeing label is
omitted, never guessed, so the output does not depend on device order."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gfd.config import Config, ResourcePattern
from gfd.echo import describe
from gfd.grammar import PREFIX
from gfd.grammar import wildcard_match as wildcard_match  # the config patterns' rule
from gfd.labels import keys

DEFAULT_GPU_RESOURCE = "gpu"


# (id of the pattern list, text, default) -> (the pattern list, the name): a node's GPUs
# share a few names, so each name is matched once per pattern list, not once per GPU.
# The entry holds the list itself, so its id cannot be reused while the entry lives.
_names: dict[tuple[int, str, str], tuple[Sequence[ResourcePattern], str]] = {}
_NAMES_KEPT = 4096


def resource_name_for(text: str, patterns: Sequence[ResourcePattern], default: str) -> str:
    """The name of the first pattern matching ``text`` (a GPU name or a MIG profile)."""
    key = (id(patterns), text, default)
    known = _names.get(key)
    if known is not None and known[0] is patterns:
        return known[1]
    name = default
    for rule in patterns:
        if wildcard_match(rule.pattern, text):
            name = rule.name
            break
    if len(_names) >= _NAMES_KEPT:
        _names.clear()
    _names[key] = (patterns, name)
    return name


def default_mig_resource(profile: str) -> str:
    """Upstream's mixed-strategy name: ``mig-<profile>`` with ``+`` turned into ``.``."""
    return "mig-" + profile.replace("+", ".")


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one device (or a group of identical devices) says about its resource."""

    count: int
    labels: Mapping[str, str]


def combine(contributions: Iterable[Contribution]) -> dict[str, str]:
    """Sum the counts; keep each other label only if every contribution has the same value."""
    items = list(contributions)
    if not items:
        return {}
    common = dict(items[0].labels)
    for item in items[1:]:
        for suffix in list(common):
            if item.labels.get(suffix) != common[suffix]:
                del common[suffix]
    common[keys.COUNT] = str(sum(item.count for item in items))
    return common


#: how many of the node's names a "matches nothing" warning lists
_NAMES_SHOWN = 5
_SECTIONS = {"time-slicing": "sharing.timeSlicing", "mps": "sharing.mps"}


def _listed(names: Iterable[str]) -> str:
    ordered = sorted(set(names))
    shown = ", ".join(describe(name) for name in ordered[:_NAMES_SHOWN])
    return shown + (
        f" and {len(ordered) - _NAMES_SHOWN} more" if len(ordered) > _NAMES_SHOWN else ""
    )


def _unused_patterns(
    patterns: Sequence[ResourcePattern], names: Collection[str], where: str, what: str
) -> list[str]:
    """The patterns that name none of ``names``: none matches, or an earlier one wins."""
    first = {
        next((i for i, rule in enumerate(patterns) if wildcard_match(rule.pattern, n)), -1)
        for n in names
    }
    unused = []
    for i, rule in enumerate(patterns):
        if i in first:
            continue
        shown = f"{where}[{i}]: pattern {describe(rule.pattern)}"
        if any(wildcard_match(rule.pattern, name) for name in names):
            unused.append(
                f"{shown} names no {what} on this node: every {what} it matches is named by "
                "an earlier pattern"
            )
        else:
            found = f"its {what}s: {_listed(names)}" if names else f"it has no {what}"
            unused.append(f"{shown} matches no {what} on this node ({found})")
    return unused


def unused_entries(
    config: Config,
    gpu_names: Collection[str],
    mig_profiles: Collection[str],
    resources: Collection[str],
) -> list[str]:
    """The config entries that apply to nothing on this node, each named: a ``resources``
    pattern that names no device, and a sharing entry for a resource the node does not
    have.  MIG patterns are judged only where MIG devices are labelled (``mig_profiles``
    not empty): MIG mode is switched at run time (mig-manager), so a config names profiles
    for the days a node is in MIG mode.  The labels do
    not change; the caller says so once, since a config that does nothing looks like one
    that works."""
    unused = _unused_patterns(config.gpu_patterns, gpu_names, "resources.gpus", "GPU")
    if mig_profiles:
        unused.extend(
            _unused_patterns(config.mig_patterns, mig_profiles, "resources.mig", "MIG profile")
        )
    section = _SECTIONS.get(config.sharing.strategy, "sharing")
    for entry in config.sharing.resources:
        if entry.name.removeprefix(PREFIX) not in resources:
            unused.append(
                f"{section}: {entry.name} applies to no resource on this node (its resources: "
                f"{_listed(PREFIX + name for name in resources) or 'none'})"
            )
    return unused
