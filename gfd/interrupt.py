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

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

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


def reset() -> None:
    """Forget a stop request (tests; a process stops once)."""
    _state.stop = False
    _state.name = ""
    _state.depth = 0
