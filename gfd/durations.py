"""Go-style durations (``90s``, ``1m30s``, ``500ms``, ``1h``), bare seconds, and ``infinite``."""

from __future__ import annotations

import math
import re

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_BARE = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)")

INFINITE = "infinite"
#: Go's longest duration (2**63 - 1 ns, about 2,562,047 h): upstream cannot express more
MAX_SECONDS = (2**63 - 1) / 1e9


def parse_duration(text: str) -> float | None:
    """Seconds as a float, or ``None`` for ``infinite``.

    Raises ValueError with a short reason for anything else, including zero and negative
    durations (a labeller that never sleeps is a mistake, not a setting)."""
    value = text.strip()
    if value.lower() == INFINITE:
        return None
    if not value:
        raise ValueError("empty duration")
    if _BARE.fullmatch(value):
        seconds = float(value)
    else:
        sign = 1.0
        rest = value
        if rest[0] in "+-":
            sign = -1.0 if rest[0] == "-" else 1.0
            rest = rest[1:]
        seconds = 0.0
        position = 0
        while position < len(rest):
            match = _PART.match(rest, position)
            if match is None:
                raise ValueError(
                    "not a duration (use e.g. 60s, 1m30s, 500ms, 1h, a number of seconds, "
                    "or infinite)"
                )
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            position = match.end()
        if position == 0:
            raise ValueError("not a duration")
        seconds *= sign
    return check_seconds(seconds)


def check_seconds(seconds: float) -> float:
    """``seconds`` when it is a usable interval: finite, above zero, within Go's range."""
    if math.isnan(seconds):
        raise ValueError("not a number")
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    if seconds > MAX_SECONDS:
        raise ValueError("longer than the longest duration, 2562047h (use infinite)")
    return seconds


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return INFINITE
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:g}s"
