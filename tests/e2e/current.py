"""A real control plane of the current Kubernetes release: etcd 3.6 and kube-apiserver as built
by scripts/e2e-tools.sh (tests/e2e/tools), started on free 127.0.0.1 ports, stopped at the end.

- TLS verified: the server's self-signed certificate (--cert-dir) is the clients' CA.
- An admin (system:masters) by static token; gfd authenticates with real service-account
  tokens from the TokenRequest API, bound to a Pod on a node, so the server puts the node's
  name into the request's user info (what the admission policy reads).
- Node,RBAC authorization; every request in an audit log (Metadata level) that tests read.

Used by the issue-20 tests (admission policy, NFD, helm); parameterised by binary, so
another server version is another pair of paths.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.helm import require_tool

ADMIN_TOKEN = "gfd-e2e-admin-token"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ControlPlane:
    workdir: Path
    url: str
    ca_file: Path
    audit_log: Path
    version: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

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
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._context(), timeout=30) as resp:
                raw = resp.read()
                try:
                    return resp.status, json.loads(raw) if raw else None
                except ValueError:
                    return resp.status, raw.decode(errors="replace")
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw)
            except ValueError:
                return error.code, raw.decode(errors="replace")

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, answer = self.request(method, path, body, **kw)
        assert 200 <= status < 300, f"{method} {path}: {status} {answer}"
        return answer

    def apply_objects(self, objects: list[dict[str, Any]]) -> None:
        """Create each object (server-side apply, as kubectl apply --server-side would)."""
        for obj in objects:
            path = self.object_path(obj)
            status, answer = self.request(
                "PATCH",
                path + "?fieldManager=gfd-e2e&force=true",
                obj,
                content_type="application/apply-patch+yaml",
            )
            assert status in (200, 201), f"apply {path}: {status} {answer}"

    def object_path(self, obj: dict[str, Any]) -> str:
        api_version = obj["apiVersion"]
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        plural = self.plural(api_version, obj["kind"])
        namespace = obj["metadata"].get("namespace")
        prefix = f"{base}/namespaces/{namespace}" if namespace else base
        return f"{prefix}/{plural}/{obj['metadata']['name']}"

    def plural(self, api_version: str, kind: str) -> str:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        for resource in self.ok("GET", base)["resources"]:
            if resource["kind"] == kind and "/" not in resource["name"]:
                return str(resource["name"])
        raise AssertionError(f"{kind} not served under {base}")

    def wait_for(self, path: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            status, answer = self.request("GET", path)
            if status == 200:
                return answer
            if time.monotonic() > deadline:
                raise AssertionError(f"{path}: {status} {answer}")
            time.sleep(0.2)

    # ----------------------------------------------------------------- identities

    def create_node(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                # As on a node a kubelet registered (its annotations map exists: nfd-master's
                # JSON patches add to it and are refused without it).
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
        }
        return dict(self.ok("POST", "/api/v1/nodes", node))

    def ensure_namespace(self, namespace: str) -> None:
        status, answer = self.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}
        )
        assert status in (201, 409), answer

    def pod_token(
        self, namespace: str, service_account: str, node: str, pod: str | None = None
    ) -> str:
        """A token of the service account bound to a (pending, kubelet-less) pod on NODE:
        what the kubelet would mount into gfd's pod there."""
        pod = pod or f"gfd-{node}"
        status, answer = self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "metadata": {"name": pod},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": service_account,
                    "automountServiceAccountToken": False,
                    "containers": [{"name": "gfd", "image": "gfd"}],
                },
            },
        )
        assert status in (201, 409), answer
        uid = self.ok("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")["metadata"]["uid"]
        answer = self.ok(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [],
                    "expirationSeconds": 3600,
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
                },
            },
        )
        return str(answer["status"]["token"])

    def kubeconfig(self, path: Path, token: str = ADMIN_TOKEN, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [
                {"name": "c", "context": {"cluster": "e2e", "user": "u", "namespace": namespace}}
            ],
            "current-context": "c",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # ----------------------------------------------------------------- audit

    def audit_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.audit_log.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
        return events


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
def control_plane(apiserver: Path, etcd: Path, version: str) -> Iterator[ControlPlane]:
    workdir = Path(tempfile.mkdtemp(prefix="gfd-e2e-cp-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        (workdir / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')
        (workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        subprocess.run(
            ["openssl", "genrsa", "-out", str(workdir / "sa.key"), "2048"],
            check=True,
            capture_output=True,
        )
        client_port, peer_port, secure_port = free_port(), free_port(), free_port()
        logs = workdir / "logs"
        logs.mkdir()
        etcd_proc = subprocess.Popen(
            [
                str(etcd),
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
                "--listen-metrics-urls",
                "",
                "--log-level",
                "warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(logs / "etcd.log", "wb"),  # noqa: SIM115
        )
        plane = ControlPlane(
            workdir=workdir,
            url=f"https://127.0.0.1:{secure_port}",
            ca_file=workdir / "certs" / "apiserver.crt",
            audit_log=workdir / "audit.log",
            version=version,
            processes=processes,
        )
        processes.append(etcd_proc)
        apiserver_proc = subprocess.Popen(
            [
                str(apiserver),
                f"--etcd-servers=http://127.0.0.1:{client_port}",
                "--bind-address=127.0.0.1",
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
                "--advertise-address=127.0.0.1",
                # no kubelets, no endpoints: nothing for the reconciler (which refuses loopback)
                "--endpoint-reconciler-type=none",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(logs / "kube-apiserver.log", "wb"),  # noqa: SIM115
        )
        processes.append(apiserver_proc)
        deadline = time.monotonic() + 90
        while True:
            if apiserver_proc.poll() is not None or etcd_proc.poll() is not None:
                raise AssertionError(
                    "control plane exited:\n"
                    + (logs / "kube-apiserver.log").read_text()[-3000:]
                    + (logs / "etcd.log").read_text()[-2000:]
                )
            if plane.ca_file.exists():
                try:
                    status, _ = plane.request("GET", "/readyz")
                    if status == 200:
                        break
                except (OSError, ssl.SSLError):
                    pass
            if time.monotonic() > deadline:
                raise AssertionError("kube-apiserver not ready in 90 s")
            time.sleep(0.3)
        # RBAC's bootstrap roles come in shortly after readyz on a fresh etcd
        plane.wait_for("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:basic-user")
        yield plane
    finally:
        stop(processes)
        if os.environ.get("GFD_E2E_KEEP"):
            print(f"control plane files kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def current_binaries() -> tuple[Path, Path, str]:
    apiserver = require_tool("kube-apiserver")
    etcd = require_tool("etcd")
    return apiserver, etcd, apiserver.name.rsplit("-", 1)[1]
