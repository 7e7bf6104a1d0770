"""gfd.yamlfast: the plain-YAML reader that spares a oneshot ``import yaml`` (issue 11).

The contract: wherever the fast reader accepts a text, it builds exactly what the PyYAML
path builds (values, types, key order); wherever it does not, it gives up and the PyYAML
path runs unchanged, so ``parse_yaml``'s result or error message is the PyYAML path's for
every input.  Checked differentially (hypothesis) on documents in and near the subset, on
YAML 1.1's special scalar spellings one by one, and on every document gfd ships or writes;
and in subprocesses, that a oneshot reading plain documents never imports PyYAML.
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gfd import documents, yamlfast
from gfd import snapshot as snapshot_io
from gfd.documents import MAX_NESTING, MAX_NODES, MAX_NUMBER_CHARS, parse_yaml
from gfd.errors import UsageError

from .helpers import SAFE_LOADER
from .process import ROOT
from .strategies import index_strings, indices, snapshots
from .test_imports import DGX, loaded, record_imports

# ------------------------------------------------------------------------------ helpers


def fast(text: str) -> Any:
    return yamlfast.read(text, MAX_NESTING, MAX_NODES, MAX_NUMBER_CHARS)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down, with mapping keys in the same order
    (``True == 1`` and ``0.0 == -0.0`` are not the same here; NaN is the same as NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("value", call())
    except Exception as exc:  # the comparison covers whatever either path raises
        return (type(exc).__name__, str(exc))


def public(text: str) -> tuple[str, Any]:
    """``parse_yaml`` as gfd calls it: fast reader first."""
    return outcome(lambda: parse_yaml(text, "doc.yaml", UsageError))


def pyyaml_path(text: str) -> tuple[str, Any]:
    """``parse_yaml`` with the fast reader always giving up: the path as it was."""
    with mock.patch.object(yamlfast, "read", return_value=yamlfast.GIVE_UP):
        return outcome(lambda: parse_yaml(text, "doc.yaml", UsageError))


def check(text: str, *, pure_parser: bool = True) -> bool:
    """The contract on one text; whether the fast reader accepted it.  ``pure_parser``:
    also compare with what PyYAML's own (pure-Python) parser builds."""
    result = fast(text)
    accepted = result is not yamlfast.GIVE_UP
    if accepted:
        # what PyYAML's events build, through libyaml and through PyYAML's own parser (an
        # installation without libyaml uses that)
        references = [outcome(lambda: documents._build_yaml(text))]
        if pure_parser:
            with mock.patch.object(yaml, "CSafeLoader", yaml.SafeLoader):
                references.append(outcome(lambda: documents._build_yaml(text)))
        for reference in references:
            assert reference[0] == "value", (text, reference)
            assert same(result, reference[1]), (text, result, reference[1])
    reference = pyyaml_path(text)
    got = public(text)
    assert got[0] == reference[0], (text, got, reference)
    assert same(got[1], reference[1]), (text, got, reference)
    return accepted


# ------------------------------------------------------------------------------ scalars


def words(text: str) -> list[str]:
    return text.split()


# Every YAML 1.1 spelling with a meaning, and strings near them.
SPECIAL = [
    *words("yes Yes YES no No NO y Y n N true True TRUE false False FALSE"),
    *words("on On ON off Off OFF null Null NULL ~ nul tru yess"),
    *words("0 -0 +0 00 012 08 0o7 0x1F 0X1F 0x_1F -0x1F +0x1F 0xG 0b101 0b -0b1 0b12"),
    *words("1_000 1__0 +1 -1 1 12040 100 1.5 -1.5 +1.5 1. -1. 1.0e3 1.0e+3 1.0E-3 1e3"),
    *words(".5 -.5 +.5 ._5 .e1 .inf -.inf +.inf .Inf .INF .nan .NaN .NAN NaN inf .infx"),
    *words("1:30 -1:30 +1:30 190:20:30 1:60 1:5:9 0:30 1:30.5 1:30. 01:30 1_0:30"),
    *words("0000:07:00.0 0000:0f:00.0 0000:87:00.0 12:34:56.78 0x030200 0x03_0200"),
    *words("2001-12-14 2001-1-4 2001-12-14t21:59:43.10-05:00 2002-12-14x 20011-12-14"),
    "2001-12-14 21:59:43.10 -5",
    "2001-12-14T21:59:43Z",
    *words("550.54.15 1g.5gb 4g.20gb+me 1.2.3 1.2e3.4 a1 1a -a -1a .a +a _1 1- 1-2"),
    *words("<< < = == ~~ ---a ...a -- . + - : ? a: a:b a#b #a"),
    "1" * 100,
    "1" * 101,
    "-" + "1" * 99,
    "-" + "1" * 100,
    "0x" + "f" * 98,
    "0x" + "f" * 99,
    "1." + "5" * 300,
]


