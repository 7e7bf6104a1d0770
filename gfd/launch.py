"""The process's entry point: ``gfd`` and ``gpu-feature-discovery`` (console scripts) and
``python -m gfd``.

It does one thing before anything else of gfd is imported: :func:`gfd.signals.install`, so
that a signal that arrives while the rest is still being imported is caught (a SIGHUP then
is a reload, never a death); and one thing last: from the moment the command is done,
signals are ignored, so none can change how the process ends.
"""

from __future__ import annotations

import os


def main() -> None:
    from gfd import signals

    signals.install()
    try:
        from gfd.cli import main as run

        run()
    except MemoryError:
        # an address-space limit (RLIMIT_AS) met anywhere: one line, not a traceback that
        # itself needs memory to print
        os.write(2, b"gfd: out of memory (the process's address-space limit was reached)\n")
        raise SystemExit(1) from None
    finally:
        signals.exiting()
