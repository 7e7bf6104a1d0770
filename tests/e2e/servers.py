"""The control planes the e2e layer runs on, one :class:`Server` per release; ``GFD_E2E_SERVERS``
selects versions, ``GFD_E2E_EXTRA_SERVERS="VERSION=APISERVER:ETCD,..."`` adds binaries."""

from __future__ import annotations

import os
from pathlib import Path

from tests.e2e.controlplane import Server

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(
    os.environ.get("GFD_E2E_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gfd-e2e"
)

#: the oldest release gfd claims: kube-apiserver v1.20.2 built from Debian's source package,
#: Debian's etcd 3.4 (scripts/e2e-apiserver-v1.20.sh builds and installs both)
V1_20 = Server(
    version="v1.20.2",
    apiserver=CACHE / "bin" / "kube-apiserver-v1.20.2",
    etcd=Path("/usr/bin/etcd"),
    build_hint="scripts/e2e-apiserver-v1.20.sh",
)


def _required(wrapper: str, module: str) -> str:
    """The version tests/e2e/tools/WRAPPER/go.mod requires of MODULE (scripts/e2e-tools.sh
    builds that version and caches it under that name)."""
    for line in (ROOT / "tests" / "e2e" / "tools" / wrapper / "go.mod").read_text().splitlines():
        words = line.replace("require ", "").split()
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise ValueError(f"tests/e2e/tools/{wrapper}/go.mod requires no {module}")


_K8S = _required("kube-apiserver", "k8s.io/kubernetes")
_ETCD = _required("etcd", "go.etcd.io/etcd/server/v3")

#: the newest release gfd claims: kube-apiserver of the newest Kubernetes release the Go module
#: proxy serves, on etcd 3.6 (scripts/e2e-tools.sh builds both once)
CURRENT = Server(
    version=_K8S,
    apiserver=CACHE / "bin" / f"kube-apiserver-{_K8S}",
    etcd=CACHE / "bin" / f"etcd-{_ETCD}",
    build_hint="scripts/e2e-tools.sh kube-apiserver etcd",
)

SERVERS: dict[str, Server] = {server.version: server for server in (V1_20, CURRENT)}


def _extra_servers(spec: str) -> list[Server]:
    extra = []
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        version, _, paths = entry.partition("=")
        apiserver, _, etcd = paths.partition(":")
        if not (version and apiserver and etcd):
            raise ValueError(f"GFD_E2E_EXTRA_SERVERS: {entry!r} is not VERSION=APISERVER:ETCD")
        extra.append(Server(version, Path(apiserver), Path(etcd), build_hint="(given by path)"))
    return extra


SERVERS.update({s.version: s for s in _extra_servers(os.environ.get("GFD_E2E_EXTRA_SERVERS", ""))})


def selected() -> list[Server]:
    wanted = [v.strip() for v in os.environ.get("GFD_E2E_SERVERS", "").split(",") if v.strip()]
    if not wanted:
        return list(SERVERS.values())
    unknown = [v for v in wanted if v not in SERVERS]
    if unknown:
        raise ValueError(f"GFD_E2E_SERVERS: unknown {unknown}; known: {sorted(SERVERS)}")
    return [SERVERS[v] for v in wanted]
