"""Per-node configuration on the oldest and newest server: relabel the Node and gfd's labels follow,
with only the RBAC the node-config component or chart installs; the audit log shows one ``get``
of its own Node per pass and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.e2e import servers
from tests.e2e.controlplane import GFD_NAMESPACE, Server
from tests.e2e.current import ControlPlane, pod_token, started
from tests.e2e.gfdrun import RBAC_KINDS, Agent, gfd_requests
from tests.e2e.helm import CHART, NAMESPACE, RELEASE, require_tool, set_args
from tests.e2e.test_helm_install import allowed, helm, wait_until
from tests.helpers import manifests_tool
from tests.process import ROOT

LABEL = "nvidia.com/device-plugin.config"
NODE = "gpu-node-1"
MIG_NODE = Path(ROOT) / "examples" / "snapshots" / "dgx-a100-mig-mixed.yaml"
ENTRIES = {
    "default": "version: v1\nflags:\n  migStrategy: none\n",
    "mig-single": "version: v1\nflags:\n  migStrategy: single\n",
    "mig-mixed": "version: v1\nflags:\n  migStrategy: mixed\n",
}
STRATEGY = "nvidia.com/mig.strategy"
SERVERS = servers.selected()

pytestmark = pytest.mark.timeout(300)


def config_dir(tmp_path: Path, entries: Mapping[str, str]) -> Path:
    root = tmp_path / "available-configs"
    root.mkdir()
    for name, text in entries.items():
        (root / name).write_text(text)
    return root


def features(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def relabel(plane: ControlPlane, value: str | None) -> None:
    plane.ok(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        {"metadata": {"labels": {LABEL: value}}},
        content_type="application/merge-patch+json",
    )


def follow_relabels(plane: ControlPlane, tmp_path: Path, token: str, env: dict[str, str]) -> None:
    """Start gfd as the pod's account, then relabel the node twice; the features file follows."""
    output = tmp_path / "features"
    kubeconfig = plane.kubeconfig(tmp_path / "gfd.kubeconfig", token, GFD_NAMESPACE)
    agent = Agent(
        "--output-file", str(output),
        "--snapshot-file", str(MIG_NODE),
        "--sleep-interval", "0.3s",
        "--no-timestamp",
        env={"NODE_NAME": NODE, "KUBECONFIG": str(kubeconfig), **env},
    )  # fmt: skip
    try:
        chosen = agent.wait_for("node config chosen")[0]
        assert chosen["entry"] == "mig-mixed", agent.log()
        agent.wait_until(lambda: features(output).get(STRATEGY) == "mixed", "mixed labels")
        mark = plane.audit_mark()

        relabel(plane, "mig-single")
        agent.wait_until(lambda: features(output).get(STRATEGY) == "single", "single labels")
        relabel(plane, None)  # no label: the fallback "named" picks the entry "default"
        agent.wait_until(lambda: STRATEGY not in features(output), "no MIG strategy label")
        assert "nvidia.com/mig.capable" in features(output)

        relabel(plane, "no-such-entry")  # keeps the config in force, one error line
        agent.wait_for("node config not applied; the config in force stays")
        agent.passes(3)
        assert STRATEGY not in features(output)
        assert agent.stop() == 0
        requests = set(gfd_requests(plane, mark))
        # the label is followed by the watch of its own node (SPEC §6.4): no read per pass
        assert requests <= {f"watch nodes/{NODE} -> 200", f"list nodes/{NODE} -> 200"}, requests
    finally:
        agent.kill()


def apply(plane: ControlPlane, objects: list[dict[str, object]]) -> None:
    plane.apply_all([o for o in objects if o["kind"] in RBAC_KINDS])


@pytest.mark.parametrize("server", SERVERS, ids=lambda s: s.version)
def test_the_overlays_rbac_lets_gfd_follow_its_node_label(server: Server, tmp_path: Path) -> None:
    tool = manifests_tool()
    objects = tool.render(tool.Variant("nfd-features-file", ("node-config",)))
    with started(server) as plane:
        apply(plane, objects)
        plane.create_node(NODE, {LABEL: "mig-mixed"})
        plane.create_node("gpu-node-2", {LABEL: "mig-single"})
        token = pod_token(plane, GFD_NAMESPACE, "gfd", NODE)
        wait_until(lambda: allowed(plane, token, "get", "nodes"), "the ClusterRole never applied")
        # get, list and watch (its own node, watched: SPEC §6.4), and no write
        for verb in ("list", "watch"):
            assert allowed(plane, token, verb, "nodes"), verb
        for verb in ("patch", "update"):
            assert not allowed(plane, token, verb, "nodes"), verb
        (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
        (container,) = daemonset["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env["CONFIG_FILE_SRCDIR"] = str(config_dir(tmp_path, ENTRIES))
        follow_relabels(plane, tmp_path, token, without_pod_paths(env))


def without_pod_paths(env: dict[str, str]) -> dict[str, str]:
    """The DaemonSet's variables less those naming the pod's own mounts and ports."""
    return {k: v for k, v in env.items() if k not in ("GFD_METRICS_ADDRESS", "GFD_OUTPUT_FILE")}


@pytest.mark.parametrize("server", SERVERS, ids=lambda s: s.version)
def test_the_charts_rbac_lets_gfd_follow_its_node_label(server: Server, tmp_path: Path) -> None:
    helm_bin = require_tool("helm")
    with started(server) as plane:
        plane.create_node(NODE, {LABEL: "mig-mixed"})
        helm(
            helm_bin, plane, tmp_path,
            "install", RELEASE, str(CHART), "--create-namespace",
            *set_args({"config.map": ENTRIES, "output": "features-file"}),
        )  # fmt: skip
        base = f"/api/v1/namespaces/{NAMESPACE}"
        daemonset = plane.ok("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/gfd")
        pod = daemonset["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is True
        (container,) = pod["containers"]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        # upstream's config-manager variables (daemonset-gfd.yml:113-122 at v0.20.0)
        assert env["CONFIG_FILE_SRCDIR"] == "/config"
        assert (env["NODE_LABEL"], env["FALLBACK_STRATEGIES"]) == (LABEL, "named,single")
        # the ConfigMap as the pod would see it mounted
        (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
        config_map = plane.ok("GET", f"{base}/configmaps/{volume['configMap']['name']}")
        env["CONFIG_FILE_SRCDIR"] = str(config_dir(tmp_path, config_map["data"]))
        token = pod_token(plane, NAMESPACE, "gfd", NODE)
        wait_until(lambda: allowed(plane, token, "get", "nodes"), "the ClusterRole never applied")
        assert allowed(plane, token, "watch", "nodes")  # its own node, watched (SPEC §6.4)
        assert not allowed(plane, token, "patch", "nodes")
        follow_relabels(plane, tmp_path, token, without_pod_paths(env))

        helm(helm_bin, plane, tmp_path, "uninstall", RELEASE, "--wait", "--timeout", "60s")
        path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/gfd-node-config"
        wait_until(lambda: plane.request("GET", path)[0] == 404, "ClusterRole left behind")
