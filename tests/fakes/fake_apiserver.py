"""A small, real Kubernetes API server for tests.

It listens on 127.0.0.1 in its own thread and speaks enough of the API for the real
``kubernetes`` client (reached through :meth:`FakeApiServer.write_kubeconfig`) to manage
Nodes, Pods, DaemonSets and NFD NodeFeatures:

- GET (object or collection), POST (create; 409 AlreadyExists), PUT (replace; 409 Conflict on
  a stale ``metadata.resourceVersion``), DELETE, and PATCH with
  ``application/merge-patch+json`` (RFC 7386).  Any other patch type is answered 415, so a
  client that sends the wrong content type fails loudly instead of passing by accident.
- Every object carries ``uid``, ``resourceVersion`` (one global counter, as etcd's) and
  ``creationTimestamp``; errors are ``Status`` objects as the real API server returns them.
- Every request is recorded (method, path, status, content type) and can be counted.
- Watches (``?watch=1`` on a collection, as client-go's reflector sends them): a
  ``fieldSelector`` of equality terms (``metadata.name``, ``spec.nodeName``), resumed from
  a ``resourceVersion`` (410 Gone, as an ERROR event, once :meth:`FakeApiServer.compact`
  dropped the history), ``BOOKMARK`` events on
  :meth:`FakeApiServer.bookmark` when ``allowWatchBookmarks``, ``timeoutSeconds``; one JSON
  event a line until the server ends the stream.  The WatchList (``sendInitialEvents`` with
  ``resourceVersionMatch=NotOlderThan``): the objects picked as ADDED events, then a bookmark
  annotated ``k8s.io/initial-events-end``, then the changes, as kube-apiserver 1.37 sends them;
  or refused with 422, as before 1.27 (:meth:`FakeApiServer.serve_watch_list`).  A watch can
  be refused (403 from RBAC) or stalled (headers sent, then nothing) on demand.
- Faults on demand: an HTTP status (5xx, 429 with Retry-After), a delay, a dropped connection
  (the socket is closed without a response), or the whole server going "down" (the listening
  socket is closed: connection refused) and coming back on the same port.
- Misbehaviour a real API server shows only behind a broken proxy or under attack: a request
  applied whose answer is lost, raw non-JSON or wrongly shaped answers, headers trickled a
  line at a time, a server that never answers, answers of hundreds of MiB (:class:`Fault`).

Each connection serves one request (HTTP/1.0 style), so going down never leaves a
half-open keep-alive connection behind.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

JSON = dict[str, Any]


@dataclass(frozen=True)
class ResourceType:
    prefix: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return "v1" if self.prefix == "/api/v1" else self.prefix[len("/apis/") :]


RESOURCES = (
    ResourceType("/api/v1", "nodes", "Node", namespaced=False),
    ResourceType("/api/v1", "pods", "Pod", namespaced=True),
    ResourceType("/apis/apps/v1", "daemonsets", "DaemonSet", namespaced=True),
    ResourceType("/apis/nfd.k8s-sigs.io/v1alpha1", "nodefeatures", "NodeFeature", namespaced=True),
    ResourceType("/apis/resource.k8s.io/v1", "resourceslices", "ResourceSlice", namespaced=False),
)
_BY_PLURAL = {resource.plural: resource for resource in RESOURCES}
_BY_KIND = {resource.kind: resource for resource in RESOURCES}

MERGE_PATCH = "application/merge-patch+json"
#: the token of the kubeconfig :func:`write_kubeconfig` writes when given no user
TOKEN = "fake-token"
#: the annotation of the bookmark that closes a WatchList's initial events
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_REASONS = {
    401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid",
    429: "TooManyRequests", 503: "ServiceUnavailable", 504: "Timeout",
}  # fmt: skip


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    status: int  # 0: the connection was dropped without a response
    content_type: str | None
    body: Any
    authorization: str | None = None  # the Authorization header as it arrived
    client_cn: str | None = None  # over TLS: the common name of the client's certificate
    query: str = ""  # the query string (a list's field selector, a watch's parameters)


@dataclass
class Fault:
    """Applied to the next ``count`` matching requests (forever when ``count`` is None).

    Besides clean API errors, a fault can misbehave at the HTTP level: answer raw bytes
    (``body``: not JSON, or JSON of the wrong shape), apply the request and then lose its
    answer (``after_apply``), trickle the headers forever (``trickle``), accept and never
    answer (``hang``), or send an answer of ``huge`` bytes."""

    status: int | None = None  # answer with this status (a Status object, or ``body``)
    delay: float = 0.0  # sleep this long first
    drop: bool = False  # close the connection without a response
    retry_after: int | str | None = None  # Retry-After header (seconds) with the status
    method: str | None = None  # only requests with this verb
    path_contains: str | None = None  # only requests whose path contains this
    count: int | None = 1
    body: bytes | None = None  # answer these bytes (status: ``status`` or 200)
    content_type: str = "application/json"  # with ``body``
    after_apply: bool = False  # carry the request out first, then misbehave (a lost answer)
    trickle: float | None = None  # send one header line every this many seconds, forever
    hang: bool = False  # read the request, then never answer
    huge: int | None = None  # answer 200 with this many bytes
    declare_length: bool = True  # with ``huge``: send Content-Length (else: until close)
    raw: bytes | None = None  # answer with these bytes as they are, status line and all
    echo_authorization: bool = False  # with ``status``: the message quotes the credentials
    watch: bool | None = None  # only watch requests (True) or only the others (False)
    reason: str | None = None  # with ``status``: this reason phrase on the status line

    def matches(self, method: str, path: str, watch: bool = False) -> bool:
        if self.watch is not None and self.watch != watch:
            return False
        if self.method is not None and self.method != method:
            return False
        return self.path_contains is None or self.path_contains in path


class ApiStatusError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}


def status_object(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    body: JSON = {
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Success" if code < 400 else "Failure", "message": message, "reason": reason,
        "code": code,
    }  # fmt: skip
    if details:
        body["details"] = details
    return body


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


@dataclass
class _State:
    objects: dict[tuple[str, str, str], JSON] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    versions: Iterator[int] = field(default_factory=lambda: itertools.count(1000))
    lock: threading.RLock = field(default_factory=threading.RLock)
    closing: threading.Event = field(default_factory=threading.Event)  # ends hung answers
    huge_bytes_sent: int = 0
    # the Authorization header values let in (None: any request, with or without one)
    accepted: frozenset[str] | None = None
    # every change, for watches: (resourceVersion, type, plural, namespace, name, object)
    events: list[tuple[int, str, str, str, str, JSON]] = field(default_factory=list)
    last_version: int = 999
    compacted: int = 0  # a watch from an older version is answered 410 Gone
    bookmarks: int = 0  # bumped by bookmark(): every open watch sends one
    watch_refused: int | None = None  # answer every watch with this status
    watch_stalled: bool = False  # send a watch's headers, then nothing
    watch_list: bool = True  # serve the WatchList (sendInitialEvents), as since Kubernetes 1.27
    restores: int = 0  # bumped by restore(): every open watch ends, as at a graceful restart
    open_watches: int = 0
    changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def version(self) -> str:
        self.last_version = next(self.versions)
        return str(self.last_version)

    def note(self, kind: str, resource: ResourceType, key: tuple[str, str, str], obj: JSON) -> None:
        """Record a change for the watches (under the lock)."""
        version = int(obj["metadata"]["resourceVersion"])
        self.events.append((version, kind, resource.plural, key[1], key[2], copy.deepcopy(obj)))
        self.changed.notify_all()


@dataclass(frozen=True)
class Tls:
    """Serve HTTPS with this certificate and key; with ``client_ca``, ask every client for
    a certificate signed by it (a client without one is answered 401, as the real server
    does for an anonymous request it does not allow)."""

    cert: str
    key: str
    client_ca: str | None = None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that breaks off (a TLS client speaking to plain HTTP, a dropped request)
        is no error of the server's: socketserver's traceback on stderr would land in the
        stderr of a gfd run in this process (tests/process.py run_gfd_here)."""


