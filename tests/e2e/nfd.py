"""NFD's own nfd-master and nfd-worker against a test control plane. nfd-worker reads the fixed
features.d, so it runs in a private mount namespace with /etc overlaid:
no test writes the host's."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane, free_port
from tests.e2e.current import kubelet_node
from tests.e2e.helm import REQUIRED, require_tool, tool_path

FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
NFD_NAMESPACE = "node-feature-discovery"


def nfd_version() -> str:
    return tool_path("nfd-master").name.rsplit("-", 1)[1]


def module_dir() -> Path:
    """The NFD release's module files (the build downloaded them)."""
    cache = Path(os.environ.get("GFD_E2E_CACHE") or Path.home() / ".cache" / "gfd-e2e")
    return cache / "gomod" / "sigs.k8s.io" / f"node-feature-discovery@{nfd_version()}"


def crds() -> list[dict[str, Any]]:
    path = module_dir() / "deployment" / "base" / "nfd-crds" / "nfd-api-crds.yaml"
    if not path.exists():
        pytest.skip(f"NFD's CRDs are not in the module cache ({path}); scripts/e2e-tools.sh nfd")
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def require_private_mounts() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        reason = "nfd-worker's fixed features.d needs a private mount namespace: root and unshare"
        if REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)


def install(plane: ControlPlane) -> None:
    """NFD's CRDs of the release (the harness waits until each is served) and its namespace."""
    plane.apply_all(crds())
    plane.ensure_namespace(NFD_NAMESPACE)


def start_master(plane: ControlPlane, workdir: Path) -> subprocess.Popen[bytes]:
    master = require_tool("nfd-master")
    # nfd-master annotates the node it runs on (NODE_NAME) at start, and exits without it.
    if plane.request("GET", "/api/v1/nodes/control-plane")[0] == 404:
        kubelet_node(plane, "control-plane")
    kubeconfig = plane.kubeconfig(workdir / "nfd-master.kubeconfig", ADMIN_TOKEN)
    log = open(workdir / "nfd-master.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [
            str(master),
            f"-kubeconfig={kubeconfig}",
            f"-port={free_port()}",
            f"-config={workdir / 'nfd-master.conf'}",
            "-resync-period=1h",
        ],
        env={**os.environ, "KUBERNETES_NAMESPACE": NFD_NAMESPACE, "NODE_NAME": "control-plane"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def run_worker(
    plane: ControlPlane,
    workdir: Path,
    features: Path,
    node: str,
    *extra: str,
    background: bool = False,
) -> subprocess.Popen[bytes] | subprocess.CompletedProcess[bytes]:
    """nfd-worker for NODE with only the local source, features.d = FEATURES."""
    require_private_mounts()
    worker = require_tool("nfd-worker")
    kubeconfig = plane.kubeconfig(workdir / f"nfd-worker-{node}.kubeconfig", ADMIN_TOKEN)
    upper, work = workdir / f"etc-upper-{node}", workdir / f"etc-work-{node}"
    upper.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    command = shlex.join(
        [
            str(worker),
            f"-kubeconfig={kubeconfig}",
            f"-port={free_port()}",
            f"-config={workdir / 'nfd-worker.conf'}",
            "-feature-sources=local",
            "-label-sources=local",
            "-owner-refs=",
            *extra,
        ]
    )
    script = (
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
        f" && mkdir -p {FEATURES_D} && mount --bind {shlex.quote(str(features))} {FEATURES_D}"
        f" && exec {command}"
    )
    args = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    env = {**os.environ, "NODE_NAME": node, "KUBERNETES_NAMESPACE": NFD_NAMESPACE}
    log = open(workdir / f"nfd-worker-{node}.log", "ab")  # noqa: SIM115
    if background:
        return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    return subprocess.run(args, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=120)


def wait_for_labels(
    plane: ControlPlane,
    node: str,
    condition: Callable[[dict[str, str]], bool],
    timeout: float = 60,
) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        labels = dict(plane.ok("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels", {}))
        nvidia = {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}
        if condition(nvidia):
            return nvidia
        if time.monotonic() > deadline:
            raise AssertionError(
                f"node {node}: labels never matched; last nvidia.com/ labels: {nvidia}"
            )
        time.sleep(0.5)
