"""Where the test suite spends its time: CPU seconds and wall seconds per test file.

Run from the repository root:  ``.venv/bin/python bench/bench_test_suite.py [-n RUNS] [FILE...]``
(default: the whole suite but tests/e2e, 3 runs).

Each run is one serial pytest (no xdist).  Around every test (setup, call and teardown) a
small plugin reads the CPU time of the test process and of its ended children (every gfd
the tests start is one of those).  CPU is what the suite costs a machine; wall minus
CPU is time spent waiting (timeouts, stalled servers, daemon passes).  ``make test`` takes
roughly max(CPU / cores, (CPU + wait) / workers).  The medians of the runs are printed per
file, the slowest first.  The figures move with the machine's load: compare two trees in
runs taken one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------- the plugin (in pytest)


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + ended.ru_utime + ended.ru_stime


class Measure:
    def __init__(self, path: str) -> None:
        self.path = path
        self.rows: list[tuple[str, float, float]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Any:
        cpu, wall = _cpu_seconds(), time.perf_counter()
        yield
        self.rows.append((item.nodeid, _cpu_seconds() - cpu, time.perf_counter() - wall))

    def pytest_sessionfinish(self) -> None:
        Path(self.path).write_text(json.dumps(self.rows))


def pytest_configure(config: Any) -> None:
    path = os.environ.get("GFD_BENCH_TESTS_OUT")
    if path:
        config.pluginmanager.register(Measure(path), "gfd-bench-measure")


# ----------------------------------------------------------------- the driver


def one_run(files: list[str], out: Path) -> dict[str, tuple[float, float]]:
    env = {**os.environ, "GFD_BENCH_TESTS_OUT": str(out), "PYTHONDONTWRITEBYTECODE": ""}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    command += ["-p", "bench.bench_test_suite", *files]
    subprocess.run(command, cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL)
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for nodeid, cpu, wall in json.loads(out.read_text()):
        totals = per_file[nodeid.split("::")[0]]
        totals[0] += cpu
        totals[1] += wall
    return {name: (cpu, wall) for name, (cpu, wall) in per_file.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=3)
    parser.add_argument("files", nargs="*", default=["tests", "--ignore=tests/e2e"])
    options = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(options.runs):
            runs.append(one_run(options.files, Path(scratch) / f"run{number}.json"))
    names = sorted({name for run in runs for name in run})
    medians = {
        name: (
            statistics.median(run.get(name, (0.0, 0.0))[0] for run in runs),
            statistics.median(run.get(name, (0.0, 0.0))[1] for run in runs),
        )
        for name in names
    }
    print(f"{'file':48} {'CPU s':>7} {'wall s':>7} {'wait s':>7}")
    for name, (cpu, wall) in sorted(medians.items(), key=lambda item: -item[1][1]):
        print(f"{name:48} {cpu:7.2f} {wall:7.2f} {max(0.0, wall - cpu):7.2f}")
    cpu_total = statistics.median(sum(c for c, _ in run.values()) for run in runs)
    wall_total = statistics.median(sum(w for _, w in run.values()) for run in runs)
    print(f"{'total (median of runs)':48} {cpu_total:7.2f} {wall_total:7.2f}")


if __name__ == "__main__":
    main()
