"""The fault matrix: every channel of docs/SECURITY.md crossed with the fault classes that
apply to it; a channel declares its classes and knows how to place each fault.

- a start-up input (flag, environment, config, snapshot, kubeconfig): :func:`assert_refused`;
- a runtime input or output of a daemon: that pass fails with one log line naming the source,
  the daemon lives, the pass after the fault is removed succeeds, SIGTERM ends it with 0;
- a host input read during discovery: the fact is unknown (``None``), never a wait or a raise.

Real processes throughout but the discovery cells (in-process: a blocked read hangs the test
until its timeout fails it).  Time is bounded by timeouts and guards, never asserted.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes.util
import http.server
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd.discovery import sysfs
from gfd.documents import MAX_DOCUMENT_BYTES
from gfd.files import LIBRARY_MAX_BYTES
from gfd.options import OPTIONS
from gfd.snapshot import Vgpu
from tests.fakes.fake_apiserver import TOKEN as KUBECONFIG_TOKEN
from tests.fakes.fake_apiserver import FakeApiServer, Fault
from tests.helpers import table
from tests.process import LONGEST_LINE, ROOT, Daemon, assert_refused, run_gfd, run_gfd_here
from tests.specialfiles import SPECIAL, fifo_held_open, fifo_trickled, replace_with_directory, swap

DGX = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")
#: a value far past every limit, to see that no message echoes it whole
HUGE_VALUE = "v" * 1_000_000
#: passes of a daemon under test come this often
INTERVAL = "100ms"

pytestmark = pytest.mark.timeout(180)


# =============================================================== running gfd


def run_start(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A real gfd process that should end by itself; its status and output.  A process
    that hung would keep the test waiting until its timeout fails it."""
    return run_gfd(*args, env=env, timeout=120)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path, so a message's clipped path still ends in the name
    of the file (pytest's tmp_path is long enough to be clipped)."""
    path = Path(tempfile.mkdtemp(prefix="fm"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# =============================================================== start-up documents


@dataclass
class Document:
    """A YAML document named by a flag at start-up; ``valid`` is a good one."""

    name: str
    flag: str
    file_name: str
    valid: Callable[[], str]
    args: Callable[[str], list[str]]
    empty_is_valid: bool
    wrong_type: str = "- a\n- list\n"

    def run(self, directory: Path) -> subprocess.CompletedProcess[str]:
        return run_start(*self.args(str(directory / self.file_name)))


def _kubeconfig_text(cluster: str = "", user: str = "", url: str = "http://127.0.0.1:9") -> str:
    """A kubeconfig (by default at a server nobody serves), ``cluster``/``user`` fields added."""
    server = f"server: '{url}'" + (f", {cluster}" if cluster else "")
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{{server}}}}}]\n"
        f"contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
        f"users: [{{name: u, user: {{{user}}}}}]\n"
    )


DOCUMENTS = [
    Document(
        "config file", "--config-file", "cfg.yaml", lambda: "version: v1\n",
        lambda path: ["--oneshot", "--snapshot-file", DGX, "--config-file", path],
        empty_is_valid=True,
    ),
    Document(
        "snapshot file", "--snapshot-file", "snap.yaml", lambda: Path(DGX).read_text(),
        lambda path: ["--oneshot", "--snapshot-file", path], empty_is_valid=False,
    ),
    Document(
        "kubeconfig", "--kubeconfig", "kube.cfg", _kubeconfig_text,
        lambda path: ["--cleanup", "--use-node-labels", "--node-name", "n1", "--kubeconfig", path],
        empty_is_valid=False,
    ),
]  # fmt: skip
EVERY_DOCUMENT = [pytest.param(d, id=d.name) for d in DOCUMENTS]


#: a fault at a start-up document's path: how it is placed (returning a context manager where
#: the fault must last through the run), what the refusal names besides the file's name, and
#: whether the file could be opened but not parsed (otherwise the refusal names the flag too)
START_FAULTS = {
    "missing": (lambda document, path: None, (), False),
    # past the size limit: refused after reading at most limit + 1 bytes
    "huge": (lambda doc, path: path.write_text(f"{doc.valid()}# {'x' * MAX_DOCUMENT_BYTES}\n"),
             ("larger than the limit",), False),
    # a FIFO, fed slowly or never, is not a regular file: refused at once, never waited for
    "slow": (lambda document, path: fifo_trickled(path, document.valid()), ("FIFO",), False),
    "hung": (lambda document, path: fifo_held_open(path), ("FIFO",), False),
    "malformed": (lambda document, path: path.write_text("key: [unclosed\n"), (), True),
    "wrong-type": (lambda document, path: path.write_text(document.wrong_type), (), True),
    # a symlink to a file that was removed: the path is there, the file is gone
    "vanished": (lambda document, path: path.symlink_to(path.parent / "gone"), (), False),
}  # fmt: skip


@pytest.mark.parametrize("fault", list(START_FAULTS))
@pytest.mark.parametrize("document", EVERY_DOCUMENT)
def test_refused_at_start(document: Document, fault: str, short_dir: Path) -> None:
    place, words, parsed = START_FAULTS[fault]
    placed = place(document, short_dir / document.file_name)
    if not isinstance(placed, contextlib.AbstractContextManager):
        placed = contextlib.nullcontext()
    with placed:
        flag = () if parsed else (document.flag,)
        assert_refused(document.run(short_dir), *flag, document.file_name, *words)


@pytest.mark.parametrize("document", EVERY_DOCUMENT)
def test_empty(document: Document, short_dir: Path) -> None:
    (short_dir / document.file_name).write_text("")
    result = document.run(short_dir)
    if document.empty_is_valid:  # an empty config file is version v1 with every default
        assert result.returncode == 0, result.stderr
        assert "nvidia.com/gpu.count=8" in result.stdout
    else:
        assert_refused(result, document.file_name)


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("document", EVERY_DOCUMENT)
def test_special_file(document: Document, kind: str, short_dir: Path) -> None:
    SPECIAL[kind](short_dir / document.file_name)
    assert_refused(document.run(short_dir), document.flag, document.file_name, "not a regular file")


@pytest.mark.parametrize("document", EVERY_DOCUMENT)
def test_permission_denied(document: Document, short_dir: Path) -> None:
    """Root reads any file whatever its mode; a path through a file is refused by the
    kernel for root too (ENOTDIR), which is how these tests (run as root) deny access."""
    (short_dir / "plain").write_text("")
    assert_refused(document.run(short_dir / "plain"), document.flag)


