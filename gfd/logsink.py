"""The process's stderr as a sink that never blocks and never raises.

gfd's log lines, and everything else written to ``sys.stderr`` (click's one-line errors,
warnings, a traceback), go to file descriptor 2, which the container runtime holds: a pipe
that nobody may be reading, a pipe whose reader has gone (EPIPE), or nothing at all when gfd
was started with fd 2 closed.  None of these may stop or hold up labelling, nor a signal.

How: :func:`install` replaces ``sys.stderr`` with a :class:`StderrSink`.  ``write`` only
appends the text to an in-memory backlog (bounded: :data:`BACKLOG_BYTES`) and returns; one
daemon thread, started with the first write, copies the backlog to fd 2 with plain blocking
writes.  A writer that cannot write (a full pipe) holds up only that thread: meanwhile the
backlog fills, and text that does not fit is dropped and counted (``dropped``, served as
``gfd_log_lines_dropped_total``).  A write that fails (EPIPE, EIO, ENOSPC) drops what it
held, counted the same way; the next one is tried afresh.  At exit the backlog gets at most
:data:`EXIT_DRAIN_SECONDS` to reach fd 2.

Why a thread rather than a non-blocking descriptor: ``O_NONBLOCK`` is a flag of the open
file description, which fd 2 shares with whoever else holds it (the runtime's other
processes, the shell of a person running gfd by hand), so setting it would change their
writes too; a thread keeps fd 2 exactly as it was given.

When fd 2 is closed at start, it is pointed at ``/dev/null`` before anything else can be
opened there (a features file opened as fd 2 would receive every later log line), and
every line is counted as dropped.
"""

from __future__ import annotations

import _thread
import atexit
import io
import os
import select
import sys
import threading
from collections import deque
from typing import TYPE_CHECKING

from gfd.signals import start_thread

if TYPE_CHECKING:
    import threading

#: text waiting for fd 2, at most (about 800 log lines); more is dropped
BACKLOG_BYTES = 256 << 10
#: how long a process's exit waits for the backlog to reach fd 2
EXIT_DRAIN_SECONDS = 0.5
#: once the interpreter is finalizing, the longest a write waits for the backlog's lock
LOCK_SECONDS = 0.5


def _lines(data: bytes) -> int:
    """Lines in a dropped piece of text: a log line is one write, ending in one newline."""
    return data.count(b"\n") or 1


