"""A real control plane (etcd + kube-apiserver on free 127.0.0.1 ports), one per :class:`Server`:
verified TLS, static tokens for an admin and for gfd's service account (as the server names it, so
RBAC bindings apply), Node,RBAC authorization and a Metadata audit log the tests read."""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.process import free_port

ADMIN_TOKEN = "gfd-e2e-admin-token"
#: gfd's identity: the manifests' ServiceAccount (manifests/common/serviceaccount.yaml)
GFD_NAMESPACE = "gpu-feature-discovery"
GFD_SERVICE_ACCOUNT = "gfd"
GFD_TOKEN = "gfd-e2e-service-account-token"
GFD_USER = f"system:serviceaccount:{GFD_NAMESPACE}:{GFD_SERVICE_ACCOUNT}"
#: a second writer (a stand-in for kubelet, an operator, a human with kubectl)
OTHER_TOKEN = "gfd-e2e-other-writer-token"
OTHER_USER = "other-writer"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}
#: how long the control plane may take to come up (a guard, not a timing assertion)
START_PATIENCE_SECONDS = 120.0

JSON = dict[str, Any]


@dataclass(frozen=True)
class Server:
    """One kube-apiserver build and the etcd it runs on."""

    version: str  # the test id, e.g. "v1.20.2"
    apiserver: Path
    etcd: Path
    #: how to build what is missing (shown when a binary is absent)
    build_hint: str = ""
    #: flags this release needs beyond the common ones
    extra_args: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        return [str(path) for path in (self.apiserver, self.etcd) if not os.access(path, os.X_OK)]


class ApiError(AssertionError):
    def __init__(self, method: str, path: str, status: int, answer: Any) -> None:
        super().__init__(f"{method} {path}: {status} {answer}")
        self.status = status
        self.answer = answer


