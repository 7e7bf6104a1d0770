"""A small, strict reader for the plain YAML that snapshots and config files are made of.

``import yaml`` costs ~20 ms, and building a document through PyYAML's events costs more;
a oneshot reading a snapshot pays both on every node at every start (issue 11).  The
documents themselves use little of YAML: block mappings and sequences, comments, plain and
one-line quoted scalars, and one-line flow collections (``{major: 8, minor: 0}``,
``[0, 1]``).  :func:`read` handles exactly that and gives up -- returns :data:`GIVE_UP`,
never raises -- on anything else, and the caller then runs PyYAML as before.  So every
error message, every limit and every exotic feature (anchors, tags, block scalars,
multi-line scalars, several documents, ...) stays PyYAML's, and within the subset the
result is the same data (values, types, key order) that PyYAML's SafeLoader builds.

Plain scalars are resolved as YAML 1.1 does (PyYAML's implicit resolvers), but only where
the answer is certain and simple: ``true``/``false``/``null`` in their three spellings,
decimal integers without ``+``, leading zero or underscore (``-`` is fine), hex integers
``0x...`` without sign or underscore, and decimals ``1.5``.  A scalar that YAML 1.1 might
read as anything else -- ``yes``, ``On``, ``~``, ``012``, ``0x_1F``, ``1_000``, ``+1``,
``1:30``, ``.5``, ``1.0e3``, ``.inf``, ``2001-12-14``, ``<<`` -- makes the reader give up;
everything else is a string (``0o7`` and ``1e3`` too: numbers in YAML 1.2, not in 1.1).

The reader is one pass over the lines with an explicit stack (no recursion), and every
scan is linear: :meth:`str.find` and regular expressions without nested ambiguity.  It
gives up past the same nesting and value-count limits that the PyYAML path enforces, on a
duplicate key, and on a number longer than the PyYAML path accepts, so that path reports
them.
"""

from __future__ import annotations

import re
from typing import Any, Final

#: what :func:`read` returns when the text is not in the subset it reads
GIVE_UP: Final = object()


class _Unsupported(Exception):
    """The text steps outside the subset (caught in :func:`read`)."""


# --------------------------------------------------------------------------- scalars

# Plain scalars YAML 1.1 resolves to something other than a string start with one of these
# (PyYAML registers its implicit resolvers by first character).
_WORD_FIRST = frozenset("yYnNtTfFoO~<=")
_NUMBER_FIRST = frozenset("-+.0123456789")
_WORDS: dict[str, Any] = {
    "true": True,
    "True": True,
    "TRUE": True,
    "false": False,
    "False": False,
    "FALSE": False,
    "null": None,
    "Null": None,
    "NULL": None,
}
# YAML 1.1 words left to PyYAML (bools and nulls a reader may not expect, the merge key and
# the value key, which PyYAML refuses)
_UNSURE_WORDS = frozenset(
    ("yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF", "~", "<<", "=")
)

# A superset of YAML 1.1's int, float and timestamp forms (every base, underscores,
# sexagesimal, exponents, .inf/.nan, dates): a plain scalar that does not match is
# certainly a string.  (YAML 1.1 has no exponent without a fraction and no 0o prefix: 1e3
# and 0o7 are strings to PyYAML, and so here.)  Each repeated group starts with its own
# separator, so matching never backtracks more than linearly.
_MAYBE_NUMBER = re.compile(
    r"[-+]?(?:[0-9][0-9_]*(?::[0-5]?[0-9])*(?:\.[0-9_]*(?:[eE][-+]?[0-9]+)?)?"
    r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
    r"|\.(?:inf|Inf|INF|nan|NaN|NAN)"
    r"|0b[0-1_]+|0x[0-9a-fA-F_]+)"
    r"|[0-9][0-9][0-9][0-9]-.*"
)
# The forms read here: decimal int, hex int, simple decimal fraction.
_SIMPLE_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))|(0x[0-9a-fA-F]+)|(-?[0-9]+\.[0-9]+)")

# A plain scalar may not start with an indicator; `-` may when a non-space follows, and so
# may `?` and `:` outside flow collections (read here only when no flow indicator follows).
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")

