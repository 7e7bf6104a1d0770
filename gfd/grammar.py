"""The label grammar every layer relies on: the prefix gfd owns, the Kubernetes rule for a
label name, the longest per-resource suffix a resource name must leave room for, and the
wildcard rule of the config's resource patterns.

A leaf module (no gfd imports), so settings can check a config file's resource names
against the same rules the label engine (gfd/labels) and the outputs use.
"""

from __future__ import annotations

import re

#: the prefix of every label gfd publishes (and of every resource name it labels)
PREFIX = "nvidia.com/"
#: a label name (the part after the prefix) and a label value are at most this long
MAX_NAME_LENGTH = 63
# patterns, not compiled regexes: re compiles (and caches) one on first use, so importing
# this module costs no compile on a start-up that never checks a name
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
#: a resource name as the config allows it (SPEC §4.1: a lowercase DNS label with dots)
RESOURCE_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
#: the per-resource label suffix "<resource>.sharing-strategy" (labels/keys.py names it)
SHARING_STRATEGY = "sharing-strategy"
#: the longest per-resource suffix: a resource name must leave room for it in a label name
LONGEST_RESOURCE_SUFFIX = SHARING_STRATEGY


def is_valid_label_name(text: str) -> bool:
    """A label key's name part (after ``nvidia.com/``): 1 to 63 characters of the label grammar."""
    return 0 < len(text) <= MAX_NAME_LENGTH and re.fullmatch(_LABEL_NAME, text) is not None


def is_resource_name(text: str) -> bool:
    """A resource name as the config allows it (:data:`RESOURCE_NAME`)."""
    return re.fullmatch(RESOURCE_NAME, text) is not None


def wildcard_match(pattern: str, text: str) -> bool:
    """``*`` matches any run of characters, nothing else is special, anchored at both ends.

    Linear in fact, whatever the pattern: the text between the first and last ``*`` is
    searched for each literal part in turn, leftmost first (taking the leftmost place of a
    part never loses a match the later parts could use), so ``*a*a*a*...*b`` against a long
    name costs one pass per part instead of a regular expression's backtracking."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == text
    head, tail = parts[0], parts[-1]
    end = len(text) - len(tail)
    if end < len(head) or not text.startswith(head) or not text.endswith(tail):
        return False
    position = len(head)
    for part in parts[1:-1]:
        if part:
            found = text.find(part, position, end)
            if found < 0:
                return False
            position = found + len(part)
    return True