@dataclass
class ControlPlane:
    server: Server
    workdir: Path
    url: str
    ca_file: Path
    audit_log: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _plurals: dict[tuple[str, str], str] = field(default_factory=dict)
    #: etcd's client URL, and how the API server was started (an outage restarts it)
    etcd_url: str = ""
    apiserver_argv: list[str] = field(default_factory=list)

    # ----------------------------------------------------------------- an outage

    def stop_apiserver(self) -> None:
        """Kill the API server (as a crashed or unreachable one: connections reset)."""
        apiserver = self.processes[-1]
        apiserver.kill()
        apiserver.wait()

    def start_apiserver(self) -> None:
        """Start it again, as before, and wait until it is ready."""
        log = (self.workdir / "logs" / "kube-apiserver.log").open("ab")
        apiserver = subprocess.Popen(self.apiserver_argv, stdout=subprocess.DEVNULL, stderr=log)
        self.processes[-1] = apiserver
        deadline = time.monotonic() + START_PATIENCE_SECONDS
        while True:
            if apiserver.poll() is not None:
                raise AssertionError("kube-apiserver exited on restart")
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return
            except (OSError, ssl.SSLError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError("kube-apiserver not ready after restart")
            time.sleep(0.1)

    @property
    def version(self) -> str:
        return self.server.version

    # ----------------------------------------------------------------- requests

    def _context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str = ADMIN_TOKEN,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """One request; (status, decoded answer). Never raises for an HTTP error status."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=30) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as error:
            return error.code, _decode(error.read())

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, answer = self.request(method, path, body, **kw)
        if not 200 <= status < 300:
            raise ApiError(method, path, status, answer)
        return answer

    def get(self, path: str, **kw: Any) -> JSON | None:
        status, answer = self.request("GET", path, **kw)
        if status == 404:
            return None
        if status != 200:
            raise ApiError("GET", path, status, answer)
        return dict(answer)

    def delete(self, path: str, **kw: Any) -> None:
        status, answer = self.request("DELETE", path, **kw)
        if status not in (200, 202, 404):
            raise ApiError("DELETE", path, status, answer)

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Poll until ``condition()`` is truthy; its value.  A guard against hanging, not a
        timing assertion."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)

    # ----------------------------------------------------------------- objects

    def plural(self, api_version: str, kind: str) -> str:
        key = (api_version, kind)
        if key not in self._plurals:
            for resource in self.ok("GET", _base(api_version))["resources"]:
                if "/" not in resource["name"]:
                    self._plurals[(api_version, resource["kind"])] = resource["name"]
        if key not in self._plurals:
            raise AssertionError(f"{kind} is not served under {_base(api_version)}")
        return self._plurals[key]

    def collection_path(self, api_version: str, kind: str, namespace: str | None = None) -> str:
        prefix = _base(api_version) + (f"/namespaces/{namespace}" if namespace else "")
        return f"{prefix}/{self.plural(api_version, kind)}"

    def object_path(self, obj: Mapping[str, Any]) -> str:
        metadata = obj["metadata"]
        collection = self.collection_path(obj["apiVersion"], obj["kind"], metadata.get("namespace"))
        return f"{collection}/{metadata['name']}"

    def create(self, obj: Mapping[str, Any], **kw: Any) -> JSON:
        metadata = obj["metadata"]
        path = self.collection_path(obj["apiVersion"], obj["kind"], metadata.get("namespace"))
        return dict(self.ok("POST", path, obj, **kw))

    def apply(self, obj: Mapping[str, Any]) -> JSON:
        """Create, or replace what is there (as the admin)."""
        status, answer = self.request(
            "POST",
            self.collection_path(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace")),
            obj,
        )
        if status == 201:
            return dict(answer)
        if status != 409:
            raise ApiError("POST", self.object_path(obj), status, answer)
        path = self.object_path(obj)
        current = self.ok("GET", path)
        replacement = json.loads(json.dumps(obj))
        replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return dict(self.ok("PUT", path, replacement))

    def apply_all(self, objects: Sequence[Mapping[str, Any]]) -> None:
        # namespaces first, CRDs before their objects
        order = {"Namespace": 0, "CustomResourceDefinition": 1}
        for obj in sorted(objects, key=lambda o: order.get(o["kind"], 2)):
            self.apply(obj)
            if obj["kind"] == "CustomResourceDefinition":
                self.wait_crd_established(obj["metadata"]["name"])

    def wait_crd_established(self, name: str) -> None:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

        def established() -> bool:
            crd = self.ok("GET", path)
            conditions = (crd.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        self.wait_for(f"CRD {name} established", established)
        group, version = (
            self.ok("GET", path)["spec"]["group"],
            self.ok("GET", path)["spec"]["versions"][0]["name"],
        )
        # discovery follows a moment later
        self.wait_for(
            f"{group}/{version} served",
            lambda: self.request("GET", f"/apis/{group}/{version}")[0] == 200,
        )
        self._plurals.clear()

    def ensure_namespace(self, namespace: str) -> None:
        status, answer = self.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}
        )
        if status not in (201, 409):
            raise ApiError("POST", "/api/v1/namespaces", status, answer)

    def create_node(self, name: str, labels: Mapping[str, str] | None = None) -> JSON:
        """A Node object as a kubelet would register it (no kubelet runs here)."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
        }
        return dict(self.ok("POST", "/api/v1/nodes", node))

    def node(self, name: str) -> JSON:
        return dict(self.ok("GET", f"/api/v1/nodes/{name}"))

    def node_labels(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("labels") or {})

    def node_annotations(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def delete_node(self, name: str) -> None:
        self.delete(f"/api/v1/nodes/{name}")
        self.wait_for(f"node {name} gone", lambda: self.get(f"/api/v1/nodes/{name}") is None)

    # ----------------------------------------------------------------- authorization

    def allowed(
        self,
        user: str,
        groups: Sequence[str],
        verb: str,
        resource: str,
        *,
        group: str = "",
        namespace: str = "",
    ) -> bool:
        """The server's own answer (SubjectAccessReview) to "may USER VERB RESOURCE?"."""
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": list(groups),
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "namespace": namespace,
                },
            },
        }
        answer = self.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(answer["status"].get("allowed"))

    def gfd_allowed(
        self, verb: str, resource: str, *, group: str = "", namespace: str = ""
    ) -> bool:
        return self.allowed(
            GFD_USER, gfd_groups(), verb, resource, group=group, namespace=namespace
        )

    # ----------------------------------------------------------------- clients

    def kubeconfig(
        self, path: Path, token: str = GFD_TOKEN, namespace: str = "default", server: str = ""
    ) -> Path:
        """A kubeconfig that verifies the server's certificate against its own CA."""
        cluster: JSON = {"server": server or self.url}
        if cluster["server"].startswith("https:"):
            cluster["certificate-authority"] = str(self.ca_file)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [
                {"name": "c", "context": {"cluster": "e2e", "user": "u", "namespace": namespace}}
            ],
            "current-context": "c",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # ----------------------------------------------------------------- audit

    def audit_mark(self) -> int:
        """A position in the audit log; :meth:`audit_events` after it sees only later events."""
        self.sync_audit()
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def sync_audit(self) -> None:
        """Make every event of requests already answered visible: the log is written in
        blocking mode, so an answered marker request means everything before it is in."""
        self.request("GET", "/api/v1/namespaces/default?audit-sync=1")

    def audit_events(
        self, since: int = 0, *, user: str | None = None, resource: str | None = None
    ) -> list[JSON]:
        self.sync_audit()
        events = []
        with self.audit_log.open("rb") as log:
            log.seek(since)
            for line in log.read().splitlines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if user is not None and event.get("user", {}).get("username") != user:
                    continue
                ref = event.get("objectRef") or {}
                if resource is not None and ref.get("resource") != resource:
                    continue
                events.append(event)
        return events


