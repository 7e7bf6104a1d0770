"""Reading the two user documents (config file and snapshot): YAML or JSON text into plain
data, with every failure turned into the caller's error type and one short line.

The documents come from operators and from other machines, so reading them is bounded
(README "Limits"):

- only a regular file is read (a FIFO or ``/dev/zero`` is refused without blocking), and at
  most :data:`MAX_DOCUMENT_BYTES` of it;
- YAML is parsed by PyYAML's C loader (libyaml; PyYAML's own parser where PyYAML was built
  without it), and its events are built into data by an iterative builder, not PyYAML's
  recursive composer: nesting deeper than :data:`MAX_NESTING` is refused as soon as it is
  seen (the C composer overflows the C stack on ``[[[[…`` 100,000 deep), aliases are
  counted at their expanded size (a "billion laughs" document stops at
  :data:`MAX_NODES`), a duplicate key in a mapping is an error (PyYAML keeps the last one
  silently), and a number too long to be a plausible value is refused before ``int()``
  sees it (Python refuses more than 4,300 digits with a ValueError);
- every value quoted in a message is clipped to about 100 characters (:func:`describe`,
  :func:`clip`), so a megabyte-long value never becomes a megabyte-long line.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from gfd.echo import clip, clip_path, describe
from gfd.errors import UsageError
from gfd.files import UnreadableFileError, read_regular

# json and yaml are imported by the first document that needs them: a run that reads no
# document (discovery through NVML, no config file) never pays for PyYAML.

#: the largest config file or snapshot read (a DGX snapshot is ~10 KB; 10,000 GPUs ~2.4 MB)
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
#: the deepest nesting of lists and mappings (real documents nest fewer than 10 levels)
MAX_NESTING = 100
#: the most values a document may hold, counting every use of an alias at its full size
MAX_NODES = 1_000_000
#: the longest number accepted in a document, in characters (Python stops at 4,300 digits)
MAX_NUMBER_CHARS = 100
# --------------------------------------------------------------------------- files


def read_text(
    path: str, flag: str, error: type[UsageError], limit: int = MAX_DOCUMENT_BYTES
) -> str:
    """A regular file of at most ``limit`` bytes, as UTF-8 text; never blocks and never
    reads without bound (:func:`gfd.files.read_regular`)."""
    try:
        data = read_regular(path, limit)
    except UnreadableFileError as exc:
        shown = repr(clip_path(path))
        if exc.reason.startswith("is "):
            raise error(f"{flag}: {shown} {exc.reason}") from None
        raise error(f"{flag}: cannot read {shown}: {exc.reason}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{flag}: {clip_path(path)!r} is not UTF-8 text") from None


# --------------------------------------------------------------------------- parsing


class _DocumentError(Exception):
    """A bounded-reading rule broken; the message is complete apart from the source."""


def parse_yaml(text: str, source: str, error: type[UsageError]) -> Any:
    """YAML or JSON text into plain data; a syntax error names line and column.

    JSON is read by the JSON parser: YAML's reading of JSON escapes differs (a surrogate
    pair becomes two lone surrogates) and it rejects control characters JSON allows."""
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                return _parse_json(text)
            except json.JSONDecodeError:
                pass  # flow-style YAML, or broken: the YAML parser says which
        import yaml

        try:
            return _build_yaml(text)
        except yaml.YAMLError as exc:
            raise _DocumentError(_yaml_problem(exc)) from None
    except _DocumentError as exc:
        raise error(f"{source}: {exc}") from None


def _yaml_problem(exc: Exception) -> str:
    """A PyYAML syntax error as "not valid YAML at line L, column C: <problem>"."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"not valid YAML{where}: {clip(problem)}"


# ---- JSON


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DocumentError(f"duplicate key {describe(key)}")
            seen.add(key)
    return mapping