class FakeApiServer:
    """Use as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(self, tls: Tls | None = None) -> None:
        self._state = _State()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.tls = tls

    # ------------------------------------------------------------- lifecycle

    def start(self) -> FakeApiServer:
        state = self._state

        class Handler(_Handler):
            pass

        Handler.state = state
        state.closing.clear()
        server = _QuietServer(("127.0.0.1", self.port), Handler)
        if self.tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.cert, self.tls.key)
            if self.tls.client_ca:
                context.load_verify_locations(self.tls.client_ca)
                context.verify_mode = ssl.CERT_OPTIONAL
            server.socket = context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._state.closing.set()
        if self._server is not None:
            # serve_forever only looks for the shutdown request between waits for a
            # connection (poll_interval): shutting the listening socket down ends that wait
            # at once on Linux (the accept it wakes fails and is ignored), instead of every
            # stop -- every test's teardown -- sitting out the rest of the interval
            with suppress(OSError):
                self._server.socket.shutdown(socket.SHUT_RDWR)
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def is_up(self) -> bool:
        return self._server is not None

    def go_down(self) -> None:
        """Close the listening socket: clients get connection refused until :meth:`come_up`."""
        self.stop()

    def come_up(self) -> None:
        """Listen again on the same port, with every object as it was."""
        if self._server is None:
            self.start()

    @contextmanager
    def down(self) -> Iterator[None]:
        self.go_down()
        try:
            yield
        finally:
            self.come_up()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def write_kubeconfig(
        self, path: Path | str, namespace: str = "default", user: JSON | None = None,
        ca: Path | None = None,
    ) -> Path:  # fmt: skip
        """A kubeconfig that points the real client at this server (a token, or the
        credentials in ``user``; ``ca`` the certificate authority a TLS server is checked by)."""
        return write_kubeconfig(path, self.url, namespace, user, ca)

    # ------------------------------------------------------------- objects

    def put_object(self, obj: JSON) -> JSON:
        """Store ``obj`` (its ``kind`` picks the resource) as if created; returns the copy."""
        resource = _BY_KIND[obj["kind"]]
        with self._state.lock:
            stored = _Handler.prepare_new(self._state, resource, copy.deepcopy(obj))
            key = _key(
                resource, stored["metadata"].get("namespace", ""), stored["metadata"]["name"]
            )
            self._state.objects[key] = stored
            self._state.note("ADDED", resource, key, stored)
            return copy.deepcopy(stored)

    def add_node(
        self, name: str, labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> JSON:  # fmt: skip
        metadata: JSON = {"name": name, "labels": dict(labels or {})}
        if annotations:
            metadata["annotations"] = dict(annotations)
        return self.put_object({
            "kind": "Node", "apiVersion": "v1", "metadata": metadata, "spec": {},
            "status": {"nodeInfo": {"kubeletVersion": "v1.31.0"}},
        })  # fmt: skip

    def add_daemonset(self, namespace: str, name: str) -> JSON:
        return self.put_object({
            "kind": "DaemonSet", "apiVersion": "apps/v1",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}}},
        })  # fmt: skip

    def add_pod(self, namespace: str, name: str, owner: JSON | None = None) -> JSON:
        """A pod; ``owner`` (an object from :meth:`add_daemonset`) becomes its controller."""
        metadata: JSON = {"name": name, "namespace": namespace}
        if owner is not None:
            metadata["ownerReferences"] = [{
                "apiVersion": owner["apiVersion"], "kind": owner["kind"],
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "controller": True, "blockOwnerDeletion": True,
            }]  # fmt: skip
        return self.put_object(
            {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": {"containers": []}}
        )

    def get(self, kind: str, name: str, namespace: str = "") -> JSON | None:
        resource = _BY_KIND[kind]
        with self._state.lock:
            obj = self._state.objects.get(_key(resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def node(self, name: str) -> JSON:
        node = self.get("Node", name)
        assert node is not None, f"no node {name}"
        return node

    def node_labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def node_annotations(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def edit(self, kind: str, name: str, namespace: str, change: Callable[[JSON], None]) -> JSON:
        """Change a stored object in place (as another client would), bumping its version."""
        resource = _BY_KIND[kind]
        with self._state.lock:
            key = _key(resource, namespace, name)
            obj = self._state.objects[key]
            change(obj)
            obj["metadata"]["resourceVersion"] = self._state.version()
            self._state.note("MODIFIED", resource, key, obj)
            return copy.deepcopy(obj)

    def edit_node(self, name: str, **metadata: Any) -> JSON:
        """Replace whole fields of a node's metadata (``labels=``, ``annotations=``)."""
        return self.edit("Node", name, "", lambda node: node["metadata"].update(metadata))

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        resource = _BY_KIND[kind]
        with self._state.lock:
            key = _key(resource, namespace, name)
            gone = self._state.objects.pop(key, None)
            if gone is not None:
                gone["metadata"]["resourceVersion"] = self._state.version()
                self._state.note("DELETED", resource, key, gone)

    def objects(self, kind: str) -> list[JSON]:
        resource = _BY_KIND[kind]
        with self._state.lock:
            return [
                copy.deepcopy(obj) for (plural, _, _), obj in sorted(self._state.objects.items())
                if plural == resource.plural
            ]  # fmt: skip

    # ------------------------------------------------------------- requests and faults

    @property
    def requests(self) -> list[Request]:
        with self._state.lock:
            return list(self._state.requests)

    def count(self, method: str | None = None, path_contains: str | None = None) -> int:
        return sum(
            1 for request in self.requests if (method is None or request.method == method)
            and (path_contains is None or path_contains in request.path)
        )  # fmt: skip

    def counts(self) -> dict[tuple[str, str], int]:
        """Requests by (verb, path)."""
        result: dict[tuple[str, str], int] = {}
        for request in self.requests:
            key = (request.method, request.path)
            result[key] = result.get(key, 0) + 1
        return result

    @property
    def huge_bytes_sent(self) -> int:
        """How many bytes of ``Fault(huge=...)`` answers the clients took."""
        with self._state.lock:
            return self._state.huge_bytes_sent

    def clear_requests(self) -> None:
        with self._state.lock:
            self._state.requests.clear()

    def inject(self, fault: Fault) -> Fault:
        """Serve ``fault``; what is returned is the live copy the server counts down (a
        test's own Fault, often a shared parameter, is never changed by being served)."""
        live = replace(fault)
        with self._state.lock:
            self._state.faults.append(live)
        return live

    def fail(self, status: int = 500, count: int | None = 1, **where: Any) -> Fault:
        """Answer ``status`` (a Status object); ``where``: the Fault's ``method``,
        ``path_contains`` and ``retry_after``."""
        return self.inject(Fault(status=status, count=count, **where))

    def drop(self, count: int | None = 1, *, method: str | None = None) -> Fault:
        return self.inject(Fault(drop=True, count=count, method=method))

    def delay(self, seconds: float, count: int | None = 1, *, method: str | None = None) -> Fault:
        return self.inject(Fault(delay=seconds, count=count, method=method))

    def clear_faults(self) -> None:
        with self._state.lock:
            self._state.faults.clear()

    # ------------------------------------------------------------- watches

    def compact(self) -> None:
        """Drop the history: a watch resumed from any version seen so far gets 410 Gone."""
        with self._state.lock:
            self._state.compacted = self._state.last_version + 1
            self._state.events.clear()

    def restore(self, back: int = 100) -> None:
        """As after etcd is restored from an older backup: the server's version goes ``back``
        (objects keep theirs), open watches end cleanly as at a graceful restart, and a watch
        from a version the server has not reached is answered 504 "Too large resource
        version", as the API server's watch cache answers it."""
        with self._state.lock:
            state = self._state
            state.last_version -= back
            state.versions = itertools.count(state.last_version + 1)
            state.events = [event for event in state.events if event[0] <= state.last_version]
            state.restores += 1
            state.changed.notify_all()

    def bookmark(self) -> None:
        """Every open watch that allows bookmarks sends one (the current version)."""
        with self._state.lock:
            self._state.bookmarks += 1
            self._state.changed.notify_all()

    def refuse_watches(self, status: int | None = 403) -> None:
        """Answer every watch with ``status`` (None: serve them again)."""
        with self._state.lock:
            self._state.watch_refused = status

    def serve_watch_list(self, served: bool) -> None:
        """Serve the WatchList (``sendInitialEvents``), or refuse its parameters with 422 as
        kube-apiserver before 1.27 does."""
        with self._state.lock:
            self._state.watch_list = served

    def stall_watches(self, stalled: bool = True) -> None:
        """Send a watch's headers and then nothing (a stalled stream)."""
        with self._state.lock:
            self._state.watch_stalled = stalled

    @property
    def open_watches(self) -> int:
        with self._state.lock:
            return self._state.open_watches

    def watch_requests(self, path_contains: str = "") -> int:
        """How many watch requests arrived (on a path containing ``path_contains``)."""
        return sum(
            1
            for request in self.requests
            if "watch=" in request.query and path_contains in request.path
        )

    def accept_only(self, *authorizations: str) -> None:
        """Answer 401 Unauthorized (as the real server does) to a request whose
        ``Authorization`` header is none of these (e.g. ``"Bearer abc"``), and that has no
        client certificate named in them as ``"cert:<common name>"``."""
        with self._state.lock:
            self._state.accepted = frozenset(authorizations)