def pyyaml_scalar(text: str) -> Any:
    """What PyYAML's SafeLoader makes of ``text`` as a plain scalar."""
    resolver = yaml.resolver.Resolver()
    tag = resolver.resolve(yaml.ScalarNode, text, (True, False))
    node = yaml.ScalarNode(tag, text)
    constructor = yaml.constructor.SafeConstructor()
    return tag, constructor.yaml_constructors[tag](constructor, node)


def resolves_like_pyyaml(text: str) -> bool:
    try:
        mine = yamlfast.resolve_plain(text, MAX_NUMBER_CHARS)
    except yamlfast._Unsupported:
        return False
    tag, theirs = pyyaml_scalar(text)
    assert tag.rsplit(":", 1)[1] in ("str", "int", "float", "bool", "null"), text
    assert same(mine, theirs), (text, mine, theirs)
    return True


@pytest.mark.parametrize("text", [t for t in SPECIAL if t])
def test_a_plain_scalar_resolves_as_pyyaml_resolves_it_or_not_at_all(text: str) -> None:
    resolves_like_pyyaml(text)


def test_only_the_easy_special_spellings_are_resolved() -> None:
    """The reader resolves the common forms and leaves every other special one to PyYAML."""
    resolved = {t for t in SPECIAL if t and resolves_like_pyyaml(t)}
    for easy in ["true", "False", "NULL", "0", "-0", "12040", "0x030200", "1.5", "-1.5"]:
        assert easy in resolved
    certainly_strings = ["550.54.15", "1g.5gb", "0000:0f:00.0", "0000:87:00.0", "a:b", "nul"]
    # numbers in YAML 1.2, strings in YAML 1.1 (PyYAML's float needs a fraction before an
    # exponent, and its octal has no 0o)
    certainly_strings += ["0o7", "1e3"]
    for text in certainly_strings:
        assert text in resolved
    for hard in [
        *words("yes On ~ 012 0x1F 1_000 +1 1:30 .5 1.0e3 2001-12-14 .inf << = 0000:07:00.0"),
        "1" * 101,
    ]:
        if hard == "0x1F":
            continue  # a hex integer is read (snapshots write PCI classes that way)
        assert hard not in resolved, hard


NUMBERISH = st.text(alphabet="0123456789-+._:eExXbBoOaAfFiInNtTzZ ", min_size=1, max_size=14)


@settings(max_examples=600, deadline=None)
@given(NUMBERISH.filter(lambda t: t[0] != " " and t[-1] != " "))
def test_number_like_scalars_resolve_as_pyyaml_resolves_them(text: str) -> None:
    resolves_like_pyyaml(text)


# ------------------------------------------------------------------------------ documents

