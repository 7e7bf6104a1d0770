"""The process's entry point: ``gfd`` and ``gpu-feature-discovery`` (console scripts) and
``python -m gfd``.

It does two things before anything else of gfd is imported: :func:`gfd.signals.install`, so
that a signal that arrives while the rest is still being imported is caught (a SIGHUP then
is a reload, never a death), and it turns off what would write secrets to files; and one
thing last: from the moment the command is done, signals are ignored, so none can change
how the process ends.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import sys
import threading
from typing import NoReturn


def main() -> None:
    try:
        from gfd import signals

        signals.install()
        _no_secrets_written()
        _thread_memory_errors_end_the_process()
        import logging

        # until gfd's log stream is set up (it replaces the root handlers), a library's
        # logging record has no gfd format to be written in: it is dropped rather than
        # printed by logging's last resort as a foreign line with a traceback (hashlib does
        # so at import when an address-space limit leaves it no memory for OpenSSL's digests)
        logging.getLogger().addHandler(logging.NullHandler())
        from gfd.cli import main as run

        run()
    except MemoryError:
        # an address-space limit (RLIMIT_AS) met anywhere, from gfd's first import on: one
        # line, not a traceback that itself needs memory to print
        _out_of_memory()
    except (ImportError, SystemError, OSError) as exc:
        # the same limit met where the interpreter raises no MemoryError of its own, or
        # where a system call refused it (ENOMEM: the import system listing a directory)
        if not _no_memory(exc):
            raise
        _out_of_memory()
    finally:
        _exiting()


def _exiting() -> None:
    """From now on signals change nothing (where the limit let the signals module load)."""
    signals = sys.modules.get("gfd.signals")
    if signals is not None:
        signals.exiting()


#: how running out of address space shows itself where no MemoryError is raised: the loader
#: could not map an extension module, or a C call failed on an allocation without setting an
#: exception -- worded one way by the call's check and another by the evaluation loop (met in
#: click building its context, for one)
_NO_MEMORY_SIGNS = (
    "failed to map segment",
    "returned NULL without setting an exception",
    "error return without exception set",
)


def _no_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the address-space limit met without a MemoryError: a system call
    that could not allocate (ENOMEM: the import system listing a package's folder, which
    it does not catch), or a failure worded as in :data:`_NO_MEMORY_SIGNS` -- itself or
    one it was raised while handling (a module whose fallback import fails after the
    loader could not map the first choice, as random's does for hashlib's digests)."""
    seen = 0
    while exc is not None and seen < 16:  # a chain is short; a cycle must not loop
        if isinstance(exc, MemoryError):
            return True
        if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
            return True
        if isinstance(exc, (ImportError, SystemError)) and any(
            sign in str(exc) for sign in _NO_MEMORY_SIGNS
        ):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _no_secrets_written() -> None:
    """What would put a client key, a token or the TLS secrets that decrypt them in a file
    that outlives the process is turned off, for gfd and the plugins it runs:

    - core dumps: a crash (a fault in the driver's library or in OpenSSL) would write the
      process's memory wherever the node's core pattern says; the limit is 0, soft and hard
      (container runtimes commonly start containers with no limit at all);
    - ``SSLKEYLOGFILE``: Python's and urllib3's TLS set-up append every session's secrets
      to the file it names; upstream's Go TLS never reads it."""
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.environ.pop("SSLKEYLOGFILE", None)


def _thread_memory_errors_end_the_process() -> None:
    """A MemoryError in another thread (the log writer, the watchdog, a watch) ends the
    process as one in the main thread does, instead of threading's traceback, which needs
    memory to print and leaves the process running without the thread."""
    default = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if issubclass(args.exc_type, MemoryError):
            _out_of_memory()
        default(args)

    threading.excepthook = hook


def _out_of_memory() -> NoReturn:
    os.write(2, b"gfd: out of memory (the process's address-space limit was reached)\n")
    # and nothing after it: an orderly exit runs exit handlers, the log writer's last flush
    # and the collector, each of which needs memory there is none of -- the interpreter then
    # aborts or prints unraisable-exception noise after the one line
    os._exit(1)
