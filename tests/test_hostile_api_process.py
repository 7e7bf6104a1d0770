"""A broken or hostile API server against ``gfd`` as a real process: signals are honoured in
every state of a request, a oneshot or ``--cleanup`` ends with an honest status and one line,
bad server addresses are usage errors, credentials never reach a log (runs that need no signal
go through the same command line in-process).  Waits are guards (well above the second a stop
takes, well below the 26 s it took before); speed is measured in bench/bench_api_faults.py."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.fake_apiserver import FakeApiServer, Fault, write_kubeconfig
from tests.process import ROOT, eventually, run_gfd_here

pytestmark = pytest.mark.timeout(120)

SNAPSHOT = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")
FOREIGN = {"kubernetes.io/hostname": "n1", "nvidia.com/gpu.present": "true"}
#: a stop must come well within this (guard against a hang, not a timing assertion)
STOP_GUARD_SECONDS = 8.0


API_NODE_N1 = {"labels": FOREIGN}  # the shared api fixture (tests/conftest.py) adds it


def api_args(kubeconfig: str, *extra: str, output: str = "--use-node-labels") -> list[str]:
    return [output, "--node-name", "n1", "--kubeconfig", kubeconfig, "--snapshot-file", SNAPSHOT,
            *extra]  # fmt: skip


def assert_no_traceback(text: str) -> None:
    assert "Traceback" not in text
    assert "exc_info" not in text


# ----------------------------------------------------------------- signals


STATES = {
    # a request to a server that accepted the connection and never answers
    "request-never-answered": (Fault(hang=True, count=None), None),
    # a request whose answer's headers arrive one line at a time, forever
    "headers-trickling": (Fault(trickle=0.2, count=None), None),
    # waiting between retries of a server that answers 503 (waits grow to 5 s at the
    # default interval, whose budget is 30 s)
    "waiting-to-retry": (Fault(status=503, count=None), "kubernetes API call failed, retrying"),
}


@pytest.mark.parametrize("state", sorted(STATES))
@pytest.mark.parametrize("oneshot", [False, True], ids=["daemon", "oneshot"])
def test_sigterm_ends_gfd_at_once_in_every_state_of_a_request(
    api: FakeApiServer, kubeconfig: str, daemons: Any, state: str, oneshot: bool
) -> None:
    fault, event = STATES[state]
    api.inject(fault)
    # the default interval (60 s): a pass may retry for 30 s, a request take 10 s
    daemon = daemons(*api_args(kubeconfig, *(["--oneshot"] if oneshot else [])))
    if event is None:
        eventually(lambda: api.count("GET") >= 1, "the first request")
    else:
        daemon.wait_for(event, count=2)
    daemon.process.send_signal(signal.SIGTERM)
    status = daemon.wait(STOP_GUARD_SECONDS)
    log = "".join(daemon.lines)
    assert_no_traceback(log)
    if oneshot:
        # the pass did not finish: an error, said in one line
        assert status == 1
        assert "interrupted by SIGTERM" in log
    else:
        assert status == 0
        assert '"signal received; exiting"' in log


def test_a_daemon_stops_at_once_while_the_server_is_down(
    api: FakeApiServer, kubeconfig: str, daemons: Any
) -> None:
    api.go_down()
    daemon = daemons(*api_args(kubeconfig))
    daemon.wait_for("kubernetes API call failed, retrying", count=3)
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait(STOP_GUARD_SECONDS) == 0


# ----------------------------------------------------------------- oneshot and cleanup end


@pytest.mark.parametrize(
    "stall",
    # a header line every 0.05 s: every read gets one well within the request's deadline
    [Fault(trickle=0.05, count=None), Fault(hang=True, count=None)],
    ids=["headers-trickling", "never-answering"],
)
def test_a_oneshot_against_a_stalling_server_ends_with_one_line(
    api: FakeApiServer, kubeconfig: str, stall: Fault
) -> None:
    api.inject(stall)
    # a 600 ms interval: the pass's budget, and so its one request's deadline, is 0.3 s
    done = run_gfd_here(*api_args(kubeconfig, "--oneshot", "--sleep-interval", "600ms"))
    assert done.returncode == 1
    assert_no_traceback(done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("gfd: error:")]
    assert len(errors) == 1
    assert errors[0].startswith("gfd: error: patch labels of node n1")
    # ended by the request's deadline, not by http.client's limit of 100 header lines
    # (which a trickle every 0.05 s reaches after 5 s)
    assert "before the request's deadline" in errors[0]


BAD_BODIES = {
    "a-list": b"[]", "not-json": b"<html>oops</html>",
    "annotations-a-list": b'{"kind":"Node","metadata":{"name":"n1","annotations":[]}}',
}  # fmt: skip


@pytest.mark.parametrize("body", sorted(BAD_BODIES))
def test_cleanup_that_cannot_remove_the_labels_exits_non_zero(
    api: FakeApiServer, kubeconfig: str, body: str
) -> None:
    published = run_gfd_here(*api_args(kubeconfig, "--oneshot"))
    assert published.returncode == 0, published.stderr
    labelled = api.node_labels("n1")
    assert len(labelled) > len(FOREIGN)

    api.inject(Fault(body=BAD_BODIES[body], method="GET", count=None))
    done = run_gfd_here(*api_args(kubeconfig, "--cleanup", "--sleep-interval", "400ms"))
    assert done.returncode == 1
    assert_no_traceback(done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("gfd: error:")]
    assert len(errors) == 1 and len(errors[0]) < 400
    assert "cleanup done" not in done.stderr
    assert api.node_labels("n1") == labelled


# ----------------------------------------------------------------- the server address


@pytest.mark.parametrize("mode", ["--oneshot", "--cleanup"])
@pytest.mark.parametrize("server", ["ftp://127.0.0.1:6443", "127.0.0.1:6443"])
def test_a_server_address_that_is_not_http_is_a_usage_error(
    tmp_path: Path, mode: str, server: str
) -> None:
    kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", server))
    done = run_gfd_here(*api_args(kubeconfig, mode))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "not an http:// or https:// URL" in done.stderr


def test_a_password_in_the_server_url_never_reaches_the_log(tmp_path: Path) -> None:
    kubeconfig = str(write_kubeconfig(tmp_path / "kubeconfig", "http://admin:s3cr3t@127.0.0.1:9"))
    # a 0.3 s budget: time for the refused first attempt and at least one retry
    done = run_gfd_here(*api_args(kubeconfig, "--oneshot", "--sleep-interval", "600ms"))
    assert done.returncode == 1
    assert "retrying" in done.stderr  # connection errors were logged...
    assert "s3cr3t" not in done.stderr  # ...without the password
    assert "***@127.0.0.1:9" in done.stderr


@pytest.mark.parametrize("output", ["--use-node-labels", "--use-node-feature-api"])
def test_a_second_start_on_a_labelled_node_writes_nothing(
    api: FakeApiServer, kubeconfig: str, output: str
) -> None:
    args = api_args(kubeconfig, "--no-timestamp", "--oneshot", output=output)
    first = run_gfd_here(*args)
    assert first.returncode == 0, first.stderr
    assert api.count("PATCH") + api.count("POST") == 1
    api.clear_requests()
    second = run_gfd_here(*args)
    assert second.returncode == 0, second.stderr
    assert {request.method for request in api.requests} == {"GET"}
