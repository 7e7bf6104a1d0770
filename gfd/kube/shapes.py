"""The shapes gfd expects of what the API server sends: a map of strings where one belongs.

A wrong shape is a bad answer (a server fault: retried, one line), never a TypeError."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gfd.kube.client import bad_answer


def string_map(obj: Mapping[str, Any], *path: str) -> dict[str, str]:
    """The string-to-string map at ``path`` in ``obj`` (absent or null: empty).

    Anything else — a list, a string, a number among the values — is a bad answer."""
    current: Any = obj
    for depth, key in enumerate(path):
        if current is None:
            return {}
        if not isinstance(current, dict):
            return _wrong_shape(".".join(path[:depth]) or "the object", current)
        current = current.get(key)
    if current is None:
        return {}
    if not isinstance(current, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in current.items()
    ):
        return _wrong_shape(".".join(path), current)
    return dict(current)


def _wrong_shape(where: str, value: Any) -> dict[str, str]:
    raise bad_answer(f"{where} as {type(value).__name__}, not a map of strings")
