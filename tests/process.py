"""Running ``gfd`` as a real process in tests."""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GFD = [sys.executable, "-m", "gfd"]


#: the environment variables gfd reads besides GFD_*: never inherited from outside the test
GFD_VARIABLES = {
    "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "CONFIG_FILE", "USE_NODE_FEATURE_API", "NODE_NAME",
    "DEVICE_DISCOVERY_STRATEGY", "NAMESPACE", "POD_NAME", "KUBECONFIG", "CONFIG_FILE_SRCDIR",
    "NODE_LABEL", "DEFAULT_CONFIG", "FALLBACK_STRATEGIES", "DRIVER_ROOT_CTR_PATH",
    "CONTAINER_DRIVER_ROOT", "KUBE_API_QPS", "KUBE_API_BURST",
}  # fmt: skip


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any GFD setting that could leak in from outside."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("GFD_") and k not in GFD_VARIABLES
    }
    env["PYTHONPATH"] = ROOT
    env.update(extra or {})
    return env


def run_gfd(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60,
    stdin: Any = subprocess.DEVNULL, stdout: Any = subprocess.PIPE,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``python -m gfd ARGS`` in a fresh interpreter, to its end; stdout captured unless
    ``stdout`` names where it goes; ``preexec_fn`` runs in the child (process limits)."""
    return subprocess.run(
        [*GFD, *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, text=True,
        env=clean_env(env), cwd=ROOT, timeout=timeout, preexec_fn=preexec_fn,
    )  # fmt: skip


def run_gfd_here(
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``run_gfd`` without a new interpreter: ``gfd.cli.main(args)`` in this process, with the
    same environment and working directory, stdout and stderr captured, the exit status
    taken from its SystemExit.  For runs that end by themselves (oneshot, bad input,
    --help); signals, daemons and start-up itself are tested with real processes."""
    from gfd import cli
    from gfd.discovery import sysfs
    from gfd.observability import configure_logging

    sysfs._warned.clear()  # a new process has warned about nothing yet (warnings are once each)

    stdout, stderr = io.StringIO(), io.StringIO()
    saved_environ, saved_cwd = dict(os.environ), os.getcwd()
    saved_handlers = {signum: signal.getsignal(signum) for signum in _HANDLED}
    os.environ.clear()
    os.environ.update(clean_env(env))
    os.chdir(ROOT)
    status: int = 0
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                cli.main(list(args))
            except SystemExit as exit_:
                code = exit_.code
                status = code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        os.chdir(saved_cwd)
        for signum, handler in saved_handlers.items():
            signal.signal(signum, handler)
        configure_logging(None, "info")  # the next record sets logging up anew
    return subprocess.CompletedProcess([*GFD, *args], status, stdout.getvalue(), stderr.getvalue())


#: the longest error line a refusal may be: a message quotes at most ~100 characters of a
#: value, the rest of the line is words
LONGEST_LINE = 400


def assert_refused(result: subprocess.CompletedProcess[str], *words: str, status: int = 2) -> str:
    """The start-up contract for bad input: exit ``status``, one short ``gfd: error:`` line
    naming ``words``, no traceback, nothing on stdout.  Returns the line."""
    assert result.returncode == status, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    line = lines[0]
    assert line.startswith("gfd: error: "), line[:500]
    assert len(line) <= LONGEST_LINE, line[:500]
    for word in words:
        assert word in line, line
    assert result.stdout == ""
    return line


_HANDLED = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


def spawn_gfd(
    *args: str, env: Mapping[str, str] | None = None, command: Sequence[str] = GFD
) -> subprocess.Popen[str]:
    """A fresh interpreter running ``python -m gfd ARGS`` (``command`` instead of
    ``python -m gfd`` where given: the e2e layer's launcher)."""
    return subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=clean_env(env), cwd=ROOT, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def http_get(port: int, path: str) -> tuple[int, str]:
    """The status and body of ``GET path`` on the loopback ``port`` (an error status too)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def eventually(condition: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Poll ``condition`` (a guard of ``limit`` seconds against a hung test, not a timing
    assertion)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not; one gone
    between the open and the read of its stat is not either)."""
    try:
        with open(f"/proc/{pid}/stat") as status:
            return status.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Daemon:
    """A running gfd whose JSON log lines are read on a thread, so a test waits for events
    rather than a guessed time; ``metrics=True`` serves ``/metrics`` on a free port too."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, metrics: bool = False
    ) -> None:
        # port 0: gfd binds a free port itself and says which in its log; a port picked
        # here and bound by gfd a moment later could be taken by another process between
        self._served = metrics
        served = ["--metrics-address", "127.0.0.1:0"] if metrics else []
        self._follow(spawn_gfd("--log-format", "json", *args, *served, env=env))

    #: the metrics port once known; whether gfd was asked to serve metrics
    _port: int | None = None
    _served = False

    @property
    def port(self) -> int | None:
        """The metrics port gfd bound, read from its log line (waited for); None unless
        metrics are served."""
        deadline = time.monotonic() + 30
        while self._served and self._port is None:
            for line in list(self.lines):
                if '"serving metrics and health endpoints"' in line:
                    self._port = int(json.loads(line)["port"])
            if self._port is None:
                assert time.monotonic() < deadline, f"no metrics port; log:\n{self.log()[-8000:]}"
                time.sleep(0.02)
        return self._port

    @port.setter
    def port(self, value: int | None) -> None:
        self._port = value

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        """Whatever the block did, no gfd outlives it."""
        self.kill()

    def _follow(self, process: Any) -> None:
        """Take ``process`` on: its stderr lines read on a thread into ``lines`` and
        ``events`` (a subclass that starts gfd another way calls this)."""
        self.process = process
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                self.events.put({"event": "raw", "line": line})

    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, event: str, count: int = 1, limit: float = 30) -> list[dict[str, Any]]:
        """The next ``count`` ``event`` log lines, waiting at most ``limit`` seconds in all
        (other events keep arriving: the limit is for the whole wait, not for each line)."""
        found = []
        deadline = time.monotonic() + limit
        while len(found) < count:
            try:
                item = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {event!r} event; log so far:\n{''.join(self.lines)[-8000:]}"
                ) from None
            if item.get("event") == event:
                found.append(item)
        return found

    # ------------------------------------------------------------- through /metrics

    def get(self, path: str) -> tuple[int, str]:
        assert self.port is not None
        return http_get(self.port, path)

    def metric(self, name: str, **labels: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        _, text = self.get("/metrics")
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(key) == value for key, value in labels.items()
                ):
                    total += sample.value
        return total

    def passes(self, **labels: str) -> int:
        return int(self.metric("gfd_passes_total", **labels))

    def wait_until(self, condition: Callable[[], bool], what: str, limit: float = 60) -> None:
        """Poll ``condition`` (a guard against a hung test, not a timing assertion)."""
        deadline = time.monotonic() + limit
        while True:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"gfd exited ({self.process.returncode}) waiting for {what}:\n{self.log()}"
                )
            try:
                if condition():
                    return
            except (urllib.error.URLError, ConnectionError):
                pass  # the metrics server is not up yet
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up waiting for {what}; gfd log:\n{self.log()[-4000:]}")
            time.sleep(0.05)

    def wait(self, timeout: float) -> int:
        """Its exit status, once it has ended and every line it wrote is in ``lines``."""
        status = self.process.wait(timeout=timeout)
        self._reader.join(timeout)  # the rest of stderr, up to the end the exit closed
        return int(status)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.wait(30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
