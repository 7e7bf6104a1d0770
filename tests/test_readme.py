"""README and docs/deploy.md against the code: the flag tables list exactly ``gfd --help``'s options
(environment variables in precedence order, config key, default); every ``yaml`` block loads as
gfd loads it (an unknown kind fails); the usage lines run as shown, on a snapshot."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import gfd.cli
from gfd import snapshot
from gfd.options import OPTIONS, Option
from tests.process import clean_env, run_gfd, run_gfd_here

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DEPLOY = (ROOT / "docs" / "deploy.md").read_text()
DGX = "examples/snapshots/dgx-a100.yaml"

# The command's own flags that are actions, not settings (no environment, no default).
ACTIONS = {"--dump-snapshot", "--cleanup", "--dump-partitions", "--version", "--help", "-h"}
# Options whose default depends on other settings: README says it in words, which are
# checked to name the value the code takes in the common case.
DEFAULT_IN_WORDS = {
    "expiry_horizon": "max(`1h`, 4 \N{MULTIPLICATION SIGN} interval)",
    "output_file": "/etc/kubernetes/node-feature-discovery/features.d/gfd",
    "use_node_feature_api": "**true**", "log_format": "json unless stderr is a terminal",
}  # fmt: skip
# A default cell meaning "not set".
UNSET = {"—", "none", "off", "in-cluster", "none: use NVML"}


def _section(text: str, heading: str) -> str:
    start = text.index(heading + "\n")
    level = heading.split(" ")[0]
    rest = text[start + len(heading) + 1 :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, re.M)]
    return rest[: ends[0]] if ends else rest


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("| `-"):
            cells = re.split(r"(?<!\\)\|", line.strip()[1:-1])  # "a\|b" is one cell
            rows.append([cell.strip() for cell in cells])
    return rows


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def _flags(cell: str) -> list[str]:
    return [word for word in _ticked(cell) if re.fullmatch(r"--?[a-z][-a-z]*", word)]


def _readme_flag_rows() -> Iterator[tuple[list[str], list[str], str, str | None]]:
    """(flags, envs, default cell, config key cell) of every row of both tables."""
    for row in _table_rows(_section(README, "### Flags and environment variables")):
        flag, env, default, key = row
        yield _flags(flag), _ticked(env), default, key
    for row in _table_rows(_section(README, "### Per-node configuration")):
        flag, env, default, _meaning = row
        yield _flags(flag), _ticked(env), default, None


def _option_for(flags: list[str]) -> Option | None:
    for option in OPTIONS:
        if option.flag in flags:
            return option
    return None


def _command_flags() -> tuple[set[str], set[str]]:
    """The command's option names, and their negations (``--no-oneshot``)."""
    import click

    command = gfd.cli._build_command()
    names: set[str] = set()
    negations: set[str] = set()
    for param in command.get_params(click.Context(command)):
        names.update(param.opts)
        negations.update(param.secondary_opts)
    return names, negations


def test_readme_flag_tables_list_exactly_the_commands_options() -> None:
    listed: set[str] = set()
    for flags, _envs, _default, _key in _readme_flag_rows():
        listed.update(flags)
    offered, negations = _command_flags()
    assert offered - listed == set(), "in gfd --help, missing from README's flag tables"
    assert listed - offered - negations == set(), "in README's flag tables, unknown to gfd"


def test_readme_flag_tables_name_each_options_aliases_envs_and_config_key() -> None:
    seen = set()
    for flags, envs, _default, key in _readme_flag_rows():
        option = _option_for(flags)
        if option is None:
            assert set(flags) <= ACTIONS, flags
            continue
        seen.add(option.name)
        names = {option.flag, *option.aliases} | ({option.short} if option.short else set())
        negated = gfd.cli._negated(option.flag) if option.is_bool and option.flag else None
        assert set(flags) - {negated} == names, flags
        assert tuple(envs) == option.envs, flags
        if key is not None:
            want = "—" if option.config_key is None else "`" + ".".join(option.config_key) + "`"
            assert key == want, flags
        else:
            assert option.config_key is None, flags
    assert seen == {option.name for option in OPTIONS if option.flag}


def test_readme_flag_tables_give_the_codes_defaults() -> None:
    for flags, _envs, default, _key in _readme_flag_rows():
        option = _option_for(flags)
        if option is None:
            continue
        if option.name in DEFAULT_IN_WORDS:
            assert DEFAULT_IN_WORDS[option.name] in default, (flags, default)
            continue
        if default in UNSET:
            assert option.default in (None, "", ()), (flags, option.default)
            continue
        words = _ticked(default) or [default.strip("*")]
        assert option.parse(words[0]) == option.default, (flags, default)