class StderrSink(io.TextIOBase):
    """A text stream over a file descriptor whose ``write`` never blocks and never raises."""

    def __init__(self, fd: int, *, closed: bool = False, backlog_bytes: int = BACKLOG_BYTES):
        super().__init__()
        self._fd = fd
        self._unwritable = closed  # nothing will ever reach the descriptor
        self._tty = not closed and os.isatty(fd)
        self._limit = backlog_bytes
        self._backlog: deque[bytes] = deque()
        self._backlog_bytes = 0  # queued plus the batch being written
        self._busy = False  # the writer holds a batch
        self._dropped = 0
        self._cond: threading.Condition | None = None  # made with the first write
        self._starting = _thread.allocate_lock()  # one writer, whichever thread writes first
        self._direct = False  # no writer thread could start: write what fd 2 takes at once
        self.unreported = False  # ... and no log line has said so yet

    # ----------------------------------------------------------------- the stream surface

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "backslashreplace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._tty

    def fileno(self) -> int:
        return self._fd

    def flush(self) -> None:
        """Nothing to do: the writer thread delivers (waiting here could block)."""

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            # a text stream refuses bytes (click probes with b"" to tell text from binary)
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return 0
        data = text.encode("utf-8", "backslashreplace")
        if self._unwritable:
            self._dropped += _lines(data)
            return len(text)
        cond = self._cond or self._start()
        if self._direct:
            self._dropped += self._write_now(data)
            return len(text)
        if not _acquire(cond):
            self._dropped += _lines(data)
            return len(text)
        try:
            if self._backlog_bytes + len(data) > self._limit:
                self._dropped += _lines(data)
            else:
                self._backlog.append(data)
                self._backlog_bytes += len(data)
                cond.notify()
        finally:
            cond.release()
        return len(text)

    # ----------------------------------------------------------------- accounting

    @property
    def dropped(self) -> int:
        """Lines dropped so far: the backlog was full, fd 2 was closed or a write failed."""
        return self._dropped

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the backlog to reach fd 2; True when it did."""
        cond = self._cond
        if cond is None:
            return True
        if not _acquire(cond):
            return False
        try:
            return cond.wait_for(lambda: not self._backlog and not self._busy, timeout)
        finally:
            cond.release()

    # ----------------------------------------------------------------- the writer

    def _start(self) -> threading.Condition:

        with self._starting:
            if self._cond is None:
                # reentrant: a signal handler that writes while the main thread is inside
                # write() must not wait for itself
                self._cond = threading.Condition(threading.RLock())

                try:
                    start_thread(
                        threading.Thread(target=self._write_forever, name="gfd-stderr", daemon=True)
                    )
                except RuntimeError:  # a pids limit: "can't start new thread"
                    self._direct = True
                    self.unreported = True
            return self._cond

    def _write_now(self, data: bytes) -> int:
        """Without a writer thread: ``data`` to fd 2 only when it can take it without
        waiting (a pipe with room: a write of up to PIPE_BUF bytes is then whole); the
        lines lost."""

        try:
            _, ready, _ = select.select([], [self._fd], [], 0)
            if ready and len(data) <= select.PIPE_BUF:
                os.write(self._fd, data)
                return 0
        except (OSError, ValueError):
            pass
        return _lines(data)

    def _write_forever(self) -> None:
        cond = self._cond
        assert cond is not None
        while True:
            with cond:
                cond.wait_for(lambda: bool(self._backlog))
                batch = b"".join(self._backlog)
                self._backlog.clear()
                self._busy = True
            lost = self._write_all(batch)
            with cond:
                self._busy = False
                self._backlog_bytes -= len(batch)
                self._dropped += lost
                cond.notify_all()

    def _write_all(self, data: bytes) -> int:
        """Write ``data`` to the descriptor, blocking as long as it takes; the lines lost."""
        view = memoryview(data)
        while view:
            try:
                written = os.write(self._fd, view)
            except BlockingIOError:
                # someone else made the shared description non-blocking: wait for room

                select.select([], [self._fd], [], 1.0)
                continue
            except OSError:
                return _lines(view.tobytes())
            view = view[written:]
        return 0


def _acquire(cond: threading.Condition) -> bool:
    """Take the backlog's lock; False only when it may never come.

    The writer thread holds the lock only to swap the backlog out, never while writing, so
    as long as it runs it lets go within moments -- however long a loaded machine leaves it
    descheduled meanwhile: the wait is not bounded then, and no line is lost to a slow
    scheduler.  The one holder that never lets go is a daemon thread frozen where it stood
    by the interpreter's finalization; from then on a wait has :data:`LOCK_SECONDS`."""
    return cond.acquire(timeout=LOCK_SECONDS if sys.is_finalizing() else -1)


def install(fd: int = 2) -> StderrSink | None:
    """Make ``sys.stderr`` a :class:`StderrSink` over ``fd``; None (nothing changed) when
    ``sys.stderr`` is not the process's own (a test's capture, an embedding program)."""
    if sys.stderr is not sys.__stderr__ or isinstance(sys.stderr, StderrSink):
        return None
    closed = False
    try:
        os.fstat(fd)
    except OSError:
        closed = True
        _hold_with_devnull(fd)
    sink = StderrSink(fd, closed=closed)
    sys.stderr = sink
    atexit.register(sink.drain, EXIT_DRAIN_SECONDS)
    return sink


def _hold_with_devnull(fd: int) -> None:
    """Point the closed ``fd`` at /dev/null, so that no file gfd opens later gets it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    if devnull != fd:
        os.dup2(devnull, fd)
        os.close(devnull)


#: lines a stream that is not a StderrSink refused (closed, a broken pipe)
_refused = [0]


def write_line(line: str) -> None:
    """``line`` to the current ``sys.stderr``; a stream that refuses it (closed, EPIPE)
    only costs the line, counted."""
    stream = sys.stderr
    try:
        if stream is None:
            raise ValueError("stderr is closed")
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        _refused[0] += 1


def log_lines_dropped() -> int:
    """Log lines (and other stderr text, counted by lines) that never reached stderr."""
    stream = sys.stderr
    sink = stream.dropped if isinstance(stream, StderrSink) else 0
    return _refused[0] + sink


def writer_missing() -> bool:
    """True, once, when stderr is gfd's sink and its writer thread could not start."""
    stream = sys.stderr
    if isinstance(stream, StderrSink) and stream.unreported:
        stream.unreported = False
        return True
    return False
