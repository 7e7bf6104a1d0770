"""A real NFD reads what gfd writes, on the current control plane.

- Features file: gfd writes its file; nfd-worker with only the local source reads it (from the
  fixed features.d, in a private mount namespace) and publishes its NodeFeature; nfd-master
  labels the node. The node's nvidia.com/ labels equal `gfd --oneshot` output, byte for byte.
- The daemon's lifecycle through NFD: labels follow a changed file; gfd stopped (SIGTERM
  removes the file) and nfd-master removes the labels.
- NodeFeature mode: gfd, as the nodefeature overlay's service account (its Role and nothing
  more), creates its own NodeFeature object; nfd-master labels the node from it; `--cleanup`
  deletes the object and nfd-master removes the labels.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import nfd, servers
from tests.e2e.current import ADMIN_TOKEN, ControlPlane, kubelet_node, pod_token, started
from tests.test_manifests import tool

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "examples" / "snapshots"
GFD_NAMESPACE = "gpu-feature-discovery"


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="gfd-e2e-nfd-") as tmp:
        yield Path(tmp)


@pytest.fixture(scope="module", params=servers.selected(), ids=lambda s: s.version)
def plane(request: pytest.FixtureRequest, workdir: Path) -> Iterator[ControlPlane]:
    """A control plane of its own per server (nfd-master labels every node it has)."""
    nfd.require_private_mounts()
    with started(request.param) as plane:
        nfd.install(plane)
        for node in ("gpu-node-1", "gpu-node-2", "gpu-node-3"):
            kubelet_node(plane, node)
        master = nfd.start_master(plane, workdir)
        try:
            yield plane
        finally:
            master.terminate()
            master.wait(timeout=30)


def gfd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gfd", *args], capture_output=True, text=True, timeout=120
    )


def oneshot_labels(snapshot: str, *args: str) -> dict[str, str]:
    done = gfd("--oneshot", "--no-timestamp", "--snapshot-file", str(SNAPSHOTS / snapshot), *args)
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


CASES = [
    (snapshot.name, ("--mig-strategy", strategy))
    for snapshot in sorted(SNAPSHOTS.glob("*.yaml"))
    for strategy in ("none", "single", "mixed")
]


@pytest.mark.parametrize(("snapshot", "args"), CASES, ids=[f"{s}-{a[1]}" for s, a in CASES])
def test_features_file_read_by_nfd_worker_labels_the_node_as_gfd_oneshot(
    plane: ControlPlane, workdir: Path, tmp_path: Path, snapshot: str, args: tuple[str, ...]
) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    done = gfd(
        "--oneshot",
        "--no-timestamp",
        "--snapshot-file",
        str(SNAPSHOTS / snapshot),
        "--output-file",
        str(features / "gfd"),
        *args,
    )
    assert done.returncode == 0, done.stderr
    expected = oneshot_labels(snapshot, *args)

    worker = nfd.run_worker(plane, workdir, features, "gpu-node-1", "-oneshot")
    assert worker.returncode == 0, (workdir / "nfd-worker-gpu-node-1.log").read_text()[-3000:]
    # What nfd-worker read from the file: its NodeFeature carries exactly gfd's labels.
    published = plane.ok(
        "GET",
        f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{nfd.NFD_NAMESPACE}/nodefeatures/gpu-node-1",
    )
    assert published["spec"]["labels"] == expected
    # And nfd-master put them on the node.
    labels = nfd.wait_for_labels(plane, "gpu-node-1", lambda got: got == expected)
    assert labels == expected


def test_nfd_follows_the_daemon_and_drops_the_labels_when_it_stops(
    plane: ControlPlane, workdir: Path, tmp_path: Path
) -> None:
    features = tmp_path / "features.d"
    features.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gfd",
            "--snapshot-file",
            str(SNAPSHOTS / "dgx-a100.yaml"),
            "--output-file",
            str(features / "gfd"),
            "--sleep-interval",
            "1s",
            "--config-file",
            str(config),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    worker = nfd.run_worker(
        plane,
        workdir,
        features,
        "gpu-node-2",
        '-options={"core":{"sleepInterval":"1s"}}',
        background=True,
    )
    assert isinstance(worker, subprocess.Popen)
    try:
        labels = nfd.wait_for_labels(plane, "gpu-node-2", lambda got: "nvidia.com/gpu.count" in got)
        timestamp = labels["nvidia.com/gfd.timestamp"]
        assert {
            k: v for k, v in labels.items() if k != "nvidia.com/gfd.timestamp"
        } == oneshot_labels("dgx-a100.yaml")
        # A changed config (SIGHUP): the new labels reach the node through NFD.
        config.write_text("version: v1\nflags:\n  migStrategy: single\n")
        daemon.send_signal(signal.SIGHUP)
        nfd.wait_for_labels(
            plane, "gpu-node-2", lambda got: got.get("nvidia.com/mig.strategy") == "single"
        )
        # Stopped for good: the file goes, and with it the node's labels.
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
        assert not (features / "gfd").exists()
        nfd.wait_for_labels(plane, "gpu-node-2", lambda got: got == {})
        assert timestamp
    finally:
        for process in (daemon, worker):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_nodefeature_object_of_gfd_labels_the_node_through_nfd_master(
    plane: ControlPlane, tmp_path: Path
) -> None:
    # The nodefeature overlay, as rendered: namespace, service account, Role, RoleBinding.
    plane.apply_all(
        [o for o in tool.render(tool.Variant("nodefeature")) if o["kind"] != "DaemonSet"]
    )
    token = pod_token(plane, GFD_NAMESPACE, "gfd", "gpu-node-3")
    kubeconfig = plane.kubeconfig(tmp_path / "gfd.kubeconfig", token, GFD_NAMESPACE)
    expected = oneshot_labels("dgx-a100-mig-mixed.yaml", "--mig-strategy", "mixed")
    common = [
        "--use-node-feature-api",
        "--node-name",
        "gpu-node-3",
        "--namespace",
        GFD_NAMESPACE,
        "--snapshot-file",
        str(SNAPSHOTS / "dgx-a100-mig-mixed.yaml"),
        "--mig-strategy",
        "mixed",
        "--no-timestamp",
    ]
    done = gfd("--oneshot", "--kubeconfig", str(kubeconfig), *common)
    assert done.returncode == 0, done.stderr
    labels = nfd.wait_for_labels(plane, "gpu-node-3", lambda got: got == expected)
    assert labels == expected

    # --cleanup deletes the object (as an admin: the agent's Role has no delete; owner
    # references remove it in a cluster) and nfd-master takes the labels away.
    admin = plane.kubeconfig(tmp_path / "admin.kubeconfig", ADMIN_TOKEN)
    done = gfd("--cleanup", "--kubeconfig", str(admin), *common)
    assert done.returncode == 0, done.stderr
    nfd.wait_for_labels(plane, "gpu-node-3", lambda got: got == {})


def test_nfd_master_log_has_no_rejected_gfd_label(workdir: Path, plane: ControlPlane) -> None:
    time.sleep(1)
    log = (workdir / "nfd-master.log").read_text()
    rejected = [
        line
        for line in log.splitlines()
        if "nvidia.com" in line and ("invalid" in line.lower() or "denied" in line.lower())
    ]
    assert rejected == []