FULL_CONFIG: dict[str, Any] = {
    "version": "v1",
    "flags": {"migStrategy": "mixed", "failOnInitError": True, "useNodeFeatureAPI": False,
              "gfd": {"oneshot": True, "sleepInterval": "60s", "machineTypeFile": "/x"}},
    "resources": {"gpus": [{"pattern": "*A100*", "name": "a100"}],
                  "mig": [{"pattern": "1g.*", "name": "mig-small"}]},
    "sharing": {"timeSlicing": {"renameByDefault": False, "resources": [
        {"name": "nvidia.com/gpu", "replicas": 4, "rename": "shared"}]}},
    "partitions": {2: [{"minors": [0, 1], "ringBusBandwidth": "300G", "allocationScore": 1}]},
}  # fmt: skip


def _one_gpu_snapshot() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(Path(DGX).read_text())
    document["gpus"] = document["gpus"][:1]
    return document


def _leaves(document: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from _leaves(value, (*path, index))
    else:
        yield path


def _with(document: Any, path: tuple[Any, ...], value: Any, *, as_key: bool) -> Any:
    changed = copy.deepcopy(document)
    parent = changed
    for part in path[:-1]:
        parent = parent[part]
    if as_key:
        if isinstance(parent, dict):
            parent[value] = parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return changed


FIELD_DOCUMENTS = {
    "config file": (FULL_CONFIG, "--config-file", ["--snapshot-file", DGX]),
    "snapshot file": (_one_gpu_snapshot(), "--snapshot-file", []),
}


@pytest.mark.parametrize("name", sorted(FIELD_DOCUMENTS))
def test_huge_value_in_every_field(name: str, short_dir: Path) -> None:
    """Every value and every key of a document, in turn, 100,000 characters long: taken
    or refused, every line short (an excerpt with the length, never the whole value).
    In-process: the same ``main``, one run per field."""
    document, flag, extra = FIELD_DOCUMENTS[name]
    huge = "v" * 100_000
    path = short_dir / "document.yaml"
    for where in _leaves(document):
        for as_key in (False, True):
            path.write_text(yaml.safe_dump(_with(document, where, huge, as_key=as_key)))
            result = run_gfd_here("--oneshot", *extra, flag, str(path))
            assert "Traceback" not in result.stderr, where
            for line in result.stderr.splitlines():
                assert len(line) <= LONGEST_LINE, (where, as_key, line[:300])
            if result.returncode == 2:
                assert_refused(result)


@pytest.mark.parametrize("where", ["top level", "flags.gfd"])
def test_huge_count_of_unknown_keys_is_one_bounded_report(where: str, short_dir: Path) -> None:
    """100,000 unknown keys are one mistake: a screenful of warnings (the first ones, then a
    count of the rest), not 100,000 log lines at every start and reload."""
    keys = "".join(f"k{i}: 1\n" for i in range(100_000))
    if where == "flags.gfd":
        keys = "flags:\n  gfd:\n" + "".join(f"    k{i}: 1\n" for i in range(100_000))
    path = short_dir / "cfg.yaml"
    path.write_text("version: v1\n" + keys)
    result = run_gfd_here("--oneshot", "--snapshot-file", DGX, "--config-file", str(path))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 25, len(lines)
    assert "99980 more" in lines[-1], lines[-1]


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("key", ["certificate-authority", "client-certificate", "client-key"])
def test_special_file_named_by_the_kubeconfig(key: str, kind: str, short_dir: Path) -> None:
    """A file the kubeconfig names (CA, client certificate or key) that is a FIFO, a
    device, a directory or a socket: one line, exit 2, never waited on or read."""
    SPECIAL[kind](short_dir / "named")
    field = {"cluster" if key == "certificate-authority" else "user": f"{key}: {short_dir}/named"}
    (short_dir / "kube.cfg").write_text(_kubeconfig_text(**field, url="https://127.0.0.1:9"))
    assert_refused(DOCUMENTS[2].run(short_dir), "kube.cfg")


@pytest.mark.parametrize("kind", [*sorted(SPECIAL), "missing"])
def test_special_in_cluster_token(
    kind: str, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service-account token and CA of the in-cluster config (the kubelet's files):
    a token that is not a regular file is a one-line usage error, never waited on."""
    from kubernetes.config import incluster_config

    from gfd.errors import UsageError
    from gfd.kube.client import KubeClient

    token = short_dir / "token"
    if kind != "missing":
        SPECIAL[kind](token)
    (short_dir / "ca.crt").write_text("")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(short_dir / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "9")
    with pytest.raises(UsageError) as refused:
        KubeClient(None, budget=1.0)
    message = str(refused.value)
    assert "\n" not in message and len(message) <= LONGEST_LINE, message
    assert "in-cluster config" in message


# =============================================================== flags and environment


@pytest.mark.parametrize("where", ["command line", "environment"])
def test_huge_and_malformed_values_of_every_option(where: str, short_dir: Path) -> None:
    """Every option, by flag and by each environment variable: a 1 MB value, and one with a
    newline and an escape, taken or refused in one short line that never echoes them raw
    (the values are paths under a temporary directory: a file an option writes lands there)."""
    values = [HUGE_VALUE, f"{short_dir}/bad\nline\x1b[31m"]
    for option in OPTIONS:
        sources = [option.flag] if where == "command line" else list(option.envs)
        for source in sources:
            if source is None:
                continue
            for value in values:
                if where == "command line":
                    result = run_gfd_here("--oneshot", "--snapshot-file", DGX, f"{source}={value}")
                else:
                    result = run_gfd_here("--oneshot", "--snapshot-file", DGX, env={source: value})
                for line in result.stderr.splitlines():
                    assert len(line) <= LONGEST_LINE, (source, line[:300])
                    assert "\x1b" not in line, (source, line)
                assert "Traceback" not in result.stderr, source
                if result.returncode == 2:
                    assert_refused(result)


# =============================================================== the API server


API_FAULTS: dict[str, Callable[[], Fault]] = {
    "missing": lambda: Fault(status=404, count=None),
    "slow": lambda: Fault(trickle=0.2, count=None),
    "hung": lambda: Fault(hang=True, count=None),
    "huge": lambda: Fault(huge=8 * 1024 * 1024, count=None),
    "malformed": lambda: Fault(status=200, body=b"<html>" + b"x" * 100_000, count=None),
    "wrong-type": lambda: Fault(status=200, body=b'{"metadata": [1, 2]}', count=None),
    "closed": lambda: Fault(drop=True, count=None),
}


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with an empty object and remembers its headers."""

    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append(dict(self.headers))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_PATCH = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_never_followed_with_the_credential(status: int, short_dir: Path) -> None:
    """An API server (or whoever answers in its place) that redirects elsewhere: the
    request fails with one line; the token is never sent to the other address."""
    seen: list[dict[str, str]] = []
    elsewhere = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Elsewhere", (_Recorder,), {"seen": seen})
    )
    target = f"http://127.0.0.1:{elsewhere.server_port}"

    class Redirect(_Recorder):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Location", target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_PATCH = do_GET

    redirecting = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    servers = [elsewhere, redirecting]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{redirecting.server_port}"
        (short_dir / "kube.cfg").write_text(
            _kubeconfig_text(user="token: secret-token-value", url=url)
        )
        result = run_start(
            "--oneshot", "--use-node-labels", "--node-name", "n1", "--snapshot-file", DGX,
            "--kubeconfig", str(short_dir / "kube.cfg"),
        )  # fmt: skip
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and str(status) in lines[0], result.stderr
    assert "secret-token-value" not in result.stderr
    assert seen == []  # nothing, and no credential, went to the other address


# =============================================================== runtime channels of a daemon


# =============================================================== the watch stream


def _flood() -> bytes:
    event = {"type": "MODIFIED", "object": {"metadata": {"name": "n1", "resourceVersion": "7"}}}
    return (json.dumps(event) + "\n").encode() * 1000


#: what the server may send on a watch of gfd's Node instead of events of it
WATCH_FAULTS: dict[str, Callable[[], Fault]] = {
    "huge": lambda: Fault(huge=8 * 1024 * 1024, watch=True, count=None),
    "malformed": lambda: Fault(status=200, body=b"<html>\n" * 100, watch=True, count=None),
    "wrong-type": lambda: Fault(
        status=200, body=b'{"type": "ADDED", "object": [1]}\n', watch=True, count=None
    ),
    "flood": lambda: Fault(status=200, body=_flood(), watch=True, count=None),
    # lines with nothing on them: no event, but as much work to read as one
    "blank-lines": lambda: Fault(status=200, body=b" \r\n" * 65536, watch=True, count=None),
    "closed": lambda: Fault(drop=True, watch=True, count=None),
    "missing": lambda: Fault(status=404, watch=True, count=None),
    # the credential echoed where a cut to an excerpt would keep its start, beside control
    # characters that would forge a log line: in an ERROR event, its type, the status line
    "echoing-error": lambda: Fault(status=200, body=_echoing("ERROR"), watch=True, count=None),
    "echoing-type": lambda: Fault(
        status=200, body=_echoing("x" * 14 + KUBECONFIG_TOKEN), watch=True, count=None
    ),
    "echoing-status": lambda: Fault(
        status=503, reason="x" * 54 + KUBECONFIG_TOKEN, watch=True, count=None
    ),
}


def _echoing(kind: str) -> bytes:
    message = "\x1b[31m\nforged line\n" + "." * 75 + KUBECONFIG_TOKEN
    status = {"code": 500, "message": message, "metadata": {"name": "n1", "resourceVersion": "9"}}
    return (json.dumps({"type": kind, "object": status}) + "\n").encode()


@pytest.mark.parametrize("fault", sorted(WATCH_FAULTS))
def test_the_watch_stream_under_faults(fault: str, short_dir: Path, api: FakeApiServer) -> None:
    """A watch stream that is not a stream of this object's events: the stream ends, one
    warning line (not one per attempt), the labels stay and the daemon labels on; once the
    server behaves, the watch is back and a removed label is repaired at once; SIGTERM
    ends it with 0."""
    with _api_daemon(short_dir, api) as daemon:
        daemon.wait_for("pass finished", limit=60)
        daemon.wait_until(lambda: api.open_watches == 1, "the watch")
        labels = api.node_labels("n1")
        api.inject(WATCH_FAULTS[fault]())
        with api.down():  # ends the stream in progress: the next ones meet the fault
            daemon.wait_until(lambda: api.open_watches == 0, "the stream to end")
        interrupted = daemon.wait_for("watch of Node n1 interrupted; reconnecting", limit=60)
        error = str(interrupted[0].get("error", ""))
        assert len(error) <= LONGEST_LINE and error.isprintable(), error
        daemon.wait_until(lambda: api.watch_requests() >= 3, "attempts against the fault")
        api.clear_faults()
        daemon.wait_until(lambda: api.open_watches == 1, "the watch back", limit=90)
        assert api.node_labels("n1") == labels
        api.edit("Node", "n1", "", lambda node: node["metadata"]["labels"].clear())
        daemon.wait_until(lambda: api.node_labels("n1") == labels, "the repair")
        assert daemon.stop(signal.SIGTERM) == 0
    assert daemon.log().count("interrupted; reconnecting") == 1
    assert "Traceback" not in daemon.log()
    assert KUBECONFIG_TOKEN[:6] not in daemon.log()  # not even the start of the credential


@pytest.mark.parametrize("fault", ["hung", "stalled"])
def test_a_watch_that_never_answers_or_stalls_ends_by_its_deadline(
    fault: str, api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No headers at all, or headers and then silence: the request's total deadline
    (timeoutSeconds and a grace) ends it and the watch reconnects (in-process, with the
    watch's seconds shortened: at their real length the test would wait half an hour)."""
    from gfd.kube import watch

    monkeypatch.setattr(watch, "WATCH_SECONDS", 1)
    monkeypatch.setattr(watch, "STALL_GRACE_SECONDS", 0.5)
    api.add_node("n1")
    if fault == "hung":
        api.inject(Fault(hang=True, watch=True, count=None))
    else:
        api.stall_watches()
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kube.cfg"))
    client = watch.watch_client(kubeconfig, -1, 0)
    followed = watch.ObjectWatch(client, "/api/v1/nodes", "n1", "Node n1")
    followed.follow(lambda obj: None, lambda: None)
    followed.start()
    try:
        deadline = time.monotonic() + 60
        while api.watch_requests() < 2:  # the first ended by its deadline, then another
            assert time.monotonic() < deadline, "the stalled stream was never ended"
            time.sleep(0.05)
        assert not followed.refused
    finally:
        followed.stop()
        api.clear_faults()
        api.stall_watches(False)
        followed.join(10)  # a hung request ends by its (shortened) deadline: no thread outlives


@dataclass
class Runtime:
    """A daemon whose channel a fault is placed on after it published once: ``place``
    returns what removes the fault; ``failed`` is the event the failed pass (or reload)
    logs, ``names`` what its error must name."""

    name: str
    classes: tuple[str, ...]
    start: Callable[[Path, FakeApiServer], Daemon]
    place: Callable[[str, Path, Daemon, FakeApiServer], Callable[[], None]]
    failed: str = "pass failed"
    names: tuple[str, ...] = ()
    #: SIGHUP after placing the fault: a reload (the config) or a new run whose labels
    #: differ (the API outputs publish only on a change)
    needs_sighup: bool = False
    #: SIGHUP again once the fault is gone, and see the reload succeed
    reload_after: bool = False


def _daemon(*args: str) -> Daemon:
    return Daemon("--sleep-interval", INTERVAL, *args)


def _file_daemon(directory: Path, api: FakeApiServer) -> Daemon:
    snapshot = directory / "snap.yaml"
    snapshot.write_text(Path(DGX).read_text())
    return _daemon("--output-file", str(directory / "gfd"), "--snapshot-file", str(snapshot))


def _remove(path: Path, missing_ok: bool = True) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=missing_ok)


def _restore_snapshot(directory: Path) -> Callable[[], None]:
    def restore() -> None:
        path = directory / "snap.yaml"
        staging = directory / ".restore"
        staging.write_text(Path(DGX).read_text())
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(staging, path)

    return restore


def _place_snapshot(fault: str, directory: Path, daemon: Daemon, api: FakeApiServer) -> Any:
    path = directory / "snap.yaml"
    texts = {
        "empty": "", "huge": Path(DGX).read_text() + "# " + "x" * MAX_DOCUMENT_BYTES + "\n",
        "malformed": "gpus: [unclosed\n", "wrong-type": "- a list\n",
    }  # fmt: skip
    if fault == "directory":
        staging = directory / ".dir"
        staging.mkdir()
        path.unlink()
        staging.rename(path)
    elif fault in SPECIAL:
        swap(path, SPECIAL[fault])
    elif fault == "missing":
        path.unlink()
    elif fault == "vanished":
        swap(path, lambda p: p.symlink_to(directory / "gone"))
    elif fault == "hung":  # a FIFO with a writer that never writes
        path.unlink()
        holder = contextlib.ExitStack()
        holder.enter_context(fifo_held_open(path))

        def release() -> None:
            holder.close()
            path.unlink()
            _restore_snapshot(directory)()

        return release
    else:
        path.write_text(texts[fault])
    return _restore_snapshot(directory)


def _place_features_file(fault: str, directory: Path, daemon: Daemon, api: FakeApiServer) -> Any:
    path = directory / "gfd"
    if fault == "directory":
        replace_with_directory(path)
    elif fault in SPECIAL:
        swap(path, SPECIAL[fault])
    else:  # full
        path.unlink()  # the next pass writes it again, past the limit below
        resource.prlimit(daemon.process.pid, resource.RLIMIT_FSIZE, (16, resource.RLIM_INFINITY))

        def lift() -> None:
            assert list(directory.glob(".gfd-*")) == []  # the failed write left no temp file
            limit = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
            resource.prlimit(daemon.process.pid, resource.RLIMIT_FSIZE, limit)

        return lift
    return lambda: _remove(path)


def _koordlet_daemon(directory: Path, api: FakeApiServer) -> Daemon:
    (directory / "koord").mkdir()
    return _daemon(
        "--output-file", str(directory / "gfd"), "--snapshot-file", DGX,
        "--koordlet-device-infos-dir", str(directory / "koord"),
    )  # fmt: skip


def _place_koordlet(fault: str, directory: Path, daemon: Daemon, api: FakeApiServer) -> Any:
    path = directory / "koord" / "gfd-nvidia-gpus.json"
    if fault == "symlink":
        victim = directory / "victim"
        victim.write_text("not gfd's\n")
        swap(path, lambda p: p.symlink_to(victim))
    elif fault == "directory":
        replace_with_directory(path)
    elif fault == "missing":  # the directory koordlet reads, gone
        shutil.rmtree(directory / "koord")
        return (directory / "koord").mkdir
    else:
        swap(path, SPECIAL[fault])

    def restore() -> None:
        _remove(path, missing_ok=False)
        if fault == "symlink":
            assert (directory / "victim").read_text() == "not gfd's\n"  # never written through

    return restore


def _config_daemon(directory: Path, api: FakeApiServer) -> Daemon:
    (directory / "cfg.yaml").write_text("version: v1\n")
    return _daemon(
        "--output-file", str(directory / "gfd"), "--snapshot-file", DGX,
        "--config-file", str(directory / "cfg.yaml"),
    )  # fmt: skip


def _place_config(fault: str, directory: Path, daemon: Daemon, api: FakeApiServer) -> Any:
    path = directory / "cfg.yaml"
    texts = {
        "huge": "version: v1\n# " + "x" * MAX_DOCUMENT_BYTES + "\n",
        "malformed": "flags: [unclosed\n", "wrong-type": "flags: 7\n",
    }  # fmt: skip
    if fault == "directory":
        path.unlink()
        path.mkdir()
    elif fault in SPECIAL:
        swap(path, SPECIAL[fault])
    elif fault == "missing":
        path.unlink()
    else:
        path.write_text(texts[fault])

    def restore() -> None:
        _remove(path)
        path.write_text("version: v1\n")

    return restore


def _api_daemon(directory: Path, api: FakeApiServer, output: str = "--use-node-labels") -> Daemon:
    if output == "--use-node-labels":
        api.add_node("n1")
    kubeconfig = api.write_kubeconfig(directory / "kube.cfg")
    return Daemon(
        "--sleep-interval", "1s", output, "--node-name", "n1",
        "--kubeconfig", str(kubeconfig), "--snapshot-file", DGX,
    )  # fmt: skip


def _place_api(fault: str, directory: Path, daemon: Daemon, api: FakeApiServer) -> Any:
    if fault == "missing":
        api.delete("Node", "n1")
        return lambda: api.add_node("n1")
    api.inject(API_FAULTS[fault]())
    return api.clear_faults


def _place_nodefeature(fault: str, directory: Path, daemon: Daemon, api: FakeApiServer) -> Any:
    if fault == "missing":  # the server itself: connections refused
        api.go_down()
        return api.come_up
    api.inject(API_FAULTS[fault]())
    return api.clear_faults


def _place_limits(fault: str, directory: Path, daemon: Daemon, api: FakeApiServer) -> Any:
    """Out of file descriptors: every open fails with EMFILE until the limit is raised."""
    (directory / "gfd").unlink()  # the next pass must open files to write it
    pid = daemon.process.pid
    before = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, before[1]))
    return lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, before)