# In a flow collection a plain scalar runs up to the first of these (a `:` not followed by a
# space, a `#` or a `?` there makes the reader give up).
_FLOW_PLAIN = re.compile(r"[^,\[\]{}:#?]*")

_ESCAPES = {
    "0": "\0",
    "a": "\x07",
    "b": "\x08",
    "t": "\t",
    "n": "\n",
    "v": "\x0b",
    "f": "\x0c",
    "r": "\r",
    "e": "\x1b",
    '"': '"',
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}
_SPACES = re.compile(" *")
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")

# PyYAML and libyaml refuse a simple (implicit) key longer than 1024 characters
_LONGEST_KEY = 1000


class _Limits:
    __slots__ = ("max_nesting", "max_nodes", "max_number_chars", "nodes")

    def __init__(self, max_nesting: int, max_nodes: int, max_number_chars: int) -> None:
        self.max_nesting = max_nesting
        self.max_nodes = max_nodes
        self.max_number_chars = max_number_chars
        self.nodes = 0

    def count(self) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise _Unsupported


def resolve_plain(text: str, max_number_chars: int) -> Any:
    """A non-empty plain scalar's value, as YAML 1.1 resolves it; raises
    :class:`_Unsupported` where that is not certain and simple (see the module docstring)."""
    first = text[0]
    if first in _WORD_FIRST:
        if text in _WORDS:
            return _WORDS[text]
        if text in _UNSURE_WORDS:
            raise _Unsupported
        return text
    if first not in _NUMBER_FIRST:
        return text
    simple = _SIMPLE_NUMBER.fullmatch(text)
    if simple is None:
        if _MAYBE_NUMBER.fullmatch(text) is None:
            return text
        raise _Unsupported
    if len(text) > max_number_chars:
        raise _Unsupported
    decimal, hexadecimal, _ = simple.groups()
    if decimal is not None:
        return int(decimal)
    if hexadecimal is not None:
        return int(hexadecimal[2:], 16)
    return float(text)


def _plain_starts(text: str, at: int, flow: bool = False) -> bool:
    """Whether a plain scalar read here may start at ``text[at]``."""
    char = text[at]
    if char not in _INDICATORS:
        return char != " "
    if at + 1 < len(text) and (char == "-" or (char in "?:" and not flow)):
        return text[at + 1] not in " ,[]{}"
    return False


def _single_quoted(text: str, start: int) -> tuple[str, int]:
    """The single-quoted scalar opening at ``text[start]``, and the index after it."""
    parts: list[str] = []
    at = start + 1
    while True:
        close = text.find("'", at)
        if close < 0:
            raise _Unsupported  # continues on the next line
        parts.append(text[at:close])
        if close + 1 < len(text) and text[close + 1] == "'":
            parts.append("'")
            at = close + 2
            continue
        return "".join(parts), close + 1


def _double_quoted(text: str, start: int) -> tuple[str, int]:
    """The double-quoted scalar opening at ``text[start]``, and the index after it."""
    parts: list[str] = []
    at = start + 1
    end = len(text)
    quote = -1
    while True:
        if quote < at:  # (found again only when an escape has passed it: linear)
            quote = text.find('"', at)
            if quote < 0:
                raise _Unsupported  # continues on the next line
        escape = text.find("\\", at, quote)
        if escape < 0:
            parts.append(text[at:quote])
            return "".join(parts), quote + 1
        parts.append(text[at:escape])
        if escape + 1 >= end:
            raise _Unsupported
        code = text[escape + 1]
        if code in _ESCAPES:
            parts.append(_ESCAPES[code])
            at = escape + 2
        elif code in _HEX_ESCAPES:
            digits = text[escape + 2 : escape + 2 + _HEX_ESCAPES[code]]
            if len(digits) != _HEX_ESCAPES[code] or not all(d in _HEX_DIGITS for d in digits):
                raise _Unsupported
            point = int(digits, 16)
            if 0xD800 <= point <= 0xDFFF or point > 0x10FFFF:
                raise _Unsupported  # libyaml refuses these, pure PyYAML does not
            parts.append(chr(point))
            at = escape + 2 + len(digits)
        else:
            raise _Unsupported  # `\ `, `\/`, a line break: readers disagree or it spans lines