def _parse_json(text: str) -> Any:

    try:
        document = json.loads(text, object_pairs_hook=_unique_pairs)
    except RecursionError:
        raise _DocumentError(f"nested deeper than {MAX_NESTING} levels") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer past Python's 4,300-digit limit
        message = _long_json_number(text) or f"cannot read a value: {clip(str(exc))}"
        raise _DocumentError(message) from None
    if text.count("[") + text.count("{") > MAX_NESTING:
        _check_depth(document)
    return document


def _long_json_number(text: str) -> str | None:
    """Where the first over-long number of a JSON text is, and under which key."""

    digits = sys.get_int_max_str_digits() or 4300  # the limit json.loads ran into
    number = re.search(rf"-?\d{{{digits + 1},}}", text)
    if number is None:
        return None
    line = text.count("\n", 0, number.start()) + 1
    column = number.start() - text.rfind("\n", 0, number.start())
    key = re.search(
        r'"((?:[^"\\]|\\.){0,200})"\s*:\s*$', text[max(0, number.start() - 300) : number.start()]
    )
    where = f"{clip(key.group(1), 40)}: " if key else ""
    return (
        f"{where}a number of {len(number.group())} characters is longer than the limit of "
        f"{MAX_NUMBER_CHARS} at line {line}, column {column}"
    )


def _check_depth(document: Any) -> None:
    """Iteratively: no recursion on a document that may be nested ~1,000 deep."""
    pending = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, (list, dict)):
            if depth > MAX_NESTING:
                raise _DocumentError(f"nested deeper than {MAX_NESTING} levels")
            children = value.values() if isinstance(value, dict) else value
            pending.extend(
                (child, depth + 1) for child in children if isinstance(child, (list, dict))
            )


# ---- YAML

_TAG = "tag:yaml.org,2002:"
_STR_TAG = _TAG + "str"
_INT_TAG = _TAG + "int"
_MERGE_TAG = _TAG + "merge"
_SCALAR_TAGS = {_TAG + name for name in ("null", "bool", "int", "float", "str", "timestamp")}


class _Frame:
    """A list or mapping being built."""

    __slots__ = ("anchor", "has_key", "is_map", "key", "key_is_merge", "merges", "size", "value")

    def __init__(self, is_map: bool, anchor: str | None) -> None:
        self.value: Any = {} if is_map else []
        self.is_map = is_map
        self.key: Any = None
        self.has_key = False
        self.key_is_merge = False
        self.merges: list[Any] = []
        self.size = 1
        self.anchor = anchor


