"""What a oneshot imports, so that a oneshot keeps away from what its mode does not use.

Each run is a real ``gfd`` process; a ``sitecustomize`` on ``PYTHONPATH`` records
``sys.modules`` when the interpreter exits (an ``atexit`` hook), so everything imported at
any point of the run is seen.  The lists name what the mode does not use: the API clients
and their retry and HTTP stacks, the metrics server, asyncio (structlog pulls it in),
structlog while nothing is logged, click while the command line is plain, NVML discovery
on the snapshot path, PyYAML on the NVML path with no document to read.  (The frozen types
are standard dataclasses and documents are read by PyYAML: those two are imported by
design, as plain standard parts cost a few milliseconds at most.)

The second half checks the other side of the saving: ``gfd.cli._parse_plain`` (which lets a
plain command line skip click) gives the command's callback exactly what click gives it.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gfd import cli
from gfd import snapshot as snapshot_io
from gfd.options import OPTIONS

from .fakes.fake_sysfs import build_from_snapshot
from .process import ROOT, clean_env
from .strategies import draw_indices

DGX = os.path.join(ROOT, "examples", "snapshots", "dgx-a100.yaml")

RECORDER = """\
import atexit
import os
import sys

_before = set(sys.modules)
if os.environ.get("RECORD_FAKE_NVML_SNAPSHOT"):
    from gfd import snapshot
    from tests.fakes.fake_nvml import FakeNvml

    with open(os.environ["RECORD_FAKE_NVML_SNAPSHOT"], encoding="utf-8") as handle:
        _fake = FakeNvml.from_snapshot(snapshot.loads(handle.read()))
    sys.modules["pynvml"] = _fake.module


def _record():
    modules = sorted(set(sys.modules) - _before)
    gfd_snapshot = sys.modules.get("gfd.snapshot")
    dumper = getattr(gfd_snapshot, "_yaml_dumper", None)
    import json

    with open(os.environ["RECORD_IMPORTS"], "w", encoding="utf-8") as handle:
        json.dump(
            {
                "modules": modules,
                "yaml_dumper_built": bool(dumper and dumper.cache_info().currsize),
            },
            handle,
        )


atexit.register(_record)
"""

# Never used by a oneshot that writes a file or stdout.
NOT_FOR_A_FILE_ONESHOT = [
    "kubernetes",
    "prometheus_client",
    "tenacity",
    "urllib3",
    "requests",
    "asyncio",
    "structlog",  # nothing is logged at the default level when the pass succeeds
    "click",  # a plain command line is read without it
    "http.server",
    "socketserver",
    "importlib.metadata",
    "gfd.metrics",
    "gfd.outputs.kube",
    "gfd.outputs.nodefeature",
    "gfd.outputs.nodelabels",
    # the interconnect (NVLink topology) is read and labelled only when asked for
    "gfd.outputs.koordlet",
    "gfd.partitions",
    "gfd.labels.partitions",
    "gfd.labels.topology",
    "gfd.discovery.topology",
    # the per-node config is read only with --config-file-srcdir, durations only parsed when
    # one is given, MIG profile names only looked up for MIG devices (none here)
    "gfd.nodeconfig",
    "gfd.durations",
    "gfd.discovery.mig_profile",
]
# ... nor, reading a snapshot file, by NVML discovery
NOT_FOR_THE_SNAPSHOT_PATH = [
    *NOT_FOR_A_FILE_ONESHOT,
    "pynvml",
    "ctypes",
    "uuid",
    "gfd.discovery",
    "json",  # the snapshot is YAML
    "decimal",  # the partition table's quantities (the NVML path's fake loads it itself)
]


def record_imports(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run ``gfd *args`` as the console script does; the modules it imported."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(RECORDER)
    out = tmp_path / "imports.json"
    run_env = clean_env(env)
    run_env.update(PYTHONPATH=f"{shim}{os.pathsep}{ROOT}", RECORD_IMPORTS=str(out))
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from gfd.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    recorded = json.loads(out.read_text())
    recorded["stdout"] = done.stdout
    recorded["stderr"] = done.stderr
    return recorded


def loaded(recorded: Any, names: list[str]) -> list[str]:
    """Those of ``names`` that were imported, a package counting with any submodule."""
    modules = recorded["modules"]
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def test_snapshot_oneshot_to_stdout_imports_only_what_it_uses(tmp_path: Path) -> None:
    recorded = record_imports(tmp_path, "--oneshot", "--no-timestamp", "--snapshot-file", DGX)
    assert "nvidia.com/gpu.count=8\n" in recorded["stdout"]
    assert loaded(recorded, NOT_FOR_THE_SNAPSHOT_PATH) == []
    assert loaded(recorded, ["tempfile"]) == []  # the atomic write is the file output's
    assert not recorded["yaml_dumper_built"]
    # what it does use is seen (the recorder works)
    assert loaded(recorded, ["yaml", "gfd.outputs.file", "gfd.labels"]) == [
        "yaml",
        "gfd.outputs.file",
        "gfd.labels",
    ]


def test_snapshot_oneshot_to_a_file_imports_only_what_it_uses(tmp_path: Path) -> None:
    features = tmp_path / "features"
    recorded = record_imports(
        tmp_path,
        "--oneshot",
        "--no-timestamp",
        "--snapshot-file",
        DGX,
        "--output-file",
        str(features),
    )
    assert "nvidia.com/gpu.count=8\n" in features.read_text()
    assert loaded(recorded, NOT_FOR_THE_SNAPSHOT_PATH) == []
    assert not recorded["yaml_dumper_built"]


def test_nvml_oneshot_imports_no_yaml_and_no_api_client(tmp_path: Path) -> None:
    node = snapshot_io.load(DGX)
    as_json = tmp_path / "node.json"
    as_json.write_text(snapshot_io.dumps_json(node))
    overrides = build_from_snapshot(tmp_path / "node", node)
    recorded = record_imports(
        tmp_path,
        "--oneshot",
        "--no-timestamp",
        "--machine-type-file",
        overrides["machine_type_file"],
        env={"RECORD_FAKE_NVML_SNAPSHOT": str(as_json), "GFD_SYSFS_ROOT": overrides["sysfs_root"]},
    )
    assert "nvidia.com/gpu.count=8\n" in recorded["stdout"]
    # no config file and no snapshot file: nothing to parse.  (Building the fake NVML
    # imports gfd.snapshot and the real pynvml, so its imports are counted too.)
    # nothing is logged and the output has no expiry: no clock to format (json is the
    # fake's: it is built from a JSON snapshot)
    assert recorded["stderr"] == ""
    assert loaded(recorded, [*NOT_FOR_A_FILE_ONESHOT, "yaml", "datetime"]) == []
    assert loaded(recorded, ["gfd.discovery"]) == ["gfd.discovery"]


def test_the_recorder_sees_what_a_mode_does_import(tmp_path: Path) -> None:
    """The other side: a run that logs on the console format loads structlog (a JSON line
    does not: tests/test_imports_logging.py), --help loads click, a duration given loads
    its parser."""
    debug = record_imports(
        tmp_path,
        "--oneshot",
        "--snapshot-file",
        DGX,
        "--log-level",
        "debug",
        "--log-format",
        "console",
    )
    assert loaded(debug, ["structlog"]) == ["structlog"]
    assert loaded(record_imports(tmp_path, "--help"), ["click"]) == ["click"]
    interval = record_imports(
        tmp_path, "--oneshot", "--snapshot-file", DGX, "--sleep-interval", "30s"
    )
    assert loaded(interval, ["gfd.durations"]) == ["gfd.durations"]


# ------------------------------------------------------------------ plain command lines


@functools.cache
def click_command() -> click.Command:
    """gfd's click command, built once: parsing keeps its state in each new context."""
    return cli._build_command()