def _quoted(text: str, start: int) -> tuple[str, int]:
    if text[start] == "'":
        return _single_quoted(text, start)
    return _double_quoted(text, start)


def _skip_spaces(text: str, at: int) -> int:
    """The index of the first character from ``text[at]`` on that is not a space."""
    spaces = _SPACES.match(text, at)
    return spaces.end() if spaces is not None else at


def _rest_is_blank(text: str, at: int) -> bool:
    """Whether only spaces, then perhaps a comment, follow ``text[at]`` (a comment needs a
    space before its ``#``)."""
    rest = text[at:]
    stripped = rest.lstrip(" ")
    return not stripped or (stripped[0] == "#" and len(stripped) < len(rest))


# --------------------------------------------------------------------------- flow


class _FlowFrame:
    __slots__ = ("is_map", "key", "state", "value")

    def __init__(self, is_map: bool) -> None:
        self.is_map = is_map
        self.value: Any = {} if is_map else []
        self.key: Any = None
        # "first": after the bracket; "item": after a comma; "value": after "key: ";
        # "next": after an item (a comma or the closing bracket comes)
        self.state = "first"


def _flow(text: str, start: int, depth: int, limits: _Limits) -> tuple[Any, int]:
    """The one-line flow collection opening at ``text[start]`` (``[`` or ``{``) holding
    plain or quoted scalars and further such collections; and the index after it.

    (The hot loop of a topology snapshot, one NVLink a line: the value count is kept in a
    local and spaces are skipped by a regular expression only where there are some.)"""
    stack: list[_FlowFrame] = []
    at = start
    end = len(text)
    nodes = limits.nodes
    max_nodes = limits.max_nodes
    while True:
        if at < end and text[at] == " ":
            at = _skip_spaces(text, at)
        if at >= end:
            raise _Unsupported  # continues on the next line
        char = text[at]
        if char in "[{":
            if depth + len(stack) >= limits.max_nesting:
                raise _Unsupported
            if stack and (
                stack[-1].state == "next" or (stack[-1].is_map and stack[-1].state != "value")
            ):
                raise _Unsupported  # a collection as a key, or two items without a comma
            nodes += 1
            frame = _FlowFrame(char == "{")
            if stack:
                _flow_store(stack[-1], frame.value)
            stack.append(frame)
            at += 1
            continue
        if not stack:
            raise _Unsupported
        top = stack[-1]
        if char in "]}":
            if char != ("}" if top.is_map else "]") or top.state not in ("first", "next"):
                raise _Unsupported  # a trailing comma, a key without value, a mismatch
            stack.pop()
            at += 1
            if not stack:
                if nodes > max_nodes:
                    raise _Unsupported
                limits.nodes = nodes
                return top.value, at
            continue
        if char == ",":
            if top.state != "next":
                raise _Unsupported
            top.state = "item"
            at += 1
            continue
        if top.state == "next":
            raise _Unsupported
        # a scalar
        token = at
        if char in "'\"":
            value, at = _quoted(text, at)
        else:
            if char in _INDICATORS and not _plain_starts(text, at, flow=True):
                raise _Unsupported
            plain = _FLOW_PLAIN.match(text, at)
            stop = plain.end() if plain is not None else at
            if stop < end and text[stop] in "#?":
                raise _Unsupported
            value = resolve_plain(text[at:stop].rstrip(" "), limits.max_number_chars)
            at = stop
        nodes += 1
        if nodes > max_nodes:
            raise _Unsupported
        if top.is_map and top.state != "value":
            # a key: ": " must follow
            if at < end and text[at] == " ":
                at = _skip_spaces(text, at)
            if text[at : at + 2] != ": " or at - token > _LONGEST_KEY:
                raise _Unsupported
            if value in top.value:
                raise _Unsupported  # a duplicate key: PyYAML's path names it
            top.key = value
            top.state = "value"
            at += 2
            continue
        if not top.is_map and at < end and text[at] == ":":
            raise _Unsupported  # a single-pair mapping inside a list
        _flow_store(top, value)


def _flow_store(frame: _FlowFrame, value: Any) -> None:
    if frame.is_map:
        frame.value[frame.key] = value
    else:
        frame.value.append(value)
    frame.state = "next"


