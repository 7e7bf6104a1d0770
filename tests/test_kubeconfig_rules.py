"""A kubeconfig means what client-go says it means: what client-go refuses
(k8s.io/client-go tools/clientcmd/validation.go ``ConfirmUsable``, transport/transport.go's
TLS rule) gfd refuses in one line, and a ``KUBECONFIG`` list is read by client-go's loading
rules (tools/clientcmd/loader.go).  Each case cites the rule in gfd/kube/kubeconfig.py.
Errors name their source: ``--kubeconfig`` or ``KUBECONFIG``,
the in-cluster address variables, a config file given as a snapshot and the reverse."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from gfd.errors import UsageError
from gfd.kube.client import KubeClient
from tests.execplugin import EXEC_API, exec_credential, exec_user, write_plugin
from tests.fakes.fake_apiserver import FakeApiServer, write_kubeconfig
from tests.process import ROOT, run_gfd

pytestmark = pytest.mark.timeout(120)

SNAPSHOT = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")
CONFIG = str(Path(ROOT) / "examples" / "configs" / "time-slicing.yaml")
TOKEN = "tok-6b1f0e2d9c7a4853-SECRET"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
B64_PEM = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="


def kubeconfig(tmp_path: Path, **change: Any) -> str:
    """A one-context kubeconfig at a server nobody serves, with ``cluster``/``user``/
    ``context`` fields changed (None removes a field) and any top-level key replaced."""
    path = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", user={"token": TOKEN})
    config = json.loads(path.read_text())
    for section, key in (("cluster", "clusters"), ("user", "users"), ("context", "contexts")):
        for field, value in change.pop(section, {}).items():
            if value is None:
                config[key][0][section].pop(field, None)
            else:
                config[key][0][section][field] = value
    config.update(change)
    path.write_text(json.dumps(config))
    return str(path)


def refused(path: str, words: str) -> str:
    with pytest.raises(UsageError, match=words) as raised:
        KubeClient(path, budget=1.0)
    message = str(raised.value)
    assert "\n" not in message and TOKEN not in message
    return message


@pytest.mark.parametrize(
    ("change", "words"),
    [
        # transport.go:84-86
        ({"cluster": {"insecure-skip-tls-verify": True, "certificate-authority-data": B64_PEM}},
         "insecure-skip-tls-verify with a certificate-authority"),
        ({"cluster": {"insecure-skip-tls-verify": True, "certificate-authority": "ca.crt"}},
         "insecure-skip-tls-verify with a certificate-authority"),
        # validation.go:248-258
        ({"cluster": {"certificate-authority": "ca.crt", "certificate-authority-data": B64_PEM}},
         "both certificate-authority and certificate-authority-data"),
        ({"cluster": {"certificate-authority": "missing-ca.crt"}},
         "missing-ca.crt'?: does not exist"),
        # validation.go:230-241
        ({"cluster": {"server": None}}, r"cluster: empty|server: required"),
        ({"cluster": {"server": "", "insecure-skip-tls-verify": False}}, r"server: required"),
        # validation.go:264-345
        ({"user": {"username": "u", "password": "p"}}, "more than one authentication method"),
        ({"user": {"client-certificate": "ca.crt"}}, "without client-key"),
        ({"user": {"client-certificate-data": B64_PEM, "client-key": "ca.crt",
                   "client-key-data": B64_PEM}}, "both client-key and client-key-data"),
        ({"user": {"client-certificate-data": B64_PEM, "client-certificate": "ca.crt",
                   "client-key": "ca.crt"}},
         "both client-certificate and client-certificate-data"),
        ({"user": {"token": None, "client-certificate": "ca.crt", "client-key": "nokey"}},
         "nokey'?: does not exist"),
        ({"user": {"token": None, "exec": {"apiVersion": EXEC_API, "command": "p"}}},
         r"exec\.interactiveMode: required"),
        ({"user": {"token": None, "exec": {"command": "p", "interactiveMode": "Never"}}},
         r"exec\.apiVersion: required"),
        ({"user": {"token": None, "auth-provider": {"name": "oidc"},
                   "exec": {"apiVersion": EXEC_API, "command": "p", "interactiveMode": "Never"}}},
         "both exec and auth-provider"),
        ({"user": {"as-groups": ["system:masters"]}}, "impersonation"),
        # validation.go:197-204, 357-373
        ({"current-context": "elsewhere"}, "context 'elsewhere' was not found"),
        ({"current-context": ""}, "no current-context"),
        ({"context": {"user": "nobody"}}, "user 'nobody' was not found"),
        ({"context": {"cluster": None}}, "cluster was not specified"),
        ({"context": {"namespace": "Not_A_Label"}}, "not a DNS-1123 label"),
    ],
)  # fmt: skip
def test_what_client_go_refuses_gfd_refuses(
    tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    (tmp_path / "ca.crt").write_text(PEM)
    refused(kubeconfig(tmp_path, **change), words)


def test_a_token_beside_a_token_file_is_what_client_go_uses(tmp_path: Path) -> None:
    """client_config.go:277-287: both are allowed; the token is used, the file read again."""
    (tmp_path / "token").write_text("from-the-file\n")
    client = KubeClient(kubeconfig(tmp_path, user={"tokenFile": "token"}), budget=1.0)
    assert client.server == "http://127.0.0.1:9"


def test_insecure_with_a_ca_sends_nothing_and_exits_2(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add_node("n1")
        path = api.write_kubeconfig(tmp_path / "kubeconfig", user={"token": TOKEN})
        config = json.loads(path.read_text())
        config["clusters"][0]["cluster"].update(
            {"insecure-skip-tls-verify": True, "certificate-authority-data": B64_PEM}
        )
        path.write_text(json.dumps(config))
        result = run_gfd(
            "--oneshot", "--use-node-labels", "--node-name", "n1", "--kubeconfig", str(path),
            "--snapshot-file", SNAPSHOT,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "insecure-skip-tls-verify" in result.stderr and TOKEN not in result.stderr
        assert api.requests == []  # the token never left


# ----------------------------------------------------------------- KUBECONFIG lists


def two_files(tmp_path: Path) -> tuple[str, str]:
    """Two kubeconfigs, each with its own current-context, both defining user ``fake``."""
    first = kubeconfig(tmp_path, **{"current-context": "fake"})
    second = tmp_path / "second"
    config = json.loads(Path(first).read_text())
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.2:9"
    config["contexts"][0]["name"] = "other"
    config["current-context"] = "other"
    config["users"][0]["user"] = {"token": "second-file-token"}
    second.write_text(json.dumps(config))
    return first, str(second)


def test_a_list_is_merged_as_client_go_merges_it(tmp_path: Path) -> None:
    """loader.go:228-233 (a missing file is skipped), 164-168 (a name listed twice is read
    once), 247-274 (the first file's current-context and map entries win)."""
    first, second = two_files(tmp_path)
    missing = str(tmp_path / "missing")
    client = KubeClient(os.pathsep.join([missing, first, first, second]), budget=1.0)
    assert client.server == "http://127.0.0.1:9"  # the first file's context
    assert client.api_client.configuration.api_key["BearerToken"] == f"Bearer {TOKEN}"


def test_a_looping_link_in_a_list_is_an_error_not_skipped(tmp_path: Path) -> None:
    """loader.go:235-237: only a file that does not exist is skipped."""
    first, _ = two_files(tmp_path)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    refused(os.pathsep.join([first, str(loop)]), "a loop of symbolic links")


def test_a_list_of_files_none_of_which_exists_is_one_line(tmp_path: Path) -> None:
    refused(
        os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]),
        "none of the files it lists exists",
    )


