"""Showing a value someone else supplied in a message: the one way gfd does it.

A config value, a snapshot field, a flag, an environment variable, a path, a file's
content or an API server's answer may be a megabyte long, span lines, or carry terminal
escape sequences.  Every message that quotes one goes through :func:`clip` (text) or
:func:`describe` (any value), so the excerpt is short, says how long the whole was, and
stays on one line with nothing a terminal would act on (docs/SECURITY.md, "Echoed
values").  Pure: no imports, usable from the label functions too.
"""

from __future__ import annotations

from typing import Any

#: how much of a value an error or log line quotes
SHOWN_CHARS = 100
#: how much of a path an error or log line quotes
SHOWN_PATH_CHARS = 200
#: the longest message gfd prints or logs as one field: a guard behind :func:`clip`
MAX_MESSAGE_CHARS = 2000

# shown by name; every other character that is not printable is shown by its code
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every character that is not printable shown escaped: control
    characters (C0, DEL, C1; a newline becomes ``\\n``), the line and paragraph
    separators, and the format, private-use and unassigned characters (a bidirectional
    override, a zero-width space).  A value never breaks its line, never reaches a terminal
    as an escape sequence, and shows what it holds."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def one_line(text: str) -> str:
    """``text`` with its whitespace runs (newlines included) made single spaces, then
    :func:`printable`: a multi-line answer or a plugin's stderr, quoted in one log line."""
    return printable(" ".join(text.split()))


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was when it was cut; on
    one line, control characters escaped."""
    shown = printable(text[:limit])
    if len(text) <= limit and len(shown) <= limit:
        return shown
    # cut again after escaping: a line of newlines must not double in length
    return f"{shown[:limit]}... ({len(text)} characters)"


def clip_path(path: str, limit: int = SHOWN_PATH_CHARS) -> str:
    """A path as :func:`clip` shows a value, but cut at its start (the end names the
    file) and longer (paths of temporary and mounted directories are long)."""
    shown = printable(path[-limit:])
    if len(path) <= limit and len(shown) <= limit:
        return shown
    return f"...{shown[-limit:]} ({len(path)} characters)"


def _describe_int(value: int) -> str:
    if value.bit_length() > 3 * SHOWN_CHARS:  # ~90+ digits; str() fails past 4,300
        digits = int(value.bit_length() * 0.30103) + 1
        return f"an integer of about {digits} digits"
    return repr(value)


def describe(value: Any) -> str:
    """A value as an error message shows it (``null`` for None, like the document), never
    longer than about :data:`SHOWN_CHARS` characters."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return _describe_int(value)
    if isinstance(value, str):
        shown = repr(value[:SHOWN_CHARS])
        return shown if len(value) <= SHOWN_CHARS else f"{shown}... ({len(value)} characters)"
    if isinstance(value, list):
        return clip(f"a list of {len(value)} items: [{_brief_items(value)}]")
    if isinstance(value, dict):
        return clip(f"a mapping of {len(value)} keys: {{{_brief_items(list(value))}}}")
    return clip(repr(value))


def _brief_items(items: list[Any]) -> str:
    shown = []
    for item in items[:3]:
        if isinstance(item, (list, dict)):
            shown.append("[...]" if isinstance(item, list) else "{...}")
        else:
            shown.append(describe(item))
    return ", ".join(shown) + (", ..." if len(items) > 3 else "")


def bounded_message(text: str) -> str:
    """A whole message (an error line, a log field) held to :data:`MAX_MESSAGE_CHARS` on
    one line: the guard at the edge for a value some message forgot to :func:`clip`."""
    return clip(text, MAX_MESSAGE_CHARS)


def error_text(exc: BaseException) -> str:
    """An exception as a log field or error line: its message, bounded."""
    return bounded_message(str(exc))