# --------------------------------------------------------------------------- block


class _Block:
    """A block mapping or sequence being read."""

    __slots__ = ("awaiting", "indent", "inline", "is_map", "key", "value")

    def __init__(self, is_map: bool, indent: int, inline: bool = False) -> None:
        self.is_map = is_map
        self.indent = indent  # the column of its keys or dashes
        self.inline = inline  # a sequence at the indent of the key that holds it
        self.value: Any = {} if is_map else []
        self.key: Any = None
        self.awaiting = False  # its last key or dash has its value on the following lines

    def store(self, value: Any) -> None:
        if self.is_map:
            self.value[self.key] = value
        else:
            self.value.append(value)
        self.awaiting = False


def _is_dash(line: str, at: int) -> bool:
    """Whether ``line[at]`` is a block sequence's dash (followed by a space or the end)."""
    return line[at] == "-" and (at + 1 == len(line) or line[at + 1] == " ")


def _key(line: str, at: int, max_number_chars: int) -> tuple[Any, int] | None:
    """If ``line[at:]`` is ``key: ...`` or ``key:``, the key and the index after the
    colon; None if it is no mapping entry."""
    end = len(line)
    if line[at] in "'\"":
        key, colon = _quoted(line, at)
        colon = _skip_spaces(line, colon)
        if colon < end and line[colon] == ":" and (colon + 1 == end or line[colon + 1] == " "):
            if colon - at > _LONGEST_KEY:
                raise _Unsupported
            return key, colon + 1
        return None
    if not _plain_starts(line, at):
        return None
    colon = line.find(":", at)
    while colon >= 0 and colon + 1 < end and line[colon + 1] != " ":
        colon = line.find(":", colon + 1)
    if colon < 0:
        return None
    comment = line.find(" #", at, colon)
    if comment >= 0:
        return None
    if colon - at > _LONGEST_KEY:
        raise _Unsupported
    return resolve_plain(line[at:colon].rstrip(" "), max_number_chars), colon + 1


def _inline_value(line: str, at: int, depth: int, limits: _Limits) -> Any:
    """The value written on the line from ``line[at]`` (not blank, not a comment): a
    scalar or a one-line flow collection, and nothing after it but a comment."""
    char = line[at]
    if char in "[{":
        value, after = _flow(line, at, depth, limits)
    elif char in "'\"":
        limits.count()
        value, after = _quoted(line, at)
    else:
        if not _plain_starts(line, at):
            raise _Unsupported
        limits.count()
        comment = line.find(" #", at)
        text = (line[at:comment] if comment >= 0 else line[at:]).rstrip(" ")
        if ": " in text or text.endswith(":"):
            raise _Unsupported  # a mapping where a value was, which PyYAML refuses
        return resolve_plain(text, limits.max_number_chars)
    if not _rest_is_blank(line, after):
        raise _Unsupported
    return value


