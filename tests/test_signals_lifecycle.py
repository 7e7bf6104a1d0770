"""Signals at every moment of the process's life (gfd/signals.py): start-up, a pass stalled
by the API server, a wait between retries, a credential plugin running, a main thread blocked
where no Python handler runs, the exit itself.  SIGHUP is a reload or nothing, never a death;
SIGTERM, SIGINT and SIGQUIT end the process with status 0.  Waits are guards against a hung
test, except where the bound is what is tested: a stop ends the process within
``signals.STOP_BOUND_SECONDS`` (plus slack for a loaded machine; without the fix, never)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd import signals
from tests.execplugin import exec_credential, exec_user, write_plugin
from tests.fakes.fake_apiserver import FakeApiServer, Fault
from tests.helpers import expected_labels as expected
from tests.helpers import file_labels
from tests.process import GFD, ROOT, Daemon, spawn_gfd

pytestmark = pytest.mark.timeout(180)

SNAPSHOTS = Path(ROOT) / "examples" / "snapshots"
DGX = SNAPSHOTS / "dgx-a100.yaml"
TWO_MODELS = SNAPSHOTS / "two-models.yaml"
FOREIGN = {"kubernetes.io/hostname": "n1"}
API_NODE_N1 = {"labels": FOREIGN, "annotations": {}}
STOPS = [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT]
#: the features file, chosen explicitly (whatever output is the default)
TO_FILE = ("--use-node-feature-api=false", "--output-file")
#: how long a stopped process may take, on a loaded test machine, beyond the promised bound
SLACK_SECONDS = 10.0


def poll(condition: Callable[[], bool], what: str, daemon: Any = None, pause: float = 0.01) -> None:
    """Until ``condition`` holds, ``daemon`` (a Daemon or a Popen) alive meanwhile; a guard of
    60 s against a hung test, never a timing assertion."""
    deadline = time.monotonic() + 60
    process, log = (daemon.process, daemon.log) if isinstance(daemon, Daemon) else (daemon, str)
    while not condition():
        assert process is None or process.poll() is None, f"gfd exited waiting for {what}:\n{log()}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}:\n{log()}"
        time.sleep(pause)


def declared_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml: name -> "module:function"."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as handle:
        text = handle.read()
    section = text.split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([^"]+)"$', section, re.MULTILINE))


def console_script() -> list[str]:
    """What the installed ``gfd`` command runs: the entry point pyproject.toml declares,
    called as pip's generated script calls it."""
    module, _, function = declared_scripts()["gfd"].partition(":")
    code = f"import sys; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", code]


LAUNCHERS = {"python-m-gfd": GFD, "console-script": console_script()}


#: a line of ``-X importtime`` naming a module gfd's command imports after the entry point
#: (gfd.cli's own imports): from there on gfd is starting, not the interpreter
STARTING = re.compile(r"^import time:.*\|\s+gfd\.(?!launch\b|signals\b|__main__\b)")


class FreshDaemon(Daemon):
    """A daemon in a fresh interpreter under ``-X importtime``: the test sees where start-up
    (what it signals into) has got to."""

    def __init__(self, command: list[str], *args: str) -> None:
        self.port = None
        command = [command[0], "-X", "importtime", *command[1:]]
        self._follow(spawn_gfd("--log-format", "json", *args, command=command))

    def wait_until_starting(self) -> None:
        """Until gfd imports its own modules: the interpreter is up, gfd is not ready."""
        poll(lambda: any(STARTING.match(line) for line in list(self.lines)), "gfd's imports",
             self, pause=0.0002)  # fmt: skip


@pytest.fixture
def fresh() -> Iterator[Callable[..., FreshDaemon]]:
    started: list[FreshDaemon] = []

    def start(command: list[str], *args: str) -> FreshDaemon:
        daemon = FreshDaemon(command, *args)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