RUNTIME = [
    Runtime(
        "snapshot file (re-read every pass)",
        ("missing", "empty", "huge", "hung", "malformed", "wrong-type", "vanished", *SPECIAL),
        _file_daemon, _place_snapshot, names=("snap.yaml",),
    ),
    Runtime(
        "features file", ("full", *SPECIAL), _file_daemon, _place_features_file, names=("gfd",)
    ),
    Runtime(
        "koordlet device-info file", ("missing", "symlink", *SPECIAL),
        _koordlet_daemon, _place_koordlet, names=("gfd-nvidia-gpus.json",),
    ),
    Runtime(
        "config file (SIGHUP)", ("missing", "huge", "malformed", "wrong-type", *SPECIAL),
        _config_daemon, _place_config, failed="reload failed; keeping the settings in force",
        names=("cfg.yaml",), needs_sighup=True, reload_after=True,
    ),
    Runtime(
        "API server", tuple(API_FAULTS), _api_daemon, _place_api,
        names=("n1",), needs_sighup=True,
    ),
    Runtime(
        "API server (NodeFeature)", tuple(API_FAULTS),
        lambda directory, api: _api_daemon(directory, api, "--use-node-feature-api"),
        _place_nodefeature, names=("n1",), needs_sighup=True,
    ),
    Runtime("process limits (file descriptors)", ("full",), _file_daemon, _place_limits),
]  # fmt: skip


