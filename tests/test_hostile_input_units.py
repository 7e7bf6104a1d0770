"""Hostile input, in process: the bounded readers one by one.

The process tests (test_hostile_input.py) show the exit status and the one line; these
pin the pieces: the linear pattern matcher against the regular expression it replaces,
durations at Go's limit, reading special files without blocking, clipped messages.
"""

from __future__ import annotations

import itertools
import os
import random
import stat
import sys
from pathlib import Path

import pytest

from gfd import documents
from gfd.config import ResourcePattern, wildcard_regex
from gfd.discovery import sysfs
from gfd.durations import MAX_SECONDS, parse_duration
from gfd.errors import ConfigError, PublishError, SnapshotError, UsageError
from gfd.labels.resources import resource_name_for, wildcard_match
from gfd.outputs.file import FileOutput, StdoutOutput
from gfd.settings import parse_config_text, resolve

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ pattern matching


def test_wildcard_match_agrees_with_the_anchored_regex() -> None:
    chooser = random.Random(10)
    for _ in range(20_000):
        pattern = "".join(chooser.choice("ab*") for _ in range(chooser.randint(0, 8)))
        text = "".join(chooser.choice("ab") for _ in range(chooser.randint(0, 9)))
        expected = wildcard_regex(pattern).fullmatch(text) is not None
        assert wildcard_match(pattern, text) is expected, (pattern, text)


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("A100-*-40GB", "A100-SXM4-40GB", True),
        ("*A100*", "NVIDIA A100-SXM4-40GB", True),
        ("ab*ba", "aba", False),  # head and tail may not overlap
        ("a*", "a", True),
        ("*", "", True),
        ("", "", True),
        ("", "x", False),
        ("a.b", "axb", False),  # '.' is not special
        ("a?c", "abc", False),  # nor '?'
        ("[a]", "[a]", True),
        ("a", "A", False),  # case-sensitive
    ],
)
def test_wildcard_match_cases(pattern: str, text: str, expected: bool) -> None:
    assert wildcard_match(pattern, text) is expected


@pytest.mark.parametrize("length", [90, 96, 20_000])
def test_backtracking_patterns_finish_on_long_names(length: int) -> None:
    # a backtracking regex needs ~length**20 steps here (hours even at 90 characters)
    hostile = "*a" * 20 + "*b"
    rules = (
        ResourcePattern(hostile, "never", wildcard_regex(hostile)),
        ResourcePattern("*a*a*a*", "many", wildcard_regex("*a*a*a*")),
    )
    assert resource_name_for("a" * length, rules, "gpu") == "many"
    assert not rules[0].matches("a" * length)


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize("text", ["9999999999", "3000000h", "2562048h", "1" * 5000 + "s"])
def test_durations_past_gos_maximum_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="longest duration"):
        parse_duration(text)


def test_the_longest_go_duration_is_accepted() -> None:
    seconds = parse_duration("2562047h")
    assert seconds is not None and 0 < seconds <= MAX_SECONDS


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "9999999999", "1" * 200])
def test_impossible_config_intervals_are_config_errors(value: str) -> None:
    text = f"version: v1\nflags:\n  gfd:\n    sleepInterval: {value}\n"
    with pytest.raises(ConfigError, match="sleepInterval"):
        parse_config_text(text, "c.yaml")


# ------------------------------------------------------------------ special files


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_read_text_refuses_special_files_without_blocking(
    tmp_path: Path, fifo: Path, kind: str
) -> None:
    path = {"fifo": str(fifo), "dev-zero": "/dev/zero", "directory": str(tmp_path)}[kind]
    with pytest.raises(SnapshotError, match="not a regular file"):
        documents.read_text(path, "--snapshot-file", SnapshotError)


def test_read_text_refuses_a_file_past_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"#" * 101)
    with pytest.raises(ConfigError, match="larger than the limit of 100 bytes"):
        documents.read_text(str(big), "--config-file", ConfigError, limit=100)
    assert documents.read_text(str(big), "--config-file", ConfigError, limit=101) == "#" * 101


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "huge"])
def test_machine_type_file_that_is_not_a_small_regular_file_is_null(
    tmp_path: Path, fifo: Path, kind: str
) -> None:
    huge = tmp_path / "huge"
    huge.write_text("DGX " * 100_000)
    path = {"fifo": str(fifo), "dev-zero": "/dev/zero", "directory": str(tmp_path)}.get(
        kind, str(huge)
    )
    assert sysfs.read_machine_type(path) is None


def test_machine_type_file_is_read_and_stripped(tmp_path: Path) -> None:
    path = tmp_path / "product_name"
    path.write_text("  DGXA100 920-23687-2530-000\n")
    assert sysfs.read_machine_type(str(path)) == "DGXA100 920-23687-2530-000"


# ------------------------------------------------------------------ the output path


def test_dev_null_as_the_output_file_is_refused_before_anything_is_written() -> None:
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    with pytest.raises(UsageError, match="--output-file '/dev/null': is a character device"):
        resolve({"output_file": "/dev/null", "oneshot": True}, {})


