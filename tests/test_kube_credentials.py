"""The API client's credentials, in-process: token files read as client-go reads them
(trimmed, kept a minute, the last good one kept when a read fails, read again after a 401),
the in-cluster token through the same mechanism, exec plugins cached until they expire or a
401, kubeconfig mistakes as one usage error that shows no credential, and the redaction
every message goes through.  The real process is in tests/test_kube_credentials_process.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd import redaction
from gfd.errors import PublishError, UsageError
from gfd.kube import credential_source
from gfd.kube.client import KubeClient
from gfd.kube.credential_source import CredentialError, FileToken
from tests.execplugin import EXEC_API, exec_credential, exec_user, write_plugin
from tests.fakes.fake_apiserver import FakeApiServer, write_kubeconfig
from tests.helpers import Clock

pytestmark = pytest.mark.timeout(60)

API_NODE_N1 = {"labels": {"a": "b"}}
TOKEN = "tok-5e1d0c9a7b3f2e84-SECRET"
ROTATED = "tok-rotated-a90b1c2d3e4f-SECRET"


@pytest.fixture(autouse=True)
def nothing_remembered() -> Iterator[None]:
    redaction.forget_all()
    yield
    redaction.forget_all()


def get_node(client: KubeClient) -> Any:
    return client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))


def authorization(client: KubeClient) -> str:
    """The Authorization header the client would send now (its own auth settings)."""
    settings = client.api_client.configuration.auth_settings()
    return str(settings["BearerToken"]["value"])


# ----------------------------------------------------------------- token files


def test_a_token_file_is_trimmed_kept_a_minute_and_read_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n\n")
    clock = Clock(1000.0)
    source = FileToken(str(path), "tokenFile", clock=clock)
    assert source.authorization(None) == f"Bearer {TOKEN}"
    path.write_text(ROTATED)
    clock.now += 49.0  # client-go: a minute, read again 10 s before it runs out
    assert source.token() == TOKEN
    clock.now += 1.0
    assert source.token() == ROTATED


def test_a_token_file_that_cannot_be_read_keeps_the_last_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    clock = Clock(1000.0)
    source = FileToken(str(path), "tokenFile", clock=clock)
    assert source.token() == TOKEN
    for broken in ("", "\n  \n"):
        path.write_text(broken)
        clock.now += 60.0
        assert source.token() == TOKEN
    path.unlink()
    clock.now += 60.0
    assert source.token() == TOKEN


def test_a_401_makes_the_token_file_read_again_at_once(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    source = FileToken(str(path), "tokenFile", clock=Clock(1000.0))
    assert source.token() == TOKEN
    path.write_text(ROTATED)
    assert source.token() == TOKEN
    source.rejected()
    assert source.token() == ROTATED


@pytest.mark.parametrize(("content", "words"), [
    ("", "holds no token"), (" \n\t\n", "holds no token"), (f"{TOKEN}\nsecond-line", "line break"),
    (f"{TOKEN}\x00", "control character"),
])  # fmt: skip
def test_a_bad_token_file_is_an_error_that_shows_no_token(
    tmp_path: Path, content: str, words: str
) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(CredentialError, match=words) as raised:
        FileToken(str(path), "tokenFile").token()
    assert TOKEN not in str(raised.value)


def test_a_token_file_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    path = tmp_path / "token"
    os.mkfifo(path)
    with pytest.raises(CredentialError, match="FIFO"):
        FileToken(str(path), "tokenFile").token()


def test_a_kubeconfig_token_file_relative_to_the_kubeconfig(
    api: FakeApiServer, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    api.accept_only(f"Bearer {TOKEN}")
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", user={"tokenFile": "token"})
    client = KubeClient(str(kubeconfig), budget=1.0)
    assert get_node(client)["metadata"]["name"] == "n1"
    assert api.requests[-1].authorization == f"Bearer {TOKEN}"


def test_a_missing_token_file_at_start_is_a_usage_error(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", "http://127.0.0.1:9", user={"tokenFile": "missing"}
    )
    with pytest.raises(UsageError, match=r"tokenFile: cannot read .*missing"):
        KubeClient(str(kubeconfig), budget=1.0)


def test_the_in_cluster_token_is_trimmed_and_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text(TOKEN + "\n")
    ca.write_text("not read until a request is made\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    # the period is the token files' (tested above); here each request reads the file again
    monkeypatch.setattr(credential_source, "TOKEN_FILE_PERIOD_SECONDS", 0.0)
    client = KubeClient(None, budget=1.0)
    assert client.server == "https://127.0.0.1:6443"
    assert authorization(client) == f"Bearer {TOKEN}"
    token.write_text(ROTATED)
    assert authorization(client) == f"Bearer {ROTATED}"


# ----------------------------------------------------------------- static credentials


@pytest.mark.parametrize("user", [
    {"token": TOKEN + "\n"}, {"token": f"{TOKEN}\r\nX-Injected: 1"},
], ids=["trailing-newline", "header-injection"])  # fmt: skip
def test_a_token_that_cannot_be_a_header_is_a_usage_error_that_shows_no_token(
    tmp_path: Path, user: dict[str, str]
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", user=user)
    with pytest.raises(UsageError, match="line break or another control character") as raised:
        KubeClient(str(kubeconfig), budget=1.0)
    assert TOKEN[:12] not in str(raised.value)


def test_a_yaml_error_in_the_kubeconfig_shows_no_line_of_it(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"users:\n- name: u\n  user:\n    token: {TOKEN}: [\n")
    with pytest.raises(UsageError, match="not valid YAML at line 4") as raised:
        KubeClient(str(kubeconfig), budget=1.0)
    assert TOKEN[:12] not in str(raised.value)


# ----------------------------------------------------------------- exec plugins


def exec_kubeconfig(api: FakeApiServer, tmp_path: Path, command: str) -> str:
    return str(api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(command)))


def test_an_exec_credential_is_kept_until_a_401(api: FakeApiServer, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    command = write_plugin(tmp_path, f"echo run >> {runs}\necho '{exec_credential(TOKEN)}'\n")
    api.accept_only(f"Bearer {TOKEN}")
    client = KubeClient(exec_kubeconfig(api, tmp_path, command), budget=1.0)
    assert not runs.exists()  # run when a request needs it, not at start
    get_node(client)
    get_node(client)
    assert runs.read_text() == "run\n"
    api.accept_only(f"Bearer {ROTATED}")
    with pytest.raises(PublishError, match="401"):
        get_node(client)
    assert runs.read_text() == "run\n"
    with pytest.raises(PublishError, match="401"):
        get_node(client)
    assert runs.read_text() == "run\n" * 2  # the request after the 401 ran the plugin again


def test_an_exec_credential_is_renewed_when_it_expires(api: FakeApiServer, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    expired = exec_credential(TOKEN, expirationTimestamp="2000-01-01T00:00:00Z")
    command = write_plugin(tmp_path, f"echo run >> {runs}\necho '{expired}'\n")
    client = KubeClient(exec_kubeconfig(api, tmp_path, command), budget=1.0)
    get_node(client)
    get_node(client)
    assert runs.read_text() == "run\n" * 2


def test_two_clients_never_run_the_plugin_at_once(api: FakeApiServer, tmp_path: Path) -> None:
    """The pass's client and a watch's share a plugin: a second run that starts while the
    first has printed its token, unread yet, could quote that token unredacted; it waits."""
    import threading

    from tests.fakes.waits import client_without_waits

    ran, go = tmp_path / "ran", tmp_path / "go"
    command = write_plugin(
        tmp_path,
        f"if [ -e {ran} ]; then echo 'my token was {TOKEN}' >&2; exit 1; fi\n"
        f"touch {ran}\necho '{exec_credential(TOKEN)}'\n"
        f"for i in $(seq 100); do [ -e {go} ] && exit 0; sleep 0.05; done\n",
    )
    kubeconfig = exec_kubeconfig(api, tmp_path, command)
    first = client_without_waits(kubeconfig, budget=10.0)
    second = client_without_waits(kubeconfig, budget=0.5)
    running = threading.Thread(target=get_node, args=(first,))
    running.start()
    try:
        for _ in range(200):
            if ran.exists():
                break
            threading.Event().wait(0.05)
        with pytest.raises(PublishError) as waited:
            get_node(second)  # while the first run is still running
    finally:
        go.touch()
        running.join()
    assert "its run for another request has not ended" in str(waited.value)
    assert TOKEN not in str(waited.value)
    with pytest.raises(PublishError) as quoted:
        get_node(second)  # once the first run has ended: its token is remembered
    assert "my token was ***" in str(quoted.value)


@pytest.mark.parametrize(("config", "words"), [
    ({}, r"exec\.command: required"),
    ({"command": "p", "apiVersion": "client.authentication.k8s.io/v1alpha1"}, "apiVersion"),
    ({"command": "p", "interactiveMode": "Always"}, "needs a terminal"),
    ({"command": "p", "interactiveMode": "Sometimes"}, "unknown mode"),
    ({"command": "p", "env": [{"value": "x"}]}, r"env\[0\]"),
    ({"command": ["p"]}, r"command: expected str"),
])  # fmt: skip
def test_an_exec_plugin_the_kubeconfig_gets_wrong_is_a_usage_error(
    api: FakeApiServer, tmp_path: Path, config: dict[str, Any], words: str
) -> None:
    full = {"apiVersion": EXEC_API, **config}
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", user={"exec": full})
    with pytest.raises(UsageError, match=words) as raised:
        KubeClient(str(kubeconfig), budget=1.0)
    assert "\n" not in str(raised.value)


def test_a_plugin_is_given_no_more_than_the_request_deadline(
    api: FakeApiServer, tmp_path: Path
) -> None:
    from tests.fakes.waits import client_without_waits

    command = write_plugin(tmp_path, "exec sleep 1000\n")
    client = client_without_waits(
        exec_kubeconfig(api, tmp_path, command), budget=0.3, request_timeout=0.3
    )
    with pytest.raises(PublishError, match="no answer before the request's deadline") as raised:
        get_node(client)
    assert "gave up" not in str(raised.value)  # not retried within the operation
    assert api.requests == []


def test_provide_cluster_info_gives_the_plugin_the_cluster_and_its_exec_extension(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """As client-go's ExecCredential spec.cluster: the cluster's connection fields it sets,
    and the extension named client.authentication.k8s.io/exec as ``config``; no other."""
    seen = tmp_path / "seen"
    command = write_plugin(
        tmp_path, f"echo \"$KUBERNETES_EXEC_INFO\" > {seen}\necho '{exec_credential(TOKEN)}'\n"
    )
    path = api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(command))
    kubeconfig = json.loads(path.read_text())
    kubeconfig["users"][0]["user"]["exec"]["provideClusterInfo"] = True
    kubeconfig["clusters"][0]["cluster"].update({
        "tls-server-name": "api.example",
        "extensions": [
            {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "gfd"}},
            {"name": "another.example/ext", "extension": {"not": "given"}},
        ],
    })  # fmt: skip
    path.write_text(json.dumps(kubeconfig))
    get_node(KubeClient(str(path), budget=1.0))
    spec = json.loads(seen.read_text())["spec"]
    cluster = {"server": api.url, "tls-server-name": "api.example", "config": {"audience": "gfd"}}
    assert spec == {"interactive": False, "cluster": cluster}


def test_a_credential_written_just_before_the_deadline_is_read_and_so_remembered(
    tmp_path: Path,
) -> None:
    """A plugin stopped at its deadline may have printed its token an instant before, and
    its next run may quote it on stderr: what waits unread in its pipe is read all the same
    (and so remembered for redaction), after the plugin is killed."""
    import select
    import signal
    import subprocess
    import time

    from gfd.kube import exec_plugin

    command = write_plugin(tmp_path, f"echo '{exec_credential(TOKEN)}'\nexec sleep 1000\n")
    pipe = subprocess.PIPE
    process = subprocess.Popen([command], stdout=pipe, stderr=pipe, start_new_session=True)
    try:
        assert process.stdout is not None
        select.select([process.stdout], [], [], 30)  # the credential waits in the pipe
        stdout, _, status = exec_plugin._collect(process, deadline=time.monotonic())
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        exec_plugin._end_group(process)
    assert status is None  # stopped at the deadline, not a success
    assert stdout is not None and json.loads(stdout)["status"]["token"] == TOKEN


def test_a_token_in_output_cut_short_at_the_deadline_is_remembered(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """A plugin stopped at its deadline mid-write left no ExecCredential, but a whole token
    string: its next run may quote it on stderr, and that is redacted."""
    from tests.fakes.waits import client_without_waits

    ran = tmp_path / "ran"
    cut = exec_credential(TOKEN).rsplit("}", 2)[0]  # the token's string is whole
    command = write_plugin(
        tmp_path,
        f"if [ -e {ran} ]; then echo 'my token was {TOKEN}' >&2; exit 1; fi\n"
        f"printf '%s' '{cut}'\ntouch {ran}\nexec sleep 1000\n",
    )
    client = client_without_waits(exec_kubeconfig(api, tmp_path, command), budget=1.0)
    with pytest.raises(PublishError, match="no answer before the request's deadline"):
        get_node(client)
    assert ran.exists()
    with pytest.raises(PublishError) as quoted:
        get_node(client)
    assert "my token was ***" in str(quoted.value)
    assert TOKEN not in str(quoted.value)


def test_a_server_message_is_quoted_without_control_characters(
    api: FakeApiServer, tmp_path: Path
) -> None:
    from tests.fakes.fake_apiserver import Fault

    message = "\x1b[2J\x1b]0;owned\x07 forbidden \x00\x9b1m"
    status = {"kind": "Status", "code": 403, "reason": "Forbidden\x1b[31m", "message": message}
    api.inject(Fault(status=403, body=json.dumps(status).encode()))
    client = KubeClient(str(api.write_kubeconfig(tmp_path / "kubeconfig")), budget=1.0)
    with pytest.raises(PublishError, match="forbidden") as raised:
        get_node(client)
    assert str(raised.value).isprintable()


# ----------------------------------------------------------------- redaction


def test_redaction_replaces_every_remembered_credential_longest_first() -> None:
    redaction.remember("a", "abcdefgh", "abcdefghijkl")
    redaction.remember("b", "short", None, "")  # too short to hold, or nothing
    assert redaction.redact("x abcdefghijkl y abcdefgh z short") == "x *** y *** z short"


def test_a_source_keeps_only_its_last_few_credentials() -> None:
    for n in range(10):
        redaction.remember("rotating", f"token-number-{n}")
    assert redaction.redact("token-number-9 token-number-0") == "*** token-number-0"


# ----------------------------------------------------------------- client certificates


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate "gfd-exec"."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    where = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=ca",
            "-days", "2")  # fmt: skip
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, extra in (("server", ["-extfile", "san.ext"]), ("client", [])):
        cn = "127.0.0.1" if name == "server" else "gfd-exec"
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *extra)  # fmt: skip
    return {path.name: path for path in where.iterdir()}


@pytest.fixture
def tls_api(pki: dict[str, Path]) -> Iterator[FakeApiServer]:
    from tests.fakes.fake_apiserver import Tls

    tls = Tls(str(pki["server.crt"]), str(pki["server.key"]), client_ca=str(pki["ca.crt"]))
    with FakeApiServer(tls=tls) as server:
        server.add_node("n1")
        server.accept_only("cert:gfd-exec")
        yield server


def cert_plugin(tmp_path: Path, cert: str, key: str) -> str:
    answer = {"apiVersion": EXEC_API, "kind": "ExecCredential",
              "status": {"clientCertificateData": cert, "clientKeyData": key}}  # fmt: skip
    (tmp_path / "answer.json").write_text(json.dumps(answer))
    return write_plugin(tmp_path, f"cat {tmp_path / 'answer.json'}\n")


def tls_kubeconfig(api: FakeApiServer, tmp_path: Path, pki: dict[str, Path], command: str) -> str:
    return str(
        api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(command), ca=pki["ca.crt"])
    )


def test_an_exec_plugin_may_give_a_client_certificate(
    tls_api: FakeApiServer, tmp_path: Path, pki: dict[str, Path]
) -> None:
    key = pki["client.key"].read_text()
    command = cert_plugin(tmp_path, pki["client.crt"].read_text(), key)
    client = KubeClient(tls_kubeconfig(tls_api, tmp_path, pki, command), budget=5.0)
    assert get_node(client)["metadata"]["name"] == "n1"
    request = tls_api.requests[-1]
    assert (request.client_cn, request.authorization, request.status) == ("gfd-exec", None, 200)
    assert "***" in redaction.redact(key)  # the key is one of the credentials kept out of logs


def test_a_client_certificate_that_cannot_be_used_is_one_line_without_the_key(
    tls_api: FakeApiServer, tmp_path: Path, pki: dict[str, Path]
) -> None:
    key = pki["client.key"].read_text()
    command = cert_plugin(tmp_path, pki["server.crt"].read_text(), key)  # not the key's
    client = KubeClient(tls_kubeconfig(tls_api, tmp_path, pki, command), budget=5.0)
    with pytest.raises(PublishError, match="cannot be used") as raised:
        get_node(client)
    message = str(raised.value)
    assert "\n" not in message
    assert all(line not in message for line in key.splitlines()[1:-1])
    assert tls_api.requests == []


def test_a_stop_while_a_plugin_starts_is_raised_once_its_pid_is_known() -> None:
    from gfd import interrupt

    interrupt.reset()
    try:
        with pytest.raises(interrupt.Interrupted), interrupt.interruptible():
            with interrupt.deferred():
                interrupt.request_stop("SIGTERM")  # as the handler does: recorded, not raised
                started = True
            assert started
            interrupt.check()
    finally:
        interrupt.reset()


@pytest.mark.parametrize("broken", [False, True], ids=["valid", "key-not-the-certificates"])
def test_a_kubeconfig_client_key_never_reaches_the_log(
    tls_api: FakeApiServer, tmp_path: Path, pki: dict[str, Path], broken: bool
) -> None:
    import base64

    from tests.process import ROOT, run_gfd_here

    def data(name: str) -> str:
        return base64.b64encode(pki[name].read_bytes()).decode()

    key = data("client.key") if not broken else data("server.key")
    user = {"client-certificate-data": data("client.crt"), "client-key-data": key}
    path = tls_api.write_kubeconfig(tmp_path / "kubeconfig", user=user)
    config = json.loads(path.read_text())
    config["clusters"][0]["cluster"]["certificate-authority-data"] = data("ca.crt")
    path.write_text(json.dumps(config))
    done = run_gfd_here(
        "--use-node-labels", "--node-name", "n1", "--kubeconfig", str(path), "--oneshot",
        "--snapshot-file", f"{ROOT}/examples/snapshots/dgx-a100.yaml", "--log-level", "debug",
    )  # fmt: skip
    assert done.returncode == (2 if broken else 0), done.stderr
    secret = pki["client.key" if not broken else "server.key"].read_text()
    for part in [key, *secret.splitlines()[1:-1]]:
        assert part not in done.stderr
    if broken:  # found at start, as client-go finds it: a usage error
        assert (
            done.stderr.count("\n") == 1 and "cannot be used (KEY_VALUES_MISMATCH)" in done.stderr
        )
    else:
        assert tls_api.requests[-1].client_cn == "gfd-exec"


def test_a_token_beside_the_token_file_is_used_while_the_file_cannot_be_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "token"
    clock = Clock(1000.0)
    source = FileToken(str(path), "tokenFile", fallback=TOKEN, clock=clock)
    assert source.token() == TOKEN
    path.write_text(ROTATED)
    assert source.token() == TOKEN  # kept for the period, as a token read from the file
    clock.now += 60.0
    assert source.token() == ROTATED