def assert_runtime_contract(
    channel: Runtime, fault: str, directory: Path, api: FakeApiServer
) -> None:
    """The fault fails a pass with one log line naming the source; the daemon lives;
    once the fault is gone the next pass succeeds; SIGTERM ends it with status 0."""
    with channel.start(directory, api) as daemon:
        daemon.wait_for("pass finished", limit=60)
        remove = channel.place(fault, directory, daemon, api)
        if channel.needs_sighup:
            daemon.process.send_signal(signal.SIGHUP)
        failure = daemon.wait_for(channel.failed, limit=60)[0]
        error = str(failure.get("error", ""))
        assert error and len(error) <= LONGEST_LINE, error[:500]
        for name in channel.names:
            assert name in error, error
        assert daemon.process.poll() is None
        remove()
        if channel.reload_after:
            daemon.process.send_signal(signal.SIGHUP)
            daemon.wait_for("settings reloaded", limit=60)
        daemon.wait_for("pass finished", limit=60)
        assert daemon.stop(signal.SIGTERM) == 0
        assert "Traceback" not in daemon.log()


@pytest.mark.parametrize(
    ("channel", "fault"),
    [pytest.param(r, fault, id=f"{r.name}-{fault}") for r in RUNTIME for fault in r.classes],
)
def test_fault_at_runtime(
    channel: Runtime, fault: str, short_dir: Path, api: FakeApiServer
) -> None:
    """Every channel a daemon reads or writes while it runs, crossed with each fault class
    it declares (the special files among them swapped in for the file)."""
    assert_runtime_contract(channel, fault, short_dir, api)


