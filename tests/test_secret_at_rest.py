"""No client key ever rests on a filesystem: a key written inline in a kubeconfig
(``client-key-data``) or given by an exec plugin (``clientKeyData``) is used over real TLS by
``gfd`` as a real process, and no file under its TMPDIR holds the key -- while it runs, and
after it ends in every way a process ends: a normal oneshot exit, SIGTERM, the watchdog's
forced exit (``os._exit``: no ``finally``, no ``atexit``) and a crash (SIGKILL)."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import resource
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.execplugin import exec_user
from tests.fakes.fake_apiserver import FakeApiServer
from tests.process import GFD, ROOT, Daemon, clean_env, run_gfd
from tests.test_kube_credentials import cert_plugin, pki, tls_api

pytestmark = pytest.mark.timeout(120)

__all__ = ["pki", "tls_api"]  # fixtures, used by name

SNAPSHOT = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")

#: a stop the agent never hears: the watchdog alone sees it and forces the exit
DEAF_TO_STOPS = """\
import gfd.signals

_attach = gfd.signals.attach
gfd.signals.attach = lambda receiver: _attach(lambda signum: None)
"""


def kubeconfig_for(source: str, api: FakeApiServer, tmp_path: Path, pki: dict[str, Path]) -> str:
    """A kubeconfig whose client key is inline (``kubeconfig``) or an exec plugin's."""
    cert, key = pki["client.crt"].read_text(), pki["client.key"].read_text()
    if source == "exec":
        user = exec_user(cert_plugin(tmp_path, cert, key))
    else:
        user = {
            "client-certificate-data": base64.b64encode(cert.encode()).decode(),
            "client-key-data": base64.b64encode(key.encode()).decode(),
        }
    return str(api.write_kubeconfig(tmp_path / "kubeconfig", user=user, ca=pki["ca.crt"]))


def key_at_rest(tmpdir: Path, key: str) -> list[str]:
    """Every file or folder under ``tmpdir`` that holds a line of ``key``'s body, or is one
    of the exec certificate folders."""
    canaries = [line.encode() for line in key.splitlines()[1:-1] if line]
    found = []
    for directory, folders, files in os.walk(tmpdir):
        found += [f"{directory}/{d}" for d in folders if d.startswith("gfd-exec-credential-")]
        for name in files:
            path = os.path.join(directory, name)
            try:
                content = Path(path).read_bytes()
            except OSError:
                continue
            if any(canary in content for canary in canaries):
                found.append(path)
    return found


def authenticated(api: FakeApiServer) -> bool:
    return any(r.client_cn == "gfd-exec" and r.status == 200 for r in api.requests)


@dataclass
class Keyed:
    """A kubeconfig whose client key is inline or an exec plugin's, and the TMPDIR (and the
    environment naming it) where no file may hold the key."""

    kubeconfig: str
    key: str
    tmpdir: Path
    env: dict[str, str]

    @property
    def daemon_args(self) -> tuple[str, ...]:
        """A node-labels daemon that authenticates with the key, a pass a second."""
        return (
            "--use-node-labels", "--node-name", "n1", "--kubeconfig", self.kubeconfig,
            "--snapshot-file", SNAPSHOT, "--sleep-interval", "1s",
        )  # fmt: skip


