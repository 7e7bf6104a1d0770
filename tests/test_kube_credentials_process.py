"""Credentials against ``gfd`` as a real process: no credential reaches stderr or /metrics
whatever the server answers; a rotated token file is picked up; a failing exec plugin gives
one short line, a bounded wait, no process left, and a retry; an auth provider is a usage
error.  Units: tests/test_kube_credentials.py.  Waits are guards, never timing assertions."""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.execplugin import EXEC_API, exec_credential, exec_user, write_plugin
from tests.fakes.fake_apiserver import FakeApiServer, Fault
from tests.process import ROOT, Daemon, alive, run_gfd_here

pytestmark = pytest.mark.timeout(120)

SNAPSHOT = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")
API_NODE_N1 = {"labels": {"kubernetes.io/hostname": "n1"}}  # tests/conftest.py adds it

#: the credentials used below: long, unique, and easy to find in a log
TOKEN = "tok-3f9a1c07e5b24d6e8a91-SECRET"
ROTATED = "tok-rotated-77b0c2e4d1a9f3-SECRET"
PASSWORD = "pw-c41e9b7d25a8f06-SECRET"
EXEC_TOKEN = "exec-token-0d6f2a9b8c13e7-SECRET"
#: what basic auth sends: the password, readable by anyone who decodes it
BASIC_PAIR = base64.b64encode(f"gfd:{PASSWORD}".encode()).decode()
SECRETS = (TOKEN, ROTATED, PASSWORD, BASIC_PAIR, EXEC_TOKEN)
#: a stop or a failed plugin run must come well within this (a guard, not a timing assertion)
GUARD_SECONDS = 30.0


