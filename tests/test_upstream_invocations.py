"""Upstream's binary and gfd side by side on NVIDIA's mock NVML, each in its own empty ``{tmp}``:
the same invocation must agree on success and on every file written and label printed
(timestamp aside); ``differs`` rows are gfd's documented departures, proven to differ."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.upstream import Reference, labels, run_on_mock

NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
FILE = ["-use-node-feature-api=false", "-output-file", "{tmp}/out"]
CONFIG_ALL = """version: v1
flags:
  migStrategy: single
  useNodeFeatureAPI: false
  gfd:
    oneshot: true
    noTimestamp: true
    outputFile: {tmp}/out
"""
CONFIG_OUT = "version: v1\nflags:\n  gfd:\n    outputFile: {tmp}/cfg\n"
CONFIG_API_OFF = "version: v1\nflags:\n  useNodeFeatureAPI: false\n"


@dataclass(frozen=True)
class Case:
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    config: str | None = None  # written to {tmp}/config.yaml
    profile: str = "t4"
    #: why gfd departs from upstream here; gfd's outcome then differs from upstream's, and
    #: gfd succeeds (or fails, ``gfd_ok=False``)
    differs: str | None = None
    gfd_ok: bool = True


CASES = {
    # upstream's own grammar: one dash, -flag=value, Go's boolean words, Go durations
    "go-one-dash": Case(["-oneshot", "-no-timestamp", *FILE]),
    "gnu-two-dashes": Case(["--oneshot", "--no-timestamp", "--use-node-feature-api=false",
                            "--output-file={tmp}/out"]),
    "go-bool-words": Case(["-oneshot=T", "-no-timestamp=1", "-use-node-feature-api=F",
                           "-o", "{tmp}/out"]),
    "go-bool-words-2": Case(["-oneshot=TRUE", "-no-timestamp=True", "-use-node-feature-api=False",
                             "-o={tmp}/out", "-mig-strategy=single"], profile="a100"),
    "go-bool-false": Case(["-oneshot", "-no-timestamp=false", "-fail-on-init-error=0", *FILE]),
    "alias-output": Case(["-oneshot", "-use-node-feature-api=false", "--output", "{tmp}/out"]),
    "duration-1m30s": Case(["-oneshot", "-sleep-interval=1m30s", *FILE]),
    "duration-1h": Case(["-oneshot", "-sleep-interval", "1h", *FILE]),
    "duration-go-forms": Case(["-oneshot", "-sleep-interval=2h45m30.5s", *FILE],
                              {"GFD_SLEEP_INTERVAL": ".5s"}),
    "duration-micro": Case(["-oneshot", "-sleep-interval", "1µs", *FILE]),
    "duration-infinite": Case(["-oneshot", "--sleep-interval", "infinite", *FILE]),
    "stdout-empty-output": Case(["-oneshot", "-no-timestamp", "-use-node-feature-api=false",
                                 "-o", ""]),
    "burst-go-literals": Case(["-oneshot", "-kube-api-burst=0x10", "-kube-api-qps", "1e1",
                               *FILE], {"KUBE_API_BURST": "010"}),
    "unused-kube-flags": Case(["-oneshot", "-kubeconfig", "{tmp}/absent", "-namespace", "ns",
                               "-node-name", "n1", "-pod-name", "p1", *FILE]),
    "machine-type-file-absent": Case(["-oneshot", "-machine-type-file={tmp}/absent", *FILE]),
    "driver-root": Case(["-oneshot", "-container-driver-root", "/nonexistent", *FILE]),
    "discovery-nvml": Case(["-oneshot", "-device-discovery-strategy=nvml", *FILE]),
    "discovery-tegra-no-cuda": Case(["-oneshot", "-device-discovery-strategy=tegra", *FILE]),
    "empty-config-file-flag": Case(["-oneshot", "-config-file=", *FILE]),
    "mig-mixed": Case(["-oneshot", "-no-timestamp", "-mig-strategy", "mixed", *FILE],
                      profile="a100"),
    "help": Case(["-h"]),
    "help-long": Case(["--help"]),
    "version": Case(["-version"]),
    "version-short": Case(["-v"]),
    "help-command": Case(["help"]),
    "help-command-after-flags": Case(["-oneshot", "h"]),
    # environment only
    "env-only": Case([], {"GFD_ONESHOT": "1", "GFD_NO_TIMESTAMP": "t",
                          "USE_NODE_FEATURE_API": "false", "GFD_OUTPUT_FILE": "{tmp}/out"}),
    "env-only-2": Case([], {"GFD_ONESHOT": "True", "GFD_USE_NODE_FEATURE_API": "F",
                            "GFD_OUTPUT_FILE": "{tmp}/out", "GFD_MIG_STRATEGY": "single",
                            "GFD_SLEEP_INTERVAL": "90s"}, profile="a100"),
    "env-empty-output-is-stdout": Case(["-oneshot", "-no-timestamp"],
                                       {"USE_NODE_FEATURE_API": "0", "GFD_OUTPUT_FILE": ""}),
    "flag-api-beats-env-off": Case(["-oneshot", "-use-node-feature-api"],
                                   {"USE_NODE_FEATURE_API": "false"}),
    "env-empty-bool-is-false": Case(["-oneshot", *FILE], {"GFD_NO_TIMESTAMP": ""}),
    # config file only
    "config-only": Case(["-config-file", "{tmp}/config.yaml"], config=CONFIG_ALL,
                        profile="a100"),
    "config-only-env-names-it": Case([], {"CONFIG_FILE": "{tmp}/config.yaml"},
                                     config=CONFIG_ALL),
    # precedence: flag > environment > config file > default
    "flag-beats-config": Case(["-oneshot", "-use-node-feature-api=false", "-o", "{tmp}/flag",
                               "-config-file", "{tmp}/config.yaml"], config=CONFIG_OUT),
    "env-beats-config": Case(["-oneshot", "-use-node-feature-api=false",
                              "-config-file={tmp}/config.yaml"],
                             {"GFD_OUTPUT_FILE": "{tmp}/env"}, config=CONFIG_OUT),
    "flag-beats-env": Case(["-oneshot", "-use-node-feature-api=false", "-o", "{tmp}/flag"],
                           {"GFD_OUTPUT_FILE": "{tmp}/env"}),
    "first-env-wins": Case(["-oneshot", "-no-timestamp", *FILE],
                           {"GFD_MIG_STRATEGY": "single", "MIG_STRATEGY": "bogus"},
                           profile="a100"),
    "config-api-off-with-file-flag": Case(["-oneshot", "-o", "{tmp}/out", "-config-file",
                                           "{tmp}/config.yaml"], config=CONFIG_API_OFF),
    # bad values: both refuse, nothing written
    "bad-bool-word": Case(["-oneshot=maybe", *FILE]),
    "bad-bool-env": Case(["-oneshot", *FILE], {"GFD_NO_TIMESTAMP": "perhaps"}),
    "bad-duration": Case(["-oneshot", "-sleep-interval=soon", *FILE]),
    "bad-duration-env": Case(["-oneshot", *FILE], {"GFD_SLEEP_INTERVAL": "1x"}),
    "bad-mig-strategy": Case(["-oneshot", "-mig-strategy=bogus", *FILE]),
    "bad-discovery-strategy": Case(["-oneshot", "-device-discovery-strategy=cuda", *FILE]),
    "bad-qps": Case(["-oneshot", "-kube-api-qps=fast", *FILE]),
    "bad-burst": Case(["-oneshot", "-kube-api-burst=2.5", *FILE]),
    "bool-word-mixed-case": Case(["-oneshot=tRuE", *FILE]),
    "mig-strategy-case": Case(["-oneshot", "-mig-strategy=MIXED", *FILE]),
    "mig-strategy-empty": Case(["-oneshot", "-mig-strategy=", *FILE]),
    "duration-case": Case(["-oneshot", "-sleep-interval=INFINITE", *FILE]),
    "duration-spaces": Case(["-oneshot", "-sleep-interval= 5s", *FILE]),
    "duration-unit-case": Case(["-oneshot", "-sleep-interval=1H", *FILE]),
    "bool-spaces": Case(["-oneshot", *FILE], {"GFD_NO_TIMESTAMP": " true"}),
    "burst-spaces": Case(["-oneshot", "-kube-api-burst= 5", *FILE]),
    "duration-empty": Case(["-oneshot", "-sleep-interval=", *FILE]),
    "unknown-flag": Case(["-oneshot", "-no-such-flag", *FILE]),
    "glued-short-value": Case(["-oneshot", "-use-node-feature-api=false", "-o{tmp}/out"]),
    "three-dashes": Case(["---oneshot", *FILE]),
    "missing-value": Case(["-oneshot", "-use-node-feature-api=false", "-o"]),
    "two-forms-of-one-flag": Case(["-oneshot", "-use-node-feature-api=false",
                                   "-output-file", "{tmp}/a", "-o", "{tmp}/b"]),
    "bool-with-separate-value": Case(["-oneshot", "false", *FILE]),
    "missing-config-file": Case(["-oneshot", "-config-file", "{tmp}/absent.yaml", *FILE]),
    # the features file's default path, where it cannot be written (no such folder here)
    "api-off-default-path": Case(["-oneshot", "-use-node-feature-api=false"]),
    # gfd's deliberate departures
    "positional-word": Case(["-oneshot", *FILE, "extra"], gfd_ok=False, differs=(
        "upstream stops reading flags at the first word that is not one and ignores the "
        "rest (Go flag.FlagSet.Parse); gfd refuses the word")),
    "gfd-yes": Case(["-oneshot=yes", *FILE], differs="yes/no are gfd's own boolean words"),
    "gfd-negation": Case(["-oneshot", "--no-fail-on-init-error", *FILE],
                         differs="--no-<flag> is gfd's own spelling"),
    "gfd-bare-seconds": Case(["-oneshot", "-sleep-interval=90", *FILE],
                             differs="a bare number of seconds is gfd's own duration form"),
    "qps-infinite": Case(["-oneshot", "-kube-api-qps=inf", *FILE], gfd_ok=False, differs=(
        "a request rate must be a finite number; upstream parses inf and NaN")),
    "name-on-command-line": Case(["-oneshot", "-namespace=Bad_NS", *FILE], gfd_ok=False,
                                 differs="a namespace given on the command line is checked"),
    "zero-interval": Case(["-oneshot", "-sleep-interval=0s", *FILE], gfd_ok=False,
                          differs="a zero or negative interval is an error (SPEC)"),
    "dash-is-stdout": Case(["-oneshot", "-no-timestamp", "-use-node-feature-api=false", "-o",
                            "-"], differs="-o - is stdout (upstream writes a file named -)"),
    "oneshot-prints": Case(["-oneshot", "-no-timestamp"], differs=(
        "a oneshot that chooses no output prints to stdout (upstream's default output, the "
        "NodeFeature API, needs a cluster)")),
}  # fmt: skip


def _fill(text: str, folder: Path) -> str:
    return text.replace("{tmp}", str(folder))


def _outcome(result: Any, folder: Path) -> tuple[bool, dict[str, dict[str, str]], Any]:
    """(succeeded, {file left in the folder: its labels}, the labels printed)."""
    written = {
        path.name: labels(path.read_text()) for path in sorted(folder.iterdir())
        if path.name != "config.yaml" and path.is_file()
    }  # fmt: skip
    return result.returncode == 0, written, labels(result.stdout)


def _run_both(ref: Reference, case: Case, tmp_path: Path) -> dict[str, Any]:
    if case.args == ["-oneshot", "-use-node-feature-api=false"] and os.path.exists(NFD_DIR):
        pytest.skip(f"{NFD_DIR} exists here: the row would write this machine's NFD file")
    outcomes = {}
    for name in ("upstream", "gfd"):
        folder = tmp_path / name
        folder.mkdir()
        if case.config is not None:
            (folder / "config.yaml").write_text(_fill(case.config, folder))
        args = [_fill(arg, folder) for arg in case.args]
        env = {key: _fill(value, folder) for key, value in case.env.items()}
        result = run_on_mock(ref, name, args, env, profile=case.profile, cwd=folder)
        assert "Traceback" not in result.stderr, result.stderr
        outcomes[name] = (_outcome(result, folder), result)
    return outcomes


@pytest.mark.parametrize("case", [c for c in CASES.values() if not c.differs], ids=[
    name for name, c in CASES.items() if not c.differs])  # fmt: skip
def test_upstream_and_gfd_agree(upstream_reference: Reference, case: Case, tmp_path: Path) -> None:
    outcomes = _run_both(upstream_reference, case, tmp_path)
    (upstream, up_result), (gfd, gfd_result) = outcomes["upstream"], outcomes["gfd"]
    assert gfd == upstream, (up_result.stderr[-2000:], gfd_result.stderr[-2000:])
    if not gfd[0]:  # a refusal is one line naming the argument, and no partial output
        assert gfd_result.stderr.strip().splitlines()[-1].startswith("gfd: error:")
    if {"-h", "--help", "-v", "-version", "help", "h"} & set(case.args):
        return
    assert upstream[1] or upstream[2] or not upstream[0], "a success that wrote nothing"


@pytest.mark.parametrize("case", [c for c in CASES.values() if c.differs], ids=[
    name for name, c in CASES.items() if c.differs])  # fmt: skip
def test_deliberate_departures_are_real_and_as_documented(
    upstream_reference: Reference, case: Case, tmp_path: Path
) -> None:
    outcomes = _run_both(upstream_reference, case, tmp_path)
    (upstream, _), (gfd, gfd_result) = outcomes["upstream"], outcomes["gfd"]
    assert gfd[0] is case.gfd_ok, gfd_result.stderr[-2000:]
    assert gfd != upstream, case.differs
    if not case.gfd_ok:
        assert gfd[1] == {} and gfd[2] == {}
        assert gfd_result.stderr.strip().splitlines()[-1].startswith("gfd: error:")


def test_without_the_reference_folder_the_layer_skips_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Elsewhere (no ``../shared/nvidia-reference`` and nothing to build the programs with)
    one line says what is missing; where the folder exists, as in CI, nothing here skips (the
    rows above ran)."""
    from tests import upstream

    absent = tmp_path / "absent"
    monkeypatch.setattr(upstream, "SHARED", absent)
    unbuilt = tmp_path / "bench-nvml-tools.sh"  # names where a build would be; none is
    unbuilt.write_text(f'#!/bin/sh\necho "{tmp_path}/$2"\n')
    unbuilt.chmod(0o755)
    monkeypatch.setattr(upstream, "BENCH_TOOLS", unbuilt)
    monkeypatch.setenv("GO", str(tmp_path / "no-go"))
    with pytest.raises(pytest.skip.Exception, match=f"^no {re.escape(str(absent))}[,;] "):
        upstream.require_reference(tmp_path / "cache")