_text = st.text(
    alphabet=st.characters(
        whitelist_categories=(
            "Lu",
            "Ll",
            "Nd",
            "Po",
            "Pd",
            "Ps",
            "Pe",
            "Sm",
            "Zs",
            "Cc",
            "Lo",
            "So",
        )
    ),
    max_size=12,
)
SCALARS = st.one_of(
    st.sampled_from(SPECIAL),
    st.sampled_from(
        [
            "",
            " ",
            "a b",
            " lead",
            "trail ",
            "it's",
            'say "hi"',
            "é",
            "日本",
            "a\\b",
            "a\nb",
            "\t",
            "\x85",
            "\u2028",
            "a: b",
            "a #b",
            "- a",
            "[a]",
            "{a: b}",
            "a,b",
            "&x",
            "*x",
            "!x",
            "|",
            ">",
            "%",
            "@",
            "`",
            "?",
            "'",
            '"',
            "NVIDIA A100-SXM4-40GB",
        ]
    ),
    _text,
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
KEYS = st.one_of(
    st.sampled_from(["a", "b", "version", "gpus", "name", "index", "x y", "k:", "1", "-k"]),
    # about as long as PyYAML lets a key be (1,024 characters from its start to the colon)
    st.sampled_from(["k" * n for n in (990, 998, 1000, 1010, 1020, 1022, 1024, 1026, 1030)]),
    st.sampled_from(SPECIAL),
    _text,
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
)
DATA = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def _double(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable() and char != "\x85":
            out.append(char)
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(f"\\u{ord(char):04x}")
    return '"' + "".join(out) + '"'


#: the emitter's style options: each drawn uniformly from its choices (a repeated choice is
#: likelier), all at once
STYLE_CHOICES: dict[str, tuple[Any, ...]] = {
    "indent": (2, 4, 3),
    "inline_seq": (False, True),  # a list at its key's indent
    "dash_gap": (1, 1, 2, 3),
    "colon_gap": (1, 1, 2),
    "quote": ("plain", "plain", "single", "double", "mixed"),
    "flow": ("never", "leaves", "always"),
    "comments": (False, True),
    "start": (False, True),
    "newline": ("\n", "\n", "\n", "\r\n"),
    "tilde": (False, True),  # None written ~ (which PyYAML reads) at times
}


def _options(choices: dict[str, tuple[Any, ...]]) -> st.SearchStrategy[dict[str, Any]]:
    """One option of each entry of ``choices``, uniformly, drawn as one string of ``len(choices)``
    letters over a 60-letter alphabet (60 is a multiple of every entry's number of choices):
    one Hypothesis choice instead of one an option, shrinking toward each first choice."""
    assert all(60 % len(options) == 0 for options in choices.values())
    return index_strings(60, len(choices), len(choices)).map(
        lambda letters: {
            key: options[index % len(options)]
            for (key, options), index in zip(choices.items(), indices(letters), strict=True)
        }
    )


_STYLE_OPTIONS = _options(STYLE_CHOICES)


@st.composite
def styles(draw: st.DrawFn) -> dict[str, Any]:
    return {**draw(_STYLE_OPTIONS), "seed": draw(st.integers(0, 2**16))}


def emit(data: Any, style: dict[str, Any]) -> str:
    """A hand-written emitter: plain scalars written raw (right or wrong), block and flow
    collections, comments and blank lines, in the style drawn."""
    turn = [style["seed"]]

    def coin() -> bool:
        turn[0] = (turn[0] * 1103515245 + 12345) % 2**31
        return bool(turn[0] & 0x10000)

    def scalar(value: Any) -> str:
        if value is None:
            return "~" if style["tilde"] and coin() else "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, int):
            return str(value)
        quote = style["quote"]
        if quote == "mixed":
            quote = ["plain", "single", "double"][turn[0] % 3]
            coin()
        if quote == "single":
            return "'" + value.replace("'", "''") + "'"
        if quote == "double":
            return _double(value)
        return str(value)

    def flow(value: Any) -> str:
        if isinstance(value, list):
            return "[" + ", ".join(flow(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{scalar(k)}: {flow(v)}" for k, v in value.items()) + "}"
        return scalar(value)

    def is_leafy(value: Any) -> bool:
        return (
            not any(isinstance(v, (list, dict)) for v in value)
            if isinstance(value, list)
            else not any(isinstance(v, (list, dict)) for v in value.values())
        )

    def inline(value: Any) -> str | None:
        """The value on its key's or dash's line, or None for a block below."""
        if not isinstance(value, (list, dict)):
            return scalar(value)
        if (
            not value
            or style["flow"] == "always"
            or (style["flow"] == "leaves" and is_leafy(value))
        ):
            return flow(value)
        return None

    lines: list[str] = []

    def comment() -> str:
        return "  # note: x" if style["comments"] and coin() else ""

    def block(value: Any, indent: int, first_prefix: str | None) -> None:
        """Write ``value`` (a non-empty collection) at ``indent``; the first line starts with
        ``first_prefix`` instead of spaces when given (``- `` of an item)."""
        items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
        for number, (key, item) in enumerate(items):
            lead = first_prefix if number == 0 and first_prefix is not None else " " * indent
            if style["comments"] and coin():
                lines.append(" " * indent + "# between")
            if style["comments"] and coin():
                lines.append("")
            head = f"{scalar(key)}:" if isinstance(value, dict) else "-"
            gap = " " * (style["colon_gap"] if isinstance(value, dict) else style["dash_gap"])
            text = inline(item)
            if text is not None:
                lines.append(f"{lead}{head}{gap}{text}{comment()}")
                continue
            if isinstance(value, list):
                # the nested collection starts on the dash's line
                block(item, indent + 1 + len(gap), f"{lead}-{gap}")
                continue
            lines.append(f"{lead}{head}{comment()}")
            nested = indent + (
                0 if isinstance(item, list) and style["inline_seq"] else style["indent"]
            )
            block(item, nested, None)

    if style["start"]:
        lines.append("---")
    text = inline(data) if not isinstance(data, (list, dict)) or not data else None
    if text is not None:
        lines.append(text)
    else:
        block(data, 0, None)
    return style["newline"].join(lines) + style["newline"]


DUMP_STYLES = _options(
    {
        "default_flow_style": (False, None),
        "explicit_start": (False, True),
        "indent": (2, 4),
        "allow_unicode": (False, True),
        "sort_keys": (False,),
        "width": (80, 10_000),
    }
)

MUTATION_CHARS = ": -#'\"[]{},&*!|>%@`\t\n\r?~\\.0x"


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    """``text`` with a few edits at the edges of the subset."""
    for _ in range(draw(st.integers(1, 3))):
        if not text:
            break
        at = draw(st.integers(0, len(text) - 1))
        kind = draw(st.sampled_from(["insert", "delete", "indent", "dedent", "duplicate"]))
        if kind == "insert":
            text = text[:at] + draw(st.sampled_from(MUTATION_CHARS)) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            lines = text.split("\n")
            row = at % len(lines)
            if kind == "indent":
                lines[row] = " " + lines[row]
            elif kind == "dedent":
                lines[row] = lines[row][1:] if lines[row].startswith(" ") else lines[row]
            else:
                lines.insert(row, lines[row])
            text = "\n".join(lines)
    return text


DOCUMENTS = st.one_of(
    st.tuples(DATA, DUMP_STYLES).map(lambda pair: yaml.safe_dump(pair[0], **pair[1])),
    st.tuples(DATA, styles()).map(lambda pair: emit(*pair)),
)

HYPOTHESIS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYPOTHESIS
@given(DOCUMENTS)
def test_documents_read_as_pyyaml_reads_them(text: str) -> None:
    check(text)


@HYPOTHESIS
@given(DOCUMENTS.flatmap(mutated))
def test_edited_documents_read_as_pyyaml_reads_them_or_fall_back(text: str) -> None:
    check(text)


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _read_as_text(word: str) -> bool:
    """Whether YAML reads ``word``, written plain, as that text (``NO``, ``on``, ``null``,
    ``True`` are YAML 1.1 booleans and nulls)."""
    return yaml.resolver.Resolver().resolve(yaml.ScalarNode, word, (True, False)) == (
        "tag:yaml.org,2002:str"
    )


#: [a-zA-Z][a-zA-Z0-9 _./-]{0,12}[a-zA-Z0-9] that YAML reads as text: the emitter above
#: writes these plain, as they are
PLAIN_WORDS = st.builds(
    lambda first, middle, last: first + middle + last,
    st.sampled_from(_LETTERS),
    st.text(alphabet=_LETTERS + "0123456789 _./-", max_size=12),
    st.sampled_from(_LETTERS + "0123456789"),
).filter(_read_as_text)
PLAIN_DATA = st.recursive(
    PLAIN_WORDS | st.integers(-(10**12), 10**12) | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(PLAIN_WORDS, inner, max_size=4),
    max_leaves=12,
).filter(lambda value: isinstance(value, (list, dict)) and bool(value))


@settings(max_examples=200, deadline=None)
@given(PLAIN_DATA, DUMP_STYLES, styles())
def test_plain_documents_are_read_by_the_fast_reader(
    data: Any, dump_style: dict[str, Any], style: dict[str, Any]
) -> None:
    """The subset is really read (not just given up on): what PyYAML and the emitter above
    write of ordinary data, in every style."""
    dumped = yaml.safe_dump(data, **dump_style)
    emitted = emit(data, {**style, "quote": "plain", "tilde": False})
    for text in [dumped, emitted]:
        if text is dumped and written_over_lines(text):
            # PyYAML folds a flow collection (default_flow_style=None) at ``width``: a
            # value over several lines is PyYAML's to read; the contract still holds
            assert check(text) is False
            continue
        result = fast(text)
        assert result is not yamlfast.GIVE_UP, text
        assert same(result, data), (text, result, data)


def written_over_lines(text: str) -> bool:
    """Whether a scalar or a flow collection of ``text`` spans lines."""
    open_flows: list[int] = []
    for event in yaml.parse(text, Loader=SAFE_LOADER):
        if isinstance(event, yaml.ScalarEvent):
            if event.start_mark.line != event.end_mark.line:
                return True
        elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_flows.append(event.start_mark.line if event.flow_style else -1)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            line = open_flows.pop()
            if line >= 0 and line != event.end_mark.line:
                return True
    return False


@settings(max_examples=500, deadline=None)
@given(st.characters(blacklist_categories=("Cs",)), st.sampled_from(["a: x{}y", "- {}", "{}: 1"]))
def test_any_character_reads_as_pyyaml_reads_it(char: str, form: str) -> None:
    check(form.format(char) + "\n")


def test_the_characters_read_are_those_yaml_reads_as_text() -> None:
    breaks_and_bom = {0x85, 0x2028, 0x2029, 0xFEFF}
    controls = {*range(0x20), *range(0x7F, 0xA0), 0xFFFE, 0xFFFF}
    refused = breaks_and_bom | controls
    # each of those alone is refused, and all the others (no lone surrogates) are read, in
    # one line: a line is read only if each of its characters is
    assert all(not yamlfast._yaml_printable(chr(point)) for point in refused)
    every = "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))
    others = every.translate(dict.fromkeys(refused))
    assert len(others) == 0x110000 - 0x800 - len(refused)
    assert yamlfast._yaml_printable(others)


# ------------------------------------------------------------------------------ examples

ACCEPTED = [
    ("a: 1\nb:\n- x\n- y\nc: {d: [1, 2], e: 'q'}\n",
     {"a": 1, "b": ["x", "y"], "c": {"d": [1, 2], "e": "q"}}),
    ("---\n# c\n\n- - a\n  - b\n-\n  k: v\n- k:\n  - 1\n", [["a", "b"], {"k": "v"}, {"k": [1]}]),
    ("- a: 1\n  b: 2\n-   c: 3\n    d:\n", [{"a": 1, "b": 2}, {"c": 3, "d": None}]),
    ("k: 'it''s' # c\nq: \"a\\tb\\u00e9\\x41\"\nn: -12\nf: 0.5\nh: 0x1f\n",
     {"k": "it's", "q": "a\tb\xe9A", "n": -12, "f": 0.5, "h": 31}),
    ("2: a\ntrue: b\nnull: c\n'true': d\n", {2: "a", True: "b", None: "c", "true": "d"}),
    ("url: http://x.y/z?q=1#f\nv: a, b [c] {d}\n",
     {"url": "http://x.y/z?q=1#f", "v": "a, b [c] {d}"}),
    ("", None),
    ("# only a comment\n---\n", None),
    ("a: []\nb: {}\nc: [ ]\n", {"a": [], "b": {}, "c": []}),
    ("a: 1\r\nb:\r\n- 'x'\r\n", {"a": 1, "b": ["x"]}),
    ("  a: 1\n  b: 2\n", {"a": 1, "b": 2}),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_the_fast_reader_reads_the_subset(text: str, expected: Any) -> None:
    assert same(fast(text), expected)
    assert check(text) or text == ""


GIVEN_UP = [
    "a: &x 1\nb: *x\n",  # anchors and aliases
    "a: !!str 1\n",  # tags
    "<<: {a: 1}\nb: 2\n",  # merge key
    "a: |\n  text\n",  # block scalars
    "a: >\n  text\n",
    "a: b\n  c\n",  # a plain scalar over two lines
    "- a\n  b\n",
    "a: 'b\n  c'\n",  # a quoted one
    "a: [1,\n  2]\n",  # a flow collection over two lines
    "? a\n: b\n",  # a complex key
    "a:\n\tb: 1\n",  # a tab
    "%YAML 1.1\n---\na: 1\n",  # a directive
    "a: 1\n---\nb: 2\n",  # two documents
    "a: 1\n...\n",
    "a: 1\na: 2\n",  # a duplicate key
    "1: a\ntrue: b\n1.0: c\n",  # equal keys of different spelling
    "a: yes\n",
    "a: ~\n",
    "a: 012\n",
    "a: 1_000\n",
    "a: 2001-12-14\n",
    "a: .inf\n",
    "a: 1:30\n",
    f"a: {'9' * 101}\n",  # a number longer than the limit
    "a: b: c\n",  # errors
    "a\n",
    "- a\nb: 1\n",
    "a: 1\rb: 2\r",  # CR line ends
    "a: 1\r\nb: 2\rc: 3\r\n",
    "\ufeffa: 1\n",  # a byte-order mark
    "a: \x01\n",  # a control character
    'a: "\\/"\n',  # an escape the readers disagree on
    'a: "\\ud800"\n',
    "a: [1, 2,]\n",  # a trailing comma
    '{"a": 1}x\n',
    "k" * 1100 + ": 1\n",  # a key longer than PyYAML allows
    "- " + "k" * 1100 + ": 1\n",
    "a: {" + "k" * 1100 + ": v}\n",
    "{'" + "k" * 1100 + "': v}\n",
]


@pytest.mark.parametrize("text", GIVEN_UP)
def test_the_fast_reader_gives_up_outside_the_subset(text: str) -> None:
    assert fast(text) is yamlfast.GIVE_UP
    check(text)


def test_the_fast_reader_gives_up_past_the_nesting_limit() -> None:
    deep = "".join(f"{' ' * (2 * depth)}k{depth}:\n" for depth in range(MAX_NESTING + 5))
    assert fast(deep) is yamlfast.GIVE_UP
    assert "nested deeper than the limit" in public(deep)[1]
    flow = "a: " + "[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5) + "\n"
    assert fast(flow) is yamlfast.GIVE_UP
    check(flow)
    shallow = "".join(f"{' ' * (2 * depth)}k{depth}:\n" for depth in range(MAX_NESTING - 1))
    assert fast(shallow) is not yamlfast.GIVE_UP


def test_the_fast_reader_gives_up_past_the_value_limit() -> None:
    items = "- 1\n" * 40
    assert yamlfast.read(items, MAX_NESTING, 41, MAX_NUMBER_CHARS) == [1] * 40  # 40 + the list
    assert yamlfast.read(items, MAX_NESTING, 40, MAX_NUMBER_CHARS) is yamlfast.GIVE_UP
    flow = "a: [" + ", ".join(["1"] * 40) + "]\n"
    assert yamlfast.read(flow, MAX_NESTING, 43, MAX_NUMBER_CHARS) == {"a": [1] * 40}
    assert yamlfast.read(flow, MAX_NESTING, 42, MAX_NUMBER_CHARS) is yamlfast.GIVE_UP


def test_a_huge_line_is_read_in_one_pass() -> None:
    """No scan that revisits a line per value: a 1 MiB flow list reads (a quadratic scan
    would take minutes; no time is asserted, the test would just not finish)."""
    flow = "a: [" + ", ".join(["x"] * 250_000) + "]\n"
    assert fast(flow) == {"a": ["x"] * 250_000}
    escaped = 'a: "' + "\\n" * 500_000 + '"\n'
    assert fast(escaped) == {"a": "\n" * 500_000}
    doubled = "a: '" + "''" * 500_000 + "'\n"
    assert fast(doubled) == {"a": "'" * 500_000}
    colons = "a: " + "b:" * 500_000 + "c\n"
    assert fast(colons) == {"a": "b:" * 500_000 + "c"}


# ------------------------------------------------------------------------------ gfd's own


def _shipped() -> list[str]:
    paths = [
        *glob.glob(os.path.join(ROOT, "examples", "**", "*.yaml"), recursive=True),
        *glob.glob(os.path.join(ROOT, "tests", "fixtures", "**", "*.yaml"), recursive=True),
    ]
    assert len(paths) >= 14
    return sorted(paths)


@pytest.mark.parametrize("path", _shipped(), ids=os.path.basename)
def test_every_shipped_document_is_read_by_the_fast_reader(path: str) -> None:
    text = Path(path).read_text()
    assert fast(text) is not yamlfast.GIVE_UP
    assert check(text)


@pytest.mark.parametrize(
    "path", [p for p in _shipped() if "/snapshots/" in p], ids=os.path.basename
)
def test_every_dumped_snapshot_is_read_by_the_fast_reader(path: str) -> None:
    text = snapshot_io.dumps(snapshot_io.load(path))
    assert fast(text) is not yamlfast.GIVE_UP
    assert check(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_dumped_snapshots_are_read_by_the_fast_reader(node: snapshot_io.Snapshot) -> None:
    """Every snapshot ``dumps`` writes is read without PyYAML, odd strings and all, unless
    PyYAML wrote a scalar over several lines (a string holding a line break, or one it
    wrapped at 80 columns) or wrote plain a string that YAML 1.1 might read as a number
    (``08``: the module docstring's ``012``): those are left to PyYAML."""
    text = snapshot_io.dumps(node)
    scalars = [e for e in yaml.parse(text, Loader=SAFE_LOADER) if isinstance(e, yaml.ScalarEvent)]
    spans_lines = any(event.start_mark.line != event.end_mark.line for event in scalars)
    # (hypothesis drew a vGPU branch "08", which PyYAML writes plain; a plain scalar's style
    # is None from PyYAML's parser and "" from libyaml's)
    outside_subset = any(
        not event.style and event.value and not resolves_like_pyyaml(event.value)
        for event in scalars
    )
    # (the two PyYAML parsers are compared on generated documents above; here, on whole
    # snapshots, libyaml's reading is the reference)
    assert check(text, pure_parser=False) is not (spans_lines or outside_subset)
    assert snapshot_io.loads(text) == node


# ------------------------------------------------------------------------------ processes


def test_a_oneshot_with_a_plain_config_file_imports_no_yaml(tmp_path: Path) -> None:
    config = os.path.join(ROOT, "examples", "configs", "time-slicing.yaml")
    recorded = record_imports(
        tmp_path, "--oneshot", "--no-timestamp", "--snapshot-file", DGX, "--config-file", config
    )
    assert "nvidia.com/gpu.replicas=4\n" in recorded["stdout"]
    assert loaded(recorded, ["yaml", "json"]) == []
    assert loaded(recorded, ["gfd.yamlfast"]) == ["gfd.yamlfast"]


def test_a_document_with_an_anchor_falls_back_to_pyyaml(tmp_path: Path) -> None:
    config = tmp_path / "anchored.yaml"
    config.write_text(
        "version: v1\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    resources:\n"
        "    - &gpu {name: nvidia.com/gpu, replicas: 4}\n"
    )
    recorded = record_imports(
        tmp_path, "--oneshot", "--no-timestamp", "--snapshot-file", DGX, "--config-file",
        str(config),
    )  # fmt: skip
    assert "nvidia.com/gpu.replicas=4\n" in recorded["stdout"]
    assert loaded(recorded, ["yaml"]) == ["yaml"]
