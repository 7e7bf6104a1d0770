"""Sanitising product and machine names, and Kubernetes label validity (SPEC §5.4, §5.5).
The sanitising rules live here; the label-name grammar in gfd/grammar.py."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gfd.grammar import MAX_NAME_LENGTH
from gfd.grammar import is_valid_label_name as is_valid_label_name

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9\-_. ]")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
_TRAILING = re.compile(r"[^A-Za-z0-9]+$")
MAX_LENGTH = MAX_NAME_LENGTH


def sanitize_name(text: str) -> str:
    """Delete every character outside ``[A-Za-z0-9-_. ]``, then join the words with ``-``."""
    return "-".join(_NOT_ALLOWED.sub("", text).split())


def is_valid_label_value(text: str) -> bool:
    return text == "" or is_valid_label_name(text)


def valid_label_value(text: str) -> tuple[str, bool]:
    """The value itself when valid; else cut to 63 characters and trimmed to alphanumeric
    ends.  The flag says whether it had to be changed."""
    if is_valid_label_value(text):
        return text, False
    cut = _EDGE.sub("", text[:MAX_LENGTH])
    cut = re.sub(r"[^-A-Za-z0-9_.]", "", cut)
    return _EDGE.sub("", cut), True


def fit_name(model: str, qualifiers: Sequence[str] = ()) -> str | None:
    """``<model>-<qualifier>-...`` within the 63 characters of a label value, shortening
    only the model part (as upstream's open fix for too-long MIG product values does,
    NVIDIA/k8s-device-plugin#1880 for #1876): what follows
    it (``MIG``, the profile, ``SHARED``) tells devices apart and is always kept whole.
    A value that fits comes back byte-identical; the shortened model ends alphanumeric.
    None when not even one character of the model would fit."""
    value = "-".join((model, *qualifiers))
    if len(value) <= MAX_LENGTH:
        return value
    tail = "-".join(qualifiers)
    room = MAX_LENGTH - len(tail) - 1 if qualifiers else MAX_LENGTH
    shortened = _TRAILING.sub("", model[: max(room, 0)])
    if not shortened:
        return None
    return f"{shortened}-{tail}" if qualifiers else shortened
