"""docs/SECURITY.md cannot drift from the code: every test its table names exists, every
row names one, and the invariants it states about the source hold (every file read goes
through the shared reader; gfd's own code starts no child process)."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "SECURITY.md"
GFD = ROOT / "gfd"
#: the other work whose tests the lead names at merge; a placeholder names one of them
PLACEHOLDER = re.compile(r"^TODO\(lead\): test from (kubecreds|logperf|lifecycle) \(.+\)$")
REFERENCE = re.compile(r"^(tests/[\w/]+\.py)::(\w+(?:::\w+)?)(\[.+\])?$")
COLUMNS = ["Channel", "Who controls it", "Bound gfd enforces", "On violation", "Tests"]


def table() -> list[list[str]]:
    """The rows of the channel table, as lists of cells."""
    text = DOC.read_text()
    section = text.split("## Channels", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def references(row: list[str]) -> list[str]:
    return [item.strip() for item in row[-1].split("<br>") if item.strip()]


@functools.cache
def collected(files: tuple[str, ...]) -> frozenset[str]:
    """The node ids pytest collects from ``files`` (parametrised ids included)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", *files],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    ids = {line.strip() for line in done.stdout.splitlines() if "::" in line}
    assert ids, done.stdout[-2000:] + done.stderr[-2000:]
    return frozenset(ids)


def test_every_row_is_complete_and_names_a_test() -> None:
    rows = table()
    assert len(rows) >= 25
    for row in rows:
        assert len(row) == len(COLUMNS), row
        assert all(row), row
        tests = references(row)
        # a row without a test is a gap; only the rows of work merged separately may
        # hold nothing but a placeholder, which names that work
        assert tests, f"{row[0]}: a row without a test is a gap"
        for item in tests:
            assert REFERENCE.match(item) or PLACEHOLDER.match(item), (row[0], item)


def test_every_named_test_exists() -> None:
    wanted = [
        REFERENCE.match(item) for row in table() for item in references(row)
        if not item.startswith("TODO")
    ]  # fmt: skip
    files = tuple(sorted({match.group(1) for match in wanted if match}))
    ids = collected(files)
    for match in wanted:
        assert match is not None
        path, name, param = match.groups()
        assert (ROOT / path).is_file(), path
        node = f"{path}::{name}{param or ''}"
        if param:
            assert node in ids, f"{node} is not collected"
        else:
            assert any(i == node or i.startswith(node + "[") for i in ids), f"{node} is missing"


def test_the_invariants_are_stated_once_above_the_table() -> None:
    text = DOC.read_text()
    head, _ = text.split("## Channels", 1)
    assert "## Invariants" in head
    for words in ("credential", "within 5 s", "SIGHUP", "log stream", "exit status 2",
                  "orphaned"):  # fmt: skip
        assert words in head, words


# --------------------------------------------------------------- invariants of the source

#: where gfd may open or read a file without the shared reader, and why
ALLOWED_OPENS = {
    ("gfd/files.py", "open_regular"): "the shared reader itself",
    ("gfd/files.py", "read_bounded"): "the shared reader itself",
    ("gfd/cli.py", "_silence_stdout"): "/dev/null put in place of a stdout that is gone",
    ("gfd/interrupt.py", "_drain"): "its own self-pipe",
    ("gfd/signals.py", "_watch"): "its own self-pipe",
    ("gfd/logsink.py", "_hold_with_devnull"): "/dev/null put in place of a stderr that is gone",
    ("gfd/kube/exec_plugin.py", "_read_ready"): "a credential plugin's pipes, under a deadline",
    ("gfd/kube/secret_files.py", "_on_disk"): (
        "its own new file (O_CREAT | O_EXCL | O_NOFOLLOW), only where no nameless file can be made"
    ),
    ("gfd/kube/secret_files.py", "_unnamed"): "its own new unnamed file (O_TMPFILE | O_EXCL)",
    ("gfd/kube/secret_files.py", "_held_directory"): "the directory it made, to hold its lock",
    ("gfd/kube/secret_files.py", "reclaim_abandoned"): "the temporary directory (O_DIRECTORY)",
    ("gfd/kube/secret_files.py", "_reclaim"): "a directory, never followed (O_NOFOLLOW)",
    ("gfd/outputs/file.py", "_write"): "the temporary file it made with mkstemp",
    ("gfd/outputs/file.py", "_reclaim_once"): "the features file's directory (O_DIRECTORY)",
    ("gfd/outputs/file.py", "write_without_blocking"): "stdout's pipe, reopened to write",
    ("gfd/outputs/koordlet.py", "_open_directory"): "directories (O_DIRECTORY)",
    ("gfd/outputs/koordlet.py", "_write"): "its own new file (O_CREAT | O_EXCL | O_NOFOLLOW)",
}
OPENING = {"open", "fdopen", "read", "read_text", "read_bytes", "open_text", "open_binary"}