def _where(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _path(stack: list[_Frame]) -> str:
    parts: list[str] = []
    for frame in stack:
        if frame.is_map:
            if not frame.has_key:
                break
            key = clip(str(frame.key), 40)
            parts.append(f".{key}" if parts else key)
        else:
            parts.append(f"[{len(frame.value)}]")
    return clip("".join(parts))


class _YamlBuilder:
    """Plain data from YAML events, without recursion (see the module docstring)."""

    def __init__(self) -> None:
        import yaml

        self.yaml: Any = yaml
        self.resolver: Any = yaml.resolver.Resolver()
        self.constructor = yaml.constructor.SafeConstructor()
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.stack: list[_Frame] = []
        self.nodes = 0
        self.result: Any = None

    def fail(self, message: str, mark: Any) -> _DocumentError:
        path = _path(self.stack)
        return _DocumentError(f"{path + ': ' if path else ''}{message}{_where(mark)}")

    def scalar(self, event: Any) -> tuple[Any, bool]:
        """The scalar's value, and whether it is the merge key ``<<``."""
        tag = event.tag
        value = event.value
        if tag is None or tag == "!":
            tag = self.resolver.resolve(self.yaml.ScalarNode, value, event.implicit)
        if tag == _STR_TAG:
            return value, False
        if tag == _MERGE_TAG:
            return value, True
        if tag not in _SCALAR_TAGS:
            raise self.fail(f"unsupported tag {describe(tag)}", event.start_mark)
        if tag == _INT_TAG and len(value) > MAX_NUMBER_CHARS:
            raise self.fail(
                f"a number of {len(value)} characters is longer than the limit of "
                f"{MAX_NUMBER_CHARS}",
                event.start_mark,
            )
        node = self.yaml.ScalarNode(tag, value, event.start_mark, event.end_mark, event.style)
        try:
            return self.constructor.yaml_constructors[tag](self.constructor, node), False
        except (ValueError, OverflowError, self.yaml.YAMLError) as exc:
            message = f"cannot read {describe(value)}: {clip(str(exc))}"
            raise self.fail(message, event.start_mark) from None

    def add(self, value: Any, size: int, mark: Any, is_merge: bool = False) -> None:
        self.nodes += size
        if self.nodes > MAX_NODES:
            raise self.fail(
                f"more than {MAX_NODES} values (aliases count at their full size)", mark
            )
        if not self.stack:
            self.result = value
            return
        frame = self.stack[-1]
        frame.size += size
        if not frame.is_map:
            frame.value.append(value)
        elif not frame.has_key:
            if isinstance(value, (list, dict)):
                raise self.fail("a mapping key must be a plain value", mark)
            frame.key, frame.has_key, frame.key_is_merge = value, True, is_merge
        elif frame.key_is_merge:
            frame.merges.append(value)
            frame.has_key = False
        else:
            if frame.key in frame.value:
                raise self.fail(f"duplicate key {describe(frame.key)}", mark)
            frame.value[frame.key] = value
            frame.has_key = False

    def close(self, frame: _Frame, mark: Any) -> Any:
        value = frame.value
        if frame.merges:
            merged: dict[Any, Any] = {}
            for source in frame.merges:
                for mapping in source if isinstance(source, list) else [source]:
                    if not isinstance(mapping, dict):
                        raise self.fail("a merge key (<<) needs a mapping or a list of them", mark)
                    for key, item in mapping.items():
                        merged.setdefault(key, item)
            merged.update(value)
            value = merged
        return value

    def build(self, text: str) -> Any:
        import yaml

        documents = 0
        # libyaml's parser when PyYAML was built with it; the pure-Python parser is iterative
        loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        events: Any = yaml.parse(text, Loader=loader)
        for event in events:
            kind = type(event)
            if kind is yaml.ScalarEvent:
                value, is_merge = self.scalar(event)
                if event.anchor is not None:
                    self.anchors[event.anchor] = (value, 1)
                self.add(value, 1, event.start_mark, is_merge)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                is_map = kind is yaml.MappingStartEvent
                expected = _TAG + ("map" if is_map else "seq")
                if event.tag not in (None, "!", expected):
                    raise self.fail(f"unsupported tag {describe(event.tag)}", event.start_mark)
                if len(self.stack) >= MAX_NESTING:
                    raise self.fail(
                        f"nested deeper than the limit of {MAX_NESTING} levels", event.start_mark
                    )
                self.stack.append(_Frame(is_map, event.anchor))
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                frame = self.stack[-1]
                value = self.close(frame, event.start_mark)
                self.stack.pop()
                if frame.anchor is not None:
                    self.anchors[frame.anchor] = (value, frame.size)
                self.add(value, frame.size, event.start_mark)
            elif kind is yaml.AliasEvent:
                if event.anchor not in self.anchors:
                    raise self.fail(
                        f"unknown alias {describe(event.anchor)} (or an alias inside its own "
                        "anchor)",
                        event.start_mark,
                    )
                value, size = self.anchors[event.anchor]
                self.add(value, size, event.start_mark)
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise self.fail("expected one document, found another", event.start_mark)
        return self.result


def _build_yaml(text: str) -> Any:
    """YAML text into plain data, within the limits of the module docstring."""
    return _YamlBuilder().build(text)


def as_list(value: Any, where: str, error: type[UsageError]) -> list[Any]:
    """A sequence field: null means empty, anything but a list is an error."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(f"{where}: expected a list, got {describe(value)}")
    return value