# ----------------------------------------------------------------- exec plugins


def test_a_plugin_is_done_when_it_exits_though_a_helper_holds_its_output(tmp_path: Path) -> None:
    """A helper the plugin left in a session of its own keeps the plugin's stdout open:
    the credential is read and used once the plugin has exited, without waiting for EOF."""
    pids = tmp_path / "pids"
    command = write_plugin(
        tmp_path, f"setsid sleep 1000 &\necho $! >> {pids}\necho '{exec_credential('exec-tok')}'\n"
    )
    with FakeApiServer() as api:
        api.add_node("n1")
        api.accept_only("Bearer exec-tok")
        path = api.write_kubeconfig(tmp_path / "kubeconfig", user=exec_user(command))
        client = KubeClient(str(path), budget=5.0)
        try:
            answer = client.run("get node n1", lambda: client.request("GET", "/api/v1/nodes/n1"))
            assert answer["metadata"]["name"] == "n1"
        finally:
            for pid in pids.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


# ----------------------------------------------------------------- errors name the source


def one_line_exit_2(*args: str, env: dict[str, str] | None = None) -> str:
    result = run_gfd("--oneshot", *args, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


API = ("--use-node-labels", "--node-name", "n1", "--snapshot-file", SNAPSHOT)


def test_a_missing_kubeconfig_names_the_flag_or_the_variable(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    line = one_line_exit_2(*API, "--kubeconfig", missing)
    assert "--kubeconfig" in line and "does not exist" in line and "KUBECONFIG" not in line
    line = one_line_exit_2(*API, env={"KUBECONFIG": missing})
    assert "KUBECONFIG" in line and "does not exist" in line and "--kubeconfig" not in line


@pytest.mark.parametrize(
    ("host", "port", "variable"),
    [("10.0.0.1", "https", "KUBERNETES_SERVICE_PORT"),
     ("10.0.0.1", "70000", "KUBERNETES_SERVICE_PORT"),
     ("not a host/", "443", "KUBERNETES_SERVICE_HOST")],
)  # fmt: skip
def test_a_bad_in_cluster_address_names_the_variable(host: str, port: str, variable: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    line = one_line_exit_2(*API, env=env)
    assert variable in line


def test_a_config_file_given_as_a_snapshot_is_named_as_such() -> None:
    line = one_line_exit_2("--snapshot-file", CONFIG, "-o", "-")
    assert "looks like a gfd config file" in line and "not a snapshot" in line


def test_a_snapshot_given_as_a_config_file_is_named_as_such() -> None:
    line = one_line_exit_2("--snapshot-file", SNAPSHOT, "--config-file", SNAPSHOT, "-o", "-")
    assert "looks like a gfd snapshot" in line and "not a config file" in line
