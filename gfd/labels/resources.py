"""Resource naming and the common-label rule (SPEC §5.3).

Devices are named by the first matching ``resources`` pattern; every device contributes a
small label mapping, and the devices of one resource are combined: ``count`` is summed and
every other key is kept only when all devices agree on its value.  A disagreeing label is
omitted, never guessed, so the output does not depend on device order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gfd.config import ResourcePattern
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