def gfd_groups() -> list[str]:
    return ["system:serviceaccounts", f"system:serviceaccounts:{GFD_NAMESPACE}"]


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _base(api_version: str) -> str:
    return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"


def _token_file(extra: Sequence[tuple[str, str, str]] = ()) -> str:
    """The static tokens; ``extra``: more (token, user, group) lines (a fleet of nodes,
    each with a credential of its own)."""
    sa_groups = ",".join([*gfd_groups(), "system:authenticated"])
    lines = [
        f'{token},{user},{user},"{group},system:authenticated"\n' for token, user, group in extra
    ]
    return (
        f'{ADMIN_TOKEN},admin,admin,"system:masters"\n'
        f'{GFD_TOKEN},{GFD_USER},gfd-e2e-sa-uid,"{sa_groups}"\n'
        f'{OTHER_TOKEN},{OTHER_USER},other-writer,"system:masters"\n'
    ) + "".join(lines)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def running(
    server: Server, extra_tokens: Sequence[tuple[str, str, str]] = ()
) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver of ``server``, ready for requests; stopped afterwards.
    ``extra_tokens``: more static tokens, (token, user, group) each.

    ``GFD_E2E_KEEP=1`` keeps the working directory (logs, audit log, certificates)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"gfd-e2e-{server.version}-"))
    processes: list[subprocess.Popen[bytes]] = []
    logs = workdir / "logs"
    logs.mkdir()
    try:
        (workdir / "tokens.csv").write_text(_token_file(extra_tokens))
        (workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        subprocess.run(
            ["openssl", "genrsa", "-out", str(workdir / "sa.key"), "2048"],
            check=True,
            capture_output=True,
        )
        client_port, peer_port, secure_port = free_port(), free_port(), free_port()
        etcd = subprocess.Popen(
            [
                str(server.etcd),
                "--data-dir",
                str(workdir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{client_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--log-level",
                "warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(logs / "etcd.log").open("wb"),
        )
        processes.append(etcd)
        plane = ControlPlane(
            server=server,
            workdir=workdir,
            url=f"https://127.0.0.1:{secure_port}",
            ca_file=workdir / "certs" / "apiserver.crt",
            audit_log=workdir / "audit.log",
            processes=processes,
            etcd_url=f"http://127.0.0.1:{client_port}",
        )
        plane.apiserver_argv = [
            str(server.apiserver),
            f"--etcd-servers=http://127.0.0.1:{client_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={secure_port}",
            f"--cert-dir={workdir / 'certs'}",
            f"--token-auth-file={workdir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={workdir / 'sa.key'}",
            f"--service-account-signing-key-file={workdir / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/24",
            f"--audit-log-path={plane.audit_log}",
            f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
            "--audit-log-mode=blocking",
            # no kubelets and no Services here: nothing for the endpoint reconciler
            "--endpoint-reconciler-type=none",
            *server.extra_args,
        ]
        apiserver = subprocess.Popen(
            plane.apiserver_argv,
            stdout=subprocess.DEVNULL,
            stderr=(logs / "kube-apiserver.log").open("wb"),
        )
        processes.append(apiserver)
        deadline = time.monotonic() + START_PATIENCE_SECONDS
        while True:
            if apiserver.poll() is not None or etcd.poll() is not None:
                raise AssertionError(
                    f"control plane {server.version} exited:\n"
                    + (logs / "kube-apiserver.log").read_text(errors="replace")[-3000:]
                    + (logs / "etcd.log").read_text(errors="replace")[-2000:]
                )
            if plane.ca_file.exists():
                try:
                    if plane.request("GET", "/readyz")[0] == 200:
                        break
                except (OSError, ssl.SSLError):
                    pass
            if time.monotonic() > deadline:
                raise AssertionError(f"kube-apiserver {server.version} not ready")
            time.sleep(0.2)
        # the bootstrap RBAC roles arrive shortly after readyz on a fresh etcd
        plane.wait_for(
            "bootstrap RBAC",
            lambda: plane.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:basic-user"),
        )
        plane.ensure_namespace(GFD_NAMESPACE)
        yield plane
    finally:
        stop(processes)
        if os.environ.get("GFD_E2E_KEEP"):
            print(f"control plane files kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")
