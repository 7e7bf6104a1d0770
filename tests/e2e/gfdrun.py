"""gfd against a real control plane: its RBAC rendered from manifests/, its kubeconfig, and
gfd itself as a real process (the same one a pod runs), authenticated as its service account.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from gfd import labels as labelling
from gfd import snapshot
from gfd.config import Config
from tests.e2e.controlplane import GFD_NAMESPACE, GFD_TOKEN, GFD_USER, ControlPlane
from tests.helpers import manifests_tool
from tests.process import ROOT, Daemon, clean_env, spawn_gfd

SNAPSHOTS = Path(ROOT) / "examples" / "snapshots"
SNAPSHOT_A = SNAPSHOTS / "dgx-a100.yaml"
SNAPSHOT_B = SNAPSHOTS / "two-models.yaml"  # other values, and some of A's keys disappear
MANAGED = "nvidia.com/gfd.managed-labels"
CRD = Path(__file__).parent / "data" / "nodefeature-crd.yaml"
#: labels and annotations a node carries that gfd must never touch: the kubelet's, and the
#: GPU Operator's nvidia.com/ control labels
FOREIGN_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/device-plugin.config": "a100",
    "example.com/rack": "r1",
}
FOREIGN_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0"}
#: RBAC kinds the e2e layer applies from a rendered overlay (the workloads need a kubelet)
RBAC_KINDS = (
    "Namespace",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
)
#: a guard against a hung test, not a timing assertion
PATIENCE_SECONDS = 60.0

#: gfd's entry point with the verification interval (SPEC §6.4, 10 minutes) taken from
#: GFD_E2E_VERIFY_INTERVAL, so a test can watch the agent notice a node re-created under it
LAUNCHER = [sys.executable, "-m", "tests.e2e.launch"]


def expected_labels(path: Path) -> dict[str, str]:
    return labelling.build(snapshot.load(str(path)), "none", Config(), None).labels


@cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    """The objects of one overlay as kustomize renders them (scripts/manifests.py)."""
    tool = manifests_tool()
    return tuple(tool.render(tool.Variant(overlay)))


def rbac_of(overlay: str) -> list[dict[str, Any]]:
    return [obj for obj in rendered(overlay) if obj["kind"] in RBAC_KINDS]


def workload_of(overlay: str, kind: str) -> dict[str, Any]:
    return next(obj for obj in rendered(overlay) if obj["kind"] == kind)


def node_name_for(test_name: str) -> str:
    """A node name of its own for every test (all tests share one control plane)."""
    name = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")
    return name[-50:].lstrip("-") or "node"


def kubeconfig(
    plane: ControlPlane, tmp_path: Path, token: str = GFD_TOKEN, server: str = ""
) -> str:
    return str(plane.kubeconfig(tmp_path / f"kubeconfig-{token}", token=token, server=server))


def api_args(
    plane: ControlPlane,
    tmp_path: Path,
    node: str,
    *,
    output: str = "--use-node-labels",
    snapshot_file: Path = SNAPSHOT_A,
    token: str = GFD_TOKEN,
    server: str = "",
) -> list[str]:
    return [
        output,
        "--node-name",
        node,
        "--kubeconfig",
        kubeconfig(plane, tmp_path, token, server),
        "--snapshot-file",
        str(snapshot_file),
        "--no-timestamp",
    ]


def run(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCHER, "--log-format", "json", *args],
        capture_output=True,
        text=True,
        env=clean_env(env),
        cwd=ROOT,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def run_ok(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = run(*args, env=env)
    assert done.returncode == 0, f"gfd exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done


class Agent(Daemon):
    """A running gfd daemon (tests.process.Daemon's log reader) started through LAUNCHER."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self._follow(spawn_gfd("--log-format", "json", *args, env=env, command=LAUNCHER))

    def passes(self, count: int = 1) -> list[dict[str, Any]]:
        return self.wait_for("pass finished", count, limit=PATIENCE_SECONDS)


def gfd_requests(plane: ControlPlane, since: int, resource: str | None = None) -> list[str]:
    """What gfd's service account sent since the mark, from the server's audit log:
    ``VERB resource/name -> code`` per request."""
    return [
        f"{e['verb']} {(e.get('objectRef') or {}).get('resource')}/"
        f"{(e.get('objectRef') or {}).get('name')} -> {(e.get('responseStatus') or {}).get('code')}"
        for e in plane.audit_events(since, user=GFD_USER, resource=resource)
    ]


def writes(requests: Sequence[str]) -> list[str]:
    return [r for r in requests if not r.startswith(("get ", "list ", "watch "))]


def apply_rbac(plane: ControlPlane, overlays: Sequence[str]) -> None:
    for overlay in overlays:
        plane.apply_all(rbac_of(overlay))


def ensure_gfd_namespace(plane: ControlPlane) -> str:
    plane.ensure_namespace(GFD_NAMESPACE)
    return GFD_NAMESPACE
