"""The pure half of per-node configuration (no I/O, no API): the fallback strategies, the
label-key check and the chosen entry's value type.  The option table (gfd.settings) parses
with these; gfd.nodeconfig reads the node's label and the directory with them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gfd.echo import describe

FALLBACK_STRATEGIES = ("named", "single", "empty")
#: the entry the ``named`` fallback looks for (upstream's NamedConfigFallback)
NAMED_FALLBACK_ENTRY = "default"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


@dataclass(frozen=True, slots=True)
class ConfigChoice:
    """The entry chosen for this node (None: the ``empty`` fallback, no config file) and
    why, in words for the log."""

    entry: str | None
    reason: str


def check_label_key(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key, or None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not re.fullmatch(_DNS_SUBDOMAIN, prefix)):
        return "the prefix before / is not a DNS subdomain"
    if not 0 < len(name) <= 63 or not re.fullmatch(_LABEL_VALUE, name):
        return "not a label name (1-63 characters: letters, digits, - _ . inside)"
    return None


def parse_fallbacks(value: str | Sequence[str]) -> tuple[str, ...]:
    """``named,single`` (upstream's comma-separated list) -> ("named", "single")."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    result = tuple(part.strip() for part in parts if part.strip())
    for part in result:
        if part not in FALLBACK_STRATEGIES:
            raise ValueError(
                f"unknown fallback strategy {describe(part)} (use {', '.join(FALLBACK_STRATEGIES)})"
            )
    return result
