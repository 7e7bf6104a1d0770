"""Hostile input at the command line: exit status 2 and one short line on stderr naming the
key, with at most ~100 characters of the value; nothing on stdout; never a traceback, a hang
or a crash.  Big-but-valid inputs are served or refused the same way.

Most runs are in-process (``run_gfd_here``: an exception escaping ``main`` fails the test
outright, stricter than looking for "Traceback"); real processes (``REAL``) where the process
is the subject: a closed or full stdout, a fresh interpreter's stack, click's usage errors.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.fake_apiserver import FakeApiServer
from tests.helpers import SAFE_DUMPER, SAFE_LOADER
from tests.process import ROOT, assert_refused, run_gfd, run_gfd_here

SNAPSHOT = Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml"

pytestmark = pytest.mark.timeout(120)


@functools.cache
def _base_document() -> Any:
    return yaml.load(SNAPSHOT.read_text(), Loader=SAFE_LOADER)


def base_snapshot() -> dict[str, Any]:
    """The example snapshot as a document of its own to edit (parsed once per process)."""
    document: dict[str, Any] = copy.deepcopy(_base_document())
    return document


def yaml_text(document: Any) -> str:
    text: str = yaml.dump(document, Dumper=SAFE_DUMPER)
    return text


Run = Callable[..., subprocess.CompletedProcess[str]]
#: a real ``gfd`` process, for the tests whose subject is the process itself
REAL: Run = run_gfd


def oneshot_with_config(
    tmp_path: Path, text: str, *flags: str, run: Run = run_gfd_here
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    return run("--oneshot", "--snapshot-file", str(SNAPSHOT), "--config-file", str(config), *flags)


def oneshot_with_snapshot(
    tmp_path: Path, text: str, *flags: str, run: Run = run_gfd_here
) -> subprocess.CompletedProcess[str]:
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(text)
    return run("--oneshot", "--snapshot-file", str(snapshot), *flags)


# ------------------------------------------------------------------ YAML alias bombs


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_in_the_config_is_refused(tmp_path: Path) -> None:
    result = oneshot_with_config(tmp_path, "version: v1\n" + alias_bomb())
    assert_refused(result, "config.yaml", "aliases")


def _one_alias_to_a_megabyte_name_used_by_thousands_of_gpus() -> str:
    capability = "compute_capability: {major: 8, minor: 0}"
    lines = ["version: v1", "driver: {version: 550.54.15, cuda: 12040}", "gpus:"]
    lines.append(f"- {{index: 0, uuid: GPU-0, name: &n {'A' * 1_000_000}, {capability}}}")
    lines += [f"- {{index: {i}, uuid: GPU-{i}, name: *n, {capability}}}" for i in range(1, 3000)]
    return "\n".join(lines) + "\n"


def _snapshot_text(as_json: bool, edit: Callable[[dict[str, Any]], object] = print) -> str:
    document = base_snapshot()
    edit(document)
    return json.dumps(document) if as_json else yaml_text(document)


def _gpu3(field: str, value: Any) -> Callable[[], str]:
    return lambda: _snapshot_text(
        False, lambda document: document["gpus"][3].update({field: value})
    )


def _memory(digits: int, form: str) -> Callable[[], str]:
    return lambda: _snapshot_text(form == "json").replace("40960", "9" * digits, 1)


DUPLICATE_MEMORY = ("  memory_mib: 40960\n", "  memory_mib: 40960\n  memory_mib: 1\n")
DUPLICATE_JSON_MEMORY = ('"memory_mib": 40960', '"memory_mib": 40960, "memory_mib": 1')
#: a snapshot refused (built by each test: some are big), and the words its line must hold
SNAPSHOTS_REFUSED: dict[str, tuple[Callable[[], str], tuple[str, ...]]] = {
    "alias-bomb": (
        lambda: SNAPSHOT.read_text().replace("version: v1\n", "version: v1\n" + alias_bomb(), 1),
        ("snapshot.yaml", "aliases"),
    ),
    "one-alias-to-a-megabyte-name": (_one_alias_to_a_megabyte_name_used_by_thousands_of_gpus,
                                     ("gpus[0].name", "longer than")),
    **{  # never published cut
        f"memory-of-{digits}-digits-{form}": (_memory(digits, form), ("memory_mib",))
        for digits in (5000, 70)
        for form in ("yaml", "json")
    },
    "duplicate-key": (lambda: SNAPSHOT.read_text().replace(*DUPLICATE_MEMORY, 1),
                      ("duplicate key", "'memory_mib'")),
    "duplicate-key-json": (lambda: _snapshot_text(True).replace(*DUPLICATE_JSON_MEMORY, 1),
                           ("duplicate key", "'memory_mib'")),
    "two-gpus-one-uuid": (_gpu3("uuid", "GPU-79a2ba02-a537-ccbf-2965-8e9d90c0bd00"),
                          ("gpus[3].uuid", "duplicate")),
    "two-gpus-one-bus-id": (_gpu3("pci_bus_id", "0000:07:00.0"),
                            ("gpus[3].pci_bus_id", "duplicate")),
    "two-gpus-one-bus-id-in-capitals": (_gpu3("pci_bus_id", "0000:07:00.0".upper()),
                                        ("gpus[3].pci_bus_id", "duplicate")),
    "two-gpus-one-index": (_gpu3("index", 0), ("gpus[3].index", "duplicate")),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SNAPSHOTS_REFUSED))
def test_a_bad_snapshot_is_refused_naming_the_key(tmp_path: Path, case: str) -> None:
    text, words = SNAPSHOTS_REFUSED[case]
    assert_refused(oneshot_with_snapshot(tmp_path, text()), *words)


REPLICAS = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
INTERVALS = [".nan", ".inf", "-.inf", "9999999999", "3000000h", "'9999999999'", "2562048h"]
JSON_INTERVAL = '{"version": "v1", "flags": {"gfd": {"sleepInterval": VALUE}}}'
#: a config refused, and the words its line must hold
CONFIGS_REFUSED: dict[str, tuple[str, tuple[str, ...]]] = {
    # expands to a 39 MB message today: a key whose value is a huge nested list
    "small-alias-bomb": ("version: v1\n" + alias_bomb(6, 9).replace("a5:", "flags:"), ("flags",)),
    **{f"replicas-of-{digits}-digits": (f"{REPLICAS}      replicas: {'9' * digits}\n",
                                        ("replicas",)) for digits in (5000, 70)},
    **{f"interval-{value[:10]}": (f"version: v1\nflags:\n  gfd:\n    sleepInterval: {value}\n",
                                  ("sleepInterval",))
       for value in [*INTERVALS, "1" * 5000]},
    **{
        f"json-interval-{value}": (JSON_INTERVAL.replace("VALUE", value), ("sleepInterval",))
        for value in ["1e999", "NaN", "-Infinity", "1e10"]
    },
    "too-many-patterns": (
        "version: v1\nresources:\n  gpus:\n"
        + "".join(f"  - {{pattern: 'x{i}', name: r{i % 10}}}\n" for i in range(20_000)),
        ("resources.gpus", "patterns"),
    ),
    "duplicate-key": ("version: v1\nversion: v1\n", ("duplicate key", "'version'")),
    "duplicate-nested-key": (
        "version: v1\nflags:\n  gfd:\n    sleepInterval: 1s\n    sleepInterval: 5s\n",
        ("duplicate key", "'sleepInterval'")),
    "duplicate-key-in-a-flow-map": ("version: v1\nflags: {migStrategy: none, migStrategy: mixed}\n",
                                    ("duplicate key", "'migStrategy'")),
    "duplicate-key-in-json": (
        '{"version": "v1", "flags": {"migStrategy": "none", "migStrategy": "mixed"}}',
        ("duplicate key", "'migStrategy'")),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CONFIGS_REFUSED))
def test_a_bad_config_is_refused_naming_the_key(tmp_path: Path, case: str) -> None:
    text, words = CONFIGS_REFUSED[case]
    assert_refused(oneshot_with_config(tmp_path, text), *words)


# ------------------------------------------------------------------ nesting


DEEP = 100_000


NESTED = {
    "json-lists": "[" * DEEP + "]" * DEEP, "json-mappings": '{"a":' * DEEP + "1" + "}" * DEEP,
    "yaml-flow-closed": "flags: " + "[" * DEEP + "]" * DEEP,
    "yaml-flow-unclosed": "flags: " + "[" * DEEP,
    "yaml-flow-mappings": "flags: " + "{a: " * DEEP + "1" + "}" * DEEP,
    "yaml-block-sequences": "flags:\n" + "- " * DEEP + "x\n",
}  # fmt: skip


def assert_nesting_refused(tmp_path: Path, text: str, run: Run) -> None:
    # The contract is gfd's: exit 2, one line naming the file, no traceback, no crash, within
    # the test's time limit.  Which layer refuses it (gfd's depth guard, or the YAML parser,
    # which has had a depth limit of its own since PyYAML 6.0.4) and in what words is not.
    config = oneshot_with_config(tmp_path, text, run=run)
    assert config.returncode != -11, "the interpreter crashed (SIGSEGV)"
    assert_refused(config, "config.yaml")
    snapshot = oneshot_with_snapshot(tmp_path, text, run=run)
    assert snapshot.returncode != -11, "the interpreter crashed (SIGSEGV)"
    assert_refused(snapshot, "snapshot.yaml")


@pytest.mark.parametrize("text", list(NESTED.values()), ids=list(NESTED))
def test_deep_nesting_is_refused_before_the_parser_recurses(tmp_path: Path, text: str) -> None:
    assert_nesting_refused(tmp_path, text, run_gfd_here)


@pytest.mark.parametrize("shape", ["json-lists", "yaml-flow-unclosed"])
def test_deep_nesting_is_refused_in_a_fresh_interpreter(tmp_path: Path, shape: str) -> None:
    # a new process: its own C stack and recursion limit, as in production
    assert_nesting_refused(tmp_path, NESTED[shape], REAL)


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize("value", ["9999999999", "3000000h", "2562048h", "NaN", "inf"])
def test_impossible_intervals_on_the_command_line_are_refused(value: str) -> None:
    result = run_gfd_here("--oneshot", "--snapshot-file", str(SNAPSHOT), "--sleep-interval", value)
    assert_refused(result, "--sleep-interval")


# ------------------------------------------------------------------ patterns


def test_backtracking_pattern_against_a_long_name_finishes(tmp_path: Path) -> None:
    document = base_snapshot()
    for gpu in document["gpus"]:
        gpu["name"] = "a" * 90
    snapshot = tmp_path / "long-name.yaml"
    snapshot.write_text(yaml_text(document))
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nresources:\n  gpus:\n"
        f"  - {{pattern: '{'*a' * 20}*b', name: never}}\n"
        f"  - {{pattern: '{'*a' * 20}*', name: many-a}}\n"
    )
    result = run_gfd_here("--oneshot", "--no-timestamp", "--snapshot-file", str(snapshot),
                          "--config-file", str(config))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/many-a.count=8\n" in result.stdout
    assert "never" not in result.stdout


@pytest.mark.parametrize("second", ["gpu", "nvidia.com/gpu"])
def test_two_sharing_entries_for_one_resource_are_labelled_from_the_first(
    tmp_path: Path, second: str
) -> None:
    """Upstream has no duplicate check (api/config/v1/replicas.go:166-211) and labels from
    the first entry (internal/lm/resource.go:239-250); the device plugin reads the same
    file with disjoint `devices` lists.  Accepted, said in a warning naming the entry."""
    text = (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/gpu, replicas: 4}\n"
        f"    - {{name: {second}, replicas: 2}}\n"
    )
    result = oneshot_with_config(tmp_path, text)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "nvidia.com/gpu.replicas=4\n" in result.stdout
    assert "resources[1].name: nvidia.com/gpu is listed again" in result.stderr


# ------------------------------------------------------------------ long values


MEGA = "x" * 100_000  # one argv or environ string is at most 128 KiB on Linux


@pytest.mark.parametrize(
    ("flags", "env", "name"),
    [(["--mig-strategy", MEGA], {}, "--mig-strategy"),
     (["--sleep-interval", MEGA], {}, "--sleep-interval"), (["--oneshot=" + MEGA], {}, "--oneshot"),
     ([], {"GFD_MIG_STRATEGY": MEGA}, "GFD_MIG_STRATEGY"),
     ([], {"GFD_SLEEP_INTERVAL": MEGA}, "GFD_SLEEP_INTERVAL"),
     ([], {"GFD_ONESHOT": MEGA}, "GFD_ONESHOT"),
     (["--config-file", "/nonexistent/" + MEGA], {}, "--config-file"),
     (["--node-name", MEGA, "--use-node-labels"], {}, "--node-name")],
)  # fmt: skip
def test_long_flag_and_environment_values_are_clipped(
    flags: list[str], env: dict[str, str], name: str
) -> None:
    result = run_gfd_here("--oneshot", "--snapshot-file", str(SNAPSHOT), *flags, env=env)
    assert_refused(result, name)


@pytest.mark.parametrize("argument", ["--" + MEGA, "extra-" + MEGA])
def test_long_unknown_arguments_are_clipped(argument: str) -> None:
    # a real process: click's own usage error, through the interpreter's exit
    assert_refused(REAL("--oneshot", argument))


def test_long_config_key_is_clipped_in_its_warning(tmp_path: Path) -> None:
    text = json.dumps({"version": "v1", "flags": {MEGA * 10: 1}})
    result = oneshot_with_config(tmp_path, text)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "unknown key" in result.stderr
    assert max(len(line) for line in result.stderr.splitlines()) <= 1000


@pytest.mark.parametrize("where", ["version", "machine", "name", "uuid", "driver"])
def test_long_snapshot_strings_are_refused_in_one_short_line(tmp_path: Path, where: str) -> None:
    document = base_snapshot()
    long_value = "v" * 1_000_000
    if where in ("version", "machine"):
        document[where] = long_value
    elif where == "driver":
        document["driver"]["version"] = long_value
    else:
        document["gpus"][0][where] = long_value
    # libyaml's emitter (SAFE_DUMPER) where PyYAML has it: the pure-Python one takes half a
    # second to write a megabyte scalar; the document is the same
    text = yaml.dump(document, Dumper=SAFE_DUMPER, width=10**7)
    result = oneshot_with_snapshot(tmp_path, text)
    assert_refused(result)


# ------------------------------------------------------------------ names into URLs


@pytest.fixture(scope="module")
def name_server() -> Iterator[FakeApiServer]:
    """One API server (node n1) for the name checks below: each run must be refused before
    it sends anything, so a test sees the server's request log unchanged by its run (a
    server per test cost ~50 ms of waiting on its shut-down, 25 times)."""
    with FakeApiServer() as server:
        server.add_node("n1")
        yield server


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--node-name", "n1?dryRun=All"), ("--node-name", "../namespaces/kube-system/secrets/x"),
     ("--node-name", "n1/status"), ("--node-name", "n1#x"), ("--node-name", ".."),
     ("--node-name", "N1"), ("--pod-name", "../../../nodes/n1"), ("--pod-name", "p?x=1"),
     ("--namespace", ".."), ("--namespace", "kube-system/secrets"), ("--namespace", "a.b")],
)  # fmt: skip
@pytest.mark.parametrize("output", ["--use-node-labels", "--use-node-feature-api"])
def test_names_that_are_not_dns_names_are_refused_before_any_request(
    tmp_path: Path, flag: str, value: str, output: str, name_server: FakeApiServer
) -> None:
    before = name_server.requests
    kubeconfig = name_server.write_kubeconfig(tmp_path / "kubeconfig")
    flags = ["--node-name", "n1", "--pod-name", "p1", flag, value]
    result = run_gfd_here("--oneshot", "--snapshot-file", str(SNAPSHOT), output, "--kubeconfig",
                          str(kubeconfig), *flags)  # fmt: skip
    assert_refused(result, flag)
    assert name_server.requests == before


@pytest.mark.parametrize("variable", ["NODE_NAME", "POD_NAME", "NAMESPACE"])
def test_names_from_the_environment_are_checked_for_the_api_outputs(
    tmp_path: Path, variable: str, name_server: FakeApiServer
) -> None:
    before = name_server.requests
    kubeconfig = name_server.write_kubeconfig(tmp_path / "kubeconfig")
    env = {"NODE_NAME": "n1", "POD_NAME": "p1", variable: "../x?y=1"}
    result = run_gfd_here(
        "--oneshot", "--snapshot-file", str(SNAPSHOT), "--use-node-feature-api",
        "--kubeconfig", str(kubeconfig), env=env,
    )  # fmt: skip
    assert_refused(result, variable)
    assert name_server.requests == before


def test_node_name_from_the_environment_is_not_needed_by_the_file_output() -> None:
    # CI systems set NODE_NAME for their own use; stdout and the file never put it in a URL
    result = run_gfd_here(
        "--oneshot", "--snapshot-file", str(SNAPSHOT), env={"NODE_NAME": "Build Agent 7"}
    )
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ stdout that fails


def closed_stdout(*args: str) -> subprocess.CompletedProcess[str]:
    from tests.process import GFD, clean_env

    return subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *GFD, *args], stderr=subprocess.PIPE, text=True,
        env=clean_env(), cwd=ROOT, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def assert_one_runtime_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gfd: error: ")
    for word in words:
        assert word in lines[0]


#: every action whose output is stdout
STDOUT_ACTIONS = ["--dump-snapshot", "--oneshot", "--dump-partitions"]
#: a snapshot each of them writes without a warning (it has a topology section)
WITH_TOPOLOGY = str(Path(ROOT) / "examples" / "snapshots" / "dgx1-v100-cube-mesh.yaml")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("action", STDOUT_ACTIONS)
def test_stdout_on_dev_full(action: str) -> None:
    with open("/dev/full", "w") as full:
        result = run_gfd(action, "--snapshot-file", WITH_TOPOLOGY, stdout=full)
    assert_one_runtime_line(result, "stdout")


@pytest.mark.parametrize("action", STDOUT_ACTIONS)
def test_stdout_closed(action: str) -> None:
    assert_one_runtime_line(closed_stdout(action, "--snapshot-file", WITH_TOPOLOGY), "stdout")


@pytest.mark.parametrize("action", STDOUT_ACTIONS)
def test_stdout_whose_reader_has_gone(action: str) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write gets EPIPE
    try:
        result = run_gfd(action, "--snapshot-file", WITH_TOPOLOGY, stdout=write_end)
    finally:
        os.close(write_end)
    assert_one_runtime_line(result, "stdout")


def test_file_output_with_stdout_closed_is_fine(tmp_path: Path) -> None:
    out = tmp_path / "features"
    result = closed_stdout("--oneshot", "--snapshot-file", str(SNAPSHOT), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=8\n" in out.read_text()


# ------------------------------------------------------------------ files that are not files


@pytest.mark.parametrize("text", [
    alias_bomb(), "clusters: " + "[" * DEEP, "apiVersion: v1\napiVersion: v1\n",
], ids=["alias-bomb", "deep", "duplicate-key"])  # fmt: skip
def test_hostile_kubeconfig_is_refused_before_the_client_reads_it(
    tmp_path: Path, text: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    result = run_gfd_here(
        "--oneshot", "--snapshot-file", str(SNAPSHOT), "--use-node-labels", "--node-name", "n1",
        "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    assert_refused(result, "--kubeconfig")


def test_output_path_that_is_a_fifo_is_refused_and_kept(fifo: Path) -> None:
    result = run_gfd_here("--oneshot", "--snapshot-file", str(SNAPSHOT), "-o", str(fifo))
    assert_refused(result, "--output-file", "FIFO")
    assert fifo.is_fifo()


def test_cleanup_never_removes_a_fifo_at_the_output_path(fifo: Path) -> None:
    result = run_gfd_here("--cleanup", "-o", str(fifo))
    assert result.returncode == 2, result.stderr
    assert fifo.is_fifo()


# ------------------------------------------------------------------ big but valid


def test_many_mig_gpus_are_refused_or_served_never_a_traceback(tmp_path: Path) -> None:
    document = base_snapshot()
    device = {
        "profile": "1g.5gb", "memory_mib": 4864, "multiprocessors": 14,
        "slices": {"gi": 1, "ci": 1},
        "engines": {"copy": 1, "decoder": 0, "encoder": 0, "jpeg": 0, "ofa": 0},
    }  # fmt: skip
    template = copy.deepcopy(document["gpus"][0])
    template["mig"] = {"enabled": True, "devices": [device] * 7}
    document["gpus"] = [
        dict(template, index=i, uuid=f"GPU-{i}", pci_bus_id=f"{i // 256:04x}:{i % 256:02x}:00.0")
        for i in range(10_000)
    ]
    text = json.dumps(document)
    result = oneshot_with_snapshot(tmp_path, text, "--mig-strategy", "mixed")
    assert "Traceback" not in result.stderr
    if result.returncode == 0:
        assert "nvidia.com/mig-1g.5gb.count=70000\n" in result.stdout
    else:
        assert_refused(result)