def click_params(args: list[str]) -> dict[str, Any] | None:
    """The callback's arguments as click parses ``args``; None where click would not call it."""
    command = click_command()
    try:
        with command.make_context(cli.PROG, list(args)) as ctx:
            return dict(ctx.params)
    except (click.ClickException, click.exceptions.Exit):
        return None


def _flag_words() -> list[str]:
    words = ["--dump-snapshot", "--cleanup"]
    for option in OPTIONS:
        if option.flag:
            words.append(option.flag)
            if option.is_bool:
                words.append(cli._negated(option.flag))
            if option.short:
                words.append(option.short)
    return words


WORDS = tuple(
    [
        *_flag_words(),
        "--help",
        "-h",
        "--version",
        "--",
        "--no-such-flag",
        "--oneshot=",
        "--snapshot-file=",
        "--output-file=-",
        "--mig-strategy=mixed",
        "--cleanup=yes",
        "-",
        "",
        "x",
        "a=b",
        "mixed",
    ]
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """0-6 of WORDS, drawn as one index string (tests/strategies.py draw_indices: one
    Hypothesis choice instead of two a word)."""
    return [WORDS[i] for i in draw_indices(draw, len(WORDS), 0, 6)]


@settings(max_examples=400, deadline=None)
@given(command_lines())
def test_plain_parse_agrees_with_click(args: list[str]) -> None:
    plain = cli._parse_plain(args)
    if plain is not None:
        assert click_params(args) == plain


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--oneshot", "--no-timestamp", "--snapshot-file", "dgx.yaml"],
        ["--oneshot", "--output-file", "-", "--mig-strategy=mixed"],
        ["--use-node-feature-api", "--node-name", "n1", "--sleep-interval", "30s"],
        ["--no-fail-on-init-error", "--fail-on-init-error", "--metrics-address", ":8080"],
        ["--snapshot-file", "--oneshot"],  # a value is the next word, whatever it looks like
        ["--dump-snapshot"],
        ["--cleanup", "--use-node-labels", "--node-name", "n1"],
    ],
)
def test_common_command_lines_skip_click_and_agree_with_it(args: list[str]) -> None:
    plain = cli._parse_plain(args)
    assert plain is not None
    assert plain == click_params(args)


@pytest.mark.parametrize(
    "args",
    [["--help"], ["-h"], ["--version"], ["-o", "x"], ["--oneshot", "x"], ["--"], ["--oneshot="]],
)
def test_everything_else_is_left_to_click(args: list[str]) -> None:
    assert cli._parse_plain(args) is None


def test_shell_completion_is_left_to_click(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_GFD_COMPLETE", "bash_source")
    assert cli._parse_plain(["--oneshot"]) is None


def test_every_option_of_the_click_command_is_known_to_the_plain_parser() -> None:
    flags = cli._plain_flags()
    for param in cli._build_command().params:
        if not isinstance(param, click.Option) or param.is_eager:
            continue  # --help and --version are click's
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("--"):
                assert flags[flag][0] == param.name
        assert param.name is not None