def test_help_lists_the_settings_in_the_tables_order_then_the_actions() -> None:
    help_text = run_gfd_here("--help").stdout
    positions = [
        re.search(rf"^  (?:-\w, )?{option.flag}[ ,/\n]", help_text, re.M).start()  # type: ignore[union-attr]
        for option in OPTIONS
        if option.flag
    ]
    assert positions == sorted(positions)
    assert help_text.index("  --dump-snapshot") > positions[-1]


# --- the yaml blocks ------------------------------------------------------------------


def _yaml_blocks(text: str) -> list[str]:
    return re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)


def _kind(document: Any) -> str:
    if not isinstance(document, dict):
        return "unknown"
    if "apiVersion" in document:
        return "kubernetes"
    if "components" in document:
        return "kustomization"
    if {"lost_gpus", "topology"} & document.keys():
        return "snapshot piece"
    if {"flags", "sharing", "partitions"} & document.keys():
        return "config"
    return "unknown"


BLOCKS = [("README.md", i, b) for i, b in enumerate(_yaml_blocks(README))] + [
    ("docs/deploy.md", i, b) for i, b in enumerate(_yaml_blocks(DEPLOY))
]


@pytest.mark.parametrize(("doc", "number", "block"), BLOCKS, ids=[f"{d}#{n}" for d, n, _ in BLOCKS])
def test_yaml_block_is_yaml_of_a_known_kind(
    tmp_path: Path, doc: str, number: int, block: str
) -> None:
    document = yaml.safe_load(block)
    kind = _kind(document)
    assert kind != "unknown", f"{doc} yaml block {number}: teach this test what it is"
    if kind == "config":
        config = tmp_path / "config.yaml"
        config.write_text(block)
        result = run_gfd_here(
            "--oneshot", "--no-timestamp", "--snapshot-file", DGX, "--config-file", str(config)
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr == "", "a README config example must load without a warning"
    elif kind == "snapshot piece":
        base = yaml.safe_load((ROOT / DGX).read_text())
        lost = {entry["index"] for entry in document.get("lost_gpus", [])}
        base["gpus"] = [gpu for gpu in base["gpus"] if gpu["index"] not in lost]
        base.update(document)
        snapshot.from_dict(base)


def test_readme_has_the_config_and_snapshot_examples_this_test_checks() -> None:
    kinds = [_kind(yaml.safe_load(block)) for _doc, _n, block in BLOCKS]
    assert kinds.count("config") >= 2 and kinds.count("snapshot piece") >= 2


# --- the usage lines ------------------------------------------------------------------


def _usage_lines() -> list[str]:
    block = _section(README, "## Usage").split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]


def test_usage_cleanup_line_names_what_the_default_output_needs() -> None:
    """``gfd --cleanup`` alone stops at the NodeFeature default's missing node name; the
    README's line must be one that runs."""
    for words in _usage_lines():
        if "--cleanup" in words:
            assert "--node-name" in words, words


def test_usage_preview_and_oneshot_lines_run(tmp_path: Path) -> None:
    config = tmp_path / "new.yaml"
    config.write_text((ROOT / "examples/configs/renaming.yaml").read_text())
    ran = 0
    for words in _usage_lines():
        if words[:2] != ["gfd", "--oneshot"]:
            continue
        args = [{"node.yaml": DGX, "new.yaml": str(config)}.get(w, w) for w in words[1:]]
        if "--snapshot-file" not in args:
            args += ["--snapshot-file", DGX]
        result = run_gfd_here(*args)
        assert result.returncode == 0, (words, result.stderr)
        assert "nvidia.com/" in result.stdout
        ran += 1
    assert ran == 2


# --- references to README sections ---------------------------------------------------------

HEADINGS = [line.lstrip("#").strip() for line in README.splitlines() if re.match(r"#{1,4} ", line)]
CITING = ["gfd", "tests", "manifests", "docs", "scripts", "bench", "Dockerfile", "Makefile"]


def _cited_sections() -> Iterator[tuple[str, str]]:
    """(where, title) of every README-and-quoted-title citation in the repository, and of every
    see "Title" / see *Title* inside README itself."""
    for top in CITING:
        path = ROOT / top
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in {".pyc", ".gz"} or "__pycache__" in file.parts:
                continue
            text = file.read_text(errors="replace")
            for match in re.finditer(r'README[,:]? "(?:#+ )?([^"]+)"', text):
                yield str(file.relative_to(ROOT)), " ".join(match.group(1).split())
    for match in re.finditer(r'(?:see|under) (?:"([^"]+)"|\*([^*]+)\*)', README):
        yield "README.md", " ".join((match.group(1) or match.group(2)).split())


def test_every_cited_readme_section_exists() -> None:
    missing = [
        (where, title) for where, title in _cited_sections()
        if not any(heading.lower().startswith(title.lower()) for heading in HEADINGS)
    ]  # fmt: skip
    assert missing == []