class _Reader:
    """Block structure line by line, with the open blocks on a stack."""

    def __init__(self, limits: _Limits) -> None:
        self.limits = limits
        self.stack: list[_Block] = []
        self.root: Any = None
        self.rooted = False  # the document's top value has begun

    def open(self, is_map: bool, indent: int, inline: bool = False) -> _Block:
        if len(self.stack) >= self.limits.max_nesting:
            raise _Unsupported
        self.limits.count()
        block = _Block(is_map, indent, inline)
        if self.stack:
            self.stack[-1].store(block.value)
        else:
            self.root = block.value
        self.stack.append(block)
        return block

    def line(self, line: str, indent: int) -> None:
        """One line holding something; ``line[indent]`` is its first character."""
        stack = self.stack
        if not stack:
            if self.rooted:
                raise _Unsupported  # a second root
            self.rooted = True
            if line[indent] in "[{":
                self.root = _inline_value(line, indent, 0, self.limits)
                return
            is_map = not _is_dash(line, indent)
            if is_map and _key(line, indent, self.limits.max_number_chars) is None:
                raise _Unsupported  # a scalar document
            self.entries(self.open(is_map, indent), line)
            return
        dash = _is_dash(line, indent)
        top = stack[-1]
        if top.awaiting:
            if indent > top.indent:
                if not dash and _key(line, indent, self.limits.max_number_chars) is None:
                    raise _Unsupported  # a scalar on a line of its own (may span lines)
                self.entries(self.open(not dash, indent), line)
                return
            if indent == top.indent and top.is_map and dash:
                self.entries(self.open(False, indent, inline=True), line)
                return
            self.limits.count()
            top.store(None)
        while top.indent > indent or (top.inline and top.indent == indent and not dash):
            stack.pop()
            if not stack:
                raise _Unsupported  # a dedent below the root
            top = stack[-1]
        if top.indent != indent or top.is_map == dash:
            raise _Unsupported
        self.entries(top, line)

    def entries(self, block: _Block, line: str) -> None:
        """The entry of ``block`` at ``line[block.indent]``, and the blocks it opens on the
        same line (``- key: value``, ``- - item``)."""
        limits = self.limits
        end = len(line)
        while True:
            at = block.indent
            if block.is_map:
                found = _key(line, at, limits.max_number_chars)
                if found is None:
                    raise _Unsupported  # a scalar where a key was (a continued line?)
                key, after = found
                limits.count()
                if key in block.value:
                    raise _Unsupported  # a duplicate key: PyYAML's path names it
                block.key = key
                value_at = _skip_spaces(line, after)
                if value_at == end or line[value_at] == "#":
                    block.awaiting = True
                    return
                block.store(_inline_value(line, value_at, len(self.stack), limits))
                return
            item_at = _skip_spaces(line, at + 1)
            if item_at == end or line[item_at] == "#":
                block.awaiting = True
                return
            if _is_dash(line, item_at):
                block = self.open(False, item_at)
            elif _key(line, item_at, limits.max_number_chars) is not None:
                block = self.open(True, item_at)
            else:
                block.store(_inline_value(line, item_at, len(self.stack), limits))
                return

    def finish(self) -> Any:
        if self.stack and self.stack[-1].awaiting:
            self.limits.count()
            self.stack[-1].store(None)
        return self.root


def _yaml_printable(line: str) -> bool:
    """Whether every character of ``line`` is one YAML reads as text (Python's printable
    characters are; YAML also allows no-break and other spaces, private-use and unassigned
    characters, which PyYAML writes raw).  Line breaks YAML 1.1 knows besides ``\n``
    (NEL, LS, PS) and the byte-order mark (libyaml skips it at a line's start) are not
    read here.  Called only for a line that is not all printable: a loop, not a regular
    expression (one covering these ranges takes ~5 ms to compile)."""
    for char in line:
        if char.isprintable():
            continue
        point = ord(char)
        if 0xA0 <= point <= 0xD7FF:
            if point in (0x2028, 0x2029):
                return False
        elif not (0xE000 <= point <= 0xFFFD and point != 0xFEFF) and point < 0x10000:
            return False
    return True


def read(text: str, max_nesting: int, max_nodes: int, max_number_chars: int) -> Any:
    """The document ``text`` holds, or :data:`GIVE_UP` if it is not in the subset."""
    if "\t" in text:
        return GIVE_UP
    if "\r" in text:
        if text.count("\r") != text.count("\r\n"):
            return GIVE_UP  # a lone CR is a line break too
        text = text.replace("\r\n", "\n")  # (no scalar read here spans a line break)
    reader = _Reader(_Limits(max_nesting, max_nodes, max_number_chars))
    started = False  # a --- or content seen
    try:
        for line in text.split("\n"):
            if not line.isprintable() and not _yaml_printable(line):
                return GIVE_UP
            content = line.lstrip(" ")
            if not content or content[0] == "#":
                continue
            indent = len(line) - len(content)
            if indent == 0 and content.startswith(("---", "...")):
                if started or not (content == "---" or content.startswith("--- ")):
                    return GIVE_UP  # a second document, an end marker, "---x"
                started = True
                if _rest_is_blank(line, 3):
                    continue
                indent = len(line) - len(line[3:].lstrip(" "))
                if line[indent] not in "[{":
                    return GIVE_UP  # only a flow collection is read on the marker's line
            started = True
            reader.line(line, indent)
        return reader.finish()
    except _Unsupported:
        return GIVE_UP