def test_features_file_swapped_for_a_symlink_is_replaced_not_written_through(
    short_dir: Path,
) -> None:
    """A symlink planted at the features file's path: the next write replaces the link
    (an atomic rename over it), never the file it points to."""
    victim = short_dir / "victim"
    victim.write_text("not gfd's\n")
    with _file_daemon(short_dir, None) as daemon:  # type: ignore[arg-type]
        daemon.wait_for("pass finished", limit=60)
        swap(short_dir / "gfd", lambda p: p.symlink_to(victim))
        daemon.wait_until(lambda: not (short_dir / "gfd").is_symlink(), "the link replaced")
        assert victim.read_text() == "not gfd's\n"
        assert "nvidia.com/gpu.count=8" in (short_dir / "gfd").read_text()
        assert daemon.stop(signal.SIGTERM) == 0


# =============================================================== stdin and stdout


def _oneshot_with_stdio(stdin: Any, stdout: Any) -> subprocess.CompletedProcess[str]:
    return run_gfd("--oneshot", "--snapshot-file", DGX, stdin=stdin, stdout=stdout, timeout=120)


def test_hung_stdin_is_never_read(tmp_path: Path) -> None:
    """gfd never reads stdin: a pipe nobody writes or closes does not hold it."""
    read_end, write_end = os.pipe()
    try:
        result = _oneshot_with_stdio(read_end, subprocess.PIPE)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=8" in result.stdout


def test_hung_stdout_never_holds_the_daemon() -> None:
    """A daemon publishing to stdout (``-o -``) into a pipe nobody reads: its writes stall,
    but a stall never holds the loop or a stop signal (SIGTERM still ends it, status 0)."""
    import fcntl

    with _daemon("--output-file", "-", "--snapshot-file", DGX) as daemon:
        daemon.wait_for("pass finished", limit=60)
        # the smallest pipe the kernel allows, one page: four label sets of ~900 bytes
        # fill it (the first is in it already)
        fcntl.fcntl(daemon.process.stdout.fileno(), 1031, 4096)  # F_SETPIPE_SZ
        for _ in range(4):  # each reload is a new run: a new timestamp, a new label set
            daemon.process.send_signal(signal.SIGHUP)
            daemon.wait_for("settings reloaded", limit=60)
        # the last reload's pass finds the pipe full
        assert daemon.stop(signal.SIGTERM) == 0
        assert "Traceback" not in daemon.log()
        assert "not honoured" not in daemon.log()  # an orderly exit, not the watchdog's


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_full_stdout() -> None:
    with open("/dev/full", "w") as full:
        result = _oneshot_with_stdio(subprocess.DEVNULL, full)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "stdout" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


# =============================================================== host files read by discovery


@dataclass
class HostFile:
    """A file discovery reads on the host: ``read(root)`` reads the fact as discovery does;
    ``outcomes``, what each fault gives where that is not None (unknown)."""

    name: str
    relative: str
    read: Callable[[Path], Any]
    outcomes: dict[str, Any]


BUS = "0000:07:00.0"
NO_VGPU = Vgpu(devices=())


def _scan(root: Path) -> Any:
    return sysfs.scan_vgpu(str(root))


DEVICE = f"bus/pci/devices/{BUS}"
HOST_FILES = [
    HostFile("sysfs PCI class", f"{DEVICE}/class",
             lambda root: sysfs.read_pci_class(str(root), BUS), {}),
    # gone: the device left between listing and reading; empty: not NVIDIA's
    HostFile("sysfs PCI vendor (vGPU scan)", f"{DEVICE}/vendor", _scan,
             {"missing": NO_VGPU, "vanished": NO_VGPU, "empty": NO_VGPU}),
    # huge: the first 256 bytes are read, and hold no capability
    HostFile("sysfs PCI config space (vGPU scan)", f"{DEVICE}/config", _scan,
             {"missing": NO_VGPU, "vanished": NO_VGPU, "huge": NO_VGPU}),
    HostFile("sysfs attribute (GPUs on the bus, NUMA node)", f"{DEVICE}/numa_node",
             lambda root: sysfs.read_attribute(str(root / DEVICE / "numa_node")), {"empty": ""}),
    # read as upstream reads it: an empty file is an empty machine type
    HostFile("machine-type file", "product_name",
             lambda root: sysfs.read_machine_type(str(root / "product_name")),
             {"empty": "", "malformed": "\ufffd\ufffd\x00garbage"}),
]  # fmt: skip