def user_for(kind: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """A kubeconfig user of credential ``kind`` and the Authorization header it sends."""
    if kind == "token":
        return {"token": TOKEN}, f"Bearer {TOKEN}"
    if kind == "tokenFile":
        path = tmp_path / "token"
        path.write_text(TOKEN + "\n")  # as `kubectl create token > file` writes it
        return {"tokenFile": str(path)}, f"Bearer {TOKEN}"
    if kind == "basic":
        return {"username": "gfd", "password": PASSWORD}, f"Basic {BASIC_PAIR}"
    assert kind == "exec"
    plugin = write_plugin(tmp_path, f"echo '{exec_credential(EXEC_TOKEN)}'\n")
    return exec_user(plugin), f"Bearer {EXEC_TOKEN}"


def api_args(kubeconfig: str, *extra: str) -> list[str]:
    return ["--use-node-labels", "--node-name", "n1", "--kubeconfig", kubeconfig,
            "--snapshot-file", SNAPSHOT, *extra]  # fmt: skip


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text
        assert secret[:12] not in text  # not even the start of one


def assert_no_traceback(text: str) -> None:
    assert "Traceback" not in text
    assert "exc_info" not in text


@pytest.fixture
def metered(daemons: Any) -> Any:
    """Start daemons that serve /metrics; killed at the end."""
    return functools.partial(daemons, metrics=True)


# ----------------------------------------------------------------- secrets


KINDS = ["token", "tokenFile", "basic", "exec"]

ANSWERS = {
    # a server (or a proxy in front of it) that quotes the credentials it refuses
    "401-echoing": Fault(status=401, echo_authorization=True, count=None),
    "403-echoing": Fault(status=403, echo_authorization=True, count=None),
    "503-echoing": Fault(status=503, echo_authorization=True, count=None),
    "dropped": Fault(drop=True, count=None),
}


@pytest.mark.parametrize("answer", [*sorted(ANSWERS), "tls-failure", "refused"])
@pytest.mark.parametrize("kind", KINDS)
def test_no_credential_reaches_stderr_whatever_the_server_answers(
    api: FakeApiServer, tmp_path: Path, kind: str, answer: str
) -> None:
    user, _ = user_for(kind, tmp_path)
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    if answer == "tls-failure":  # the server speaks plain HTTP to a TLS client
        config = json.loads(Path(kubeconfig).read_text())
        config["clusters"][0]["cluster"]["server"] = api.url.replace("http:", "https:")
        config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
        Path(kubeconfig).write_text(json.dumps(config))
    elif answer == "refused":
        api.go_down()
    else:
        api.inject(ANSWERS[answer])
    done = run_gfd_here(
        *api_args(kubeconfig, "--oneshot", "--log-level", "debug", "--sleep-interval", "1s")
    )
    assert done.returncode == 1
    assert_no_secret(done.stderr + done.stdout)
    assert_no_traceback(done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("gfd: error:")]
    assert len(errors) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_no_credential_reaches_the_daemon_log_or_metrics(
    api: FakeApiServer, tmp_path: Path, metered: Any, kind: str
) -> None:
    user, authorization = user_for(kind, tmp_path)
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    api.accept_only(authorization)
    for status in (401, 403, 500):  # on the passes' requests (the watch's are the list's)
        api.inject(
            Fault(status=status, echo_authorization=True, count=1, path_contains="/nodes/n1")
        )
    daemon = metered(*api_args(kubeconfig, "--log-level", "debug", "--sleep-interval", "1s"))
    daemon.wait_until(lambda: daemon.passes(result="success") >= 1, "a successful pass")
    assert daemon.passes(result="error") >= 2  # the 401 and the 403 each failed a pass
    _, metrics = daemon.get("/metrics")
    assert daemon.stop() == 0
    log = daemon.log()
    assert "*** refused" in log  # the echoing answers were logged, redacted
    assert_no_secret(log + metrics)
    assert_no_traceback(log)
    assert any(r.authorization == authorization and r.status == 200 for r in api.requests)


# ----------------------------------------------------------------- token files


def test_a_token_file_ending_in_a_newline_is_sent_trimmed(
    api: FakeApiServer, tmp_path: Path
) -> None:
    user, authorization = user_for("tokenFile", tmp_path)
    api.accept_only(authorization)
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    done = run_gfd_here(*api_args(kubeconfig, "--oneshot", "--log-level", "debug"))
    assert done.returncode == 0, done.stderr
    assert {request.authorization for request in api.requests} == {authorization}
    assert_no_secret(done.stderr)


def test_a_rotated_token_file_is_read_again(
    api: FakeApiServer, tmp_path: Path, metered: Any
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    api.accept_only(f"Bearer {TOKEN}")
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user={"tokenFile": "token"}))
    daemon = metered(*api_args(kubeconfig, "--sleep-interval", "500ms", "--log-level", "debug"))
    daemon.wait_until(lambda: daemon.passes(result="success") >= 1, "a first successful pass")

    # the token rotates (as the kubelet rotates a projected token) and the old one is
    # refused; a reload makes the daemon write the labels again at once
    token_file.write_text(ROTATED + "\n")
    api.accept_only(f"Bearer {ROTATED}")
    api.clear_requests()
    daemon.process.send_signal(signal.SIGHUP)
    rotated = f"Bearer {ROTATED}"
    daemon.wait_until(
        lambda: any(r.authorization == rotated and r.status == 200 for r in api.requests),
        "a request with the rotated token", limit=GUARD_SECONDS,
    )  # fmt: skip
    # the first request after the rotation was refused; the next pass read the file again
    first, second = api.requests[:2]
    assert (first.status, first.authorization) == (401, f"Bearer {TOKEN}")
    assert (second.status, second.authorization) == (200, rotated)
    assert daemon.stop() == 0
    assert_no_secret(daemon.log())


# ----------------------------------------------------------------- exec plugins


def test_a_watch_refused_its_rotated_out_token_asks_the_plugin_again(
    api: FakeApiServer, tmp_path: Path, metered: Any
) -> None:
    """The plugin's token is rotated and the old one refused: the watch's stream, opened
    again after a graceful restart of the server, is answered 401; the watch lists again,
    which asks the plugin anew, so a removed label is still repaired."""
    credential = tmp_path / "credential"
    credential.write_text(exec_credential(EXEC_TOKEN))
    api.accept_only(f"Bearer {EXEC_TOKEN}")
    daemon = exec_daemon(api, tmp_path, metered, write_plugin(tmp_path, f"cat {credential}\n"))
    daemon.wait_until(lambda: daemon.passes(result="success") >= 1, "a first successful pass")
    daemon.wait_until(lambda: api.open_watches == 1, "the watch")
    labels = api.node_labels("n1")
    credential.write_text(exec_credential(ROTATED))
    api.accept_only(f"Bearer {ROTATED}")
    api.restore(back=0)  # open streams end, nothing else changes
    daemon.wait_until(lambda: any(r.status == 401 for r in api.requests), "the refused stream")
    api.edit("Node", "n1", "", lambda node: node["metadata"]["labels"].pop("nvidia.com/gpu.count"))
    daemon.wait_until(lambda: api.node_labels("n1") == labels, "the repair", limit=GUARD_SECONDS)
    assert daemon.stop() == 0
    assert_no_secret(daemon.log())


