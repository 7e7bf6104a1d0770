"""Sanitising product and machine names, and Kubernetes label validity (SPEC §5.4, §5.5).
The sanitising rules live here; the label-name grammar in gfd/grammar.py."""

from __future__ import annotations

import re

from gfd.grammar import MAX_NAME_LENGTH as MAX_LENGTH
from gfd.grammar import is_valid_label_name as is_valid_label_name

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9\-_. ]")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


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
