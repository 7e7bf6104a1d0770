"""The label grammar every layer relies on: the prefix gfd owns, the Kubernetes rule for a
label name, and the longest per-resource suffix a resource name must leave room for.

A leaf module (no gfd imports), so settings can check a config file's resource names
against the same rules the label engine (gfd/labels) and the outputs use.
"""

from __future__ import annotations

import re

#: the prefix of every label gfd publishes (and of every resource name it labels)
PREFIX = "nvidia.com/"
#: a label name (the part after the prefix) and a label value are at most this long
MAX_NAME_LENGTH = 63
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
#: a resource name as the config allows it (SPEC §4.1: a lowercase DNS label with dots)
RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
#: the per-resource label suffix "<resource>.sharing-strategy" (labels/keys.py names it)
SHARING_STRATEGY = "sharing-strategy"
#: the longest per-resource suffix: a resource name must leave room for it in a label name
LONGEST_RESOURCE_SUFFIX = SHARING_STRATEGY


def is_valid_label_name(text: str) -> bool:
    """A label key's name part (after ``nvidia.com/``): 1 to 63 characters of the label grammar."""
    return 0 < len(text) <= MAX_NAME_LENGTH and _LABEL_NAME.fullmatch(text) is not None