def _drop_empty_metadata(obj: JSON) -> None:
    # as the real API server serialises ObjectMeta: empty maps and lists are omitted
    metadata = obj.get("metadata") or {}
    for name in ("labels", "annotations", "ownerReferences"):
        if name in metadata and not metadata[name]:
            del metadata[name]


_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _label_problems(key: str, value: Any) -> list[str]:
    prefix, _, name = key.rpartition("/")
    problems = []
    invalid = "metadata.labels: Invalid value:"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        problems.append(f"{invalid} {key!r}: prefix part must be a DNS subdomain")
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        problems.append(f"{invalid} {key!r}: name part must be a valid label name")
    if not isinstance(value, str) or (
        value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value))
    ):
        problems.append(
            f"{invalid} {value!r}: a valid label must be an empty string or a label name"
        )
    return problems


def _validate(resource: ResourceType, obj: JSON) -> None:
    """What the real API server checks on every create and update, where a client of ours
    could trip it (found running gfd against kube-apiserver, tests/e2e): label keys and
    values, owner references with all four fields, and the NodeFeature CRD's schema (``spec``
    required, ``spec.labels`` values strings).  Answered 422 Invalid, as the server does."""
    metadata = obj.get("metadata") or {}
    problems = []
    for key, value in (metadata.get("labels") or {}).items():
        problems += _label_problems(str(key), value)
    for index, ref in enumerate(metadata.get("ownerReferences") or []):
        for required in ("apiVersion", "kind", "name", "uid"):
            if not (isinstance(ref, dict) and ref.get(required)):
                problems.append(f"metadata.ownerReferences[{index}].{required}: Required value")
    if resource.kind == "NodeFeature":
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            problems.append("spec: Required value")
        else:
            for key, value in (spec.get("labels") or {}).items():
                if not isinstance(value, str):
                    problems.append(f"spec.labels.{key}: Invalid value: must be of type string")
    if problems:
        name = metadata.get("name", "")
        raise ApiStatusError(
            422, "Invalid", f'{resource.kind} "{name}" is invalid: ' + ", ".join(problems),
            {"name": name, "kind": resource.kind, "causes": [{"message": p} for p in problems]},
        )  # fmt: skip


