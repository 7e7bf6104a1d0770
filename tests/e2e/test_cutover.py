"""README's cut-over from upstream's chart (its v0.20.0 chart, verbatim fixture) to gfd's, on the
current server: no Node loses an ``nvidia.com/`` label at any moment. With no kubelet, controllers
or images, the test plays the DaemonSet pods (real processes, bound tokens, the container's
environment), nfd-master (NFD's own) and the garbage collector."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import nfd, servers
from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane, free_port
from tests.e2e.current import kubelet_node, pod_token, started
from tests.e2e.helm import require_tool
from tests.upstream import Reference, mock_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
UPSTREAM_CHART = (
    ROOT / "tests" / "fixtures" / "upstream" / "nvidia-device-plugin-chart-v0.20.0.tar.gz"
)
UPSTREAM_CHART_REF = "nvdp/nvidia-device-plugin"
UPSTREAM_RELEASE, UPSTREAM_NAMESPACE = "nvdp", "nvidia-device-plugin"
NODE = "gpu-node-1"
PROFILE = "t4"
NFD_GROUP = "/apis/nfd.k8s-sigs.io/v1alpha1"
NFD_MASTER = (
    f"/apis/apps/v1/namespaces/{UPSTREAM_NAMESPACE}/deployments/nvdp-node-feature-discovery-master"
)
DEVICE_PLUGIN = (
    f"/apis/apps/v1/namespaces/{UPSTREAM_NAMESPACE}/daemonsets/nvdp-nvidia-device-plugin"
)
TIMESTAMP = "nvidia.com/gfd.timestamp"
#: README's commands name the user's registry as $REGISTRY (README, "Deploy")
REGISTRY = "registry.example.com/team"


def readme_cutover_commands() -> list[str]:
    """The commands of the first ``sh`` block under README's cut-over heading, continuation
    lines joined, comments left out."""
    text = README.read_text()
    section = text.split("### Cut-over from upstream's chart", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README's cut-over section has no sh block"
    joined = block.group(1).replace("\\\n", " ").replace("$REGISTRY", REGISTRY)
    return [
        " ".join(line.split())
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def upstream_chart(tmp: Path) -> Path:
    with tarfile.open(UPSTREAM_CHART) as archive:
        archive.extractall(tmp, filter="data")
    return tmp / "deployments" / "helm" / "nvidia-device-plugin"


def nvidia(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}


@dataclass
class Cluster:
    """The control plane, and the processes that stand for the pods and controllers."""

    plane: ControlPlane
    helm_bin: Path
    work: Path
    chart: Path
    reference: Reference
    pods: dict[str, tuple[subprocess.Popen[bytes], str]] = field(default_factory=dict)
    master: subprocess.Popen[bytes] | None = None
    ready: dict[str, str] = field(default_factory=dict)

    def helm(self, args: list[str]) -> None:
        kubeconfig = self.plane.kubeconfig(self.work / "admin.kubeconfig", ADMIN_TOKEN)
        args = [str(self.chart) if a == UPSTREAM_CHART_REF else a for a in args]
        done = subprocess.run(
            [str(self.helm_bin), "--kubeconfig", str(kubeconfig), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    # ------------------------------------------------------------ controllers, kubelet

    def reconcile(self) -> None:
        """Start what the cluster's objects say runs, stop what is gone, collect garbage."""
        if self.master is None and self.plane.get(NFD_MASTER):
            conf = self.plane.ok(
                "GET",
                f"/api/v1/namespaces/{UPSTREAM_NAMESPACE}/configmaps/nvdp-node-feature-discovery-master-conf",
            )["data"]["nfd-master.conf"]
            (self.work / "nfd-master.conf").write_text(conf)
            self.plane.ensure_namespace(nfd.NFD_NAMESPACE)
            self.master = nfd.start_master(self.plane, self.work)
        if self.master is not None and not self.plane.get(NFD_MASTER):
            stop(self.master)
        daemonsets = self.items("/apis/apps/v1/daemonsets")
        alive = set()
        for ds in daemonsets:
            (container, *_) = ds["spec"]["template"]["spec"]["containers"]
            if container["name"] in ("gpu-feature-discovery-ctr", "gfd"):
                key = ds["metadata"]["uid"]
                alive.add(key)
                if key not in self.pods:
                    self.pods[key] = self.start_pod(ds, container)
        for key in list(self.pods):
            if key not in alive:
                process, _ = self.pods.pop(key)
                stop(process)
        self.collect_garbage()

    def start_pod(
        self, ds: dict[str, Any], container: dict[str, Any]
    ) -> tuple[subprocess.Popen[bytes], str]:
        meta = ds["metadata"]
        namespace, pod = meta["namespace"], f"{meta['name']}-{NODE}"
        owner = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        spec = ds["spec"]["template"]["spec"]
        self.plane.ok(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "metadata": {"name": pod, "ownerReferences": [owner]},
                "spec": {
                    "nodeName": NODE,
                    "serviceAccountName": spec["serviceAccountName"],
                    "automountServiceAccountToken": False,
                    "containers": [{"name": container["name"], "image": container["image"]}],
                },
            },
        )
        token = pod_token(self.plane, namespace, spec["serviceAccountName"], NODE, pod)
        kubeconfig = self.plane.kubeconfig(self.work / f"{pod}.kubeconfig", token, namespace)
        fields = {"spec.nodeName": NODE, "metadata.namespace": namespace, "metadata.name": pod}
        env = {
            e["name"]: e["value"]
            if "value" in e
            else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
            for e in container.get("env", [])
        }
        env["KUBECONFIG"] = str(kubeconfig)
        if container["name"] == "gfd":
            # the pod's port on the host's loopback only
            port = free_port()
            env["GFD_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
            command = [sys.executable, "-m", "gfd", *container.get("args", [])]
            self.ready[namespace] = f"http://127.0.0.1:{port}/readyz"
        else:
            command = [str(self.reference.upstream), *container.get("args", [])]
        log = open(self.work / f"{pod}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            command,
            env=mock_env(self.reference, self.reference.profile(PROFILE), env),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.work,
        )
        return process, namespace

    def collect_garbage(self) -> None:
        """Delete Pods and NodeFeatures none of whose owners exists (as the garbage collector
        does with background propagation), until nothing more goes."""
        kinds = {"pods": "/api/v1", "nodefeatures": NFD_GROUP}
        while True:
            listed = {kind: self.items(f"{group}/{kind}") for kind, group in kinds.items()}
            daemonsets = self.items("/apis/apps/v1/daemonsets")
            uids = {o["metadata"]["uid"] for o in [*daemonsets, *listed["pods"]]}
            orphans = [
                f"{kinds[kind]}/namespaces/{o['metadata']['namespace']}/{kind}/{o['metadata']['name']}"
                for kind, objects in listed.items()
                for o in objects
                if o["metadata"].get("ownerReferences")
                and not any(r["uid"] in uids for r in o["metadata"]["ownerReferences"])
            ]
            if not orphans:
                return
            for path in orphans:
                # at once, as the kubelet confirms a pod whose container has stopped
                status, answer = self.plane.request("DELETE", f"{path}?gracePeriodSeconds=0")
                assert status in (200, 202, 404), (path, status, answer)

    def items(self, path: str) -> list[dict[str, Any]]:
        """A list, once the server serves it (a new CRD's storage starts with 429s)."""

        def answer() -> tuple[list[dict[str, Any]]] | None:
            status, body = self.plane.request("GET", path)
            assert status in (200, 429), (path, status, body)
            return (list(body["items"]),) if status == 200 else None

        (items,) = self.plane.wait_for(f"GET {path}", answer)
        return items

    def wait_ready(self, namespace: str) -> None:
        url = self.ready[namespace]

        def ready() -> bool:
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(url, timeout=5) as answer,
            ):
                return bool(answer.status == 200)
            return False

        self.plane.wait_for(f"gfd's pod in {namespace} ready", ready, timeout=60)

    def stop_all(self) -> None:
        for process, _ in self.pods.values():
            stop(process)
        if self.master is not None:
            stop(self.master)

    # ------------------------------------------------------------ the README's commands

    def run(self, command: str) -> None:
        words = shlex.split(command)
        if words[0] == "helm":
            self.helm(words[1:])
        else:
            assert words[0] == "kubectl" and "rollout" in words and "status" in words, command
            namespace = words[words.index("-n") + 1]
            self.wait_ready(namespace)
        self.reconcile()


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Poller(threading.Thread):
    """The Node's nvidia.com/ labels, read again and again until stopped."""

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(daemon=True)
        self.plane = plane
        self.samples: list[dict[str, str]] = []
        self.errors: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.samples.append(nvidia(self.plane.node_labels(NODE)))
            except Exception as error:  # any failure to read is reported by the test
                self.errors.append(repr(error))
            time.sleep(0.05)


