"""The entry point's last line of defence: a MemoryError in a thread gfd started ends the
process as one in the main thread does, and so does the import system's own failure to
allocate (see test_fault_matrix.test_out_of_memory)."""

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
        [sys.executable, "-c", _THREAD_RUNS_OUT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "gfd: out of memory (the process's address-space limit was reached)"
    ]


#: the import system listing a package's folder under an address-space limit: the kernel
#: answers ENOMEM, and the import system passes the OSError on (it catches only "missing"
#: and "not allowed"); click's folder is where the limit sweep meets it
_LISTING_RUNS_OUT = """
import errno, posix, sys
listdir = posix.listdir

def short_of_memory(path="."):
    if str(path).endswith("click"):
        raise OSError(errno.ENOMEM, "Cannot allocate memory", path)
    return listdir(path)

posix.listdir = short_of_memory
sys.argv[0] = "gfd"
from gfd.launch import main
main()
"""


def test_an_import_that_cannot_allocate_is_the_one_out_of_memory_line() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _LISTING_RUNS_OUT, "--oneshot", "--snapshot-file",
         str(ROOT / "examples" / "snapshots" / "two-models.yaml")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "gfd: out of memory (the process's address-space limit was reached)"
    ]