def exec_daemon(
    api: FakeApiServer, tmp_path: Path, metered: Any, command: str, *extra: str
) -> Daemon:
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(command)))
    # a 2 s interval: each pass's budget, and so a plugin's deadline, is 1 s
    return metered(*api_args(kubeconfig, "--sleep-interval", "2s", "--log-level", "debug", *extra))


def failed_passes(daemon: Daemon, count: int) -> list[dict[str, Any]]:
    failures = daemon.wait_for("pass failed", count=count, limit=GUARD_SECONDS)
    for failure in failures:
        assert failure["level"] == "error"
        assert len(failure["error"]) < 600  # one short line
        assert failure["error"].isprintable()  # no escape sequence reaches a terminal
    return failures


PLUGINS = {
    # what the plugin does, and what the one line says
    "garbage": (f"echo 'this is no ExecCredential {EXEC_TOKEN}'\n", "is not an ExecCredential"),
    "wrong-kind": (
        'echo \'{"apiVersion":"v1","kind":"Pod","status":{"token":"' + EXEC_TOKEN + "\"}}'\n",
        "is not an ExecCredential",
    ),
    "megabytes-on-stderr": (
        "head -c 5000000 /dev/zero | tr '\\0' x >&2\necho 'the end' >&2\nexit 3\n",
        "failed with exit status 3: ...xxx",
    ),
    # a token it gave before (expired at once, so asked for again), on stderr as it fails
    "binary-on-stderr": (
        "printf '\\033[2J\\033]0;owned\\007' >&2\nhead -c 3000 /dev/urandom >&2\nexit 5\n",
        "failed with exit status 5: ...",
    ),
    "token-on-stderr": (
        f"if [ -e ran ]; then echo 'my token was {EXEC_TOKEN}' >&2; exit 1; fi\n"
        f"echo '{exec_credential(EXEC_TOKEN, expirationTimestamp='2000-01-01T00:00:00Z')}'\n"
        "touch ran\n",  # after the credential: a second run finds it only once it was written
        "failed with exit status 1: my token was ***",
    ),
    # a credential written by a run that fails all the same, and quoted on its stderr
    "token-then-failure": (
        f"echo '{exec_credential(EXEC_TOKEN)}'\necho 'my token was {EXEC_TOKEN}' >&2\nexit 1\n",
        "failed with exit status 1: my token was ***",
    ),
    "megabytes-on-stdout": (
        "head -c 5000000 /dev/zero | tr '\\0' x\n",
        "wrote more than 1048576 bytes",
    ),
}


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_a_failing_exec_plugin_fails_the_pass_in_one_line_and_the_next_pass_retries(
    api: FakeApiServer, tmp_path: Path, metered: Any, plugin: str
) -> None:
    body, words = PLUGINS[plugin]
    runs = tmp_path / "runs"
    command = write_plugin(tmp_path, f"echo run >> {runs}\n{body}")
    daemon = exec_daemon(api, tmp_path, metered, command)
    failures = failed_passes(daemon, 2)
    assert words in failures[0]["error"]
    assert runs.read_text().count("run") >= 2  # the second pass ran the plugin again
    assert daemon.passes(result="error") >= 2
    _, metrics = daemon.get("/metrics")
    assert daemon.stop() == 0
    assert_no_secret(daemon.log() + metrics)
    assert_no_traceback(daemon.log())
    assert len(daemon.log()) < 20_000  # no echo of the plugin's megabytes


def test_a_missing_plugin_binary_fails_passes_until_it_appears(
    api: FakeApiServer, tmp_path: Path, metered: Any
) -> None:
    command = str(tmp_path / "bin" / "gke-gcloud-auth-plugin")
    user = exec_user(command, installHint="install it with: gcloud components install")
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    daemon = metered(*api_args(kubeconfig, "--sleep-interval", "500ms", "--log-level", "debug"))
    failures = failed_passes(daemon, 2)
    assert (
        "executable not found (install it with: gcloud components install)" in failures[0]["error"]
    )
    (tmp_path / "bin").mkdir()
    credential = f"echo '{exec_credential(EXEC_TOKEN)}'\n"
    write_plugin(tmp_path / "bin", credential, name="gke-gcloud-auth-plugin")
    daemon.wait_until(lambda: daemon.passes(result="success") >= 1, "a pass with the plugin")
    assert "nvidia.com/gpu.count" in api.node_labels("n1")
    assert daemon.stop() == 0
    assert_no_secret(daemon.log())
    assert_no_traceback(daemon.log())