@pytest.fixture
def cluster(tmp_path: Path, upstream_reference: Reference) -> Iterator[Cluster]:
    helm_bin = require_tool("helm")
    require_tool("nfd-master")
    # upstream's GFD and MPS DaemonSets ask for privileged containers (its values' default)
    server = dataclasses.replace(
        servers.CURRENT, extra_args=(*servers.CURRENT.extra_args, "--allow-privileged=true")
    )
    with started(server) as plane:
        kubelet_node(plane, NODE)
        chart = upstream_chart(tmp_path / "upstream")
        state = Cluster(plane, helm_bin, tmp_path, chart, upstream_reference)
        try:
            yield state
        finally:
            state.stop_all()


@pytest.mark.timeout(400)
def test_readme_cutover_moves_upstreams_release_to_gfd_without_a_label_gap(
    cluster: Cluster,
) -> None:
    plane = cluster.plane
    commands = readme_cutover_commands()
    # the sequence speaks of upstream's chart reference, which the test maps to the fixture
    assert any(UPSTREAM_CHART_REF in c for c in commands)

    # ---- before: upstream's release as upstream documents it, labelling the node
    cluster.helm(
        [
            "install", UPSTREAM_RELEASE, UPSTREAM_CHART_REF, "-n", UPSTREAM_NAMESPACE,
            "--create-namespace", "--set", "gfd.enabled=true",
        ]
    )  # fmt: skip
    cluster.reconcile()
    upstream_object = (
        f"{NFD_GROUP}/namespaces/{UPSTREAM_NAMESPACE}/nodefeatures/nvidia-features-for-{NODE}"
    )
    plane.wait_for("upstream's NodeFeature", lambda: plane.get(upstream_object), timeout=60)
    upstream_labels = plane.ok("GET", upstream_object)["spec"]["labels"]
    before = nfd.wait_for_labels(
        plane, NODE, lambda labels: "nvidia.com/gpu.count" in labels, timeout=60
    )
    assert before == upstream_labels
    assert plane.ok("GET", upstream_object)["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"

    # ---- the switch, polled
    poller = Poller(plane)
    poller.start()
    try:
        for command in commands:
            cluster.run(command)
        gfd_object = (
            f"{NFD_GROUP}/namespaces/gpu-feature-discovery/nodefeatures/nvidia-features-for-{NODE}"
        )
        plane.wait_for("upstream's NodeFeature collected", lambda: not plane.get(upstream_object))
        gfd_labels = plane.ok("GET", gfd_object)["spec"]["labels"]
        # nfd-master has caught up: the node carries gfd's object's labels alone
        after = nfd.wait_for_labels(plane, NODE, lambda labels: labels == gfd_labels, timeout=60)
    finally:
        poller.done.set()
        poller.join()

    # gfd publishes what upstream published (the timestamp aside), and the sequence left
    # upstream's GFD gone and its NFD and device plugin in place
    drop = {TIMESTAMP}
    assert {k: v for k, v in after.items() if k not in drop} == {
        k: v for k, v in before.items() if k not in drop
    }
    assert not plane.get(
        f"/apis/apps/v1/namespaces/{UPSTREAM_NAMESPACE}/daemonsets/nvdp-nvidia-device-plugin-gpu-feature-discovery"
    )
    assert plane.get(NFD_MASTER) and plane.get(DEVICE_PLUGIN)
    assert cluster.master is not None and cluster.master.poll() is None, "nfd-master stopped"

    # no gap: every read of the Node during the switch had every label it had before
    assert not poller.errors, poller.errors[:3]
    assert len(poller.samples) >= 20, f"only {len(poller.samples)} reads of the Node"
    gaps = [sorted(set(before) - set(s)) for s in poller.samples if not set(before) <= set(s)]
    assert not gaps, f"{len(gaps)} of {len(poller.samples)} reads lacked labels, e.g. {gaps[0]}"


def test_upstreams_gfd_switch_alone_would_uninstall_nfd(tmp_path: Path) -> None:
    """Why step 3 sets nfd.enabled=true: the NFD subchart's condition is
    ``nfd.enabled,gfd.enabled``, and upstream's values leave nfd.enabled unset."""
    helm_bin = require_tool("helm")
    chart = upstream_chart(tmp_path)

    def deployments(*values: str) -> set[str]:
        done = subprocess.run(
            [str(helm_bin), "template", UPSTREAM_RELEASE, str(chart), "-n", UPSTREAM_NAMESPACE,
             *(a for v in values for a in ("--set", v))],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return {
            f"{d['kind']}/{d['metadata']['name']}"
            for d in yaml.safe_load_all(done.stdout)
            if d and d["kind"] in ("Deployment", "DaemonSet")
        }

    master = "Deployment/nvdp-node-feature-discovery-master"
    upstream_gfd = "DaemonSet/nvdp-nvidia-device-plugin-gpu-feature-discovery"
    before = deployments("gfd.enabled=true")
    assert {master, upstream_gfd} <= before
    assert master not in deployments("gfd.enabled=false")
    step3 = [c for c in readme_cutover_commands() if "gfd.enabled=false" in c]
    assert len(step3) == 1 and "--set nfd.enabled=true" in step3[0]
    kept = deployments("gfd.enabled=false", "nfd.enabled=true")
    assert kept == before - {upstream_gfd}


def test_readme_sequence_installs_gfd_with_upstreams_output_in_its_own_namespace() -> None:
    (install,) = [c for c in readme_cutover_commands() if c.startswith("helm install gfd ")]
    words = shlex.split(install)
    assert words[words.index("-n") + 1] != UPSTREAM_NAMESPACE
    assert "output=node-feature-api" in words
    assert os.path.isdir(ROOT / words[3])
