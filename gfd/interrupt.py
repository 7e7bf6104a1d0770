"""A stop signal that cuts blocking API work short.

The daemon's signal handler calls :func:`request_stop` on SIGTERM/SIGINT/SIGQUIT.  Work that
may block for long — an API request, a wait between retries — runs inside
:func:`interruptible`, or waits with :func:`sleep`; both end at once with :class:`Interrupted`
when a stop is requested.  Inside ``interruptible`` the handler raises ``Interrupted`` itself:
Python runs a signal handler in the main thread between bytecodes and, when the handler
raises, a blocking system call (``recv``, ``connect``, ``poll``) is not restarted (PEP 475),
so a request stuck on a silent server ends within moments of the signal.

``Interrupted`` derives from BaseException so that no ``except Exception`` on the way
(urllib3, http.client, tenacity) can swallow it; the API client turns it into one clear
error.  Only the main thread is ever interrupted (where signal handlers run); in any other
thread ``interruptible`` only checks the flag on entry.
"""

from __future__ import annotations

import os
import select
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress

#: how often a wait looks at the stop flag (a signal handler takes no lock: see sleep())
_POLL_SECONDS = 0.05


class Interrupted(BaseException):
    """A stop was requested while blocking work was in progress."""

    def __init__(self, name: str) -> None:
        super().__init__(f"interrupted by {name}")
        self.name = name


class _State:
    def __init__(self) -> None:
        self.stop = False
        self.name = ""
        self.depth = 0  # how deep the main thread is inside interruptible()


_state = _State()


def request_stop(name: str = "a stop signal") -> None:
    """Ask blocking work to end.  Called from a signal handler (main thread); raises
    :class:`Interrupted` when the main thread is inside :func:`interruptible`."""
    _state.name = _state.name or name
    _state.stop = True
    if _state.depth and threading.current_thread() is threading.main_thread():
        _state.depth = 0  # raised once; the region is left by the exception
        raise Interrupted(_state.name)


def stop_requested() -> bool:
    return _state.stop


def check() -> None:
    """Raise :class:`Interrupted` when a stop was requested."""
    if _state.stop:
        raise Interrupted(_state.name)


def sleep(seconds: float) -> None:
    """Wait ``seconds``, or less when a stop is requested (then raise Interrupted).

    Waits in short sleeps rather than on an Event: setting an Event from a signal handler
    takes its lock, which the interrupted main thread may be holding."""
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        check()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(_POLL_SECONDS, left))


@contextmanager
def interruptible() -> Iterator[None]:
    """Blocking work that a stop request may end at any point (main thread only)."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        _state.depth += 1
    try:
        check()
        yield
    finally:
        if main and _state.depth:
            _state.depth -= 1


@contextmanager
def deferred() -> Iterator[None]:
    """Work inside :func:`interruptible` that a stop must not cut in the middle (starting a
    child process: cut inside ``Popen``, its pid would be lost with the child still
    running).  A stop requested meanwhile is only recorded; the next :func:`check` or
    :func:`interruptible` raises it."""
    main = threading.current_thread() is threading.main_thread()
    saved = _state.depth
    if main:
        _state.depth = 0  # the handler records the stop instead of raising it
    try:
        yield
    finally:
        if main:
            _state.depth = saved


def reset() -> None:
    """Forget a stop request (tests; a process stops once)."""
    _state.stop = False
    _state.name = ""
    _state.depth = 0


class Wakeup:
    """A flag that a signal handler may set, and that a sleeper can wait on.

    ``threading.Event`` cannot be set from a signal handler: ``set()`` takes the Event's
    lock (a plain, non-reentrant Lock), and the handler runs in the main thread between
    bytecodes — possibly while that same thread holds the lock inside ``Event.wait()`` or
    ``Event.clear()``; the handler then waits for itself forever and SIGTERM is never
    honoured.  This takes no lock: ``set()`` stores a flag and writes a byte to a
    non-blocking pipe (both safe in a handler), and ``wait()`` polls the pipe's read end,
    so a wake that lands just before the wait still ends it at once."""

    def __init__(self) -> None:
        self._flag = False
        self._read, self._write = os.pipe()  # non-inheritable (PEP 446)
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)
        weakref.finalize(self, _close_pair, self._read, self._write)

    def set(self) -> None:
        self._flag = True
        with suppress(OSError):  # the pipe is full (a wake is already pending) or closed
            os.write(self._write, b"\0")

    def is_set(self) -> bool:
        return self._flag

    def clear(self) -> None:
        self._flag = False
        self._drain()

    def _drain(self) -> None:
        try:
            while os.read(self._read, 512):
                pass
        except OSError:  # drained (EAGAIN)
            pass

    def wait(self, timeout: float | None = None) -> bool:
        """Return True once set, or False after ``timeout`` seconds (None: no limit)."""
        if self._flag:
            return True
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while not self._flag:
            if deadline is None:
                self._poll.poll()
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                # milliseconds, rounded up, at most an hour a call (poll takes a C int)
                self._poll.poll(min(3_600_000, int(left * 1000) + 1))
            if not self._flag:
                self._drain()  # a byte left by a set() that a clear() already undid
        return self._flag


def _close_pair(read: int, write: int) -> None:
    for fd in (read, write):
        with suppress(OSError):
            os.close(fd)
