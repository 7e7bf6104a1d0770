"""The log stream (stderr) failing under gfd, real processes and pipes: closed at start, a
pipe whose reader has gone (EPIPE), or one nobody reads (full).  Labelling goes on (passes
publish, SIGHUP reloads, SIGTERM ends with 0), the lost lines are counted in
``gfd_log_lines_dropped_total``, a oneshot prints its labels (exit 0, or 2 on bad input).
The second half drives gfd.logsink.StderrSink in-process over a pipe of the test's own."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd import logsink
from gfd.logsink import StderrSink
from tests.process import GFD, ROOT, Daemon, clean_env, free_port

DGX = Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml"
#: the daemon's pass interval: a test waiting for the next pass waits about this long
INTERVAL = "50ms"
#: hang guard for a daemon's exit after SIGTERM (the stated bound is 5 s)
EXIT_GUARD_SECONDS = 30

pytestmark = pytest.mark.timeout(120)


def full_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) whose buffer is already full; the write end blocks."""
    read_end, write_end = os.pipe()
    flags = fcntl.fcntl(write_end, fcntl.F_GETFL)
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 65536)
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags)  # as a runtime hands it over: blocking
    return read_end, write_end


def broken_pipe() -> tuple[int, int]:
    """A pipe whose reader has gone: -1 (no read end) and the write end."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return -1, write_end


@contextlib.contextmanager
def stderr_as(kind: str) -> Iterator[tuple[list[str], dict[str, Any]]]:
    """(a prefix for the command line, Popen's stderr arguments) for each kind of stderr."""
    if kind == "closed":
        # the shell closes fd 2 and then becomes gfd (same pid, so signals reach gfd)
        yield ["/bin/sh", "-c", 'exec "$@" 2>&-', "sh"], {"stderr": subprocess.DEVNULL}
        return
    read_end, write_end = full_pipe() if kind == "full" else broken_pipe()
    try:
        yield [], {"stderr": write_end}
    finally:
        os.close(write_end)
        if read_end >= 0:
            os.close(read_end)


KINDS = ["closed", "broken", "full"]


class StderrDaemon(Daemon):
    """A gfd daemon whose stderr is given (not read by the test): followed through /metrics
    and its features file only."""

    def __init__(self, args: list[str], prefix: list[str], stderr: dict[str, Any]) -> None:
        self.port = free_port()
        served = ["--metrics-address", f"127.0.0.1:{self.port}"]
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: None)
        self._reader.start()
        self.process = subprocess.Popen(
            [*prefix, *GFD, "--log-format", "json", "--log-level", "debug", *args, *served],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=clean_env(), cwd=ROOT,
            **stderr,
        )  # fmt: skip

    def log(self) -> str:
        return "(stderr is the test's fault injection: not read)"


def replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` in one rename: no pass reads a half-written file."""
    staging = path.with_name("." + path.name)
    staging.write_text(text)
    os.replace(staging, path)


def contains(path: Path, text: str) -> bool:
    try:
        return text in path.read_text()
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("kind", KINDS)
def test_the_daemon_labels_reloads_and_stops_whatever_stderr_does(
    tmp_path: Path, kind: str
) -> None:
    snapshot, config, out = tmp_path / "node.yaml", tmp_path / "config.yaml", tmp_path / "gfd"
    snapshot.write_text(DGX.read_text())
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    args = [
        "--sleep-interval", INTERVAL, "--output-file", str(out),
        "--snapshot-file", str(snapshot), "--config-file", str(config),
    ]  # fmt: skip
    with stderr_as(kind) as (prefix, stderr), StderrDaemon(args, prefix, stderr) as daemon:
        product = "nvidia.com/gpu.product=NVIDIA-A100-SXM4-{}GB\n"
        daemon.wait_until(lambda: contains(out, product.format(40)), "the first labels")
        # a later pass publishes what changed
        replace(snapshot, DGX.read_text().replace("A100-SXM4-40GB", "A100-SXM4-80GB"))
        daemon.wait_until(lambda: contains(out, product.format(80)), "the changed labels")
        # SIGHUP reloads the config
        replace(config, "version: v1\nflags:\n  migStrategy: single\n")
        daemon.process.send_signal(signal.SIGHUP)
        single = "nvidia.com/mig.strategy=single\n"
        daemon.wait_until(lambda: contains(out, single), "the reloaded config")
        successes = daemon.passes(result="success")
        daemon.wait_until(lambda: daemon.passes(result="success") > successes, "a pass")
        dropped = daemon.metric("gfd_log_lines_dropped_total")
        if kind != "full":  # a full pipe drops only once the backlog is full too
            assert dropped > 0
        assert daemon.passes(result="error") == 0
        assert daemon.stop(signal.SIGTERM) == 0


def oneshot(kind: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A oneshot whose stderr is of ``kind``; its labels come on stdout."""
    with stderr_as(kind) as (prefix, stderr):
        return subprocess.run(
            [*prefix, *GFD, "--oneshot", *args], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, env=clean_env(), cwd=ROOT, timeout=60, text=True, **stderr,
        )  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_oneshot_prints_its_labels_whatever_stderr_does(tmp_path: Path, kind: str) -> None:
    done = oneshot(kind, "--no-timestamp", "--log-level", "debug", "--snapshot-file", str(DGX))
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert "nvidia.com/gpu.count=8" in lines
    assert all(line.startswith("nvidia.com/") for line in lines)  # no log line among them


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_still_exits_2_whatever_stderr_does(tmp_path: Path, kind: str) -> None:
    done = oneshot(kind, "--snapshot-file", str(tmp_path / "missing.yaml"))
    assert (done.returncode, done.stdout) == (2, "")


def test_a_closed_stderr_is_not_reused_by_a_file_gfd_opens(tmp_path: Path) -> None:
    """With fd 2 closed, the next file opened would get it and receive every log line: the
    features file stays labels only."""
    out = tmp_path / "gfd"
    done = oneshot(
        "closed", "--no-timestamp", "--log-level", "debug", "--snapshot-file", str(DGX),
        "--output-file", str(out),
    )  # fmt: skip
    assert done.returncode == 0
    lines = out.read_text().splitlines()
    assert "nvidia.com/gpu.count=8" in lines
    assert all(line.startswith(("nvidia.com/", "# +expiry-time=")) for line in lines)


# ----------------------------------------------------------------- the sink in-process


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_full_pipe_never_blocks_a_write_and_the_overflow_is_counted() -> None:
    read_end, write_end = full_pipe()
    sink = StderrSink(write_end, backlog_bytes=1000)
    try:
        for number in range(100):  # 100 lines of 100 bytes: 10 fit in the backlog
            sink.write(f"{number:099d}\n")  # returns although nothing can be written
        assert sink.dropped == 90  # what the writer holds counts against the backlog too
        assert not sink.drain(0.05)  # nothing reaches a pipe nobody reads
        reader = threading.Thread(target=lambda: received.append(read_all(read_end)))
        received: list[bytes] = []
        reader.start()
        assert sink.drain(30)  # once it is read, the backlog arrives
        os.close(write_end)
        reader.join(30)
        kept = received[0].lstrip(b"x").splitlines()
        assert len(kept) == 100 - sink.dropped
        assert kept == sorted(kept)  # in order
    finally:
        os.close(read_end)
        with contextlib.suppress(OSError):
            os.close(write_end)


def test_a_broken_pipe_counts_every_line_and_raises_nothing() -> None:
    _, write_end = broken_pipe()
    sink = StderrSink(write_end)
    try:
        for _ in range(5):
            sink.write("a line\n")
            assert sink.drain(30)
        assert sink.dropped == 5
    finally:
        os.close(write_end)


def test_a_sink_with_no_descriptor_counts_every_line() -> None:
    sink = StderrSink(2, closed=True)
    sink.write("one\n")
    sink.write("two\nthree\n")
    assert sink.dropped == 3
    assert sink.drain(0)


def test_the_sink_is_a_text_stream() -> None:
    """click (one-line errors) and tracebacks write through it: str only, flush returns."""
    read_end, write_end = os.pipe()
    sink = StderrSink(write_end)
    try:
        with pytest.raises(TypeError):
            sink.write(b"bytes")  # type: ignore[arg-type]
        sink.write("gfd: error: é\n")
        sink.flush()
        assert sink.drain(30)
        assert os.read(read_end, 100) == "gfd: error: é\n".encode()
        assert sink.dropped == 0
    finally:
        os.close(read_end)
        os.close(write_end)


def test_drain_gives_up_on_a_pipe_nobody_reads() -> None:
    """An exit waits for the backlog only as long as drain() is given (a bounded wait)."""
    read_end, write_end = full_pipe()
    sink = StderrSink(write_end)
    try:
        sink.write("waiting\n")
        assert not sink.drain(0.1)
        assert sink.dropped == 0  # still held, not dropped
    finally:
        os.close(read_end)  # the blocked writer gets EPIPE and lets go
        os.close(write_end)


def hold_the_lock(sink: StderrSink, release: threading.Event) -> threading.Thread:
    """A thread that takes the backlog's lock and keeps it until ``release`` is set: the
    writer thread descheduled in the moment it holds it."""
    sink.write("first\n")  # makes the lock and starts the writer
    cond = sink._cond
    assert cond is not None
    taken = threading.Event()

    def hold() -> None:
        with cond:
            taken.set()
            release.wait(60)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert taken.wait(60)
    return holder


def test_a_line_waits_for_a_lock_holder_that_is_only_slow() -> None:
    """On a loaded machine the writer can be off the CPU for longer than any bound while it
    holds the lock; the line that waits for it is written, not dropped."""
    read_end, write_end = os.pipe()
    sink = StderrSink(write_end)
    release = threading.Event()
    holder = hold_the_lock(sink, release)
    try:
        # let go only well after the bound a finalizing interpreter gets
        threading.Timer(2 * logsink.LOCK_SECONDS, release.set).start()
        sink.write("settings reloaded\n")
        holder.join(60)
        assert sink.drain(30)
        os.close(write_end)
        assert read_all(read_end) == b"first\nsettings reloaded\n"
        assert sink.dropped == 0
    finally:
        release.set()
        os.close(read_end)
        with contextlib.suppress(OSError):
            os.close(write_end)


def test_a_finalizing_interpreter_never_waits_for_a_frozen_lock_holder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finalization freezes daemon threads where they stand, maybe holding the lock: from
    then on a line waits a bounded time and is counted as dropped."""
    read_end, write_end = os.pipe()
    sink = StderrSink(write_end)
    release = threading.Event()
    hold_the_lock(sink, release)
    try:
        monkeypatch.setattr(sys, "is_finalizing", lambda: True)
        sink.write("late\n")
        assert sink.dropped == 1
        assert not sink.drain(30)
    finally:
        release.set()
        os.close(read_end)
        os.close(write_end)
