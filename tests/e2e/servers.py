"""The control planes the e2e layer runs on, one :class:`Server` per Kubernetes release.

Every e2e test that takes the ``control_plane`` fixture runs once per selected server.
``GFD_E2E_SERVERS`` (comma-separated versions) selects; default: all of them.  Another
release is one more entry here (its binaries built and cached by its own script).
"""

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

SERVERS: dict[str, Server] = {server.version: server for server in (V1_20,)}


def selected() -> list[Server]:
    wanted = [v.strip() for v in os.environ.get("GFD_E2E_SERVERS", "").split(",") if v.strip()]
    if not wanted:
        return list(SERVERS.values())
    unknown = [v for v in wanted if v not in SERVERS]
    if unknown:
        raise ValueError(f"GFD_E2E_SERVERS: unknown {unknown}; known: {sorted(SERVERS)}")
    return [SERVERS[v] for v in wanted]