# ----------------------------------------------------------------------------- start-up


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_sighup_at_any_moment_of_start_up_is_a_reload_never_a_death(
    fresh: Callable[..., FreshDaemon], tmp_path: Path, launcher: str
) -> None:
    """From gfd's first imports through the settings and the first pass: SIGHUP at each
    delay is one reload after the first pass, and the labels are right."""
    for delay in (0.0, 0.0, 0.002, 0.01, 0.03, 0.1):
        out = tmp_path / f"gfd-{delay}"
        daemon = fresh(
            LAUNCHERS[launcher], "--sleep-interval", "50ms", *TO_FILE, str(out),
            "--snapshot-file", str(DGX), "--no-timestamp",
        )  # fmt: skip
        daemon.wait_until_starting()
        time.sleep(delay)
        daemon.process.send_signal(signal.SIGHUP)
        daemon.wait_for("settings reloaded")
        daemon.wait_for("pass finished")
        assert daemon.process.poll() is None
        assert file_labels(out) == expected(DGX)
        assert daemon.stop(signal.SIGTERM) == 0


@pytest.mark.parametrize("signum", STOPS, ids=[s.name for s in STOPS])
def test_a_stop_during_start_up_exits_0(
    fresh: Callable[..., FreshDaemon], tmp_path: Path, signum: int
) -> None:
    daemon = fresh(
        GFD, "--sleep-interval", "50ms", *TO_FILE, str(tmp_path / "gfd"),
        "--snapshot-file", str(DGX),
    )  # fmt: skip
    daemon.wait_until_starting()
    daemon.process.send_signal(signum)
    assert daemon.wait(signals.STOP_BOUND_SECONDS + SLACK_SECONDS) == 0
    assert "Traceback" not in daemon.log()


# ----------------------------------------------------------------------------- exit


def test_signals_during_exit_never_change_its_status(
    fresh: Callable[..., FreshDaemon], tmp_path: Path
) -> None:
    """SIGTERM, then SIGHUP and SIGTERM as fast as they can be sent until the process is
    gone: some land while Python shuts down, which puts the default actions back."""
    for _ in range(5):
        daemon = fresh(
            GFD, "--sleep-interval", "50ms", *TO_FILE, str(tmp_path / "gfd"),
            "--snapshot-file", str(DGX),
        )  # fmt: skip
        daemon.wait_for("pass finished")
        pid = daemon.process.pid
        daemon.process.send_signal(signal.SIGTERM)
        sent = 0
        while daemon.process.poll() is None:
            try:
                os.kill(pid, signal.SIGHUP if sent % 2 else signal.SIGTERM)
            except ProcessLookupError:
                break
            sent += 1
        assert daemon.wait(30) == 0


# ----------------------------------------------------------------------------- bound


#: a ``sitecustomize`` that puts the fake NVML of tests/fakes in place of pynvml, with an
#: nvmlInit that never returns: it waits in read(2) on a pipe nobody writes, as a call into
#: a driver whose GPU has fallen off the bus can wait in the kernel
HANGING_NVML = """\
import os
import sys

sys.path.insert(0, os.environ["HANGING_NVML_REPO"])
from gfd import snapshot
from tests.fakes.fake_nvml import FakeNvml

fake = FakeNvml.from_snapshot(snapshot.load(os.environ["HANGING_NVML_SNAPSHOT"]))
never, _keep_open = os.pipe()


def nvmlInit():
    os.read(never, 1)


fake.module.nvmlInit = nvmlInit
sys.modules["pynvml"] = fake.module
"""


