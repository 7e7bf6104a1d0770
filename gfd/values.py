"""How one option value is read, wherever it comes from: each parser takes the raw value (a
string from argv or the environment, or a YAML value from the config file) and returns the
typed value or raises ValueError with a short reason.  A leaf module: the option table
(gfd.options) and the config file model (gfd.config) both stand on it."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from typing import Any

from gfd.durations import MAX_SECONDS, check_seconds, parse_duration

#: the longest string any option takes (Linux's PATH_MAX)
MAX_OPTION_CHARS = 4096

# Go's strconv.ParseBool words exactly (upstream reads flags and variables with it), and
# gfd's own yes/no in any case
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_FALSE = {"0", "f", "F", "false", "FALSE", "False"}


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = value if isinstance(value, str) else None
    if text in _TRUE or (text and text.lower() == "yes"):
        return True
    if text in _FALSE or (text and text.lower() == "no"):
        return False
    raise ValueError("expected true/false, t/f, 1/0 or yes/no")


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
        text = parse_str(value)  # compared as upstream compares it: exactly
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse


def parse_interval(value: Any) -> float | None:

    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int):
        if value > MAX_SECONDS:  # before float(): a huge int does not convert
            raise ValueError("longer than the longest duration, 2562047h (use infinite)")
        return check_seconds(float(value))
    if isinstance(value, float):
        return check_seconds(value)
    text = parse_str(value)
    if text != text.strip():  # Go's time.ParseDuration refuses them
        raise ValueError("not a duration: spaces around it")
    if text.lower() == "infinite" and text != "infinite":
        raise ValueError("not a duration (upstream's word is infinite, in lower case)")
    return parse_duration(text)


def parse_horizon(value: Any) -> float:
    """``--expiry-horizon``: a duration, or ``never`` (no expiry directive: infinity)."""
    if isinstance(value, str) and value.strip().lower() in ("never", "infinite"):
        return math.inf
    seconds = parse_interval(value)
    return math.inf if seconds is None else seconds


_DNS_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"


def is_host(text: str) -> bool:
    """True for an IP address or a DNS name (labels of letters, digits and inner hyphens,
    at most 253 characters): what a socket or a URL can be given as a host."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        pattern = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*\.?"
        return len(text) <= 253 and re.fullmatch(pattern, text) is not None
    return True


def split_address(text: str) -> tuple[str, int]:
    """``host:port`` → (host, port); an empty host means every interface; ``[::1]:9`` is IPv6.

    Raises ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep or not re.fullmatch(r"[0-9]{1,5}", port) or int(port) > 65535:
        raise ValueError("expected host:port (e.g. :8080 or 0.0.0.0:8080), or empty for off")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host and not is_host(host):
        # the socket layer would refuse it only when it listens (a host it cannot even
        # encode with an exception of its own), after the value was taken
        raise ValueError("the host is not an IP address or a DNS name")
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
            number = float(parse_str(value))
            if value != value.strip():  # Go's strconv.ParseFloat refuses them
                raise ValueError
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
        # Go's integer literals, as upstream's IntFlag reads them (strconv base 0): 16,
        # 0x10, 0o20, 020 (octal, as in Go), 0b10000, 1_000
        text = parse_str(value)
        if not re.fullmatch(r"[+-]?(0[xXbBoO])?[0-9a-fA-F_]{1,40}", text):
            raise ValueError("expected a whole number")
        sign, digits = ("-", text[1:]) if text[0] == "-" else ("", text.lstrip("+"))
        if re.fullmatch(r"0[0-7_]+", digits):
            digits = "0o" + digits[1:]
        try:
            number = int(sign + digits, 0)
        except ValueError:
            raise ValueError("expected a whole number") from None
    if number < 0 or number > 2**31 - 1:
        raise ValueError("must be from 0 to 2147483647")
    return number


def parse_address(value: Any) -> str:
    text = parse_str(value).strip()
    if text:
        split_address(text)
    return text
