"""The exec credential plugin (client.authentication.k8s.io v1 and v1beta1), run under
bounds client-go does not set, and the files its client certificate is written to (the
module docstring of gfd.kube.credentials gives the rules and their sources)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Any

from gfd import interrupt, redaction
from gfd.echo import clip, describe, one_line
from gfd.kube.credential_source import (
    EXEC_API_VERSIONS,
    EXEC_STDERR_EXCERPT_CHARS,
    EXEC_STDERR_KEPT_BYTES,
    MAX_EXEC_OUTPUT_BYTES,
    CertificateUser,
    CredentialError,
    CredentialSource,
    Deadline,
    unsafe_header_value,
)
from gfd.kube.limits import REQUEST_TIMEOUT_SECONDS
from gfd.kube.secret_files import SecretFile

# ----------------------------------------------------------------- exec plugins


class ExecPlugin(CredentialSource):
    """A kubeconfig user's ``exec`` credential plugin, run under bounds (module docstring)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        where: str,
        *,
        cwd: str | None,
        cluster: Mapping[str, Any] | None,
    ) -> None:
        def field(name: str, kind: type, default: Any) -> Any:
            value = config.get(name, default)
            if value is None:
                return default
            if not isinstance(value, kind):
                raise CredentialError(f"{where}.{name}: expected {kind.__name__}")
            return value

        self._where = where
        command = field("command", str, "")
        if not command:
            raise CredentialError(f"{where}.command: required")
        self.command = command
        self.api_version = field("apiVersion", str, "")
        if self.api_version not in EXEC_API_VERSIONS:
            raise CredentialError(
                f"{where}.apiVersion: {clip(self.api_version)!r} is not one of "
                + ", ".join(EXEC_API_VERSIONS)
            )
        self.args = [str(arg) for arg in field("args", list, [])]
        env = {}
        for index, item in enumerate(field("env", list, [])):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise CredentialError(f"{where}.env[{index}]: expected a name and a value")
            env[item["name"]] = str(item.get("value") or "")
        self.env = env
        mode = field("interactiveMode", str, "IfAvailable")
        if mode == "Always":
            # client-go refuses this where standard input is not a terminal; gfd's never is
            raise CredentialError(
                f"{where}.interactiveMode: 'Always' needs a terminal, and gfd has none"
            )
        if mode not in ("Never", "IfAvailable"):
            raise CredentialError(f"{where}.interactiveMode: unknown mode {clip(mode)!r}")
        self.install_hint = field("installHint", str, "")
        self._cluster = _cluster_info(cluster) if field("provideClusterInfo", bool, False) else None
        self._cwd = cwd or None
        self._name = clip(os.path.basename(command) or command, 60)
        self._value: str | None = None
        self._expires: float | None = None  # wall-clock seconds; None: until a 401
        self._certificate: tuple[str, str] | None = None
        self._use_certificate: CertificateUser | None = None

    def install(
        self, configuration: Any, deadline: Deadline, use_certificate: CertificateUser
    ) -> None:
        self._use_certificate = use_certificate
        super().install(configuration, deadline, use_certificate)

    def authorization(self, deadline: float | None) -> str:
        if self._value is None or (self._expires is not None and time.time() >= self._expires):
            self._value = None
            value, certificate, self._expires = self._run(deadline)
            if certificate is not None and certificate != self._certificate:
                if self._use_certificate is None:
                    raise CredentialError(
                        f"exec plugin {describe(self._name)}: no client to give it to"
                    )
                self._use_certificate(*certificate)
                self._certificate = certificate
            self._value = value
        return self._value

    def rejected(self) -> None:
        self._value = None

    # ------------------------------------------------------------- one run

    def _request(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self._cluster is not None:
            spec["cluster"] = self._cluster
        request = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        return json.dumps(request, default=str)  # a YAML date in an extension, say

    def _run(self, deadline: float | None) -> tuple[str, tuple[str, str] | None, float | None]:
        if deadline is None:
            deadline = time.monotonic() + REQUEST_TIMEOUT_SECONDS
        what = f"exec plugin {describe(self._name)} ({self._where})"
        # one run of a plugin at a time, whichever client (a pass's, a watch's) asks, as
        # client-go shares one authenticator per plugin: a run that starts while another
        # has printed its token but not yet been read could quote that token on stderr
        # before it is remembered, and so unredacted
        lock = _run_lock((self.command, *self.args))
        with interrupt.interruptible():
            taken = lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        if not taken:
            raise CredentialError(
                f"{what}: no answer before the request's deadline; its run for another"
                " request has not ended"
            )
        try:
            return self._run_alone(deadline, what)
        finally:
            lock.release()

    def _run_alone(
        self, deadline: float, what: str
    ) -> tuple[str, tuple[str, str] | None, float | None]:
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self._request()}
        process: subprocess.Popen[bytes] | None = None
        try:
            # a stop that comes while the plugin starts waits until its pid is known: raised
            # in the middle of Popen, it would leave the plugin running, unknown to anyone
            with interrupt.deferred(), _exit.lock:
                if _exit.begun:
                    raise CredentialError(f"{what}: not run: gfd is exiting")
                process = self._start(env, what)
                _RUNNING.add(process.pid)
            with interrupt.interruptible():
                stdout, stderr, status = _collect(process, deadline)
        finally:
            if process is not None:
                with interrupt.deferred():  # nor while it is being ended
                    with _exit.lock:  # reaped only once the exit's kill cannot reach it
                        _RUNNING.discard(process.pid)
                    _end_group(process)
        if stdout:  # remembered before any check: a run that then fails is never quoted either
            _remember_written(f"exec plugin {self.command}", stdout)
        if status is None:
            raise CredentialError(
                f"{what}: no answer before the request's deadline; it was stopped"
            )
        if stdout is None:
            raise CredentialError(
                f"{what}: wrote more than {MAX_EXEC_OUTPUT_BYTES} bytes; it was stopped"
            )
        if status != 0:
            ended = f"exit status {status}" if status > 0 else f"signal {-status}"
            raise CredentialError(f"{what}: failed with {ended}{_excerpt(stderr)}")
        return self._parse(stdout, what)

    def _start(self, env: Mapping[str, str], what: str) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                [self.command, *self.args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self._cwd,
                env=env,
                close_fds=True,
                start_new_session=True,  # its own session and process group: killed whole
            )
        except FileNotFoundError:
            hint = f" ({clip(' '.join(self.install_hint.split()))})" if self.install_hint else ""
            raise CredentialError(f"{what}: executable not found{hint}") from None
        except OSError as exc:
            raise CredentialError(f"{what}: cannot run it: {exc.strerror or exc}") from None
        except ValueError:  # a NUL in the command, an argument or the environment
            raise CredentialError(
                f"{what}: cannot run it: a NUL character in its command line or environment"
            ) from None

    def _parse(self, stdout: bytes, what: str) -> tuple[str, tuple[str, str] | None, float | None]:
        """(the Authorization header value or "", (certificate, key) or None, expiry)."""
        # nothing of the output is ever quoted: it is the credential
        try:
            answer = json.loads(stdout)
        except (ValueError, RecursionError):
            raise CredentialError(
                f"{what}: its output ({len(stdout)} bytes) is not an ExecCredential in JSON"
            ) from None
        if not isinstance(answer, dict):
            raise CredentialError(f"{what}: its output is not a JSON object")
        if answer.get("kind") != "ExecCredential" or answer.get("apiVersion") != self.api_version:
            raise CredentialError(
                f"{what}: its output is not an ExecCredential of {self.api_version}"
            )
        status = answer.get("status")
        if not isinstance(status, dict):
            raise CredentialError(f"{what}: its output has no status")
        token = status.get("token") or ""
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not isinstance(token, str) or not isinstance(cert or "", str):
            raise CredentialError(f"{what}: its status holds a value that is not a string")
        if not isinstance(key or "", str):
            raise CredentialError(f"{what}: its status holds a value that is not a string")
        if not token and not cert and not key:
            raise CredentialError(f"{what}: returned neither a token nor a certificate and key")
        if bool(cert) != bool(key):  # as client-go
            raise CredentialError(f"{what}: returned a certificate or a key, not both")
        if unsafe_header_value(token):
            raise CredentialError(
                f"{what}: its token contains a line break or another control character"
            )
        header = f"Bearer {token}" if token else ""
        certificate = (cert, key) if cert and key else None
        return header, certificate, _expiry(status.get("expirationTimestamp"), what)


