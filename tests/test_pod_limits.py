"""Limits a pod really has, met by real processes: a pids limit (no thread can start) and
an address-space limit (RLIMIT_AS).

As root RLIMIT_NPROC does not bind, so "no thread can start" is made the way a pids limit
shows itself to Python: ``threading.Thread.start`` raising ``RuntimeError("can't start new
thread")``, set in the process before gfd's entry point runs.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from tests.process import ROOT

SNAPSHOT = str(Path(ROOT) / "examples" / "snapshots" / "two-models.yaml")
NO_THREADS = """
import sys, threading
def refuse(self, *args, **kwargs):
    raise RuntimeError("can't start new thread")
threading.Thread.start = refuse
sys.argv[0] = "gfd"
from gfd.launch import main
main()
"""


def gfd_without_threads(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-c", NO_THREADS, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:  # a daemon: what it wrote until then
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return subprocess.CompletedProcess([], -1, out, err)


def test_a_oneshot_without_threads_labels_and_never_loses_stderr() -> None:
    result = gfd_without_threads(
        "--oneshot",
        "--no-timestamp",
        "--snapshot-file",
        SNAPSHOT,
        "--log-level",
        "debug",
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=" in result.stdout
    assert "lost sys.stderr" not in result.stderr
    events = [json.loads(line)["event"] for line in result.stderr.splitlines()]
    assert "pass finished" in events
    assert sum("stderr writer thread not started" in e for e in events) == 1


def test_a_daemon_without_threads_labels_and_says_what_it_does_without(tmp_path: Path) -> None:
    features = tmp_path / "features"
    result = gfd_without_threads(
        "--snapshot-file",
        SNAPSHOT,
        "--output-file",
        str(features),
        "--sleep-interval",
        "1s",
        "--metrics-address",
        "127.0.0.1:0",
        "--log-format",
        "json",
        timeout=8,
    )
    assert "lost sys.stderr" not in result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]  # one JSON object each
    events = [r["event"] for r in records]
    for degraded in ("stop watchdog", "stderr writer thread", "metrics and health endpoints"):
        assert sum(e.startswith(degraded) for e in events) == 1, events
    assert "pass finished" in events
    assert "nvidia.com/gpu.count=" in features.read_text()


def limit_address_space(mib: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))


def test_an_address_space_limit_ends_in_one_line_saying_memory_ran_out() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gfd", "--oneshot", "--snapshot-file", SNAPSHOT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: limit_address_space(30),  # the interpreter starts, gfd cannot run
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "gfd: out of memory (the process's address-space limit was reached)"
    ]