def test_output_path_that_is_a_fifo_is_refused_from_the_environment(fifo: Path) -> None:
    with pytest.raises(UsageError, match=r"environment variable GFD_OUTPUT_FILE .*FIFO"):
        resolve({}, {"GFD_OUTPUT_FILE": str(fifo)})


def test_file_output_never_replaces_reads_or_removes_a_fifo(fifo: Path) -> None:
    output = FileOutput(str(fifo), remove_on_exit=True)
    with pytest.raises(PublishError, match="not a regular file"):
        output.publish({"nvidia.com/gpu.count": "1"})
    with pytest.raises(PublishError, match="not a regular file"):
        output.verify({"nvidia.com/gpu.count": "1"})
    with pytest.raises(PublishError, match="not a regular file"):
        output.cleanup()
    assert fifo.is_fifo()


def test_stdout_output_with_stdout_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(PublishError, match="stdout is closed"):
        StdoutOutput().publish({"nvidia.com/gpu.count": "1"})


# ------------------------------------------------------------------ documents


def test_describe_is_short_for_any_value() -> None:
    huge_int = 10**5000
    nested: list[object] = []
    for _ in range(500):
        nested = [nested, "x" * 1000]
    for value in ("x" * 1_000_000, huge_int, nested, {"k" * 1000: 1}, b"x" * 10_000):
        assert len(documents.describe(value)) <= 200


@pytest.mark.parametrize(("text", "expected"), [
    ("base: &b {a: 1, b: 2}\nuse:\n  <<: *b\n  b: 3\n", {"a": 1, "b": 3}),
    ("x: &x 5\ny: *x\n", 5),
])  # fmt: skip
def test_anchors_and_merge_keys_still_work(text: str, expected: object) -> None:
    document = documents.parse_yaml(text, "doc", ConfigError)
    assert document[list(document)[-1]] == expected


@pytest.mark.parametrize(("text", "message"), [
    ("a: !!python/object/apply:os.system [ls]\n", "unsupported tag"),
    ("a: !!set {x}\n", "unsupported tag"),
    ("a: &a [*a]\n", "unknown alias"),
    ("a: 1\n---\nb: 2\n", "one document"),
    ("a:\n  b: 1\n  c: 2\n  b: 3\n", "a.b: duplicate key 'b'"),
    ("a: " + "9" * 101 + "\n", "a: a number of 101 characters"),
])  # fmt: skip
def test_yaml_documents_outside_the_rules_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        documents.parse_yaml(text, "doc", ConfigError)


def _outcome(text: str) -> tuple[str, object]:
    """What ``parse_yaml`` makes of ``text``: the document, or the refusal's message (of a
    syntax error, where it is: the wording after that is the parser's own)."""
    try:
        return ("read", documents.parse_yaml(text, "doc", ConfigError))
    except ConfigError as exc:
        return (
            "refused", str(exc).split(": ", 2)[:2] if "not valid YAML" in str(exc) else str(exc),
        )  # fmt: skip


def _alias_bomb(levels: int, fan_out: int) -> str:
    """``fan_out ** levels`` values once every alias is expanded, in a few hundred bytes."""
    names = [f"l{level}" for level in range(levels + 1)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['x'] * fan_out)}]"]
    for before, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{before}'] * fan_out)}]")
    return "\n".join(lines) + "\n"


def _shipped_documents() -> list[Path]:
    root = Path(__file__).resolve().parent.parent
    paths = sorted([*root.glob("examples/**/*.yaml"), *root.glob("tests/fixtures/**/*.yaml")])
    assert len(paths) >= 14
    return paths


WITHOUT_LIBYAML = [
    *(path.read_text() for path in _shipped_documents()),
    "base: &b {a: 1, b: 2}\nuse:\n  <<: *b\n  b: 3\n", "a: !!python/object/apply:os.system [ls]\n",
    "a: &a [*a]\n", "a: 1\n---\nb: 2\n", "a:\n  b: 1\n  c: 2\n  b: 3\n", "a: " + "9" * 101 + "\n",
    "a: b: c\n", "a: " + "[" * 150 + "]" * 150 + "\n",
    _alias_bomb(3, 10),  # read: 1,000 values
    _alias_bomb(7, 10),  # refused: ten million
]  # fmt: skip


@pytest.mark.parametrize("text", WITHOUT_LIBYAML)
def test_documents_read_the_same_without_libyaml(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyYAML built without libyaml has no CSafeLoader: documents are then read by its own
    parser, with the same result, and refused by the same rules with the same message."""
    import yaml

    with_libyaml = _outcome(text)
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert _outcome(text) == with_libyaml


@pytest.mark.parametrize("key", ["machineTypeFile", "snapshotFile", "outputFile"])
def test_paths_with_a_nul_character_are_config_errors(key: str) -> None:
    text = '{"version": "v1", "flags": {"gfd": {"KEY": "a\\u0000b"}}}'.replace("KEY", key)
    with pytest.raises(ConfigError, match=f"{key}: 'a\\\\x00b': contains a NUL character"):
        parse_config_text(text, "c.json")