def shimmed(tmp_path: Path, source: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``source`` as the sitecustomize every gfd process then runs first."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(source)
    return {**env, "PYTHONPATH": f"{shim}{os.pathsep}{ROOT}"}


@pytest.fixture(params=["kubeconfig", "exec"])
def keyed(
    request: pytest.FixtureRequest, tls_api: FakeApiServer, tmp_path: Path, pki: dict[str, Path]
) -> Keyed:
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    kubeconfig = kubeconfig_for(request.param, tls_api, tmp_path, pki)
    return Keyed(kubeconfig, pki["client.key"].read_text(), tmpdir, {"TMPDIR": str(tmpdir)})


def test_a_oneshot_leaves_no_key_behind(keyed: Keyed, tls_api: FakeApiServer) -> None:
    """Nor the TLS session secrets, which would decrypt a recording of every request and
    its token: ``SSLKEYLOGFILE`` (read by Python's and urllib3's TLS set-up) is ignored, as
    upstream's Go TLS ignores it."""
    keylog = keyed.tmpdir / "tls-keys.log"
    result = run_gfd(
        "--oneshot", "--use-node-labels", "--node-name", "n1", "--kubeconfig", keyed.kubeconfig,
        "--snapshot-file", SNAPSHOT, env={**keyed.env, "SSLKEYLOGFILE": str(keylog)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert authenticated(tls_api)
    assert key_at_rest(keyed.tmpdir, keyed.key) == []
    assert not keylog.exists()


@pytest.mark.parametrize("ending", ["SIGTERM", "watchdog", "crash"])
def test_a_daemon_never_puts_the_key_on_disk_however_it_ends(
    keyed: Keyed, ending: str, tls_api: FakeApiServer, tmp_path: Path
) -> None:
    tmpdir, env, key = keyed.tmpdir, keyed.env, keyed.key
    if ending == "watchdog":
        env = shimmed(tmp_path, DEAF_TO_STOPS, env)
    daemon = Daemon(*keyed.daemon_args, env=env)
    try:
        daemon.wait_for("pass finished")
        assert authenticated(tls_api), daemon.log()
        assert key_at_rest(tmpdir, key) == []  # while it runs
        if ending == "crash":
            daemon.process.kill()
        else:
            daemon.process.send_signal(signal.SIGTERM)
        daemon.process.wait(timeout=60)
        if ending == "watchdog":
            daemon._reader.join(timeout=10)
            assert "not honoured" in daemon.log()  # the forced exit, not an orderly one
        assert key_at_rest(tmpdir, key) == []  # after it ended
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()


class DumpingDaemon(Daemon):
    """A daemon run in ``cwd`` with core dumps allowed without limit (as container runtimes
    commonly start their containers), where a core pattern of ``core`` puts them."""

    def __init__(self, *args: str, env: dict[str, str], cwd: Path) -> None:
        unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        process = subprocess.Popen(
            [*GFD, "--log-format", "json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=clean_env(env), cwd=cwd, stdin=subprocess.DEVNULL,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, unlimited),
        )  # fmt: skip
        self._follow(process)


def test_a_crash_dumps_no_core_holding_the_key(
    keyed: Keyed, tls_api: FakeApiServer, tmp_path: Path
) -> None:
    """A crash (a fault in a C library: NVML, OpenSSL) writes the process's memory, the key
    with it, wherever the node's core pattern says: gfd allows itself no core dump."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    daemon = DumpingDaemon(*keyed.daemon_args, env=keyed.env, cwd=cwd)
    try:
        daemon.wait_for("pass finished")
        assert authenticated(tls_api), daemon.log()
        daemon.process.send_signal(signal.SIGSEGV)
        assert daemon.process.wait(timeout=60) == -signal.SIGSEGV
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()
    assert key_at_rest(cwd, keyed.key) == []
    assert key_at_rest(keyed.tmpdir, keyed.key) == []


def test_the_in_memory_key_is_not_inherited_by_a_credential_plugin() -> None:
    """The descriptor holding a key is closed on exec: a plugin (or anything gfd ever runs)
    cannot read it from its own descriptor table."""
    from gfd.kube.secret_files import SecretFile

    secret = SecretFile(b"canary-key-material", "client.key")
    try:
        assert secret.nameless
        assert Path(secret.path).read_bytes() == b"canary-key-material"
        child = subprocess.run(
            ["ls", "-l", "/proc/self/fd"], capture_output=True, close_fds=False, check=False
        )
        assert child.returncode == 0
        assert b"memfd:gfd-client.key" not in child.stdout
    finally:
        secret.close()


def test_the_client_never_writes_inline_data_to_a_temporary_file(
    tmp_path: Path, pki: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every inline certificate, key and CA of the context in use reaches the client as an
    in-memory path: the client's own temporary-file writer is never called."""
    from kubernetes.config import kube_config

    from gfd.kube.client import KubeClient

    def refuse(*args: object, **kwargs: object) -> str:
        raise AssertionError("the kubernetes client wrote a secret to a temporary file")

    monkeypatch.setattr(kube_config, "_create_temp_file_with_content", refuse)
    encode = lambda name: base64.b64encode(pki[name].read_bytes()).decode()  # noqa: E731
    with FakeApiServer() as api:
        path = api.write_kubeconfig(
            tmp_path / "kubeconfig",
            user={"client-certificate-data": encode("client.crt"),
                  "client-key-data": encode("client.key")},
        )  # fmt: skip
        config = json.loads(path.read_text())
        config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
        config["clusters"][0]["cluster"]["certificate-authority-data"] = encode("ca.crt")
        path.write_text(json.dumps(config))
        client = KubeClient(str(path), budget=1.0)
    configuration = client.api_client.configuration
    for name in (configuration.cert_file, configuration.key_file, configuration.ssl_ca_cert):
        assert name.startswith("/proc/self/fd/"), name
    assert Path(configuration.key_file).read_bytes() == pki["client.key"].read_bytes()


#: a platform whose Python has no memfd_create (a C library older than 2.27), and one whose
#: kernel or filesystem has no unnamed temporary files either (no O_TMPFILE)
WITHOUT = {
    "memfd_create": "import os\ndel os.memfd_create\n",
    "memfd_create and O_TMPFILE": "import os\ndel os.memfd_create\ndel os.O_TMPFILE\n",
}


@pytest.mark.parametrize("missing", WITHOUT)
def test_without_memfd_the_fallback_file_is_private_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    import tempfile

    from gfd.kube.secret_files import SecretFile

    for name in ("memfd_create", "O_TMPFILE"):
        if name in missing:
            monkeypatch.delattr(os, name)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    secret = SecretFile(b"canary-key-material", "client.key")
    assert secret.nameless == ("O_TMPFILE" not in missing)
    assert Path(secret.path).read_bytes() == b"canary-key-material"
    assert os.stat(secret.path).st_mode & 0o077 == 0
    if secret.nameless:
        assert list(tmp_path.iterdir()) == []
    else:
        assert os.stat(os.path.dirname(secret.path)).st_mode & 0o077 == 0
    secret.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("missing", WITHOUT)
def test_without_memfd_no_key_outlives_a_killed_gfd_and_the_next_one(
    keyed: Keyed, missing: str, tls_api: FakeApiServer, tmp_path: Path
) -> None:
    """SIGKILL while the key is held: either it never had a name (an unnamed file, gone
    with the process), or it sits in a folder that the next gfd to start removes (its lock
    went with the killed process)."""
    env = shimmed(tmp_path, WITHOUT[missing], keyed.env)
    daemon = Daemon(*keyed.daemon_args, env=env)
    try:
        daemon.wait_for("pass finished")
        assert authenticated(tls_api), daemon.log()
        left = key_at_rest(keyed.tmpdir, keyed.key)
        assert bool(left) == ("O_TMPFILE" in missing)  # a name only where nothing else works
        daemon.process.kill()
        daemon.process.wait(timeout=60)
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait()
    assert key_at_rest(keyed.tmpdir, keyed.key) == left  # the kill removed nothing
    result = run_gfd("--oneshot", "--snapshot-file", SNAPSHOT, env=env)
    assert result.returncode == 0, result.stderr
    assert key_at_rest(keyed.tmpdir, keyed.key) == []


def test_the_next_gfd_reclaims_only_the_credential_folders_nobody_holds(tmp_path: Path) -> None:
    """A held folder (a live gfd's: a roll-out overlap), another user's, a file, a FIFO (never
    opened) or a symbolic link under such a name, and any other name are left as they are."""
    tmpdir = tmp_path / "tmpdir"
    outside = tmp_path / "outside"
    for folder in (tmpdir, outside):
        folder.mkdir(mode=0o700)
    (outside / "kept").write_text("kept")
    abandoned, held, foreign, file, fifo, link = (
        tmpdir / f"gfd-exec-credential-{n}aaaaaaa" for n in range(6)
    )
    for folder in (abandoned, held, foreign):
        folder.mkdir(mode=0o700)
        (folder / "client.key").write_text("key material")
    file.write_text("a file under a credential folder's name")
    os.mkfifo(fifo)
    link.symlink_to(outside)
    (tmpdir / "gfd-exec-credential-notes").mkdir()
    kept = {held.name, file.name, fifo.name, link.name, "gfd-exec-credential-notes"}
    if os.geteuid() == 0:
        os.chown(foreign, 65534, 65534)
        kept.add(foreign.name)
    holder = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        result = run_gfd(
            "--oneshot", "--snapshot-file", SNAPSHOT, "--log-level", "info",
            env={"TMPDIR": str(tmpdir)},
        )  # fmt: skip
    finally:
        os.close(holder)
    assert result.returncode == 0, result.stderr
    assert not abandoned.exists()
    assert kept <= set(os.listdir(tmpdir))
    assert (held / "client.key").exists() and (outside / "kept").exists()
    assert "removed the credential folders a stopped gfd left" in result.stderr
