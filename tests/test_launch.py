"""The entry point's last line of defence: a MemoryError in a thread gfd started ends the
process as one in the main thread does (see test_fault_matrix.test_out_of_memory)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_THREAD_RUNS_OUT = """
import threading
import gfd.cli

def fail():
    raise MemoryError

def command():
    thread = threading.Thread(target=fail)
    thread.start()
    thread.join()
    print("went on without the thread")

gfd.cli.main = command
from gfd.launch import main
main()
"""


def test_memory_error_in_a_thread_ends_the_process() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _THREAD_RUNS_OUT], cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "gfd: out of memory (the process's address-space limit was reached)"
    ]
