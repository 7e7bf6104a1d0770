"""Snapshot fields declared once: a field of a snapshot record carries, in its dataclass
metadata (:func:`declare`), the :class:`Kind` that reads and writes it (type and bounds),
its YAML name and whether it is written when it holds its default.  :func:`read_record`
and :func:`write_record` walk those declarations; no record has a reader or writer of its
own, so a new field is one declaration.

Reading is strict and names the path of the first bad value: a record's keys are read in
declaration order (a missing required key, a value of the wrong type or out of bounds is
an error there), then a key the record does not declare is an error, then the entries of
its lists are read in turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from gfd.documents import as_list
from gfd.echo import clip, describe
from gfd.errors import SnapshotError

#: the dataclass metadata key under which a field's declaration is kept
METADATA_KEY = "gfd.snapshot"

#: the longest string (names, UUIDs, versions, the machine type)
MAX_STRING_CHARS = 1024
UINT32_MAX = 2**32 - 1

Parse = Callable[[Any, str], Any]


class HexInt(int):
    """An int that YAML writes in hex (PCI class codes read best as 0x030200)."""


class Flow(dict):  # type: ignore[type-arg]
    """A small mapping YAML writes on one line (an NVLink, a GPU pair)."""


class Kind:
    """How one value is read from a document (checked, at ``path``) and written back."""

    def read(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def write(self, value: Any, for_yaml: bool) -> Any:
        return value


class Scalar(Kind):
    """A plain value: ``parse`` checks it; ``yaml_form`` (if any) dresses it for YAML."""

    def __init__(self, parse: Parse, yaml_form: Callable[[Any], Any] | None = None) -> None:
        self.parse = parse
        self.yaml_form = yaml_form

    def read(self, value: Any, path: str) -> Any:
        return self.parse(value, path)

    def write(self, value: Any, for_yaml: bool) -> Any:
        return self.yaml_form(value) if for_yaml and self.yaml_form else value


class Nullable(Kind):
    """``null`` (None) or a value of ``inner``."""

    def __init__(self, inner: Kind) -> None:
        self.inner = inner

    def read(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.read(value, path)

    def write(self, value: Any, for_yaml: bool) -> Any:
        return None if value is None else self.inner.write(value, for_yaml)


class Record(Kind):
    """A mapping read into the declared dataclass ``cls`` (written on one line if ``flow``)."""

    def __init__(self, cls: type[Any], *, flow: bool = False) -> None:
        self.cls = cls
        self.flow = flow

    def read(self, value: Any, path: str) -> Any:
        return read_record(self.cls, Reader(value, path))

    def write(self, value: Any, for_yaml: bool) -> Any:
        written = write_record(value, for_yaml)
        return Flow(written) if self.flow else written


class Items(Kind):
    """A list (null: empty) of ``item`` values, read into a tuple: at most ``limit`` of them
    (``what`` names them in the error), and ``check(items, path)`` run on the whole."""

    def __init__(
        self,
        item: Kind,
        *,
        limit: int | None = None,
        what: str = "",
        check: Callable[[tuple[Any, ...], str], None] | None = None,
    ) -> None:
        self.item = item
        self.limit = limit
        self.what = what
        self.check = check

    def shape(self, value: Any, path: str) -> list[Any]:
        """The list itself, before its entries are read."""
        items = as_list(value, path, SnapshotError)
        if self.limit is not None and len(items) > self.limit:
            raise SnapshotError(
                f"{path}: {len(items)} {self.what}, more than the limit of {self.limit}"
            )
        return items

    def entries(self, items: list[Any], path: str) -> tuple[Any, ...]:
        read = tuple(self.item.read(entry, f"{path}[{i}]") for i, entry in enumerate(items))
        if self.check is not None:
            self.check(read, path)
        return read

    def read(self, value: Any, path: str) -> Any:
        return self.entries(self.shape(value, path), path)

    def write(self, value: Any, for_yaml: bool) -> Any:
        return [self.item.write(entry, for_yaml) for entry in value]


@dataclasses.dataclass(frozen=True, slots=True)
class Declaration:
    """One snapshot field: its kind, its YAML name when that is not the attribute's, whether
    the key may be left out of a document (default: when the attribute has a default) and
    whether the writer leaves it out when it holds its default."""

    kind: Kind
    key: str | None = None
    required: bool | None = None
    omit_default: bool = False


def declare(
    kind: Kind, *, key: str | None = None, required: bool | None = None, omit_default: bool = False
) -> dict[str, Declaration]:
    """The ``metadata=`` of a snapshot field: ``field(default=..., metadata=declare(...))``."""
    return {METADATA_KEY: Declaration(kind, key, required, omit_default)}


@dataclasses.dataclass(frozen=True, slots=True)
class Planned:
    """A declared field as the reader and writer use it."""

    name: str
    key: str
    kind: Kind
    required: bool
    omit_default: bool
    default: Any


_PLANS: dict[type[Any], tuple[Planned, ...]] = {}


def plan(cls: type[Any]) -> tuple[Planned, ...]:
    """The declared fields of the record ``cls``, in declaration order (worked out once)."""
    known = _PLANS.get(cls)
    if known is not None:
        return known
    planned = []
    for field in dataclasses.fields(cls):
        declared = field.metadata.get(METADATA_KEY)
        if not isinstance(declared, Declaration):
            raise TypeError(f"{cls.__name__}.{field.name} has no snapshot declaration")
        default: Any = field.default
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        required = declared.required
        if required is None:
            required = default is dataclasses.MISSING
        key = declared.key or field.name
        planned.append(
            Planned(field.name, key, declared.kind, required, declared.omit_default, default)
        )
    _PLANS[cls] = tuple(planned)
    return _PLANS[cls]


class Reader:
    """Walks one mapping of the document, remembering which keys were consumed."""

    def __init__(self, value: Any, path: str) -> None:
        where = path or "<document>"
        if not isinstance(value, Mapping):
            raise SnapshotError(f"{where}: expected a mapping, got {describe(value)}")
        for key in value:
            if not isinstance(key, str):
                raise SnapshotError(f"{where}: keys must be strings, got {describe(key)}")
        self._value: Mapping[str, Any] = value
        self._path = path
        self._seen: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def has(self, key: str) -> bool:
        return key in self._value

    def take(self, key: str) -> Any:
        self._seen.add(key)
        return self._value[key]

    def required(self, key: str, parse: Parse) -> Any:
        if key not in self._value:
            raise SnapshotError(f"{self.path(key)}: required field is missing")
        return parse(self.take(key), self.path(key))

    def finish(self) -> None:
        unknown = sorted(set(self._value) - self._seen)
        if unknown:
            raise SnapshotError(f"{self.path(clip(unknown[0]))}: unknown key")


def read_record(cls: type[Any], reader: Reader) -> Any:
    """``cls`` built from the mapping ``reader`` walks, as its fields declare (a key left
    out takes the dataclass default)."""
    values: dict[str, Any] = {}
    lists: list[tuple[str, Items, list[Any], str]] = []
    for field in plan(cls):
        if not reader.has(field.key):
            if field.required:
                raise SnapshotError(f"{reader.path(field.key)}: required field is missing")
            continue
        value, path = reader.take(field.key), reader.path(field.key)
        if isinstance(field.kind, Items):
            lists.append((field.name, field.kind, field.kind.shape(value, path), path))
        else:
            values[field.name] = field.kind.read(value, path)
    reader.finish()
    for name, kind, items, path in lists:
        values[name] = kind.entries(items, path)
    return cls(**values)


def write_record(record: Any, for_yaml: bool) -> dict[str, Any]:
    """The record as plain data, keys in declaration order."""
    written: dict[str, Any] = {}
    for field in plan(type(record)):
        value = getattr(record, field.name)
        if field.omit_default and value == field.default:
            continue
        written[field.key] = field.kind.write(value, for_yaml)
    return written


# --------------------------------------------------------------------------- scalar kinds


def parse_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SnapshotError(f"{path}: expected an integer, got {describe(value)}")
    return value


def bounded_parse(largest: int) -> Callable[[Any, str], int]:
    """An integer from 0 to ``largest`` (the range of the NVML value it records)."""

    def parse(value: Any, path: str) -> int:
        number = parse_int(value, path)
        if number < 0:
            raise SnapshotError(f"{path}: expected a non-negative integer, got {describe(number)}")
        if number > largest:
            raise SnapshotError(f"{path}: {describe(number)} is out of range (at most {largest})")
        return number

    return parse


def bounded(largest: int, yaml_form: Callable[[Any], Any] | None = None) -> Scalar:
    return Scalar(bounded_parse(largest), yaml_form)


def parse_text(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise SnapshotError(f"{path}: expected a string, got {describe(value)}")
    if len(value) > MAX_STRING_CHARS:
        raise SnapshotError(
            f"{path}: {describe(value)} is longer than the limit of {MAX_STRING_CHARS} characters"
        )
    return value


def parse_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(f"{path}: expected true or false, got {describe(value)}")
    return value


def choice_parse(*allowed: str) -> Callable[[Any, str], str]:
    def parse(value: Any, path: str) -> str:
        text = parse_text(value, path)
        if text not in allowed:
            raise SnapshotError(
                f"{path}: expected one of {', '.join(allowed)}, got {describe(text)}"
            )
        return text

    return parse


def checked(parse: Parse, test: Callable[[Any], object], message: str) -> Scalar:
    """``parse``, then ``test`` on the value: falsy is the error ``<path>: <message>``
    (``{value}`` in the message is the value as errors show it)."""

    def run(value: Any, path: str) -> Any:
        parsed = parse(value, path)
        if not test(parsed):
            raise SnapshotError(f"{path}: " + message.format(value=describe(parsed)))
        return parsed

    return Scalar(run)


COUNT = bounded(UINT32_MAX)
TEXT = Scalar(parse_text)
BOOL = Scalar(parse_bool)
