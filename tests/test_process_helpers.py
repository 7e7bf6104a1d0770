"""The harness that starts gfd daemons (tests/process.py ``fork_gfd``, tests/zygote.py): a
child of the warm parent must be what the process tests take it for -- a process of its own
that gets its arguments, environment and working directory, writes its own stdout and
stderr, receives the signals sent to it, and reports its own exit status."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from gfd import __version__
from tests.process import FRESH_ENV, ForkedGfd, fork_gfd

DGX = "examples/snapshots/dgx-a100.yaml"


@pytest.fixture(autouse=True)
def forked(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the forked path, even in a run that asks for fresh ones."""
    monkeypatch.delenv(FRESH_ENV, raising=False)


def finish(child: ForkedGfd) -> tuple[int, str, str]:
    """Its exit status, stdout and stderr (a few lines each here: read one after the other)."""
    with child.stdout, child.stderr:
        out, err = child.stdout.read(), child.stderr.read()
    return child.wait(timeout=30), out, err


def test_a_forked_gfd_prints_and_exits_as_python_m_gfd() -> None:
    child = fork_gfd("--version")
    assert isinstance(child, ForkedGfd)
    assert child.pid not in (0, os.getpid())
    assert finish(child) == (0, f"gfd {__version__}\n", "")


def test_a_forked_gfd_reports_a_usage_error_on_its_own_stderr() -> None:
    status, out, err = finish(fork_gfd("--oneshot", "--mig-strategy", "bogus"))
    assert (status, out) == (2, "")
    assert err == "gfd: error: --mig-strategy 'bogus': must be one of none, single, mixed\n"


def test_a_forked_gfd_takes_its_environment_and_the_signals_sent_to_it(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    child = fork_gfd(
        "--snapshot-file", DGX, "--sleep-interval", "1h", env={"GFD_OUTPUT_FILE": str(out)}
    )
    for line in child.stderr:  # until the first pass has written the file
        if "pass finished" in line:
            break
    assert "nvidia.com/gpu.count=8\n" in out.read_text()
    assert child.poll() is None
    child.send_signal(signal.SIGKILL)  # not caught: the status says which signal ended it
    assert finish(child)[0] == -signal.SIGKILL


def test_what_only_start_up_reads_gets_a_fresh_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = fork_gfd("--version", env={"PYTHONOPTIMIZE": "1"})
    assert isinstance(child, subprocess.Popen)
    assert child.communicate(timeout=30)[0] == f"gfd {__version__}\n"
    monkeypatch.setenv(FRESH_ENV, "1")
    fresh = fork_gfd("--version")
    assert isinstance(fresh, subprocess.Popen)
    assert fresh.communicate(timeout=30)[0] == f"gfd {__version__}\n"
