"""Signals from the process's first statement to its last.

The entry point (:mod:`gfd.launch`) calls :func:`install` before it imports anything else
of gfd, so that no signal finds the process with the operating system's default action
(for SIGHUP: death) while Python is still importing, reading settings or building the
output:

- **SIGHUP** is never a death.  Until the agent takes the signals over (:func:`attach`) it
  is remembered and delivered to the agent then, which reloads after its first pass (the
  settings it read at start may predate a config file the sender had just written).
- **SIGTERM, SIGINT, SIGQUIT** before the agent runs end start-up at once with status 0:
  nothing has been published yet, so there is nothing to keep or undo.  Once the agent
  runs they are its stop requests (exit 0 after the pass or wait in progress; an API
  request or a wait between retries is cut short, see :mod:`gfd.interrupt`).
- Whatever the process is doing when a stop signal comes -- even blocked in a system call
  that Python restarts after each handler, or in a C library that never returns to Python
  (an NVML call hanging in the driver) -- it ends
  within :data:`STOP_BOUND_SECONDS`: the interpreter's C-level handler writes the signal
  number to a pipe (``signal.set_wakeup_fd``) at once, and a watchdog thread that reads it
  ends the process with status 0 when the orderly exit has not finished after
  :data:`STOP_GRACE_SECONDS`.
- While the process exits (:func:`exiting`) every handled signal is ignored: Python's own
  shutdown puts the default actions back for the signals it handled, and a SIGHUP landing
  then would turn an exit 0 into a death.
- Only the main thread ever takes a handled signal: every other thread gfd starts blocks
  them (:func:`start_thread`).  Linux gives a signal sent to the process to any one thread
  that does not block it, and only that thread returns from its wait; Python runs the
  handler in the main thread, but only once that thread runs again.  A SIGHUP taken by a
  helper thread while the main thread waits out a long interval in ``poll()`` would wait
  with it (the main thread usually takes it, but not when it already has a signal pending
  or the process is resumed from a stop or a cgroup freeze: then the first thread to run
  takes it).

Before the first statement of gfd's own code the interpreter itself is starting (about
20 ms); a signal in that window gets the default action, as for any program that has not
yet run.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

RELOAD = signal.SIGHUP
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
HANDLED = (RELOAD, *STOPS)
#: the promise (docs/SECURITY.md): a stop signal ends the process within this many seconds
STOP_BOUND_SECONDS = 5.0
#: how long the orderly exit may take before the watchdog ends the process itself
STOP_GRACE_SECONDS = 4.0

#: who takes the signals once gfd is ready: called in the main thread with the signal number
Receiver = Callable[[int], None]


class _State:
    __slots__ = ("exiting", "installed", "pending_reload", "receiver", "without_watchdog")

    def __init__(self) -> None:
        self.installed = False
        self.without_watchdog = False
        self.exiting = False
        self.receiver: Receiver | None = None
        self.pending_reload = False


_state = _State()


def install() -> None:
    """Catch every handled signal from now on, and start the stop watchdog.  Called once,
    first thing, by the entry point (main thread)."""
    _catch_all()
    _state.installed = True
    try:
        read, write = os.pipe()  # non-inheritable (PEP 446): no child gets either end
    except OSError:
        return  # no descriptor left (a tiny RLIMIT_NOFILE): the handlers still apply
    watchdog = threading.Thread(target=_watch, args=(read,), name="gfd-stop-watchdog", daemon=True)
    try:
        os.set_blocking(write, False)  # the C handler must never block on a full pipe
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        start_thread(watchdog)
    except (OSError, RuntimeError):  # no thread can start (RLIMIT_NPROC)
        _state.without_watchdog = True
        signal.set_wakeup_fd(-1)
        os.close(read)
        os.close(write)


def without_watchdog() -> bool:
    """True, once, when :func:`install` could not start the stop watchdog (so that the
    logging set-up says so in one line)."""
    missing, _state.without_watchdog = _state.without_watchdog, False
    return missing


def start_thread(thread: threading.Thread) -> None:
    """Start ``thread`` with every handled signal blocked in it, so that the main thread
    takes them all.  Every thread gfd starts is started here, and so is every thread a
    library starts from one of them (a new thread inherits the mask of the thread that
    starts it: blocking around ``start()`` leaves no moment where the new thread takes a
    signal).  A signal that comes while the caller has them blocked waits, and reaches the
    caller as soon as the mask is restored."""
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


def _catch_all() -> None:
    for signum in HANDLED:
        signal.signal(signum, _catch)


def _catch(signum: int, frame: FrameType | None) -> None:
    del frame
    if _state.exiting:
        return  # the status the process is ending with stands
    receiver = _state.receiver
    if receiver is not None:
        receiver(signum)
    elif signum == RELOAD:
        _state.pending_reload = True
    else:
        # start-up: nothing is published yet, so a stop ends the process here, status 0
        raise SystemExit(0)


def attach(receiver: Receiver) -> None:
    """Hand the signals to ``receiver`` (the agent, or a one-off action); a SIGHUP that came
    before is delivered to it now.  Without :func:`install` (a test driving the agent in its
    own process) this installs the handlers, without the watchdog."""
    if not _state.installed:
        _catch_all()
    _state.receiver = receiver
    if _state.pending_reload:
        _state.pending_reload = False
        receiver(RELOAD)


def ignore_reload(signum: int) -> None:
    """A receiver for one-off actions (``--cleanup``, the dumps): SIGHUP changes nothing;
    a stop ends blocking API work (:mod:`gfd.interrupt`), and the action fails with one line."""
    # imported here: the entry point installs the handlers before any other gfd module loads
    from gfd import interrupt

    if signum != RELOAD:
        interrupt.request_stop(signal.Signals(signum).name)


def exiting() -> None:
    """The process is ending: from now on a signal changes nothing."""
    _state.exiting = True
    _state.receiver = None
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_IGN)


def _watch(read: int) -> None:
    """The watchdog thread: once a stop signal has come, the process has
    STOP_GRACE_SECONDS to end by itself."""
    poller = select.poll()
    poller.register(read, select.POLLIN)
    deadline: float | None = None
    while True:
        left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000) + 1)
        if poller.poll(left):
            try:
                numbers = os.read(read, 512)
            except OSError:
                return  # the pipe is gone: nothing more can be watched
            if not numbers:
                return  # its write end is closed: no signal can come through it any more
            if deadline is None and any(number in STOPS for number in numbers):
                deadline = time.monotonic() + STOP_GRACE_SECONDS
        elif deadline is not None and time.monotonic() >= deadline:
            _force_exit()


def _force_exit() -> None:
    """End the process now, status 0, with one line on stderr when stderr can take it
    without blocking (a stderr nobody reads must not hold the exit either)."""
    line = (
        b'{"event": "stop signal not honoured within %d s; exiting without cleanup", '
        b'"level": "error"}\n' % int(STOP_GRACE_SECONDS)
    )
    try:
        probe = select.poll()
        probe.register(2, select.POLLOUT)
        if probe.poll(0):
            os.write(2, line)
    except OSError:
        pass
    os._exit(0)
