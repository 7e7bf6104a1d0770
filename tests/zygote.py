"""A warm parent for the gfd daemons that tests start (tests/process.py ``Daemon``).

Started once per test process (``python -m tests.zygote FD``), it imports what a gfd process
imports -- the Kubernetes client alone takes ~0.4 CPU-s a process -- and then forks one
child per request on the control socket ``FD`` (a SOCK_SEQPACKET Unix socket).  A child is
a real process: its own pid, stdin/stdout/stderr (the three descriptors sent with the
request), environment and working directory; signals sent to it are delivered to it and
its exit status is its own.  It runs ``python -m gfd ARGS`` as a fresh interpreter would
(``runpy``, ``__main__``), from module state nobody has used: the parent never runs gfd,
and gfd reads its environment when it runs, never at import.  What only an interpreter's
start-up reads (PYTHON*, LD_*) is the parent's: tests/process.py starts a fresh interpreter
where a test asks for another.

Requests: ``{"id": n, "args": [...], "env": {...}, "cwd": "..."}`` with three descriptors.
Answers: ``{"id": n, "pid": pid}`` once forked, ``{"pid": pid, "status": s}`` when a child
exits (``s`` as Popen.returncode: negative for a signal), with ``"cpu"``: the CPU
seconds it used (what a test's RUSAGE_CHILDREN no longer sees; bench and reports add it).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import sys
import traceback
from typing import Any

#: what gfd imports on its way to a pass, whichever output it publishes to
PRELOADED = (
    "click",
    "kubernetes.client",
    "kubernetes.client.exceptions",
    "kubernetes.config",
    "kubernetes.config.config_exception",
    "prometheus_client",
    "structlog",
    "tenacity",
    "urllib3",
    "yaml",
    "gfd.agent",
    "gfd.cli",
    "gfd.metrics",
    "gfd.outputs.kube",
    "gfd.outputs.nodefeature",
    "gfd.outputs.nodelabels",
)


def run_child(request: dict[str, Any], fds: list[int], closing: list[int]) -> None:
    """In the forked child: become ``python -m gfd ARGS``; never returns."""
    status = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in {*fds, *closing}:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        main = os.path.join(os.path.dirname(sys.modules["gfd"].__file__ or ""), "__main__.py")
        sys.argv = [main, *request["args"]]
        runpy.run_module("gfd", run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            status = 0
        elif isinstance(code, int):
            status = code
        else:
            print(code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        status = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        if status < 0:  # ended by a signal, as the interpreter ends on an unhandled ^C
            signal.signal(-status, signal.SIG_DFL)
            os.kill(os.getpid(), -status)
        os._exit(status & 0xFF)


def serve(control: socket.socket) -> None:
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    while True:
        readable, _, _ = select.select([control, wake_r], [], [])
        if wake_r in readable:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
            reap(control)
        if control in readable:
            data, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
            if not data:
                return  # the test process has gone
            request = json.loads(data)
            pid = os.fork()
            if pid == 0:
                run_child(request, fds, [control.fileno(), wake_r, wake_w])
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"id": request["id"], "pid": pid}).encode())


def reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        control.send(json.dumps({"pid": pid, "status": code, "cpu": cpu}).encode())


if __name__ == "__main__":
    for name in PRELOADED:
        importlib.import_module(name)
    serve(socket.socket(fileno=int(sys.argv[1])))