def test_every_repository_path_the_docs_name_exists() -> None:
    """A file renamed or removed leaves no stale name in README, docs/deploy.md or the
    chart's values.yaml (``dist/`` is made by ``make manifests``; ``docs/proposals/`` is
    koordinator's)."""
    # anywhere, in prose and in commands: a name starting with one of the repository's folders
    folders = "gfd|tests|bench|scripts|manifests|examples|docs"
    pattern = rf"(?<![\w/.-])((?:{folders})/[\w./{{}},<>:-]*[\w/}}>])"
    missing = []
    for doc in ["README.md", "docs/deploy.md", "manifests/helm/gfd/values.yaml"]:
        for path in re.findall(pattern, (ROOT / doc).read_text()):
            if path.startswith("docs/proposals/"):
                continue
            bare = re.split(r"[:{<]", path)[0]  # file.py::test, dir/{a,b}.go, dir/<name>
            if not (ROOT / bare).exists():
                missing.append((doc, path))
    assert missing == []


def test_readme_oneshot_sample_is_what_make_run_prints() -> None:
    """README's "A oneshot run on a DGX A100 prints" block: its lines, in its order, are
    lines of ``make run``'s output (its ``...`` leaves some out)."""
    usage = _section(README, "## Usage")
    sample = usage.split("prints:\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    result = run_gfd_here("--oneshot", "--no-timestamp", "--snapshot-file", DGX)
    printed = result.stdout.splitlines()
    shown = [line for line in sample if line != "..."]
    assert len(shown) > 10
    assert [line for line in printed if line in shown] == shown


def test_an_unknown_flag_points_at_help() -> None:
    result = run_gfd_here("--bogus-flag")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "gfd: error: No such option '--bogus-flag'. (gfd --help lists the options)"
    ]


def test_make_run_passes_example_and_args() -> None:
    """README: ``make run EXAMPLE=... ARGS='...'`` (what make would run, not run)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("no make")
    run = ["make", "-n", "run", "EXAMPLE=examples/snapshots/two-models.yaml"]
    planned = subprocess.run(
        [*run, "ARGS=--mig-strategy mixed"], cwd=ROOT, capture_output=True, text=True, check=True,
        # not the flags of a make that runs this suite (make test)
        env={k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}},
    ).stdout.splitlines()[-1]  # fmt: skip
    assert planned.endswith(
        "gfd --oneshot --no-timestamp --snapshot-file examples/snapshots/two-models.yaml"
        " --mig-strategy mixed"
    )


def test_readme_lists_every_metric_gfd_serves() -> None:
    from prometheus_client.exposition import generate_latest

    from gfd.metrics import PrometheusMetrics

    metrics = PrometheusMetrics("127.0.0.1:0", 60.0, serve=False)
    served = set(
        re.findall(r"^# TYPE (gfd_\w+) ", generate_latest(metrics.registry).decode(), re.M)
    )
    served = {name for name in served if not name.endswith("_created")}
    section = _section(README, "### Health and metrics")
    listed = set(re.findall(r"`(gfd_\w+)", section))
    assert listed == served


def test_one_version_everywhere() -> None:
    """gfd --version, pyproject.toml and the chart's appVersion (the default image tag) agree,
    and the docs' image tag examples use it."""
    import gfd

    project = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    chart = yaml.safe_load((ROOT / "manifests/helm/gfd/Chart.yaml").read_text())
    assert project is not None
    assert gfd.__version__ == project.group(1) == chart["appVersion"]
    assert run_gfd_here("--version").stdout == f"gfd {gfd.__version__}\n"
    for doc in (README, DEPLOY):
        for tag in re.findall(r"gfd[:=](\d+\.\d+\.\d+)|image\.tag=(\d+\.\d+\.\d+)", doc):
            assert gfd.__version__ in tag


def _troubleshooting_line(start: str) -> str:
    """The quoted line of README's troubleshooting row that begins with ``start``, up to
    its ``...``."""
    for row in _section(README, "## Troubleshooting").splitlines():
        cells = row.split(" | ")
        if cells[0].startswith(f"| `{start}"):
            return cells[0][3:].split("...", 1)[0].rstrip("` ")
    raise AssertionError(f"no troubleshooting row starts with {start!r}")


@pytest.mark.parametrize(
    ("start", "args", "env"),
    [
        ("--node-name", (), {}),
        # no driver: an empty library path and no NVIDIA library anywhere on this machine
        ("NVML is unavailable", ("--oneshot",), {"LD_LIBRARY_PATH": ""}),
    ],
    ids=["no-node-name", "no-driver"],
)
def test_troubleshooting_quotes_the_lines_gfd_prints(
    start: str, args: tuple[str, ...], env: dict[str, str]
) -> None:
    """Each quoted line of the troubleshooting table is what gfd really says there."""
    quoted = _troubleshooting_line(start)
    result = run_gfd(*args, env=clean_env(env))
    assert result.returncode != 0
    assert f"gfd: error: {quoted}" in result.stderr, result.stderr