def _host_tree(root: Path) -> None:
    device = root / DEVICE
    device.mkdir(parents=True)
    (device / "vendor").write_bytes(b"0x10de\n")
    (device / "class").write_bytes(b"0x030200\n")
    (device / "config").write_bytes(bytes(256))
    (device / "numa_node").write_bytes(b"0\n")
    (root / "product_name").write_bytes(b"DGXA100\n")


def _special(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def place(path: Path) -> None:
        path.unlink()
        make(path)

    return place


HOST_FAULTS: dict[str, Callable[[Path], object]] = {
    **{kind: _special(make) for kind, make in SPECIAL.items()},
    "huge": lambda path: path.write_bytes(b"1" * 10_000_000),
    "empty": lambda path: path.write_bytes(b""),
    "malformed": lambda path: path.write_bytes(b"\xff\xfe\x00garbage"),
    "missing": lambda path: path.unlink(),
    "vanished": lambda path: swap(path, lambda p: p.symlink_to(path.with_name("gone"))),
}


@pytest.mark.parametrize("fault", [*sorted(HOST_FAULTS), "hung"])
@pytest.mark.parametrize("host_file", [pytest.param(h, id=h.name) for h in HOST_FILES])
def test_host_files_never_block_or_flood_discovery(
    host_file: HostFile, fault: str, tmp_path: Path
) -> None:
    """Whatever sits at a host path, discovery reads it without waiting and without
    reading past its bound, and answers "unknown" where it cannot read a fact; it never
    raises.  (A read that blocked would hang: the test timeout fails it.)"""
    sysfs._warned.clear()
    _host_tree(tmp_path)
    path = tmp_path / host_file.relative
    if fault == "hung":
        path.unlink()
        with fifo_held_open(path):
            value = host_file.read(tmp_path)
    else:
        HOST_FAULTS[fault](path)
        value = host_file.read(tmp_path)
    assert value == host_file.outcomes.get(fault), value


# =============================================================== the metrics listener


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Daemon]:
    args = ("--sleep-interval", INTERVAL, "--output-file", str(tmp_path / "gfd"),
            "--snapshot-file", DGX)  # fmt: skip
    with Daemon(*args, metrics=True) as daemon:
        daemon.wait_until(lambda: daemon.get("/readyz")[0] == 200, "ready")
        yield daemon


def _connect(daemon: Daemon) -> socket.socket:
    assert daemon.port is not None
    return socket.create_connection(("127.0.0.1", daemon.port), timeout=10)


LISTENER_FAULTS: dict[str, Callable[[Daemon], list[socket.socket]]] = {
    # many connections that never send anything
    "hung": lambda daemon: [_connect(daemon) for _ in range(64)],
    # connections that send a request a byte at a time (each left half-sent)
    "slow": lambda daemon: [_sent(_connect(daemon), b"GET /metr") for _ in range(64)],
    # a request line of a megabyte
    "huge": lambda daemon: [_sent(_connect(daemon), b"GET /" + b"x" * 1_000_000 + b"\r\n")],
    # bytes that are not HTTP
    "malformed": lambda daemon: [_sent(_connect(daemon), b"\x16\x03\x01\x00\xff" * 100)],
    # connections reset by their peer at once
    "closed": lambda daemon: [_reset(_connect(daemon)) for _ in range(64)],
    # requests the listener refuses: a method it does not serve, a version that is not
    # HTTP's, words past the version
    "refused": lambda daemon: [
        _sent(_connect(daemon), request)
        for request in (
            b"ECHO<b>\x1b[31m" * 1000 + b" /metrics HTTP/1.0\r\n\r\n",
            b"GET /metrics ECHO/1.0\r\n\r\n",
            b"GET /ECHO HTTP/1.0 ECHO ECHO\r\n\r\n",
        )
    ],
}


def _sent(connection: socket.socket, data: bytes) -> socket.socket:
    with contextlib.suppress(OSError):
        connection.sendall(data)
    return connection


def _reset(connection: socket.socket) -> socket.socket:
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    connection.close()
    return connection


@pytest.mark.parametrize("fault", sorted(LISTENER_FAULTS))
def test_the_metrics_listener_under_hostile_clients(served: Daemon, fault: str) -> None:
    """Anyone who can reach the port: labelling goes on (passes keep finishing), nothing
    of a request comes back in an answer, the listener answers again once the hostile
    connections are cut or time out, and SIGTERM still ends the process with status 0."""
    connections = LISTENER_FAULTS[fault](served)
    answers = b""
    try:
        served.wait_for("pass finished", count=3, limit=120)  # labelling goes on
    finally:
        for connection in connections:
            with contextlib.suppress(OSError):  # what was answered by now, if anything
                connection.setblocking(False)
                answers += connection.recv(1 << 20)
            connection.close()
    assert b"ECHO" not in answers  # nothing of a request is sent back
    if fault == "refused":
        assert b"501 Not Implemented" in answers and b"400 Bad Request" in answers
    served.wait_until(lambda: served.get("/healthz")[0] == 200, "the listener to answer")
    assert served.get("/healthz")[0] == 200
    assert served.stop(signal.SIGTERM) == 0
    assert "Traceback" not in served.log()


# =============================================================== kubeconfig by client-go's rules
# The kubeconfig channel crossed with what client-go refuses or reads differently, the
# KUBECONFIG list as a channel of its own (environment), and the in-cluster address
# variables: each a start-up input, so the start-up contract holds (assert_refused).


def _kubeconfig_start(env: dict[str, str] | None = None, *args: str) -> Any:
    return run_start("--cleanup", "--use-node-labels", "--node-name", "n1", *args, env=env)


@pytest.mark.parametrize("fault", ["loop", "all-missing", "wrong-kind", "fifo-second"])
def test_kubeconfig_list_fault(fault: str, short_dir: Path) -> None:
    """A KUBECONFIG list read by client-go's loader.go rules: a looping link or a file
    that is not a kubeconfig is refused naming the variable, a FIFO later in the list is
    never waited on, a list of which nothing exists is one line."""
    good = short_dir / "kube.cfg"
    good.write_text(_kubeconfig_text())
    listed = [str(good)]
    if fault == "loop":
        (short_dir / "loop").symlink_to(short_dir / "loop")
        listed.append(str(short_dir / "loop"))
    elif fault == "all-missing":
        listed = [str(short_dir / "a"), str(short_dir / "b")]
    elif fault == "wrong-kind":
        (short_dir / "cfg.yaml").write_text("version: v1\nflags:\n  migStrategy: none\n")
        listed = [str(short_dir / "cfg.yaml")]
    else:
        SPECIAL["fifo"](short_dir / "fifo")
        listed.append(str(short_dir / "fifo"))
    result = _kubeconfig_start({"KUBECONFIG": os.pathsep.join(listed)})
    line = assert_refused(result, "KUBECONFIG")
    assert "--kubeconfig" not in line