def _key(resource: ResourceType, namespace: str, name: str) -> tuple[str, str, str]:
    return (resource.plural, namespace if resource.namespaced else "", name)


class _Handler(BaseHTTPRequestHandler):
    state: _State
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # ------------------------------------------------------------- plumbing

    def _handle(self, method: str) -> None:
        path = urlsplit(self.path).path
        content_type = self.headers.get("Content-Type")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")

        with self.state.lock:
            accepted = self.state.accepted
        presented = {self.headers.get("Authorization"), f"cert:{self._client_cn()}"}
        if accepted is not None and not presented & accepted:
            self._record(method, path, 401, content_type, body)
            self._send(401, status_object(401, "Unauthorized", "Unauthorized"))
            return

        query = parse_qs(urlsplit(self.path).query)
        watch = method == "GET" and query.get("watch", [""])[0] in ("1", "true")
        fault = self._take_fault(method, path, watch)
        if fault is not None and fault.after_apply:
            # the server does the work; then the answer is lost (a proxy's 504, a timeout)
            try:
                code, _ = self._dispatch(method, path, content_type, body)
            except ApiStatusError as error:
                code = error.code
            self._record(method, path, code, content_type, body)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if self._misbehave(fault, method, path, content_type, body):
                return
            if fault.drop:
                if not fault.after_apply:
                    self._record(method, path, 0, content_type, body)
                self.close_connection = True
                with suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault.status is not None:
                reason = _REASONS.get(fault.status, "InternalError")
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
                # recorded before answering, so a client that has its answer sees it counted
                if not fault.after_apply:
                    self._record(method, path, fault.status, content_type, body)
                message = f"injected fault {fault.status}"
                if fault.echo_authorization:  # as a careless proxy or a hostile server does
                    message += f": credentials {self.headers.get('Authorization')!s} refused"
                answer = status_object(fault.status, reason, message)
                self._send(fault.status, answer, headers, fault.reason)
                return

        try:
            if watch:
                self._watch(path, query)
                return
            code, answer = self._dispatch(method, path, content_type, body)
        except ApiStatusError as error:
            code = error.code
            answer = status_object(error.code, error.reason, error.message, error.details)
        self._record(method, path, code, content_type, body)
        self._send(code, answer)

    def _misbehave(
        self, fault: Fault, method: str, path: str, content_type: str | None, body: Any
    ) -> bool:
        """HTTP-level misbehaviour; True when the request was answered (or never will be)."""
        record = not fault.after_apply
        if fault.hang:
            if record:
                self._record(method, path, -1, content_type, body)
            self._wait_for_client_or_shutdown(lambda: None)
            self.close_connection = True
            return True
        if fault.trickle is not None:
            if record:
                self._record(method, path, -1, content_type, body)
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            lines = (f"X-Trickle-{n}: {'x' * 10}\r\n".encode() for n in itertools.count())
            self._wait_for_client_or_shutdown(lambda: self.wfile.write(next(lines)), fault.trickle)
            self.close_connection = True
            return True
        if fault.huge is not None:
            if record:
                self._record(method, path, 200, content_type, body)
            self._send_huge(fault.huge, fault.declare_length)
            self.close_connection = True
            return True
        if fault.raw is not None:
            if record:
                self._record(method, path, 200, content_type, body)
            self.close_connection = True
            with suppress(OSError):
                self.wfile.write(fault.raw)
            return True
        if fault.body is not None:
            status = fault.status or 200
            if record:
                self._record(method, path, status, content_type, body)
            with suppress(OSError):
                self.send_response(status)
                self.send_header("Content-Type", fault.content_type)
                self.send_header("Content-Length", str(len(fault.body)))
                self.end_headers()
                self.wfile.write(fault.body)
            return True
        return False

    def _wait_for_client_or_shutdown(self, tick: Callable[[], object], every: float = 0.1) -> None:
        """Call ``tick`` every ``every`` seconds until the client goes or the server stops."""
        while not self.state.closing.wait(every):
            try:
                tick()
                self.wfile.flush()
                readable, _, _ = select.select([self.connection], [], [], 0)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    return  # the client closed its end
            except OSError:
                return

    def _send_huge(self, size: int, declare_length: bool) -> None:
        """200 with a JSON string of ``size`` bytes, counted in ``state.huge_bytes_sent``."""
        chunk = b"x" * (1024 * 1024)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if declare_length:
                self.send_header("Content-Length", str(size))
            self.end_headers()
            self.wfile.write(b'"')
            left = size - 2
            while left > 0:
                piece = chunk[: min(left, len(chunk))]
                self.wfile.write(piece)
                left -= len(piece)
                with self.state.lock:
                    self.state.huge_bytes_sent += len(piece)
            self.wfile.write(b'"')
        except OSError:
            pass

    def _take_fault(self, method: str, path: str, watch: bool = False) -> Fault | None:
        with self.state.lock:
            for fault in self.state.faults:
                if fault.matches(method, path, watch):
                    if fault.count is not None:
                        fault.count -= 1
                        if fault.count <= 0:
                            self.state.faults.remove(fault)
                    return fault
        return None

    def _record(
        self, method: str, path: str, status: int, content_type: str | None, body: Any
    ) -> None:
        authorization = self.headers.get("Authorization")
        client_cn = self._client_cn()
        query = urlsplit(self.path).query
        with self.state.lock:
            self.state.requests.append(
                Request(method, path, status, content_type, body, authorization, client_cn, query)
            )

    def _client_cn(self) -> str | None:
        peer = getattr(self.connection, "getpeercert", lambda: None)()
        for field_ in (peer or {}).get("subject", ()):
            for name, value in field_:
                if name == "commonName":
                    return str(value)
        return None

    def _send(
        self, code: int, body: JSON, headers: Mapping[str, str] | None = None,
        reason: str | None = None,
    ) -> None:  # fmt: skip
        payload = json.dumps(body).encode("utf-8")
        self.send_response(code, reason)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    # ------------------------------------------------------------- watches

    def _watch(self, path: str, query: Mapping[str, list[str]]) -> None:
        """Serve one watch: the events after its resourceVersion, until its timeoutSeconds,
        the server's stop or the client going away."""
        resource, namespace, name = self._route(path)
        if name is not None:
            raise ApiStatusError(405, "MethodNotAllowed", "watch a collection")
        with self.state.lock:
            refused = self.state.watch_refused
        if refused is not None:
            raise ApiStatusError(refused, _REASONS.get(refused, "Forbidden"), "watch refused")
        wanted = self._field_selector()
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        bookmarks = query.get("allowWatchBookmarks", [""])[0] == "true"
        initial = self._initial_events(query, resource, namespace, wanted, bookmarks)
        if initial is not None:
            since = initial[1]  # the changes after the state the initial events gave
        with self.state.lock:
            current = self.state.last_version
        if since > current:
            message = f"Too large resource version: {since}, current: {current}"
            cause = {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            raise ApiStatusError(
                504, "Timeout", message, {"causes": [cause], "retryAfterSeconds": 1}
            )
        deadline = time.monotonic() + float(query.get("timeoutSeconds", ["1800"])[0])
        self._record("GET", path, 200, None, None)
        self.close_connection = True
        with suppress(OSError):
            # chunked, as kube-apiserver streams a watch: a stream that reaches its timeout
            # ends with the last chunk; one cut by the server going away ends without it,
            # which the client sees as a broken stream, not as an end
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            with self.state.lock:
                self.state.open_watches += 1
            try:
                self._write_events(initial[0] if initial else [])
                whole = initial is not None  # no version of the client's that could be gone
                self._stream_events(resource, namespace, wanted, since, bookmarks, deadline, whole)
                if not self.state.closing.is_set():
                    self.wfile.write(b"0\r\n\r\n")
            finally:
                with self.state.lock:
                    self.state.open_watches -= 1

    def _stream_events(
        self, resource: ResourceType, namespace: str, wanted: Mapping[str, str], since: int,
        bookmarks: bool, deadline: float, whole: bool = False,
    ) -> None:  # fmt: skip
        state = self.state
        with state.lock:
            seen_bookmarks, restores = state.bookmarks, state.restores
        while time.monotonic() < deadline and not state.closing.is_set():
            if state.restores != restores:
                return
            lines: list[JSON] = []
            with state.lock:
                if state.watch_stalled:
                    pass
                elif since and since < state.compacted and not whole:
                    gone = status_object(410, "Expired", "too old resource version")
                    lines.append({"type": "ERROR", "object": gone})
                else:
                    for version, kind, plural, ns, _name, obj in state.events:
                        if version <= since or plural != resource.plural:
                            continue
                        if resource.namespaced and ns != namespace:
                            continue
                        if not _selected(obj, wanted):
                            continue
                        lines.append({"type": kind, "object": copy.deepcopy(obj)})
                        since = version
                    if bookmarks and state.bookmarks != seen_bookmarks:
                        seen_bookmarks = state.bookmarks
                        since = max(since, state.last_version)
                        mark: JSON = {"kind": resource.kind, "apiVersion": resource.api_version}
                        mark["metadata"] = {"resourceVersion": str(since)}
                        lines.append({"type": "BOOKMARK", "object": mark})
                if not lines:
                    state.changed.wait(0.05)
            self._write_events(lines)
            if any(line["type"] == "ERROR" for line in lines):
                return
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                return  # the client closed its end

    def _write_events(self, lines: list[JSON]) -> None:
        for line in lines:
            data = json.dumps(line).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _initial_events(
        self, query: Mapping[str, list[str]], resource: ResourceType, namespace: str,
        wanted: Mapping[str, str], bookmarks: bool,
    ) -> tuple[list[JSON], int] | None:  # fmt: skip
        """A WatchList's first events (``sendInitialEvents``): every object the selector picks,
        then the bookmark that closes them (only where bookmarks are allowed, as the real
        server does), and the version they are the state at; None for a plain watch.  Refused
        with 422 as kube-apiserver refuses it: a server without the WatchList, or parameters
        that do not go together."""
        initial = query.get("sendInitialEvents", [""])[0] == "true"
        match = query.get("resourceVersionMatch", [""])[0]
        if not initial and not match:
            return None
        with self.state.lock:
            served = self.state.watch_list
        if not served:
            raise ApiStatusError(
                422, "Invalid", "resourceVersionMatch: Forbidden: forbidden for watch"
            )
        if not initial or match != "NotOlderThan":
            raise ApiStatusError(
                422, "Invalid", "resourceVersionMatch: Forbidden: sendInitialEvents requires "
                "setting resourceVersionMatch to NotOlderThan",
            )  # fmt: skip
        lines: list[JSON] = []
        with self.state.lock:
            for (plural, ns, _name), obj in sorted(self.state.objects.items()):
                if plural != resource.plural or (resource.namespaced and ns != namespace):
                    continue
                if _selected(obj, wanted):
                    lines.append({"type": "ADDED", "object": copy.deepcopy(obj)})
            version = self.state.last_version
        if bookmarks:
            meta = {"resourceVersion": str(version), "annotations": {INITIAL_EVENTS_END: "true"}}
            mark = {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": meta}
            lines.append({"type": "BOOKMARK", "object": mark})
        return lines, version

    # ------------------------------------------------------------- the API

    def _field_selector(self) -> dict[str, str]:
        """``fieldSelector=a.b=v,...`` of the request (equality terms only, as used here)."""
        values = parse_qs(urlsplit(self.path).query).get("fieldSelector") or [""]
        terms = [term.split("=", 1) for term in values[0].split(",") if "=" in term]
        return {field: value for field, value in terms}

    @staticmethod
    def _route(path: str) -> tuple[ResourceType, str, str | None]:
        """(resource, namespace, name or None for the collection)."""
        for resource in RESOURCES:
            if not path.startswith(resource.prefix + "/"):
                continue
            parts = path[len(resource.prefix) + 1 :].split("/")
            if resource.namespaced:
                if (
                    len(parts) in (3, 4)
                    and parts[0] == "namespaces"
                    and parts[2] == resource.plural
                ):
                    return resource, parts[1], parts[3] if len(parts) == 4 else None
            elif len(parts) in (1, 2) and parts[0] == resource.plural:
                return resource, "", parts[1] if len(parts) == 2 else None
        raise ApiStatusError(404, "NotFound", "the server could not find the requested resource")

    def _dispatch(
        self, method: str, path: str, content_type: str | None, body: Any
    ) -> tuple[int, JSON]:
        resource, namespace, name = self._route(path)
        objects = self.state.objects
        with self.state.lock:
            if name is None:
                if method == "GET":
                    items = [
                        copy.deepcopy(obj) for (plural, ns, _), obj in sorted(objects.items())
                        if plural == resource.plural
                        and (not resource.namespaced or ns == namespace)
                        and _selected(obj, self._field_selector())
                    ]  # fmt: skip
                    return 200, {
                        "kind": resource.kind + "List", "apiVersion": resource.api_version,
                        "metadata": {"resourceVersion": self.state.version()}, "items": items,
                    }  # fmt: skip
                if method == "POST":
                    return 201, self._create(resource, namespace, body)
                raise ApiStatusError(405, "MethodNotAllowed", f"{method} is not allowed here")

            key = _key(resource, namespace, name)
            current = objects.get(key)
            if current is None:
                raise ApiStatusError(
                    404, "NotFound", f'{resource.plural} "{name}" not found',
                    {"name": name, "kind": resource.plural},
                )  # fmt: skip
            if method == "GET":
                return 200, copy.deepcopy(current)
            if method == "DELETE":
                del objects[key]
                current["metadata"]["resourceVersion"] = self.state.version()
                self.state.note("DELETED", resource, key, current)
                return 200, status_object(200, "", "", {"name": name, "kind": resource.plural})
            if method == "PUT":
                if not isinstance(body, dict):
                    raise ApiStatusError(400, "BadRequest", "the body must be a JSON object")
                if resource.prefix.startswith("/apis/nfd.") and not (
                    (body.get("metadata") or {}).get("resourceVersion")
                ):
                    # custom resources allow no unconditional update (core objects do)
                    raise ApiStatusError(
                        422, "Invalid", f'{resource.plural}.nfd.k8s-sigs.io "{name}" is invalid: '
                        "metadata.resourceVersion: Invalid value: 0: must be specified for an "
                        "update", {"name": name, "kind": resource.plural},
                    )  # fmt: skip
                return 200, self._replace(resource, key, current, body)
            if method == "PATCH":
                if (content_type or "").split(";")[0].strip() != MERGE_PATCH:
                    raise ApiStatusError(
                        415, "UnsupportedMediaType",
                        f"the fake API server only supports {MERGE_PATCH}, got {content_type!r}",
                    )  # fmt: skip
                if not isinstance(body, dict):
                    raise ApiStatusError(400, "BadRequest", "a merge patch must be a JSON object")
                patched = json_merge_patch(current, body)
                wanted_version = (body.get("metadata") or {}).get("resourceVersion")
                if wanted_version is None:
                    patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                return 200, self._replace(resource, key, current, patched)
        raise ApiStatusError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _create(self, resource: ResourceType, namespace: str, body: Any) -> JSON:
        if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
            raise ApiStatusError(422, "Invalid", "metadata.name: Required value")
        name = body["metadata"]["name"]
        key = _key(resource, namespace, name)
        if key in self.state.objects:
            raise ApiStatusError(
                409, "AlreadyExists", f'{resource.plural} "{name}" already exists',
                {"name": name, "kind": resource.plural},
            )  # fmt: skip
        if resource.namespaced:
            given = body["metadata"].get("namespace")
            if given not in (None, namespace):
                raise ApiStatusError(
                    400, "BadRequest", "the namespace of the object does not match the request"
                )
            body["metadata"]["namespace"] = namespace
        if body["metadata"].get("resourceVersion"):
            raise ApiStatusError(
                422, "Invalid", "metadata.resourceVersion: must not be set on create"
            )
        _validate(resource, body)
        stored = self.prepare_new(self.state, resource, copy.deepcopy(body))
        self.state.objects[key] = stored
        self.state.note("ADDED", resource, key, stored)
        return copy.deepcopy(stored)

    def _replace(
        self, resource: ResourceType, key: tuple[str, str, str], current: JSON, body: JSON
    ) -> JSON:
        metadata = body.get("metadata") or {}
        name = key[2]
        if metadata.get("name") not in (None, name):
            raise ApiStatusError(
                400, "BadRequest", "the name of the object does not match the request"
            )
        given_version = metadata.get("resourceVersion")
        if (
            given_version not in (None, "")
            and given_version != current["metadata"]["resourceVersion"]
        ):
            raise ApiStatusError(
                409, "Conflict", f'Operation cannot be fulfilled on {resource.plural} "{name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again", {"name": name, "kind": resource.plural},
            )  # fmt: skip
        _validate(resource, body)
        stored = copy.deepcopy(body)
        stored["kind"] = resource.kind
        stored["apiVersion"] = resource.api_version
        new_metadata = stored.setdefault("metadata", {})
        new_metadata["name"] = name
        if resource.namespaced:
            new_metadata["namespace"] = key[1]
        for immutable in ("uid", "creationTimestamp"):
            new_metadata[immutable] = current["metadata"][immutable]
        # as the real server: a write that changes nothing keeps the resourceVersion
        new_metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        _drop_empty_metadata(stored)
        if stored != current:
            new_metadata["resourceVersion"] = self.state.version()
            self.state.note("MODIFIED", resource, key, stored)
        self.state.objects[key] = stored
        return copy.deepcopy(stored)

    @staticmethod
    def prepare_new(state: _State, resource: ResourceType, obj: JSON) -> JSON:
        obj["kind"] = resource.kind
        obj["apiVersion"] = resource.api_version
        metadata = obj.setdefault("metadata", {})
        if resource.namespaced:
            metadata.setdefault("namespace", "default")
        else:
            metadata.pop("namespace", None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["resourceVersion"] = state.version()
        metadata["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        _drop_empty_metadata(obj)
        return obj

    def finish(self) -> None:
        # a dropped connection has no socket left to flush
        with suppress(OSError):
            super().finish()


def write_kubeconfig(
    path: Path | str, server: str, namespace: str = "default", user: JSON | None = None,
    ca: Path | None = None,
) -> Path:  # fmt: skip
    """A kubeconfig with one context: ``server`` (any URL, valid or not) and a token (or
    ``user``: the ``users[].user`` section, e.g. ``{"tokenFile": ...}`` or ``{"exec": ...}``)."""
    context = {"cluster": "fake", "user": "fake", "namespace": namespace}
    cluster = {"server": server, **({"certificate-authority": str(ca)} if ca else {})}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": cluster}],
        "users": [{"name": "fake", "user": user if user is not None else {"token": TOKEN}}],
        "contexts": [{"name": "fake", "context": context}],
    }  # fmt: skip
    target = Path(path)
    target.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return target


def _selected(obj: JSON, selector: Mapping[str, str]) -> bool:
    """Whether ``obj`` matches every ``path.to.field=value`` term of a field selector."""
    for field_path, wanted in selector.items():
        value: Any = obj
        for part in field_path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value != wanted:
            return False
    return True
