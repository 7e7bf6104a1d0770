"""How one option value is read, wherever it comes from: each parser takes the raw value (a
string from argv or the environment, or a YAML value from the config file) and returns the
typed value or raises ValueError with a short reason.  A leaf module: the option table
(gfd.options) and the config file model (gfd.config) both stand on it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

#: the longest string any option takes (Linux's PATH_MAX)
MAX_OPTION_CHARS = 4096

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return True
    if isinstance(value, str) and value.strip().lower() in _FALSE:
        return False
    raise ValueError("expected true/false, 1/0 or yes/no")


def parse_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    if len(value) > MAX_OPTION_CHARS:
        raise ValueError(f"longer than {MAX_OPTION_CHARS} characters")
    if "\0" in value:  # no path or name holds one (a JSON config can write "\u0000")
        raise ValueError("contains a NUL character")
    return value


def parse_optional_str(value: Any) -> str | None:
    return parse_str(value)


def choice(*allowed: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = parse_str(value).strip().lower()
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse


def parse_interval(value: Any) -> float | None:
    from gfd.durations import MAX_SECONDS, check_seconds, parse_duration

    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int):
        if value > MAX_SECONDS:  # before float(): a huge int does not convert
            raise ValueError("longer than the longest duration, 2562047h (use infinite)")
        return check_seconds(float(value))
    if isinstance(value, float):
        return check_seconds(value)
    return parse_duration(parse_str(value))


def parse_horizon(value: Any) -> float:
    """``--expiry-horizon``: a duration, or ``never`` (no expiry directive: infinity)."""
    if isinstance(value, str) and value.strip().lower() in ("never", "infinite"):
        return math.inf
    seconds = parse_interval(value)
    return math.inf if seconds is None else seconds


def split_address(text: str) -> tuple[str, int]:
    """``host:port`` → (host, port); an empty host means every interface; ``[::1]:9`` is IPv6.

    Raises ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected host:port (e.g. :8080 or 0.0.0.0:8080), or empty for off")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def parse_qps(value: Any) -> float:
    """``--kube-api-qps``: a finite number (client-go: 0 means its default, 5; a negative
    number turns the client-side limit off)."""
    if isinstance(value, bool):
        raise ValueError("expected a number")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        try:
            number = float(parse_str(value).strip())
        except ValueError:
            raise ValueError("expected a number (requests per second)") from None
    if not math.isfinite(number):
        raise ValueError("expected a finite number")
    return number


def parse_burst(value: Any) -> int:
    """``--kube-api-burst``: a whole number of requests (client-go: 0 means its default, 10;
    a negative burst is refused here, as client-go refuses it when it builds the client)."""
    if isinstance(value, bool):
        raise ValueError("expected a whole number")
    if isinstance(value, int):
        number = value
    else:
        text = parse_str(value).strip()
        if not re.fullmatch(r"[+-]?[0-9]{1,10}", text):
            raise ValueError("expected a whole number")
        number = int(text)
    if number < 0 or number > 2**31 - 1:
        raise ValueError("must be from 0 to 2147483647")
    return number


def parse_address(value: Any) -> str:
    text = parse_str(value).strip()
    if text:
        split_address(text)
    return text
