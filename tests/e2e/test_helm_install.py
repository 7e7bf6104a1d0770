"""The Helm chart installed, upgraded through its modes and uninstalled on the current server, gfd
running as the chart's service account: every RBAC verb is needed, the policy refuses another
node, and uninstall leaves nothing of the release behind."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import nfd, servers
from tests.e2e.controlplane import Server
from tests.e2e.current import ADMIN_TOKEN, ControlPlane, pod_token, started
from tests.e2e.fixtures_shared import gfd_as, oneshot_labels
from tests.e2e.helm import CHART, IMAGE, NAMESPACE, RELEASE, set_args

CLUSTER_OBJECTS = [
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/gfd-node-labels",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gfd-node-labels",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/gfd-node-labels",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/gfd-node-labels",
]
ROLE = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/roles/gfd"
CLUSTER_ROLE = CLUSTER_OBJECTS[0]


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with started() as plane:
        plane.apply_all([c for c in nfd.crds() if c["spec"]["names"]["kind"] == "NodeFeature"])
        plane.create_node("gpu-node-1", {"nvidia.com/gpu.present": "true"})
        plane.create_node("gpu-node-2")
        yield plane


def helm(helm_bin: Path, plane: ControlPlane, tmp: Path, *args: str) -> str:
    kubeconfig = plane.kubeconfig(tmp / "admin.kubeconfig", ADMIN_TOKEN)
    if args[0] in ("install", "upgrade"):
        args = (*args, *set_args(IMAGE))
    done = subprocess.run(
        [str(helm_bin), "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def gfd(plane: ControlPlane, tmp: Path, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return gfd_as(plane, tmp, token, NAMESPACE, "--namespace", NAMESPACE, *args)


def exists(plane: ControlPlane, path: str) -> bool:
    return plane.request("GET", path)[0] == 200


def nvidia_labels(plane: ControlPlane, node: str) -> dict[str, str]:
    labels = plane.ok("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels", {})
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}


def wait_until(check: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def allowed(plane: ControlPlane, token: str, verb: str, resource: str) -> bool:
    """The server's own answer (SelfSubjectAccessReview) for TOKEN."""
    group = "nfd.k8s-sigs.io" if resource == "nodefeatures" else ""
    attributes = {"verb": verb, "resource": resource, "group": group}
    if resource != "nodes":
        attributes["namespace"] = NAMESPACE
    review = plane.ok(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {"spec": {"resourceAttributes": attributes}},
        token=token,
    )
    return bool(review["status"].get("allowed"))


def set_rules(plane: ControlPlane, path: str, rules: list[dict[str, Any]]) -> None:
    plane.ok("PATCH", path, {"rules": rules}, content_type="application/merge-patch+json")


def without_verb(
    plane: ControlPlane, token: str, path: str, resource: str, verb: str
) -> list[dict[str, Any]]:
    """Remove VERB from the rule for RESOURCE (as an admin), wait until the authorizer has
    it; return the original rules."""
    original = [dict(r) for r in plane.ok("GET", path)["rules"]]
    rules = []
    for rule in original:
        verbs = [v for v in rule["verbs"] if not (resource in rule["resources"] and v == verb)]
        if verbs:
            rules.append({**rule, "verbs": verbs})
    set_rules(plane, path, rules)
    wait_until(
        lambda: not allowed(plane, token, verb, resource), f"{verb} {resource} still allowed"
    )
    return original


def restore(
    plane: ControlPlane,
    token: str,
    path: str,
    rules: list[dict[str, Any]],
    verb: str,
    resource: str,
) -> None:
    set_rules(plane, path, rules)
    wait_until(
        lambda: allowed(plane, token, verb, resource), f"{verb} {resource} not allowed again"
    )