def test_a_stop_ends_the_process_when_the_main_thread_is_blocked(tmp_path: Path) -> None:
    """NVML hangs in the kernel: Python runs the handler (the stop is recorded) and goes
    back to waiting (PEP 475), so the orderly exit never comes; the watchdog ends the
    process, status 0, within the bound."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(HANGING_NVML)
    env = {
        "PYTHONPATH": f"{shim}{os.pathsep}{ROOT}", "HANGING_NVML_REPO": ROOT,
        "HANGING_NVML_SNAPSHOT": str(DGX),
    }  # fmt: skip
    process = spawn_gfd(
        "--log-format", "json", "--sleep-interval", "1s", *TO_FILE, str(tmp_path / "gfd"),
        env=env,
    )  # fmt: skip
    try:
        wchan = Path(f"/proc/{process.pid}/wchan")
        poll(lambda: "pipe_read" in wchan.read_text(encoding="ascii"), "nvmlInit", process, 0.02)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=signals.STOP_BOUND_SECONDS + SLACK_SECONDS) == 0
        assert not (tmp_path / "gfd").exists()  # no pass ever finished
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# ----------------------------------------------------------------------------- the API


@pytest.fixture
def start(kubeconfig: str) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def start_daemon(*args: str, kubeconfig_path: str = kubeconfig) -> Daemon:
        daemon = Daemon(
            "--use-node-labels", "--use-node-feature-api=false", "--node-name", "n1",
            "--kubeconfig", kubeconfig_path, "--no-timestamp", *args,
        )  # fmt: skip
        started.append(daemon)
        return daemon

    yield start_daemon
    for daemon in started:
        daemon.kill()


def labelled(api: FakeApiServer, path: Path) -> bool:
    return api.node_labels("n1") == {**FOREIGN, **expected(path)}


def honoured(daemon: Daemon, signum: int, api: FakeApiServer, path: Path) -> None:
    """What ``signum`` must have done: SIGHUP a reload (the process lives on and the labels
    come right), a stop an exit with status 0 within the bound."""
    if signum == signal.SIGHUP:
        daemon.wait_for("settings reloaded")
        poll(lambda: labelled(api, path), "the labels", daemon)
        assert daemon.process.poll() is None
        assert daemon.stop() == 0
    else:
        assert daemon.wait(signals.STOP_BOUND_SECONDS + SLACK_SECONDS) == 0


SIGNALS = [signal.SIGHUP, signal.SIGTERM]


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_while_the_api_server_stalls_a_pass(
    api: FakeApiServer, start: Callable[..., Daemon], signum: int
) -> None:
    """A request the server never answers (the client gives up after its timeout, 1 s at
    this interval, and tries again)."""
    api.inject(Fault(hang=True, method="PATCH", count=1))
    daemon = start("--snapshot-file", str(DGX), "--sleep-interval", "2s")
    poll(lambda: api.count("PATCH") >= 1, "the stalled request", daemon)
    daemon.process.send_signal(signum)
    honoured(daemon, signum, api, DGX)


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_during_the_wait_between_retries(
    api: FakeApiServer, start: Callable[..., Daemon], signum: int
) -> None:
    api.inject(Fault(status=503, method="PATCH", retry_after=1, count=None))
    daemon = start("--snapshot-file", str(DGX), "--sleep-interval", "10s")
    daemon.wait_for("kubernetes API call failed, retrying")
    daemon.process.send_signal(signum)
    if signum == signal.SIGHUP:
        time.sleep(0.2)  # the signal lands in the back-off, not after it
        api.clear_faults()
    honoured(daemon, signum, api, DGX)


# ----------------------------------------------------------------------------- credential plugin

#: a kubeconfig exec credential plugin; while the file ``slow`` exists beside it, the
#: next call sleeps the seconds it holds (and removes it); every token it gives has expired,
#: so the client runs it again before each request
PLUGIN = f"""dir=$(dirname "$0")
if [ -e "$dir/slow" ]; then
    seconds=$(cat "$dir/slow")
    rm -f "$dir/slow"
    sleep "$seconds" &
    echo $! > "$dir/sleep.pid"
    touch "$dir/sleeping"
    wait $!