@pytest.mark.parametrize(
    ("cluster", "user"),
    table([("insecure-with-ca",
            "insecure-skip-tls-verify: true, certificate-authority-data: eA==", ""),
           ("two-methods", "", "token: t, username: u, password: p"),
           ("cert-without-key", "", "client-certificate-data: eA==")]),
)  # fmt: skip
def test_kubeconfig_client_go_refuses(cluster: str, user: str, short_dir: Path) -> None:
    """What client-go's ConfirmUsable or its TLS rule refuses: one line, exit 2."""
    url = "https://127.0.0.1:9" if cluster else "http://127.0.0.1:9"
    (short_dir / "kube.cfg").write_text(_kubeconfig_text(cluster, user, url))
    assert_refused(DOCUMENTS[2].run(short_dir), "kube.cfg")


@pytest.mark.parametrize(
    ("host", "port", "variable"),
    table([("port", "127.0.0.1", "https", "KUBERNETES_SERVICE_PORT"),
           ("host", "a host", "443", "KUBERNETES_SERVICE_HOST")]),
)  # fmt: skip
def test_in_cluster_address_fault(host: str, port: str, variable: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    assert_refused(_kubeconfig_start(env), variable)


# ==================================================== driver libraries (loaded files)
#
# What gfd hands to the dynamic loader under --driver-root-ctr-path is a channel like
# every file it reads: each special file, an over-size one and a dangling link in place
# of each library gives one line and the minimal label set (--no-fail-on-init-error),
# in a oneshot and in a daemon, never a loader blocked on a FIFO.

DRIVER_LIBRARIES = {"libnvidia-ml.so.1": "nvml", "libcuda.so.1": "tegra"}


def _oversize(path: Path) -> None:
    path.touch()
    os.truncate(path, LIBRARY_MAX_BYTES + 1)  # sparse: no disk used


LIBRARY_FAULTS: dict[str, Callable[[Path], object]] = {
    "fifo": SPECIAL["fifo"],
    "dev-zero": SPECIAL["dev-zero"],
    "directory": SPECIAL["directory"],
    "over-size": _oversize,
    "dangling-link": lambda path: path.symlink_to(path.parent / "gone" / path.name),
    "symlink-loop": lambda path: path.symlink_to(path.name),  # itself: following never ends
}


def _driver_root_with(fault: str, library: str, directory: Path) -> Path:
    root = directory / "driver-root"
    (root / "usr" / "lib64").mkdir(parents=True)
    LIBRARY_FAULTS[fault](root / "usr" / "lib64" / library)
    return root


needs_no_driver = pytest.mark.skipif(
    any(ctypes.util.find_library(name) for name in ("nvidia-ml", "cuda")),
    reason="a driver library is found by name here",
)


@needs_no_driver
@pytest.mark.timeout(60)
@pytest.mark.parametrize("library", sorted(DRIVER_LIBRARIES))
@pytest.mark.parametrize("fault", sorted(LIBRARY_FAULTS))
def test_driver_library_fault_in_a_oneshot(fault: str, library: str, short_dir: Path) -> None:
    root = _driver_root_with(fault, library, short_dir)
    strategy = DRIVER_LIBRARIES[library]
    args = ["--oneshot", "--no-timestamp", "--machine-type-file", "", "-o", "-"]
    args += ["--device-discovery-strategy", strategy, "--driver-root-ctr-path", str(root)]
    refused = run_gfd(*args, timeout=30)
    line = assert_refused(refused, library.split(".")[0], status=1)
    assert "is not loaded" in line or "could not be loaded" in line
    tolerant = run_gfd(*args, "--no-fail-on-init-error", "--log-format", "json", timeout=30)
    assert tolerant.returncode == 0, tolerant.stderr[-2000:]
    assert tolerant.stdout == "nvidia.com/vgpu.present=false\n"
    assert "Traceback" not in tolerant.stderr
    assert len(tolerant.stderr.splitlines()) == 1, tolerant.stderr[-2000:]


@needs_no_driver
@pytest.mark.timeout(60)
@pytest.mark.parametrize("library", sorted(DRIVER_LIBRARIES))
@pytest.mark.parametrize("fault", ["fifo", "dev-zero", "over-size"])
def test_driver_library_fault_in_a_daemon(fault: str, library: str, short_dir: Path) -> None:
    root = _driver_root_with(fault, library, short_dir)
    features = short_dir / "features"
    daemon = _daemon(
        "--no-fail-on-init-error", "--no-timestamp", "--machine-type-file", "",
        "-o", str(features), "--device-discovery-strategy", DRIVER_LIBRARIES[library],
        "--driver-root-ctr-path", str(root),
    )  # fmt: skip
    try:
        daemon.wait_for("pass finished", count=2)
        assert features.read_text().endswith("nvidia.com/vgpu.present=false\n")
        assert library.split(".")[0] in daemon.log()
    finally:
        assert daemon.stop() == 0
    assert "Traceback" not in daemon.log()


# =============================================================== every input limit at once


def _limited(open_files: int, file_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))

    return apply