def test_install_upgrade_uninstall_with_gfd_as_the_chart_service_account(
    helm_bin: Path, plane: ControlPlane, tmp_path: Path
) -> None:
    # ---- install: node-labels
    helm(
        helm_bin,
        plane,
        tmp_path,
        "install",
        RELEASE,
        str(CHART),
        "--create-namespace",
        *set_args({"output": "node-labels"}),
    )
    for path in CLUSTER_OBJECTS:
        assert exists(plane, path), path
    assert exists(plane, f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/gfd")
    token = pod_token(plane, NAMESPACE, "gfd", "gpu-node-1")
    expected_labels = oneshot_labels()

    # the policy is loaded asynchronously: wait until it refuses the other node -- probed
    # with a dry run (a gfd run per probe is slow, and labels the node while it is loading)
    def refused_elsewhere() -> bool:
        status, answer = plane.request(
            "PATCH",
            "/api/v1/nodes/gpu-node-2?dryRun=All",
            {"metadata": {"labels": {"nvidia.com/gpu.count": "1"}}},
            token=token,
            content_type="application/merge-patch+json",
        )
        return status == 403 and "ValidatingAdmissionPolicy" in str(answer)

    wait_until(
        refused_elsewhere, "the chart's admission policy never refused another node", timeout=60
    )
    done = gfd(
        plane, tmp_path, token, "--oneshot", "--use-node-labels", "--node-name", "gpu-node-2"
    )
    assert done.returncode != 0, "gfd labelled another node"
    assert nvidia_labels(plane, "gpu-node-2") == {}

    done = gfd(
        plane, tmp_path, token, "--oneshot", "--use-node-labels", "--node-name", "gpu-node-1"
    )
    assert done.returncode == 0, done.stderr
    assert nvidia_labels(plane, "gpu-node-1") == {
        **expected_labels,
        "nvidia.com/gpu.present": "true",
    }

    # each verb of the ClusterRole is needed
    for verb in ("get", "patch"):
        original = without_verb(plane, token, CLUSTER_ROLE, "nodes", verb)
        try:
            done = gfd(
                plane,
                tmp_path,
                token,
                "--cleanup",
                "--use-node-labels",
                "--node-name",
                "gpu-node-1",
            )
            assert done.returncode != 0, f"gfd --cleanup worked without nodes {verb}"
            assert set(expected_labels) <= set(nvidia_labels(plane, "gpu-node-1"))
        finally:
            restore(plane, token, CLUSTER_ROLE, original, verb, "nodes")

    # ---- upgrade to mode cleanup-job: the DaemonSet goes, identity and policy stay
    helm(
        helm_bin,
        plane,
        tmp_path,
        "upgrade",
        RELEASE,
        str(CHART),
        "--reuse-values",
        *set_args({"mode": "cleanup-job", "job.nodes": ["gpu-node-1"]}),
    )
    assert not exists(plane, f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/gfd")
    job = plane.ok("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/gfd-cleanup-gpu-node-1")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-node-1" and pod["serviceAccountName"] == "gfd"
    assert pod["containers"][0]["args"] == ["--cleanup"]
    # what that Job's pod runs, as that account on that node
    done = gfd(
        plane, tmp_path, token, "--cleanup", "--use-node-labels", "--node-name", "gpu-node-1"
    )
    assert done.returncode == 0, done.stderr
    assert nvidia_labels(plane, "gpu-node-1") == {"nvidia.com/gpu.present": "true"}

    # ---- upgrade to node-feature-api: cluster-wide objects go, the Role comes
    helm(
        helm_bin,
        plane,
        tmp_path,
        "upgrade",
        RELEASE,
        str(CHART),
        *set_args({"output": "node-feature-api"}),
    )
    for path in CLUSTER_OBJECTS:
        assert not exists(plane, path), path
    assert exists(plane, ROLE)
    nodefeature = (
        f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}"
        "/nodefeatures/nvidia-features-for-gpu-node-1"
    )
    args = ("--oneshot", "--use-node-feature-api", "--node-name", "gpu-node-1")

    wait_until(
        lambda: allowed(plane, token, "create", "nodefeatures"), "the Role never took effect"
    )
    done = gfd(plane, tmp_path, token, *args)
    assert done.returncode == 0, done.stderr
    assert plane.ok("GET", nodefeature)["spec"]["labels"] == expected_labels

    # each verb of the nodefeatures rule is needed: get always, create for a new object,
    # update for a changed one
    for verb, prepare, extra in (
        ("get", None, ()),
        ("create", nodefeature, ()),
        ("update", None, ("--mig-strategy", "single")),
    ):
        if prepare:
            plane.ok("DELETE", prepare)
        original = without_verb(plane, token, ROLE, "nodefeatures", verb)
        try:
            done = gfd(plane, tmp_path, token, *args, *extra)
            assert done.returncode != 0, f"gfd published without nodefeatures {verb}"
        finally:
            restore(plane, token, ROLE, original, verb, "nodefeatures")
        done = gfd(plane, tmp_path, token, *args, *extra)
        assert done.returncode == 0, f"after nodefeatures {verb} was back: {done.stderr}"

    # ---- uninstall: nothing of the release is left
    helm(helm_bin, plane, tmp_path, "uninstall", RELEASE, "--wait", "--timeout", "60s")
    for path in [*CLUSTER_OBJECTS, ROLE, f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/gfd"]:
        wait_until(lambda path=path: not exists(plane, path), f"{path} left after uninstall")


@pytest.mark.parametrize("server", servers.selected(), ids=lambda s: s.version)
def test_the_nfd_outputs_install_on_every_server(
    helm_bin: Path, server: Server, tmp_path: Path
) -> None:
    """The oldest and the newest release: features-file and node-feature-api install, gfd
    publishes with the chart's Role, and uninstall leaves nothing (node-labels needs the
    admission policy, so 1.30+: the test above)."""
    with started(server) as plane:
        plane.apply_all([c for c in nfd.crds() if c["spec"]["names"]["kind"] == "NodeFeature"])
        plane.create_node("gpu-node-1")
        helm(
            helm_bin, plane, tmp_path, "install", RELEASE, str(CHART), "--create-namespace",
            *set_args({"output": "features-file"}),
        )  # fmt: skip
        daemonset = plane.ok("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/gfd")
        env = {
            e["name"]: e.get("value")
            for e in daemonset["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["GFD_OUTPUT_FILE"] == "/etc/kubernetes/node-feature-discovery/features.d/gfd"
        assert not exists(plane, ROLE)

        helm(
            helm_bin,
            plane,
            tmp_path,
            "upgrade",
            RELEASE,
            str(CHART),
            *set_args({"output": "node-feature-api"}),
        )
        token = pod_token(plane, NAMESPACE, "gfd", "gpu-node-1")
        wait_until(
            lambda: allowed(plane, token, "create", "nodefeatures"), "the Role never took effect"
        )
        done = gfd(
            plane,
            tmp_path,
            token,
            "--oneshot",
            "--use-node-feature-api",
            "--node-name",
            "gpu-node-1",
        )
        assert done.returncode == 0, done.stderr
        path = (
            f"/apis/nfd.k8s-sigs.io/v1alpha1/namespaces/{NAMESPACE}"
            "/nodefeatures/nvidia-features-for-gpu-node-1"
        )
        assert plane.ok("GET", path)["spec"]["labels"]["nvidia.com/gpu.count"]

        helm(helm_bin, plane, tmp_path, "uninstall", RELEASE, "--wait", "--timeout", "60s")
        for gone in (ROLE, f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/gfd"):
            wait_until(lambda gone=gone: not exists(plane, gone), f"{gone} left after uninstall")
