"""A real NFD reads what gfd writes, on the current control plane.

- Features file: gfd writes its file; nfd-worker with only the local source reads it (from the
  fixed features.d, in a private mount namespace) and publishes its NodeFeature; nfd-master
  labels the node. The node's nvidia.com/ labels equal `gfd --oneshot` output, byte for byte.
- The daemon's lifecycle through NFD: labels follow a changed file; a restarted
  gfd never takes a label off the node (the file, with its `# +expiry-time`, stays while
  it is down); gfd stopped for good and NFD ages the labels out, nfd-master removes them.
- A label with an empty value: what each server does with it (v1.20 refuses the object).
- NodeFeature mode: the README's NodeFeatureRule over gfd's `spec.features` labels a node
  through the real nfd-master.
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
from typing import Any

import pytest
import yaml

from tests.e2e import fixtures_shared as shared
from tests.e2e import nfd, servers
from tests.e2e.current import ADMIN_TOKEN, ControlPlane, kubelet_node, pod_token, started
from tests.e2e.fixtures_shared import run_gfd as gfd
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


def nodefeature_gfd(
    action: str, kubeconfig: Path, node: str, snapshot: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """gfd in NodeFeature mode for node, on one of the example snapshots."""
    api = ("--use-node-feature-api", "--kubeconfig", str(kubeconfig), "--node-name", node)
    source = ("--snapshot-file", str(SNAPSHOTS / snapshot), "--no-timestamp")
    return gfd(action, *api, "--namespace", GFD_NAMESPACE, *source, *args)


def oneshot_labels(snapshot: str, *args: str) -> dict[str, str]:
    return shared.oneshot_labels(SNAPSHOTS / snapshot, *args)


CASES = [
    (snapshot.name, ("--mig-strategy", strategy))
    for snapshot in sorted(SNAPSHOTS.glob("*.yaml"))
    for strategy in ("none", "single", "mixed")
]


def oneshot_into_features_dir(tmp_path: Path, snapshot: str, *args: str) -> Path:
    """A fresh ``features.d`` holding what ``gfd --oneshot`` wrote for ``snapshot``."""
    features = tmp_path / "features.d"
    features.mkdir()
    shared.oneshot_stdout(SNAPSHOTS / snapshot, "--output-file", str(features / "gfd"), *args)
    return features


@pytest.mark.parametrize(("snapshot", "args"), CASES, ids=[f"{s}-{a[1]}" for s, a in CASES])
def test_features_file_read_by_nfd_worker_labels_the_node_as_gfd_oneshot(
    plane: ControlPlane, workdir: Path, tmp_path: Path, snapshot: str, args: tuple[str, ...]
) -> None:
    features = oneshot_into_features_dir(tmp_path, snapshot, *args)
    expected = oneshot_labels(snapshot, *args)
    if "" in expected.values() and refuses_empty_strings(plane):
        pytest.skip("a label with an empty value: see test_a_label_with_an_empty_value_*")

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


def daemon(features: Path, config: Path, *extra: str) -> subprocess.Popen[bytes]:
    inputs = ("--snapshot-file", str(shared.DGX_A100), "--config-file", str(config))
    output = ("--output-file", str(features / "gfd"), "--sleep-interval", "1s")
    return subprocess.Popen(
        [sys.executable, "-m", "gfd", *inputs, *output, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_nfd_follows_the_daemon_keeps_the_labels_over_a_restart_and_expires_them(
    plane: ControlPlane, workdir: Path, tmp_path: Path
) -> None:
    """No gap on restart, through the real nfd-worker and nfd-master: the file carries
    `# +expiry-time`; a stopped gfd leaves it, so a restart never takes a label off the node;
    a gfd gone for good is aged out by NFD itself once the horizon has passed."""
    features = tmp_path / "features.d"
    features.mkdir()
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: none\n")
    # the shortest horizon gfd accepts (60 s: nfd-worker's default re-read interval)
    horizon = ("--expiry-horizon", "60s")
    first = daemon(features, config, *horizon)
    second: subprocess.Popen[bytes] | None = None
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
        assert (features / "gfd").read_text().startswith("# +expiry-time=")
        assert {
            k: v for k, v in labels.items() if k != "nvidia.com/gfd.timestamp"
        } == oneshot_labels("dgx-a100.yaml")
        # A changed config (SIGHUP): the new labels reach the node through NFD.
        config.write_text("version: v1\nflags:\n  migStrategy: single\n")
        first.send_signal(signal.SIGHUP)
        labels = nfd.wait_for_labels(
            plane, "gpu-node-2", lambda got: got.get("nvidia.com/mig.strategy") == "single"
        )
        keys = set(labels)

        # Restart: the file stays while no gfd runs; the node keeps every label throughout.
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
        assert (features / "gfd").exists()
        written = (features / "gfd").stat().st_mtime_ns
        second = daemon(features, config, *horizon)
        samples = []
        deadline = time.monotonic() + 60
        while (features / "gfd").stat().st_mtime_ns == written:  # the new gfd's first write
            assert time.monotonic() < deadline, "the restarted gfd never wrote its file"
            samples.append(set(plane.node_labels("gpu-node-2")))
            time.sleep(0.2)
        for _ in range(15):  # and nfd-worker's next rounds (every 1 s) after it
            samples.append(set(plane.node_labels("gpu-node-2")))
            time.sleep(0.2)
        lost = [keys - sample for sample in samples if not keys <= sample]
        assert lost == [], f"labels lost during the restart: {lost[:3]}"

        # Stopped for good: the file stays, its expiry-time passes, and nfd-worker drops
        # the labels; nfd-master removes them from the node.
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
        nfd.wait_for_labels(plane, "gpu-node-2", lambda got: got == {}, timeout=90)
        assert (features / "gfd").exists()  # NFD's expiry, not a deleted file
    finally:
        for process in (first, second, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def serves_admission_policies(plane: ControlPlane) -> bool:
    resources = plane.ok("GET", "/apis/admissionregistration.k8s.io/v1")["resources"]
    return "validatingadmissionpolicies" in {r["name"] for r in resources}


def test_nodefeature_object_of_gfd_labels_the_node_through_nfd_master(
    plane: ControlPlane, tmp_path: Path
) -> None:
    # The nodefeature overlay, as rendered: namespace, service account, Role, RoleBinding.
    # On the current server with its admission policy too (v1.20 has no
    # ValidatingAdmissionPolicy): the token is bound to a pod on gpu-node-3.
    skip = {"DaemonSet"}
    if not serves_admission_policies(plane):
        skip |= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    plane.apply_all([o for o in tool.render(tool.Variant("nodefeature")) if o["kind"] not in skip])
    token = pod_token(plane, GFD_NAMESPACE, "gfd", "gpu-node-3")
    kubeconfig = plane.kubeconfig(tmp_path / "gfd.kubeconfig", token, GFD_NAMESPACE)
    expected = oneshot_labels("dgx-a100-mig-mixed.yaml", "--mig-strategy", "mixed")
    common = ("gpu-node-3", "dgx-a100-mig-mixed.yaml", "--mig-strategy", "mixed")
    done = nodefeature_gfd("--oneshot", kubeconfig, *common)
    assert done.returncode == 0, done.stderr
    labels = nfd.wait_for_labels(plane, "gpu-node-3", lambda got: got == expected)
    assert labels == expected

    # --cleanup deletes the object (as an admin: the agent's Role has no delete; owner
    # references remove it in a cluster) and nfd-master takes the labels away.
    admin = plane.kubeconfig(tmp_path / "admin.kubeconfig", ADMIN_TOKEN)
    done = nodefeature_gfd("--cleanup", admin, *common)
    assert done.returncode == 0, done.stderr
    nfd.wait_for_labels(plane, "gpu-node-3", lambda got: got == {})


# gfd's labels with an empty value, kept for upstream parity: the single strategy's INVALID
# set has nvidia.com/gpu.sharing-strategy= (and a two-part driver version cuda.driver.rev=).
EMPTY_VALUE_CASE = ("dgx-a100-mig-varied.yaml", "--mig-strategy", "single")
EMPTY_VALUE_KEY = "nvidia.com/gpu.sharing-strategy"


def refuses_empty_strings(plane: ControlPlane) -> bool:
    """kube-apiserver v1.20 refuses a custom object whose string map holds "" (it reports the
    value as "null": `must be of type string: "null"`); the current release takes it."""
    return plane.server.version.startswith("v1.20.")


def test_a_label_with_an_empty_value_through_nfd_worker(
    plane: ControlPlane, workdir: Path, tmp_path: Path
) -> None:
    """Features-file mode. Current server: nfd-worker publishes the empty label and nfd-master
    puts it on the node. v1.20: the server refuses nfd-worker's whole NodeFeature (422), so
    the node gets none of the file's labels -- nor any other feature of that worker."""
    snapshot, *args = EMPTY_VALUE_CASE
    features = oneshot_into_features_dir(tmp_path, snapshot, *args)
    expected = oneshot_labels(snapshot, *args)
    assert expected[EMPTY_VALUE_KEY] == ""
    node = "gpu-node-4"
    kubelet_node(plane, node)
    log = workdir / f"nfd-worker-{node}.log"
    worker = nfd.run_worker(plane, workdir, features, node, "-oneshot")
    path = f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{nfd.NFD_NAMESPACE}/nodefeatures/{node}"
    if refuses_empty_strings(plane):
        assert worker.returncode != 0
        text = log.read_text()
        assert f"labels.{EMPTY_VALUE_KEY}" in text and 'must be of type string: \\"null\\"' in text
        time.sleep(2)
        assert plane.node_labels(node).keys().isdisjoint(expected)
    else:
        assert worker.returncode == 0, log.read_text()[-3000:]
        assert plane.ok("GET", path)["spec"]["labels"] == expected
        labels = nfd.wait_for_labels(plane, node, lambda got: got == expected)
        assert labels[EMPTY_VALUE_KEY] == ""