def test_every_documented_input_limit_hit_at_once_is_answered_within_10s(short_dir: Path) -> None:
    """README "Limits" and docs/SECURITY.md, all past their bound in one process: a config
    file over the size limit made of deep nesting and many keys, a snapshot over the size
    limit, strings past 4096 characters as flags and environment, a machine-type file that
    never ends, an infinite sleep interval, and the process's own open-file and file-size
    limits.  It ends by itself (the 10 s is a bound against a hang, not a speed claim)
    with one line and exit 2."""
    config = short_dir / "config.yaml"
    nested = "[" * 200 + "]" * 200
    keys = "".join(f"k{n}: {nested}\n" for n in range(MAX_DOCUMENT_BYTES // 300))
    config.write_text("version: v1\n" + keys)
    assert config.stat().st_size > MAX_DOCUMENT_BYTES
    record = short_dir / "snapshot.yaml"
    record.write_text("gpus:\n" + "- {index: 0}\n" * (MAX_DOCUMENT_BYTES // 10))
    args = [
        "--oneshot",
        "--config-file", str(config),
        "--snapshot-file", str(record),
        "--machine-type-file", "/dev/zero",
        "--node-name", "n" * 5000,
        "--sleep-interval", "1e400h",
        "--output-file", str(short_dir / "out"),
    ]  # fmt: skip
    env = {"GFD_MIG_STRATEGY": HUGE_VALUE[:100_000], "NAMESPACE": "x" * 5000}
    limits = _limited(open_files=32, file_bytes=1024)
    result = run_gfd(*args, env=env, timeout=10, preexec_fn=limits)
    assert_refused(result)
    assert not (short_dir / "out").exists()


# =============================================================== process limits of the pod
#
# As root RLIMIT_NPROC does not bind, so "no thread can start" is made the way a pids limit
# shows itself to Python: ``threading.Thread.start`` raising ``RuntimeError("can't start
# new thread")``, set in the process before gfd's entry point runs.

TWO_MODELS = str(Path(ROOT) / "examples" / "snapshots" / "two-models.yaml")
NO_THREADS = """
import sys, threading
def refuse(self, *args, **kwargs):
    raise RuntimeError("can't start new thread")
threading.Thread.start = refuse
sys.argv[0] = "gfd"
from gfd.launch import main
main()
"""


def _gfd_without_threads(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-c", NO_THREADS, *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as exc:  # a daemon: what it wrote until then
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return subprocess.CompletedProcess([], -1, out, err)


def _no_thread_oneshot(tmp_path: Path) -> None:
    result = _gfd_without_threads(
        "--oneshot", "--no-timestamp", "--snapshot-file", TWO_MODELS, "--log-level", "debug",
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=" in result.stdout
    assert "lost sys.stderr" not in result.stderr
    events = [json.loads(line)["event"] for line in result.stderr.splitlines()]
    assert "pass finished" in events
    assert sum("stderr writer thread not started" in e for e in events) == 1


def _no_thread_daemon(tmp_path: Path) -> None:
    features = tmp_path / "features"
    result = _gfd_without_threads(
        "--snapshot-file", TWO_MODELS, "--output-file", str(features), "--sleep-interval", "1s",
        "--metrics-address", "127.0.0.1:0", "--log-format", "json",
        timeout=8,
    )  # fmt: skip
    assert "lost sys.stderr" not in result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]  # one JSON object each
    events = [r["event"] for r in records]
    for degraded in ("stop watchdog", "stderr writer thread", "metrics and health endpoints"):
        assert sum(e.startswith(degraded) for e in events) == 1, events
    assert "pass finished" in events
    assert "nvidia.com/gpu.count=" in features.read_text()


@pytest.mark.parametrize(
    "check", [_no_thread_oneshot, _no_thread_daemon], ids=["oneshot", "daemon"]
)
def test_thread_cannot_start(check: Callable[[Path], None], tmp_path: Path) -> None:
    """A pids limit: labelling goes on, each thread-needing part degrades with one line,
    a oneshot never ends in "lost sys.stderr"."""
    check(tmp_path)


def _limit_address_space(mib: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))


def _oneshot_under(mib: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gfd", "--oneshot", "--snapshot-file", TWO_MODELS], cwd=ROOT,
        capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: _limit_address_space(mib),  # the interpreter starts, gfd may not
    )  # fmt: skip


def test_out_of_memory() -> None:
    """An address-space limit (RLIMIT_AS) the interpreter starts under -- met by the loader
    or the compiler importing gfd's modules, or by gfd's own code as a MemoryError at any
    point of a pass: one line saying memory ran out, exit 1, never a traceback, an abort or
    a line after it.  Where exactly each limit bites depends on the machine, so every limit
    of a sweep (1 MiB steps where it bites here) must end one of the two clean ways, and
    the sweep must meet the limit at least once and also reach a limit gfd runs under."""
    line = ["gfd: out of memory (the process's address-space limit was reached)"]
    outcomes = {}
    for mib in [*range(28, 45), 48, 56, 64]:  # 1 MiB steps where it bites, then room
        result = _oneshot_under(mib)
        if result.returncode == 0:
            assert "nvidia.com/gpu.count=" in result.stdout, (mib, result.stdout)
            outcomes[mib] = "ran"
        else:
            assert (result.returncode, result.stderr.splitlines()) == (1, line), (mib, result)
            outcomes[mib] = "out of memory"
    assert set(outcomes.values()) == {"ran", "out of memory"}, outcomes


# =============================================================== the log stream is gfd's alone
#
# What libraries say (Python's ``warnings`` -- urllib3's InsecureRequestWarning and clock
# warning, ssl's deprecations -- and ``logging`` records of urllib3 and the kubernetes
# client) comes out as gfd's own records, one JSON object per line; a record a fast loop
# repeats is written once, then counted (gfd.observability.coalesce).  Each cell is a real
# process whose real stderr is parsed line by line.

_LOGGING_SETUP = """
import logging, warnings
from gfd.observability import configure_logging, get_logger
configure_logging("json", "info")
import urllib3
from urllib3.exceptions import InsecureRequestWarning, SystemTimeWarning
warnings.simplefilter("always")
"""
LIBRARY_MESSAGES = {
    "warnings": (
        """
warnings.warn("Unverified HTTPS request is being made", InsecureRequestWarning)
warnings.warn("System time is way off (before 2024-01-01)", SystemTimeWarning)
warnings.warn("ssl.PROTOCOL_TLS is deprecated", DeprecationWarning)
""",
        [("library warning", "InsecureRequestWarning", "warning"),
         ("library warning", "SystemTimeWarning", "warning"),
         ("library warning", "DeprecationWarning", "warning")],
    ),
    "logging": (
        """
logging.getLogger("urllib3.connectionpool").warning(
    "Retrying (%s) after %s", "Retry(total=2)", "boom"
)
logging.getLogger("kubernetes.client.rest").error("response body: %r", b"{}")
logging.getLogger("urllib3").warning("bad %d format", "x")
""",
        [("library log", "urllib3.connectionpool", "warning"),
         ("library log", "kubernetes.client.rest", "error"),
         ("library log", "urllib3", "warning")],
    ),
}  # fmt: skip


def _log_records(code: str) -> list[dict[str, Any]]:
    result = subprocess.run([sys.executable, "-c", _LOGGING_SETUP + code], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON


@pytest.mark.parametrize("source", sorted(LIBRARY_MESSAGES))
def test_library_message_on_the_json_stream(source: str) -> None:
    code, expected = LIBRARY_MESSAGES[source]
    records = _log_records(code)
    found = [
        (r["event"], r.get("category") or r.get("logger"), r["level"]) for r in records
        if r["event"] in ("library warning", "library log")
    ]  # fmt: skip
    assert found == expected
    assert all("timestamp" in r for r in records)
    if source == "logging":
        assert "Retry(total=2)" in records[0]["message"]


REPEATS = {
    "gfd's own record": 'get_logger(node="n1").error("pass failed", error="api unreachable")',
    "a library record": 'logging.getLogger("urllib3").warning("Retrying %s", "again")',
}


@pytest.mark.parametrize("source", sorted(REPEATS))
def test_record_repeated_many_times(source: str) -> None:
    """Fifty equal records within the coalescing window: one line."""
    records = _log_records(f"for _ in range(50):\n    {REPEATS[source]}\n")
    assert len(records) == 1, records
