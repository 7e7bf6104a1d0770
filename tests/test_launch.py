"""The entry point's last line of defence: a MemoryError in a thread gfd started ends the
process as one in the main thread does, and so does the import system's own failure to
allocate (see test_fault_matrix.test_out_of_memory)."""

import errno
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

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


#: where the address-space limit meets gfd's start (the import system failing without a
#: MemoryError, or with one before gfd's own code), set up before gfd's entry point runs:
#: each stands for what a 1 MiB sweep like test_fault_matrix.test_out_of_memory's meets at
#: one limit or another
_IMPORT_RUNS_OUT = {
    # reading the logging module's code, the entry point's first import of the standard
    # library after the signal handlers
    "reading the logging module": """
import sys

class Unreadable:
    def find_spec(self, name, path=None, target=None):
        if name == "logging":
            raise MemoryError
        return None

sys.meta_path.insert(0, Unreadable())
""",
    # listing a package's folder is answered ENOMEM, and the import system passes the
    # OSError on (it catches only "missing" and "not allowed")
    "listing a package": """
import errno, posix
listdir = posix.listdir

def short_of_memory(path="."):
    if str(path).endswith("click"):
        raise OSError(errno.ENOMEM, "Cannot allocate memory", path)
    return listdir(path)

posix.listdir = short_of_memory
""",
    # the loader cannot map hashlib's extension modules: random's fallback import then
    # fails with an ImportError of its own, raised while handling the loader's
    "mapping an extension module": """
import sys

class Unmappable:
    def find_spec(self, name, path=None, target=None):
        if name in ("_hashlib", "_sha512"):
            raise ImportError(f"{name}.so: failed to map segment from shared object")
        return None

sys.meta_path.insert(0, Unmappable())
""",
}


@pytest.mark.parametrize("shim", sorted(_IMPORT_RUNS_OUT))
def test_an_import_that_cannot_allocate_is_the_one_out_of_memory_line(shim: str) -> None:
    program = _IMPORT_RUNS_OUT[shim] + 'sys.argv[0] = "gfd"\nfrom gfd.launch import main\nmain()\n'
    result = subprocess.run(
        [sys.executable, "-c", "import sys\n" + program, "--oneshot", "--snapshot-file",
         str(ROOT / "examples" / "snapshots" / "two-models.yaml")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "gfd: out of memory (the process's address-space limit was reached)"
    ], result.stderr[-2000:]


def _chained(*errors: BaseException) -> BaseException:
    """The last of ``errors``, each raised while handling the one before."""
    for before, after in itertools.pairwise(errors):
        after.__context__ = before
    return errors[-1]


def _looped() -> BaseException:
    first, second = ImportError("no module named _sha512"), ImportError("no module named x")
    first.__context__, second.__context__ = second, first
    return first


@pytest.mark.parametrize(
    ("error", "out_of_memory"),
    [
        (OSError(errno.ENOMEM, "Cannot allocate memory"), True),
        (OSError(errno.ENOENT, "No such file or directory"), False),
        (ImportError("libfoo.so: failed to map segment from shared object"), True),
        (ImportError("no module named foo"), False),
        (SystemError("error return without exception set"), True),
        (_chained(ImportError("failed to map segment"), ImportError("no module named _x")), True),
        (_chained(MemoryError(), ImportError("no module named _x")), True),
        (_chained(KeyError("a"), ImportError("no module named _x")), False),
        (_looped(), False),  # a cycle in the chain ends the walk
    ],
    ids=["enomem", "enoent", "map", "no-module", "no-exception-set", "chained-map",
         "chained-memory-error", "chained-other", "cycle"],
)  # fmt: skip
def test_what_counts_as_the_address_space_limit(error: BaseException, out_of_memory: bool) -> None:
    """The chain walk that decides between the one line and a traceback: in the process
    these meet, it ends at once without writing what it covered, so it is read here."""
    from gfd.launch import _no_memory

    assert _no_memory(error) is out_of_memory
