"""What the process is given besides its options, as a real process: a working directory
removed under it, a stdout whose encoding cannot carry the text, a SIGHUP reload that
moves ``--metrics-address`` (the new address served, the old one closed), the metrics
library's multiprocess directory, and the metrics port a killed gfd held."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.process import GFD, ROOT, Daemon, assert_refused, clean_env, free_port, http_get, run_gfd

DGX = f"{ROOT}/examples/snapshots/dgx-a100.yaml"


class _DaemonIn(Daemon):
    """A daemon started with ``cwd`` as its working directory."""

    def __init__(self, cwd: Path, *args: str) -> None:
        process = subprocess.Popen(
            [*GFD, "--log-format", "json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=clean_env(), cwd=cwd, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.port = None
        self._follow(process)


def test_a_relative_output_file_in_a_removed_working_directory_is_one_line(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    result = subprocess.run(
        [*GFD, "--oneshot", "--snapshot-file", DGX, "--output-file", "out"],
        capture_output=True, text=True, env=clean_env(), cwd=gone, timeout=60,
        preexec_fn=gone.rmdir,  # removed after the fork, before gfd starts in it
    )  # fmt: skip
    line = assert_refused(result, "--output-file", "out", "working directory")
    assert "Errno" not in line


def test_a_daemon_whose_working_directory_is_removed_names_the_path(
    tmp_path: Path, daemons: Any
) -> None:
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    daemon = _DaemonIn(workdir, "--sleep-interval", "50ms", "--output-file", "out",
                       "--snapshot-file", DGX)  # fmt: skip
    try:
        daemon.wait_for("pass finished")
        assert (workdir / "out").exists()
        (workdir / "out").unlink()
        workdir.rmdir()
        failed = daemon.wait_for("pass failed")[0]
        # the place the relative path meant when gfd started, not a bare ENOENT
        assert str(workdir) in failed["error"], failed
        assert daemon.stop() == 0
        assert "Traceback" not in daemon.log()
    finally:
        daemon.kill()


def test_a_snapshot_dump_to_an_ascii_stdout_is_one_line_naming_the_stream(tmp_path: Path) -> None:
    record = tmp_path / "snapshot.yaml"
    text = Path(DGX).read_text().replace("NVIDIA A100-SXM4-40GB", "NVIDIA \u00c4100-SXM4-40GB")
    record.write_text(text, encoding="utf-8")
    result = run_gfd(
        "--dump-snapshot", "--snapshot-file", str(record), env={"PYTHONIOENCODING": "ascii"}
    )
    line = assert_refused(result, "stdout", "encoding", status=1)
    assert "\u00c4" not in line and "Traceback" not in result.stderr


def test_labels_to_an_ascii_stdout_are_written(tmp_path: Path) -> None:
    """A label value is sanitised to the label alphabet, so nothing non-ASCII survives to
    stdout: the labels are written whatever stdout's encoding."""
    record = tmp_path / "snapshot.yaml"
    text = Path(DGX).read_text().replace("NVIDIA A100-SXM4-40GB", "NVIDIA \u00c4100-SXM4-40GB")
    record.write_text(text, encoding="utf-8")
    result = run_gfd(
        "--oneshot", "--snapshot-file", str(record), "--output-file", "-",
        env={"PYTHONIOENCODING": "ascii"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.product=NVIDIA-100-SXM4-40GB\n" in result.stdout


def _healthz(port: int) -> int:
    return http_get(port, "/healthz")[0]


def _refuses(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _serve_metrics_at(config: Path, address: str) -> None:
    config.write_text(f"version: v1\nflags:\n  gfd:\n    metricsAddress: '{address}'\n")


def _daemon_with_metrics_at(tmp_path: Path, daemons: Any, port: int) -> tuple[Any, Path]:
    """A daemon whose metrics address comes from its config file, and that file."""
    config = tmp_path / "config.yaml"
    _serve_metrics_at(config, f"127.0.0.1:{port}")
    daemon = daemons(
        "--sleep-interval", "100ms", "--output-file", str(tmp_path / "gfd"),
        "--snapshot-file", DGX, "--config-file", str(config),
    )  # fmt: skip
    return daemon, config


def test_a_reload_that_moves_the_metrics_address_serves_the_new_one(
    tmp_path: Path, daemons: Any
) -> None:
    old, new = free_port(), free_port()
    daemon, config = _daemon_with_metrics_at(tmp_path, daemons, old)
    daemon.wait_for("serving metrics and health endpoints")
    daemon.wait_for("pass finished")
    assert _healthz(old) == 200

    _serve_metrics_at(config, f"127.0.0.1:{new}")
    daemon.process.send_signal(signal.SIGHUP)
    moved = daemon.wait_for("metrics address changed")[0]
    assert moved["address"] == f"127.0.0.1:{new}"
    assert _healthz(new) == 200
    assert _refuses(old)

    # back to no server at all: the address it served is closed too
    _serve_metrics_at(config, "")
    daemon.process.send_signal(signal.SIGHUP)
    daemon.wait_for("metrics address changed")
    assert _refuses(new)
    assert daemon.stop() == 0


def test_a_reload_to_a_metrics_address_in_use_keeps_the_old_one(
    tmp_path: Path, daemons: Any
) -> None:
    old = free_port()
    daemon, config = _daemon_with_metrics_at(tmp_path, daemons, old)
    daemon.wait_for("pass finished")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        _serve_metrics_at(config, f"127.0.0.1:{busy}")
        daemon.process.send_signal(signal.SIGHUP)
        refused = daemon.wait_for("metrics address not changed; serving where it was")[0]
        assert str(busy) in refused["error"]
        assert _healthz(old) == 200
    daemon.wait_for("pass finished")  # the loop goes on
    assert daemon.stop() == 0


@pytest.mark.parametrize("exists", [True, False], ids=["a directory", "missing"])
def test_a_multiprocess_metrics_directory_in_the_environment_is_never_written(
    tmp_path: Path, exists: bool
) -> None:
    """``PROMETHEUS_MULTIPROC_DIR`` (set in a pod's environment for another program) would
    have the metrics library keep gfd's values in files there: three more files at every
    start, none ever removed, and no start at all where the directory is missing.  gfd is
    one process: its values stay in its memory."""
    shared = tmp_path / "multiproc"
    if exists:
        shared.mkdir()
    daemon = Daemon(
        "--snapshot-file", DGX, "--sleep-interval", "1s", "-o", str(tmp_path / "features"),
        env={"PROMETHEUS_MULTIPROC_DIR": str(shared)}, metrics=True,
    )  # fmt: skip
    try:
        daemon.wait_for("pass finished")
        status, body = daemon.get("/metrics")
        assert status == 200
        assert 'gfd_passes_total{result="success"}' in body
    finally:
        daemon.process.kill()
        daemon.process.wait()
    assert list(shared.iterdir()) == [] if exists else not shared.exists()


def test_the_metrics_port_a_killed_gfd_held_is_served_by_the_next_one(tmp_path: Path) -> None:
    """gfd closes each scrape's connection itself, so the port's side of it waits out
    TIME_WAIT (a minute) after gfd is killed: only a listener that allows reusing the
    address binds the port again meanwhile."""
    port = free_port()
    args = ["--snapshot-file", DGX, "--sleep-interval", "1s", "-o", str(tmp_path / "features"),
            "--metrics-address", f"127.0.0.1:{port}"]  # fmt: skip
    for _ in range(2):
        daemon = Daemon(*args)
        try:
            daemon.wait_for("pass finished")
            assert http_get(port, "/metrics")[0] == 200
        finally:
            daemon.process.kill()
            daemon.process.wait()
