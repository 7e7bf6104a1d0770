"""Frozen records: the part of ``@dataclass(frozen=True)`` gfd uses, at a start-up cost
a oneshot can afford (issue 11).

``import dataclasses`` imports ``inspect`` (with ``ast``, ``dis``, ``tokenize``), and every
frozen dataclass compiles six methods from source when its class is created: with the ~30
record types of gfd that was about a third of a oneshot's run time.  :func:`record` builds
only ``__init__`` from source (so that it has a real signature, keyword arguments and
TypeErrors like any function, at the speed of a hand-written one); ``__repr__``,
``__eq__``, ``__hash__`` and the frozen ``__setattr__``/``__delattr__`` are shared
functions that read the class's field list.

What a record is, exactly as with a frozen dataclass: the annotated class attributes, in
order, are its fields (``ClassVar`` ones are not); an attribute value is the field's
default, :func:`field` gives a default factory or leaves a field out of comparison and
repr; instances are immutable (:class:`FrozenInstanceError`), equal when of the same class
with equal compared fields, hashable by those, and shown as ``Name(a=1, b='x')``.
:func:`replace` is ``dataclasses.replace``; :func:`fields` lists the field names.
Inheritance between records is not supported (gfd has none): a record's base must not be
a record.
"""

from __future__ import annotations

import sys
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Any:
        return lambda decorator: decorator


T = TypeVar("T")


class FrozenInstanceError(AttributeError):
    """An attempt to set or delete a field of a record (like dataclasses' own error)."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()


class Field:
    """What :func:`field` says about one field."""

    __slots__ = ("compare", "default", "default_factory", "repr")

    def __init__(
        self, default: Any, default_factory: Callable[[], Any] | None, compare: bool, repr: bool
    ) -> None:
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.repr = repr


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | None = None,
    compare: bool = True,
    repr: bool = True,
) -> Any:
    """A field's default factory (a fresh value per instance), or a field left out of
    ``==``, ``hash()`` and ``repr()``."""
    if default is not _MISSING and default_factory is not None:
        raise ValueError("a field cannot have both a default and a default_factory")
    return Field(default, default_factory, compare, repr)


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__record_repr__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self.__record_key__
    return bool(key(self) == key(other))


def _hash(self: Any) -> int:
    return hash(self.__record_key__(self))


def _no_key(_: object) -> tuple[()]:
    return ()


def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar"))


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen record (see the module docstring)."""
    for base in cls.__mro__[1:]:
        if "__record_fields__" in base.__dict__:
            raise TypeError(f"{cls.__qualname__}: a record cannot derive from a record")
    # the class's own annotations (inspect.get_annotations would import inspect)
    annotations: dict[str, Any] = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    names: list[str] = []
    params: list[str] = []
    lines: list[str] = []
    scope: dict[str, Any] = {"_set": object.__setattr__, "_MISSING": _MISSING}
    compared: list[str] = []
    shown: list[str] = []
    seen_default = False
    for name, annotation in annotations.items():
        if _is_classvar(annotation):
            continue
        names.append(name)
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, Field) else Field(value, None, True, True)
        if spec.compare:
            compared.append(name)
        if spec.repr:
            shown.append(name)
        if spec.default_factory is not None:
            scope[f"_factory_{name}"] = spec.default_factory
            params.append(f"{name}=_MISSING")
            lines.append(f"  if {name} is _MISSING: {name} = _factory_{name}()")
            seen_default = True
        elif spec.default is not _MISSING:
            scope[f"_default_{name}"] = spec.default
            params.append(f"{name}=_default_{name}")
            seen_default = True
        elif seen_default:
            raise TypeError(f"{cls.__qualname__}: non-default field {name!r} follows a default")
        else:
            params.append(name)
        if value is not _MISSING:
            if spec.default is _MISSING:
                delattr(cls, name)  # no class attribute for a field without a plain default
            elif isinstance(value, Field):
                setattr(cls, name, spec.default)
        lines.append(f"  _set(self, {name!r}, {name})")
    body = "\n".join(lines) or "  pass"
    signature = ", ".join(["self", *params])
    source = (
        f"def __create__({', '.join(scope)}):\n"
        f" def __init__({signature}):\n{body}\n"
        " return __init__"
    )
    # the module's globals, so that the __init__ annotations resolve like the class's
    module = sys.modules.get(cls.__module__)
    namespace: dict[str, Any] = {}
    exec(source, vars(module) if module is not None else {}, namespace)
    init = namespace["__create__"](**scope)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {name: annotations[name] for name in names}
    init.__annotations__["return"] = "None"
    methods: dict[str, Any] = {
        "__init__": init,
        "__record_fields__": tuple(names),
        "__record_repr__": tuple(shown),
        "__record_key__": staticmethod(attrgetter(*compared) if compared else _no_key),
        "__match_args__": tuple(names),
        "__repr__": _repr,
        "__eq__": _eq,
        "__hash__": _hash,
        "__setattr__": _frozen_setattr,
        "__delattr__": _frozen_delattr,
    }
    for name, value in methods.items():
        setattr(cls, name, value)
    return cls


def fields(instance_or_class: object) -> tuple[str, ...]:
    """The field names of a record, in order."""
    owner = instance_or_class if isinstance(instance_or_class, type) else type(instance_or_class)
    names: tuple[str, ...] = owner.__dict__["__record_fields__"]
    return names


def is_record(value: object) -> bool:
    return "__record_fields__" in type(value).__dict__


def replace(instance: T, **changes: Any) -> T:
    """A copy of the record ``instance`` with ``changes`` (like ``dataclasses.replace``)."""
    names = fields(instance)
    for name in changes:
        if name not in names:
            raise TypeError(f"{type(instance).__qualname__} has no field {name!r}")
    values = {name: changes[name] if name in changes else getattr(instance, name) for name in names}
    return type(instance)(**values)