def test_a_label_with_an_empty_value_in_gfds_nodefeature(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """NodeFeature mode. Current server: the object is taken and nfd-master labels the node,
    the empty value included. v1.20: the server refuses gfd's object with 422; gfd says so
    in one line (no traceback) and exits non-zero; nothing reaches the node."""
    snapshot, *args = EMPTY_VALUE_CASE
    node = "gpu-node-5"
    kubelet_node(plane, node)
    plane.ensure_namespace(GFD_NAMESPACE)
    admin = plane.kubeconfig(tmp_path / "admin.kubeconfig", ADMIN_TOKEN)
    done = nodefeature_gfd("--oneshot", admin, node, snapshot, *args)
    expected = oneshot_labels(snapshot, *args)
    path = (
        f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{GFD_NAMESPACE}"
        f"/nodefeatures/nvidia-features-for-{node}"
    )
    if refuses_empty_strings(plane):
        assert done.returncode != 0
        assert "Traceback" not in done.stderr
        # gfd's one line cuts the server's message short. The same labels, sent as they are:
        # refused for the empty value and nothing else (without it the object is taken).
        assert "422 Invalid" in done.stderr and "spec.labels" in done.stderr, done.stderr
        collection = path.rsplit("/", 1)[0] + "?dryRun=All"

        def dry_run(labels: dict[str, str]) -> tuple[int, Any]:
            body = {
                "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
                "kind": "NodeFeature",
                "metadata": {"name": f"nvidia-features-for-{node}"},
                "spec": {"labels": labels},
            }
            return plane.request("POST", collection, body)

        status, answer = dry_run(expected)
        assert status == 422, answer
        assert f'spec.labels.{EMPTY_VALUE_KEY}: Invalid value: "null"' in answer["message"]
        non_empty = {k: v for k, v in expected.items() if v}
        assert dry_run(non_empty)[0] == 201
        assert plane.get(path) is None
        assert plane.node_labels(node).keys().isdisjoint(expected)
    else:
        assert done.returncode == 0, done.stderr
        assert plane.ok("GET", path)["spec"]["labels"][EMPTY_VALUE_KEY] == ""
        labels = nfd.wait_for_labels(plane, node, lambda got: got == expected)
        assert labels[EMPTY_VALUE_KEY] == ""


def readme_nodefeaturerule() -> dict[str, Any]:
    """The worked example of the README's "Features for NodeFeatureRules" section, as is."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Features for NodeFeatureRules") :]
    block = section[section.index("```yaml\n") + len("```yaml\n") :]
    rule = yaml.safe_load(block[: block.index("```")])
    assert rule["kind"] == "NodeFeatureRule"
    return dict(rule)


def test_the_readme_nodefeaturerule_labels_by_gfds_features_through_nfd_master(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """NodeFeature mode: gfd's spec.features on two nodes -- 8 x H100 80GB and 8 x A100 40GB;
    the README's rule (at least four GPUs of 80 GiB or more) labels the first only."""
    rule = readme_nodefeaturerule()
    (label,) = rule["spec"]["rules"][-1]["labels"]
    plane.ensure_namespace(GFD_NAMESPACE)
    admin = plane.kubeconfig(tmp_path / "admin.kubeconfig", ADMIN_TOKEN)
    nodes = {"gpu-node-6": "hgx-h100-nvswitch.yaml", "gpu-node-7": "dgx-a100.yaml"}
    for node, snapshot in nodes.items():
        kubelet_node(plane, node)
        done = nodefeature_gfd("--oneshot", admin, node, snapshot)
        assert done.returncode == 0, done.stderr
        nfd.wait_for_labels(plane, node, lambda got: "nvidia.com/gpu.count" in got)
    plane.apply(rule)
    plane.wait_for(
        f"{label} on gpu-node-6",
        lambda: plane.node_labels("gpu-node-6").get(label) == "true",
        timeout=60,
    )
    # the same master, the same rule: the A100 40GB node does not match
    time.sleep(2)
    assert label not in plane.node_labels("gpu-node-7")


def test_nfd_master_log_has_no_rejected_gfd_label(workdir: Path, plane: ControlPlane) -> None:
    time.sleep(1)
    log = (workdir / "nfd-master.log").read_text()
    rejected = [
        line
        for line in log.splitlines()
        if "nvidia.com" in line and ("invalid" in line.lower() or "denied" in line.lower())
    ]
    assert rejected == []
