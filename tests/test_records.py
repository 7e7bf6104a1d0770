"""gfd.records: what the snapshot, settings and label types rely on from a frozen record,
checked side by side with ``@dataclass(frozen=True)``, which it replaces (issue 11)."""

from __future__ import annotations

import dataclasses
import re
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gfd import records
from gfd.records import FrozenInstanceError, field, record


@record
class Part:
    major: int
    minor: int = 0


@record
class Whole:
    """A record with every kind of field."""

    KIND: ClassVar[str] = "whole"
    name: str
    part: Part = field(default_factory=lambda: Part(1))
    tags: tuple[str, ...] = ()
    regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class DPart:
    major: int
    minor: int = 0


@dataclasses.dataclass(frozen=True)
class DWhole:
    KIND: ClassVar[str] = "whole"
    name: str
    part: DPart = dataclasses.field(default_factory=lambda: DPart(1))
    tags: tuple[str, ...] = ()
    regex: re.Pattern[str] | None = dataclasses.field(default=None, compare=False, repr=False)


names = st.text(st.characters(exclude_categories=("Cs",)), max_size=5)  # st.text()'s own alphabet
tags = st.lists(st.sampled_from(["a", "b", "é"]), max_size=2).map(tuple)
ints = st.integers(-3, 3)


@given(names, ints, ints, tags, names, ints, ints, tags)
def test_equality_hash_and_repr_are_a_frozen_dataclass_s(
    n1: str, a1: int, b1: int, t1: tuple[str, ...], n2: str, a2: int, b2: int, t2: tuple[str, ...]
) -> None:
    r1, r2 = Whole(n1, Part(a1, b1), t1), Whole(n2, Part(a2, b2), t2)
    d1, d2 = DWhole(n1, DPart(a1, b1), t1), DWhole(n2, DPart(a2, b2), t2)
    assert (r1 == r2) == (d1 == d2)
    assert (r1 != r2) == (d1 != d2)
    assert (hash(r1) == hash(Whole(n1, Part(a1, b1), t1))) is True
    assert repr(r1) == repr(d1).replace("DWhole", "Whole").replace("DPart", "Part")


def test_fields_defaults_and_factories() -> None:
    assert records.fields(Whole) == ("name", "part", "tags", "regex")  # no ClassVar
    assert Whole.KIND == "whole"
    plain = Whole("x")
    assert plain.part == Part(1, 0) and plain.tags == () and plain.regex is None
    assert Whole("x").part is not Whole("x").part  # a fresh value from the factory
    assert Whole(name="y", tags=("a",)) == Whole("y", Part(1), ("a",))


def test_a_field_left_out_of_comparison_is_ignored_by_eq_hash_and_repr() -> None:
    one, other = Whole("x", regex=re.compile("a")), Whole("x", regex=re.compile("b"))
    assert one == other and hash(one) == hash(other)
    assert "regex" not in repr(one)


def test_instances_are_frozen() -> None:
    whole = Whole("x")
    with pytest.raises(FrozenInstanceError, match="'name'"):
        whole.name = "y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del whole.name  # type: ignore[misc]
    assert whole.name == "x"


def test_different_classes_with_equal_fields_are_not_equal() -> None:
    @record
    class Other:
        major: int
        minor: int = 0

    assert Part(1, 2) != Other(1, 2)
    assert Part(1, 2) == Part(1, 2)


def test_replace_copies_with_changes_and_refuses_an_unknown_field() -> None:
    whole = Whole("x", tags=("a",))
    changed = records.replace(whole, name="y")
    assert changed == Whole("y", tags=("a",)) and whole.name == "x"
    with pytest.raises(TypeError, match="no field 'nope'"):
        records.replace(whole, nope=1)


def test_the_constructor_checks_its_arguments_like_a_function() -> None:
    with pytest.raises(TypeError):
        Part()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Part(1, 2, 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Part(1, bogus=2)  # type: ignore[call-arg]


def test_declaration_errors() -> None:
    with pytest.raises(TypeError, match="non-default field 'b' follows a default"):

        @record
        class Bad:
            a: int = 0
            b: int

    with pytest.raises(TypeError, match="cannot derive from a record"):

        @record
        class Derived(Part):
            extra: int = 0

    with pytest.raises(ValueError, match="both a default and a default_factory"):
        field(default=1, default_factory=int)


def test_match_args_follow_the_fields() -> None:
    match Part(3, 4):
        case Part(major, minor):
            assert (major, minor) == (3, 4)
        case _:
            raise AssertionError("no match")