def test_a_plugin_that_never_exits_is_killed_with_everything_it_started(
    api: FakeApiServer, tmp_path: Path, metered: Any
) -> None:
    pids = tmp_path / "pids"
    # the plugin starts a child that holds its pipes, then waits forever
    command = write_plugin(tmp_path, f"sleep 1000 &\necho $$ $! >> {pids}\nwait\n")
    daemon = exec_daemon(api, tmp_path, metered, command)
    failures = failed_passes(daemon, 2)
    # the pass's own run, or the watch's that it waited for: the same deadline's words
    assert "no answer before the request's deadline" in failures[0]["error"]
    first_run = [int(pid) for pid in pids.read_text().split()[:2]]
    assert daemon.stop() == 0
    assert not any(alive(pid) for pid in first_run)
    for line in pids.read_text().splitlines():  # every run's, the last one's too
        assert not any(alive(int(pid)) for pid in line.split())


def test_a_plugin_that_leaves_a_child_behind_succeeds_and_the_child_is_killed(
    api: FakeApiServer, tmp_path: Path, metered: Any
) -> None:
    pids = tmp_path / "pids"
    command = write_plugin(
        tmp_path, f"sleep 1000 &\necho $! >> {pids}\necho '{exec_credential(EXEC_TOKEN)}'\nexit 0\n"
    )
    api.accept_only(f"Bearer {EXEC_TOKEN}")
    daemon = exec_daemon(api, tmp_path, metered, command)
    daemon.wait_until(lambda: daemon.passes(result="success") >= 1, "a pass with the credential")
    child = int(pids.read_text().split()[0])
    assert not alive(child)
    assert daemon.stop() == 0
    assert_no_secret(daemon.log())


def test_sigterm_during_a_plugin_call_ends_gfd_and_the_plugin(
    api: FakeApiServer, tmp_path: Path, metered: Any
) -> None:
    pids = tmp_path / "pids"
    command = write_plugin(tmp_path, f"echo $$ >> {pids}\nexec sleep 1000\n")
    # the default interval: the plugin's deadline is 10 s, the signal comes first
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(command)))
    daemon = metered(*api_args(kubeconfig))
    daemon.wait_until(
        lambda: pids.exists() and bool(pids.read_text().strip()), "the plugin to start",
        limit=GUARD_SECONDS,
    )  # fmt: skip
    plugin = int(pids.read_text().split()[0])
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.wait(GUARD_SECONDS) == 0
    assert not alive(plugin)
    assert_no_traceback(daemon.log())


# ----------------------------------------------------------------- auth providers


@pytest.mark.parametrize("provider", [
    {"name": "gcp"},
    {"name": "azure", "config": {"access-token": TOKEN}},
    {"name": "oidc", "config": {"id-token": TOKEN, "idp-issuer-url": "http://127.0.0.1:9"}},
    {"name": "gcp", "config": {"cmd-path": "/bin/sleep", "cmd-args": "1000"}},
], ids=["gcp", "azure", "oidc", "gcp-cmd-path"])  # fmt: skip
@pytest.mark.parametrize("mode", ["--oneshot", "--cleanup"])
def test_an_auth_provider_is_one_usage_error(
    api: FakeApiServer, tmp_path: Path, provider: dict[str, Any], mode: str
) -> None:
    user = {"auth-provider": provider}
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    done = run_gfd_here(*api_args(kubeconfig, mode, "--log-level", "debug"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "auth-provider" in done.stderr and "not supported" in done.stderr
    assert_no_secret(done.stderr)
    assert api.requests == []


def test_the_plugin_runs_in_its_own_session_with_the_exec_info(
    api: FakeApiServer, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    command = write_plugin(
        tmp_path,
        f"cut -d' ' -f6 /proc/$$/stat > {seen}\necho \"$KUBERNETES_EXEC_INFO\" >> {seen}\n"
        f"echo \"$EXTRA\" >> {seen}\necho '{exec_credential(EXEC_TOKEN)}'\n",
    )
    user = exec_user(command, env=[{"name": "EXTRA", "value": "from-the-kubeconfig"}])
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user))
    done = run_gfd_here(*api_args(kubeconfig, "--oneshot"))
    assert done.returncode == 0, done.stderr
    session, info, extra = seen.read_text().splitlines()[:3]
    assert int(session) != os.getsid(0)
    assert json.loads(info) == {
        "apiVersion": EXEC_API, "kind": "ExecCredential", "spec": {"interactive": False}
    }  # fmt: skip
    assert extra == "from-the-kubeconfig"