fi
echo '{exec_credential("fake-token", expirationTimestamp="2000-01-01T00:00:00Z")}'
"""


class Plugin:
    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.directory = directory
        self.script = write_plugin(directory, PLUGIN)

    def slow_next_call(self, seconds: float) -> None:
        (self.directory / "slow").write_text(f"{seconds}\n")

    def wait_until_running(self, daemon: Daemon) -> None:
        poll((self.directory / "sleeping").exists, "the plugin's call", daemon)

    def kubeconfig(self, api: FakeApiServer) -> str:
        return str(api.write_kubeconfig(self.directory / "kubeconfig", user=exec_user(self.script)))

    def end_sleep(self) -> None:
        """The sleep this test started, if it is still running (a plugin's leftover child
        is another part of the threat model; here it only must not outlive the test)."""
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((self.directory / "sleep.pid").read_text()), signal.SIGKILL)


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Plugin]:
    made = Plugin(tmp_path / "plugin")
    yield made
    made.end_sleep()


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_while_the_credential_plugin_runs_at_start(
    api: FakeApiServer, start: Callable[..., Daemon], plugin: Plugin, signum: int
) -> None:
    """The plugin runs for the first request gfd makes, in the first pass (gfd runs it
    itself, under the request's deadline, not the client while it loads the kubeconfig)."""
    plugin.slow_next_call(2 if signum == signal.SIGHUP else 60)
    daemon = start(
        "--snapshot-file", str(DGX), "--sleep-interval", "0.5s",
        kubeconfig_path=plugin.kubeconfig(api),
    )  # fmt: skip
    plugin.wait_until_running(daemon)
    daemon.process.send_signal(signum)
    honoured(daemon, signum, api, DGX)


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_while_the_credential_plugin_runs_in_a_pass(
    api: FakeApiServer, start: Callable[..., Daemon], plugin: Plugin, tmp_path: Path, signum: int
) -> None:
    """The token has expired: the client runs the plugin again before the pass's request."""
    node = tmp_path / "node.yaml"
    node.write_bytes(DGX.read_bytes())
    daemon = start(
        "--snapshot-file", str(node), "--sleep-interval", "0.5s",
        kubeconfig_path=plugin.kubeconfig(api),
    )  # fmt: skip
    poll(lambda: labelled(api, DGX), "the first labels", daemon)
    plugin.slow_next_call(2 if signum == signal.SIGHUP else 60)
    staging = tmp_path / "node.tmp"
    staging.write_bytes(TWO_MODELS.read_bytes())
    os.replace(staging, node)  # the labels change: the next pass sends a request
    plugin.wait_until_running(daemon)
    daemon.process.send_signal(signum)
    honoured(daemon, signum, api, TWO_MODELS)


def test_the_console_script_is_the_launcher() -> None:
    """Both console scripts install the signal handlers before anything else of gfd."""
    entry = "gfd.launch:main"
    assert declared_scripts() == {"gfd": entry, "gpu-feature-discovery": entry}
    check = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import gfd.launch"], capture_output=True,
        text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    gfd_modules = {
        line.rsplit("|", 1)[1].strip() for line in check.stderr.splitlines()
        if line.rsplit("|", 1)[-1].strip().startswith("gfd")
    }  # fmt: skip
    assert gfd_modules == {"gfd", "gfd.launch"}  # gfd.signals comes first, inside main()


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_during_cleanup(api: FakeApiServer, kubeconfig: str, signum: int) -> None:
    """``--cleanup`` waiting on the API server: SIGHUP changes nothing (here in the wait
    before a retry: it retries and finishes); SIGTERM (here in a request the server never
    answers) ends it with one line and status 1 -- it did not finish, so never 0."""
    if signum == signal.SIGHUP:
        api.inject(Fault(status=503, retry_after=1, method="GET", count=1))
    else:
        api.inject(Fault(hang=True, method="GET", count=1))
    process = spawn_gfd(
        "--cleanup", "--use-node-labels", "--use-node-feature-api=false", "--node-name", "n1",
        "--kubeconfig", kubeconfig, "--sleep-interval", "10s",
    )  # fmt: skip
    try:
        poll(lambda: api.count("GET") >= 1, "the cleanup to ask for the node", process)
        process.send_signal(signum)
        status = process.wait(timeout=signals.STOP_BOUND_SECONDS + SLACK_SECONDS)
        stderr = process.stderr.read()
        errors = [line for line in stderr.splitlines() if "error:" in line]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if signum == signal.SIGHUP:
        assert (status, errors) == (0, [])
        assert api.count("GET") >= 2  # the refused request was tried again
    else:
        assert status == 1, stderr  # 0 with the watchdog's line: the request was not cut
        assert len(errors) == 1 and "interrupted by SIGTERM" in errors[0], errors


# ----------------------------------------------------------------------------- threads

#: the signals gfd handles, as bits of /proc's signal masks (bit n-1 is signal n)
HANDLED_BITS = {signum: 1 << (signum - 1) for signum in signals.HANDLED}


def blocked_by_each_thread(pid: int) -> dict[str, int]:
    """Each thread of ``pid`` but the main one: its name -> its SigBlk mask."""
    masks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) == pid:
            continue
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue  # the thread ended meanwhile (a metrics request's)
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        masks[f"{fields['Name'].strip()}/{tid}"] = int(fields["SigBlk"], 16)
    return masks