def _calls(path: Path) -> list[tuple[str, str, int]]:
    """(enclosing function, call, line) for every call that opens or reads a file."""
    found = []
    tree = ast.parse(path.read_text())

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name
            if isinstance(child, ast.Call):
                func = child.func
                if isinstance(func, ast.Name) and func.id == "open":
                    found.append((function, "open", child.lineno))
                elif (
                    isinstance(func, ast.Attribute)
                    and func.attr in OPENING
                    and not (isinstance(func.value, ast.Name) and func.value.id == "self")
                ):
                    receiver = ast.unparse(func.value)
                    if func.attr in ("open", "fdopen", "read") and receiver not in ("os", "io"):
                        pass  # a method of gfd's own objects (a response)
                    else:
                        found.append((function, f"{receiver}.{func.attr}", child.lineno))
            visit(child, name)

    visit(tree, "<module>")
    return found


def test_every_file_read_goes_through_the_shared_reader() -> None:
    """No ``open()``, ``os.open()``, ``os.fdopen()``, ``os.read()``, ``read_text()`` or
    ``read_bytes()`` anywhere in gfd but the shared reader and the writers listed above:
    a new reader that could block on a FIFO or read ``/dev/zero`` for ever fails here."""
    stray = []
    used = set()
    for path in sorted(GFD.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for function, call, line in _calls(path):
            if (relative, function) in ALLOWED_OPENS:
                used.add((relative, function))
            else:
                stray.append(f"{relative}:{line} {function}: {call}")
    assert stray == []
    assert used == set(ALLOWED_OPENS)  # the list holds nothing stale


def test_the_check_finds_a_plain_open(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("def f(p):\n    with open(p) as h:\n        return h.read()\n")
    assert _calls(source) == [("f", "open", 2)]


FORBIDDEN_MODULES = ("subprocess", "multiprocessing", "pty", "concurrent.futures.process")
FORBIDDEN_CALLS = re.compile(r"^os\.(system|popen|fork|forkpty|exec\w*|spawn\w*|posix_spawn\w*)$")


#: the one module that starts processes: the kubeconfig's exec credential plugins, each
#: under a deadline, in a process group of its own that is killed when it ends
CHILD_PROCESS_RUNNERS = {"gfd/kube/exec_plugin.py"}


@pytest.mark.parametrize("path", sorted(GFD.rglob("*.py")), ids=lambda p: p.name)
def test_no_child_process_outside_the_credential_plugin_runner(path: Path) -> None:
    if path.relative_to(ROOT).as_posix() in CHILD_PROCESS_RUNNERS:
        return
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert not FORBIDDEN_CALLS.match(ast.unparse(node.func)), (path, node.lineno)
            continue
        else:
            continue
        for name in names:
            assert not name.startswith(FORBIDDEN_MODULES), (path, name)


#: ``!r`` of a value that is short by construction (a published label value: at most 63
#: characters), so it needs no excerpt
SHORT_BY_CONSTRUCTION = {("gfd/labels/devices.py", "fitted"), ("gfd/labels/__init__.py", "value")}
SHARED_HELPERS = {"clip", "clip_path", "describe", "quote_answer", "_quote_status", "printable"}


def test_every_echoed_value_goes_through_the_shared_helper() -> None:
    """An f-string that quotes a value with ``!r`` quotes it whole: every such value is
    first cut by gfd/echo.py (``clip``, ``describe``; ``quote_answer`` in the API client is
    built on ``clip``), or is short by construction (listed above)."""
    stray = []
    for path in sorted(GFD.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FormattedValue) or node.conversion != ord("r"):
                continue
            value = node.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id in SHARED_HELPERS
            ):
                continue
            if (relative, ast.unparse(value)) in SHORT_BY_CONSTRUCTION:
                continue
            stray.append(f"{relative}:{node.lineno}: {ast.unparse(value)!r}")
    assert stray == []