def _remember_written(source: str, stdout: bytes) -> None:
    """Hold the token and key of whatever ExecCredential ``stdout`` holds, whether or not the
    run that wrote it succeeds: its stderr, a later run's or a log line may quote them."""
    try:
        status = json.loads(stdout).get("status")
    except (ValueError, RecursionError, AttributeError):
        # output cut short (a plugin stopped at its deadline mid-write) or not an object:
        # whatever complete token or key string it holds is held all the same
        text = stdout.decode("utf-8", "replace")
        cut = [_json_string(match) for match in _SECRET_FIELD.findall(text)]
        redaction.remember(source, *(value for value in cut if value))
        return
    if isinstance(status, dict):
        found = (status.get("token"), status.get("clientKeyData"))
        redaction.remember(source, *(value for value in found if isinstance(value, str)))


#: a token or client key field with its whole string value, wherever it stands in a text
_SECRET_FIELD = re.compile(r'"(?:token|clientKeyData)"\s*:\s*("(?:[^"\\]|\\.)*")')


def _json_string(literal: str) -> str | None:
    try:
        value = json.loads(literal)
    except ValueError:  # an escape JSON does not know
        return None
    return value if isinstance(value, str) else None


def _cluster_info(cluster: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``spec.cluster`` an exec plugin is given with ``provideClusterInfo``."""
    cluster = cluster or {}
    info: dict[str, Any] = {}
    for ours, theirs in (
        ("server", "server"),
        ("tls-server-name", "tls-server-name"),
        ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
        ("certificate-authority-data", "certificate-authority-data"),
        ("proxy-url", "proxy-url"),
    ):
        if cluster.get(theirs) is not None:
            info[ours] = cluster[theirs]
    for extension in cluster.get("extensions") or []:
        if (
            isinstance(extension, dict)
            and extension.get("name") == "client.authentication.k8s.io/exec"
        ):
            info["config"] = extension.get("extension")
    return info


def _expiry(stamp: Any, what: str) -> float | None:
    if stamp is None:
        return None
    from kubernetes.config import dateutil

    parse: Any = dateutil.parse_rfc3339  # untyped
    try:
        return float(parse(str(stamp)).timestamp())
    except (ValueError, TypeError, AttributeError):
        raise CredentialError(f"{what}: its expirationTimestamp is not an RFC 3339 time") from None


def _excerpt(stderr: bytes) -> str:
    text = one_line(redaction.redact(stderr.decode("utf-8", "replace")))
    if not text:
        return ""
    if len(text) > EXEC_STDERR_EXCERPT_CHARS:
        text = "..." + text[-EXEC_STDERR_EXCERPT_CHARS:]
    return f": {text}"


def _collect(
    process: subprocess.Popen[bytes], deadline: float
) -> tuple[bytes | None, bytes, int | None]:
    """Read the plugin's output until it exits, or the deadline.

    Returns (stdout or None when over the limit, the end of stderr, exit status or None
    when the deadline came first; a signal as its negative number).  Once the plugin has
    exited, everything it wrote is already in its pipes: what is there is read and reading
    stops, whether or not the pipes have closed -- a helper it left behind in a session of
    its own may hold them open for ever.  Its own process group is killed first."""
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout.fileno(), process.stderr.fileno()
    stdout = bytearray()
    stderr = bytearray()
    open_fds = {out, err}
    exited = False
    while True:
        if not exited and _exited(process.pid):
            exited = True
            _kill_group(process.pid)  # whatever it left behind: its pipes then close
        if exited and not open_fds:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            # what it wrote before it was stopped is read all the same: a credential it
            # printed just then must be remembered, or its next run's stderr could quote
            # the token unredacted
            _kill_group(process.pid)
            # a bounded number of reads: a helper that escaped the group may write for ever
            for _ in range(MAX_EXEC_OUTPUT_BYTES // 65536 + 2):
                if not open_fds or not _read_ready(open_fds, out, stdout, stderr, 0):
                    break
            over = len(stdout) > MAX_EXEC_OUTPUT_BYTES
            return None if over else bytes(stdout), bytes(stderr), None
        # short waits while running: its exit is seen by polling, not by a signal; once
        # it has exited, no wait at all: only what is already in the pipes is read
        read = _read_ready(open_fds, out, stdout, stderr, 0 if exited else min(left, 0.05))
        if len(stdout) > MAX_EXEC_OUTPUT_BYTES:
            return None, bytes(stderr), 0
        if exited and not read:
            break
    status = process.wait()
    return bytes(stdout), bytes(stderr), status


def _read_ready(
    open_fds: set[int], out: int, stdout: bytearray, stderr: bytearray, wait: float
) -> bool:
    """Read once from each of the pipes ready within ``wait`` seconds (a pipe at its end is
    dropped from ``open_fds``); whether any was ready.  Reading stops short once stdout is
    over its limit, and only the end of stderr is kept."""
    ready, _, _ = select.select(list(open_fds), [], [], wait)
    for fd in ready:
        if len(stdout) > MAX_EXEC_OUTPUT_BYTES:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            open_fds.discard(fd)
        elif fd == out:
            stdout += chunk
        else:
            stderr += chunk
            del stderr[:-EXEC_STDERR_KEPT_BYTES]
    return bool(ready)


def _exited(pid: int) -> bool:
    """Whether the plugin has exited, without reaping it: while it is a zombie its process
    group id cannot be taken by another process, so killing the group is safe."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


_RUN_LOCKS: dict[tuple[str, ...], threading.Lock] = {}
_RUN_LOCKS_GUARD = threading.Lock()


def _run_lock(command: tuple[str, ...]) -> threading.Lock:
    """The lock that one plugin's runs (its command line) take, one at a time."""
    with _RUN_LOCKS_GUARD:
        return _RUN_LOCKS.setdefault(command, threading.Lock())


#: the plugins running now, by pid (= process group): killed at exit, whichever thread
#: started them (a watch's thread is not waited for when the process ends)
_RUNNING: set[int] = set()


class _Exit:
    """Whether the exit has begun (its kill of the plugins above), and the lock that it and
    each plugin's start take: a watch's thread runs on while the process exits, and a
    plugin it started just after the exit looked would be left running."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.begun = False


_exit = _Exit()


def _end_running() -> None:
    with _exit.lock:
        _exit.begun = True
        for pid in _RUNNING:
            _kill_group(pid)


atexit.register(_end_running)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the plugin's process group (anything still in it) and reap the plugin.

    Once reaped, its pid (and group id) may belong to another process: the group is killed
    only before that."""
    if process.returncode is None:
        _kill_group(process.pid)
        process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def check_key_pair(cert_file: str, key_file: str, what: str) -> None:
    """A CredentialError unless TLS can use the pair (as client-go checks it with
    ``tls.X509KeyPair`` before the first request); the reason ssl gives, never the files."""
    import ssl

    try:
        # no passphrase: an encrypted key is refused here, not prompted for on a terminal
        ssl.create_default_context().load_cert_chain(cert_file, key_file, password=b"")
    except (ssl.SSLError, ValueError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None)
        raise CredentialError(f"{what} cannot be used ({reason or type(exc).__name__})") from None


class CertificateFiles:
    """The client certificate and key an exec plugin gave, as paths TLS can open (it reads
    them only from files: ``ssl.SSLContext.load_cert_chain``): anonymous in-memory files
    (gfd.kube.secret_files), so the key never rests on a filesystem.  The previous pair is
    closed once a new one replaces it."""

    def __init__(self) -> None:
        self._files: list[SecretFile] = []

    def write(self, cert: str, key: str) -> tuple[str, str]:
        """The paths of the certificate and key files, now holding ``cert`` and ``key``;
        a CredentialError when TLS cannot use them."""
        files = [SecretFile(cert.encode(), "client.crt")]
        files.append(SecretFile(key.encode(), "client.key"))
        try:
            check_key_pair(
                files[0].path, files[1].path, "the client certificate and key an exec plugin gave"
            )
        except CredentialError:
            for file in files:
                file.close()
            raise
        previous, self._files = self._files, files
        for file in previous:  # the caller puts the new pair in use before any connection
            file.close()
        return files[0].path, files[1].path