def assert_only_the_main_thread_takes_signals(daemon: Daemon) -> None:
    masks = blocked_by_each_thread(daemon.process.pid)
    # the stop watchdog, the stderr writer and whatever the output and the metrics start
    assert len(masks) >= 2, masks
    for thread, mask in masks.items():
        missing = [s.name for s, bit in HANDLED_BITS.items() if not mask & bit]
        assert not missing, f"thread {thread} takes {missing}"


def test_no_thread_but_the_main_one_takes_a_signal_writing_a_file(tmp_path: Path) -> None:
    """Linux gives a process's signal to any thread not blocking it; Python runs the handler
    only when the main thread runs again, so a SIGHUP a helper thread took would wait out
    the main thread's long interval with it."""
    daemon = Daemon(
        "--sleep-interval", "9223372036.8", *TO_FILE, str(tmp_path / "gfd"),
        "--snapshot-file", str(DGX), metrics=True,
    )  # fmt: skip
    try:
        daemon.wait_for("pass finished")
        assert daemon.get("/metrics")[0] == 200  # the server has served (a thread a request)
        assert_only_the_main_thread_takes_signals(daemon)
        assert daemon.stop() == 0
    finally:
        daemon.kill()


def test_no_thread_but_the_main_one_takes_a_signal_labelling_the_node(
    api: FakeApiServer, start: Callable[..., Daemon]
) -> None:
    """The same with the API output: whatever the kubernetes client starts as well."""
    daemon = start("--snapshot-file", str(DGX), "--sleep-interval", "9223372036.8")
    daemon.wait_for("pass finished")
    assert labelled(api, DGX)
    assert_only_the_main_thread_takes_signals(daemon)
    assert daemon.stop() == 0


def thread_states(pid: int) -> set[str]:
    """The states of the threads of ``pid`` (T: stopped)."""
    states = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            states.add(stat.rsplit(")", 1)[1].split()[0])
    return states


def test_a_signal_that_waited_while_the_process_was_stopped_is_honoured(tmp_path: Path) -> None:
    """A signal sent to a stopped (or frozen) process waits, and the first of its threads
    to run again takes it: it must be the main thread, whichever resumes first.  Each
    SIGHUP is a reload, the SIGTERM an orderly exit with status 0 (not the watchdog's)."""
    daemon = Daemon(
        "--sleep-interval", "9223372036.8", *TO_FILE, str(tmp_path / "gfd"),
        "--snapshot-file", str(DGX),
    )  # fmt: skip
    pid = daemon.process.pid
    try:
        daemon.wait_for("pass finished")
        for signum in [signal.SIGHUP] * 5 + [signal.SIGTERM]:
            os.kill(pid, signal.SIGSTOP)
            poll(lambda: thread_states(pid) == {"T"}, "every thread stopped")
            os.kill(pid, signum)
            os.kill(pid, signal.SIGCONT)
            if signum == signal.SIGHUP:
                daemon.wait_for("settings reloaded")
                daemon.wait_for("pass finished")
        assert daemon.wait(60) == 0
        assert '"signal received; exiting"' in daemon.log()
        assert "not honoured" not in daemon.log()
    finally:
        daemon.kill()


def test_every_thread_gfd_makes_is_started_with_the_signals_blocked() -> None:
    """The tests above see the threads of the runs they make; this sees the code: each
    thread (or timer) gfd makes is started by signals.start_thread, and gfd makes no thread
    another way (a pool, the low-level start)."""
    for path in sorted(Path(ROOT, "gfd").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        made = len(re.findall(r"\b(?:Thread|Timer)\(", text))
        started = len(re.findall(r"\bstart_thread\(", text)) - text.count("def start_thread(")
        assert made == started, f"{where}: {made} threads made, {started} by start_thread"
        for other in ("ThreadPool", "Executor(", "start_new_thread", "_thread.start"):
            assert other not in text, f"{where} starts a thread with {other}"
