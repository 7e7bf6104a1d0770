"""The kustomize overlays render, are schema-valid, configure each gfd workload for its use, and
their admission policies (run with cel-python) admit what they must. A missing renderer or
package skips outside CI and fails in CI (CI=true)."""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
import yaml

from gfd import __version__
from gfd.errors import UsageError
from gfd.labels import keys
from gfd.options import NFD_FEATURES_FILE, OPTIONS
from gfd.settings import Settings, resolve
from tests.helpers import SAFE_LOADER, manifests_tool, table
from tests.process import free_port, http_get

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
FEATURES_DIR = str(Path(NFD_FEATURES_FILE).parent)
MACHINE_TYPE_DEFAULT = Settings().machine_type_file
NAMESPACE = "gpu-feature-discovery"
Obj = dict[str, Any]
Render = Callable[[str], list[Obj]]


tool = manifests_tool()


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"{reason} -- CI must install it (see .ci/run)")
    pytest.skip(reason)


def _require_module(name: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        _unavailable(f"the {package} package is not installed")
        raise


@pytest.fixture(scope="module")
def rendered() -> Render:
    """Render an overlay (or 'overlay+component') once per module, as scripts/manifests.py does."""
    if tool.kustomize_command() is None:
        _unavailable("no kustomize renderer: kubectl, kustomize or $KUSTOMIZE")
    cache: dict[str, list[Obj]] = {}

    def get(name: str) -> list[Obj]:
        if name not in cache:
            overlay, *components = name.split("+")
            text = tool.build(tool.Variant(overlay, tuple(components)))
            cache[name] = load_objects(tool.substitute_placeholders(text))
        return copy.deepcopy(cache[name])

    return get


def load_objects(rendered: str) -> list[Obj]:
    """``tool.load_objects`` with libyaml's parser where PyYAML has it (same objects, faster)."""
    return [doc for doc in yaml.load_all(rendered, Loader=SAFE_LOADER) if doc is not None]


_validated: dict[tuple[str, str], list[str]] = {}


def validate_objects(objects: list[Obj], versions: list[str]) -> list[str]:
    """``tool.validate_objects``, remembered per (object, version) (variants share objects)."""
    errors = []
    for obj in objects:
        text = json.dumps(obj, sort_keys=True)
        for version in versions:
            if (text, version) not in _validated:
                _validated[text, version] = tool.validation_errors(obj, version)
            errors.extend(_validated[text, version])
    return errors


@pytest.fixture(scope="module")
def versions() -> list[str]:
    _require_module("kubernetes_validate", "kubernetes-validate")
    return list(tool.kubernetes_versions())


# ---------------------------------------------------------------------- helpers

# overlay -> (kind of the gfd workload, the output gfd must select)
WORKLOADS = {
    "nfd-features-file": ("DaemonSet", "file"),
    "nfd-worker-sidecar": ("DaemonSet", "file"),
    "nodefeature": ("DaemonSet", "nodefeature"),
    "node-labels": ("DaemonSet", "node-labels"),
    "oneshot-job": ("Job", "file"),
    "node-labels-cleanup-job": ("Job", "node-labels"),
}
DAEMONSETS = [o for o, (kind, _) in WORKLOADS.items() if kind == "DaemonSet"]
JOBS = [o for o, (kind, _) in WORKLOADS.items() if kind == "Job"]
EXPECTED_OVERLAYS = set(WORKLOADS)
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}  # fmt: skip


def only(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    result: Obj = found[0]
    return result


def workload(overlay: str, objects: list[Obj]) -> Obj:
    kind, _ = WORKLOADS[overlay.split("+")[0]]
    return only(objects, kind)


def pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


def gfd_container(obj: Obj) -> Obj:
    containers: list[Obj] = [c for c in pod_spec(obj)["containers"] if c["name"] == "gfd"]
    assert len(containers) == 1
    return containers[0]


def effective_security(obj: Obj, container: Obj) -> Obj:
    """Pod-level security settings overridden by the container's, as the kubelet does."""
    merged = dict(pod_spec(obj).get("securityContext") or {})
    merged.update(container.get("securityContext") or {})
    return merged


def container_environment(obj: Obj, container: Obj) -> dict[str, str]:
    """The container's environment as the kubelet would set it on a sample node."""
    field_values = {
        "spec.nodeName": pod_spec(obj).get("nodeName") or tool.SAMPLE_NODE,
        "metadata.namespace": obj["metadata"].get("namespace", "default"),
        "metadata.name": f"{obj['metadata']['name']}-x7k2p",
    }
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            env[item["name"]] = field_values[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def gfd_settings(obj: Obj, container: Obj) -> Settings:
    """What gfd itself makes of the container's args and environment."""
    flags = {o.flag: o for o in OPTIONS if o.flag}
    cli_values: Obj = {}
    actions = {"dump_snapshot": False, "cleanup": False}
    for arg in [*container.get("command", [])[1:], *container.get("args", [])]:
        flag, sep, value = arg.partition("=")
        if flag in ("--cleanup", "--dump-snapshot"):
            actions[flag[2:].replace("-", "_")] = True
            continue
        option = flags.get(flag)
        assert option is not None, f"argument {arg!r} is not a gfd flag"
        assert option.is_bool or sep, f"give {flag}'s value as {flag}=VALUE"
        cli_values[option.name] = value if sep else True
    return resolve(cli_values, container_environment(obj, container), **actions)


def mounts(container: Obj) -> dict[str, Obj]:
    return {m["mountPath"].rstrip("/") or "/": m for m in container.get("volumeMounts", [])}


def volumes(obj: Obj) -> dict[str, Obj]:
    return {v["name"]: v for v in pod_spec(obj).get("volumes", [])}


def assert_non_root_unprivileged(security: Obj) -> None:
    # gfd never runs as root, even where it writes the root-owned host features.d (an init
    # container makes that directory group-writable: see features-file.yaml)
    assert security["allowPrivilegeEscalation"] is False
    assert security.get("privileged", False) is False
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] != 0


def port_number(container: Obj, port: int | str) -> int:
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert named, f"probe port {port!r} is not a named port of the container"
    return int(named[0])


# ---------------------------------------------------------------------- rendering, schemas


def test_there_is_one_overlay_per_use() -> None:
    assert set(tool.overlays()) == EXPECTED_OVERLAYS


@pytest.mark.parametrize("overlay", sorted(EXPECTED_OVERLAYS))
def test_overlay_renders_and_every_object_is_schema_valid(
    overlay: str, rendered: Render, versions: list[str]
) -> None:
    objects = rendered(overlay)
    assert objects
    assert validate_objects(objects, versions) == []


@pytest.mark.parametrize(
    "variant", [v.name for v in tool.variants() if v.components], ids=lambda v: v
)
def test_overlay_with_component_renders_and_is_schema_valid(
    variant: str, rendered: Render, versions: list[str]
) -> None:
    assert validate_objects(rendered(variant), versions) == []


def test_validation_targets_the_oldest_supported_and_the_newest_kubernetes(
    versions: list[str],
) -> None:
    assert versions[0] == "1.30"  # ValidatingAdmissionPolicy v1, node name in SA tokens
    assert len(versions) == 2 and versions[1] > versions[0]


TYPOS: list[tuple[str, Callable[[Obj], None]]] = [
    ("container securityContext key",
     lambda ds: gfd_container(ds)["securityContext"].update(readOnlyRootFilesytem=True)),
    ("pod spec key", lambda ds: pod_spec(ds).update(toleration=pod_spec(ds)["tolerations"])),
    ("probe key", lambda ds: gfd_container(ds)["livenessProbe"].update(httpGett={"path": "/"})),
    ("top-level spec key", lambda ds: ds["spec"].update(selecter=ds["spec"]["selector"])),
    ("wrong type", lambda ds: gfd_container(ds)["ports"][0].update(containerPort="8080")),
]  # fmt: skip


@pytest.mark.parametrize("mutate", [m for _, m in TYPOS], ids=[n for n, _ in TYPOS])
def test_a_typo_in_a_field_is_rejected(
    mutate: Callable[[Obj], None], rendered: Render, versions: list[str]
) -> None:
    daemonset = only(rendered("nfd-features-file"), "DaemonSet")
    assert validate_objects([daemonset], versions) == []
    mutate(daemonset)
    errors = validate_objects([daemonset], versions)
    assert len(errors) == len(versions), errors


def test_a_typo_in_the_admission_policy_is_rejected(rendered: Render, versions: list[str]) -> None:
    policy = only(rendered("node-labels"), "ValidatingAdmissionPolicy")
    policy["spec"]["validations"][0]["messageExpresion"] = "'x'"
    assert validate_objects([policy], versions)


def test_a_typo_in_a_kustomize_patch_is_caught_after_rendering(
    tmp_path: Path, versions: list[str]
) -> None:
    # kustomize itself accepts unknown fields; the schema check is what catches them.
    if tool.kustomize_command() is None:
        _unavailable("no kustomize renderer")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(tool.OVERLAYS / "nfd-features-file", overlay)
    kustomization = (
        f"resources: [{base}]\n"
        "patches:\n"
        "  - target: {kind: DaemonSet, name: gfd}\n"
        "    patch: |-\n"
        "      - op: add\n"
        "        path: /spec/template/spec/containers/0/resources/limit\n"
        "        value: {memory: 1Gi}\n"
    )
    (overlay / "kustomization.yaml").write_text(kustomization)
    objects = tool.load_objects(tool.build_directory(overlay))
    errors = validate_objects(objects, versions)
    assert errors and all("'limit' was unexpected" in e for e in errors), errors


def test_validation_agrees_with_kubernetes_validate_itself(
    rendered: Render, versions: list[str]
) -> None:
    """Our cached validators give kubernetes_validate.validate()'s verdict, path and message."""
    kv = importlib.import_module("kubernetes_validate")
    daemonset = only(rendered("nfd-features-file"), "DaemonSet")
    typo = copy.deepcopy(daemonset)
    gfd_container(typo)["securityContext"]["readOnlyRootFilesytem"] = True
    wrong_type = copy.deepcopy(daemonset)
    gfd_container(wrong_type)["ports"][0]["containerPort"] = "8080"
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    for version in versions:
        for obj in (daemonset, typo, wrong_type, unknown):
            try:
                kv.validate(obj, version, strict=True)
                expected = []
            except kv.utils.ValidationError as error:
                where = "/".join(str(p) for p in error.path) or "(top)"
                expected = [
                    f"{tool.describe(obj)} (Kubernetes {version}): {where}: {error.message}"
                ]
            except kv.utils.SchemaNotFoundError as error:
                expected = [f"{tool.describe(obj)} (Kubernetes {version}): {error.message}"]
            assert tool.validation_errors(obj, version) == expected
            assert (expected == []) == (obj is daemonset)


def test_cluster_scoped_objects_have_no_namespace_and_the_rest_share_one(rendered: Render) -> None:
    for overlay in sorted(EXPECTED_OVERLAYS - {"nfd-worker-sidecar"}):
        objects = rendered(overlay)
        for obj in objects:
            if obj["kind"] in CLUSTER_SCOPED:
                assert "namespace" not in obj["metadata"], (overlay, tool.describe(obj))
            else:
                assert obj["metadata"].get("namespace") == NAMESPACE, (overlay, tool.describe(obj))
        assert only(objects, "Namespace")["metadata"]["name"] == NAMESPACE


# ---------------------------------------------------------------------- the gfd workloads


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_environment_and_args_select_the_intended_output(overlay: str, rendered: Render) -> None:
    obj = workload(overlay, rendered(overlay))
    container = gfd_container(obj)
    settings = gfd_settings(obj, container)
    _, expected_output = WORKLOADS[overlay]
    assert settings.output_kind == expected_output
    if expected_output == "file":
        assert settings.effective_output_file == NFD_FEATURES_FILE
    else:
        assert settings.node_name == tool.SAMPLE_NODE
        assert pod_spec(obj)["automountServiceAccountToken"] is True
    if expected_output == "nodefeature":
        assert settings.namespace == NAMESPACE
        assert settings.pod_name and settings.pod_name.startswith("gfd-")
    if expected_output == "file":
        # No API access for the file writers.
        assert pod_spec(obj).get("automountServiceAccountToken") is not True
    assert settings.mig_strategy == "none"
    # ...as gfd's default, not a variable: MIG_STRATEGY would override a config file's
    # flags.migStrategy (docs/deploy.md: "default: not set")
    assert "MIG_STRATEGY" not in container_environment(obj, container)
    assert settings.oneshot == (overlay == "oneshot-job")
    assert settings.cleanup == (overlay == "node-labels-cleanup-job")


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_every_environment_variable_is_one_gfd_or_the_nvidia_runtime_reads(
    overlay: str, rendered: Render
) -> None:
    known = {env for option in OPTIONS for env in option.envs}
    runtime = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES"}
    for variant in [overlay, f"{overlay}+mig-mixed"]:
        container = gfd_container(workload(variant, rendered(variant)))
        names = [e["name"] for e in container.get("env", [])]
        assert len(names) == len(set(names)), f"duplicate variables in {variant}: {names}"
        assert set(names) <= known | runtime, set(names) - known - runtime


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_security_context_is_least_privilege(overlay: str, rendered: Render) -> None:
    obj = workload(overlay, rendered(overlay))
    container = gfd_container(obj)
    security = effective_security(obj, container)
    assert_non_root_unprivileged(security)
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod_spec(obj).get("hostNetwork", False) is False
    assert pod_spec(obj).get("hostPID", False) is False


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_mounts_are_read_only_except_features_d(overlay: str, rendered: Render) -> None:
    obj = workload(overlay, rendered(overlay))
    container = gfd_container(obj)
    settings = gfd_settings(obj, container)
    by_path = mounts(container)
    pod_volumes = volumes(obj)
    for path, mount in by_path.items():
        volume = pod_volumes[mount["name"]]
        if path == FEATURES_DIR:
            assert volume["hostPath"]["path"].rstrip("/") == FEATURES_DIR
            continue
        assert mount.get("readOnly") is True, f"{path} is mounted writable"
    # Host sysfs (PCI devices; the machine-type file lives in it) is mounted read-only.
    sys_mount = by_path["/sys"]
    assert pod_volumes[sys_mount["name"]]["hostPath"]["path"] == "/sys"
    assert sys_mount.get("recursiveReadOnly") == "IfPossible"
    assert settings.machine_type_file == MACHINE_TYPE_DEFAULT
    assert any(settings.machine_type_file.startswith(p + "/") for p in by_path)
    # features.d is mounted exactly when gfd writes the features file.
    assert (FEATURES_DIR in by_path) == (settings.output_kind == "file")


@pytest.mark.parametrize("overlay", DAEMONSETS)
def test_probes_use_the_served_health_paths_on_the_metrics_port(
    overlay: str, rendered: Render
) -> None:
    obj = workload(overlay, rendered(overlay))
    container = gfd_container(obj)
    settings = gfd_settings(obj, container)
    host, _, metrics_port = settings.metrics_address.rpartition(":")
    assert host == "", "serve on all addresses, so the kubelet can reach the probes"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"]["path"] == path
        assert port_number(container, container[probe]["httpGet"]["port"]) == int(metrics_port)
    # No other container of the pod listens on that port (the nfd-worker sidecar case).
    for other in pod_spec(obj)["containers"]:
        if other is not container:
            assert int(metrics_port) not in {p["containerPort"] for p in other.get("ports", [])}


@pytest.mark.parametrize("overlay", JOBS)
def test_jobs_run_once_on_the_named_node_without_probes(overlay: str, rendered: Render) -> None:
    job = workload(overlay, rendered(overlay))
    container = gfd_container(job)
    assert pod_spec(job)["nodeName"] == tool.SAMPLE_NODE
    assert job["metadata"]["name"].endswith("-" + tool.SAMPLE_NODE)
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] > 0
    assert "livenessProbe" not in container and "readinessProbe" not in container
    assert tool.NODE_PLACEHOLDER not in str(job)


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_resources_placement_and_image(overlay: str, rendered: Render) -> None:
    obj = workload(overlay, rendered(overlay))
    container = gfd_container(obj)
    resources = container["resources"]
    assert set(resources["requests"]) == {"cpu", "memory"}
    assert "memory" in resources["limits"]
    assert container["image"] == f"gfd:{__version__}"
    if overlay == "nfd-worker-sidecar":
        return  # placement is nfd-worker's
    spec = pod_spec(obj)
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    if overlay == "node-labels-cleanup-job":
        # Must run wherever gfd left labels, GPU labels or not.
        assert "affinity" not in spec
        return
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    selected = {(e["key"], tuple(e["values"])) for term in terms for e in term["matchExpressions"]}
    assert ("feature.node.kubernetes.io/pci-10de.present", ("true",)) in selected
    assert ("nvidia.com/gpu.present", ("true",)) in selected
    assert all(len(term["matchExpressions"]) == 1 for term in terms)  # any one term suffices


def node_affinity_selects(spec: Obj, node_labels: dict[str, str]) -> bool:
    """The kubelet's reading of required node affinity: any term, all its expressions."""
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]

    def holds(expression: Obj) -> bool:
        assert expression["operator"] == "In"
        return node_labels.get(expression["key"]) in expression["values"]

    return any(all(holds(e) for e in term["matchExpressions"]) for term in terms)


#: what each kind of NFD puts on a GPU node (NFD's default deviceLabelFields are class and
#: vendor; the GPU Operator's NFD configuration uses vendor only)
NFD = "feature.node.kubernetes.io/"
GPU_NODES = {
    "stock NFD, compute GPU (3D controller)": {NFD + "pci-0302_10de.present": "true"},
    "stock NFD, graphics GPU (VGA controller)": {NFD + "pci-0300_10de.present": "true"},
    "GPU Operator NFD": {NFD + "pci-10de.present": "true"},
    "Tegra": {NFD + "cpu-model.vendor_id": "NVIDIA"},
    "labelled by hand": {"nvidia.com/gpu.present": "true"},
}
OTHER_NODES = {
    "stock NFD, no NVIDIA device": {
        NFD + "pci-0300_1a03.present": "true", NFD + "pci-0200_8086.present": "true"},
    "NVIDIA network card only": {NFD + "pci-0207_15b3.present": "true"},
}  # fmt: skip


@pytest.mark.parametrize(
    "overlay", sorted(set(WORKLOADS) - {"nfd-worker-sidecar", "node-labels-cleanup-job"})
)
def test_every_workload_is_scheduled_on_gpu_nodes_of_a_stock_nfd(
    overlay: str, rendered: Render
) -> None:
    spec = pod_spec(workload(overlay, rendered(overlay)))
    for name, labels in GPU_NODES.items():
        assert node_affinity_selects(spec, labels), name
    for name, labels in OTHER_NODES.items():
        assert not node_affinity_selects(spec, labels), name


def test_sidecar_is_a_second_container_of_nfd_worker_sharing_its_features_volume(
    rendered: Render,
) -> None:
    objects = rendered("nfd-worker-sidecar")
    daemonset = only(objects, "DaemonSet", "nfd-worker")
    names = [c["name"] for c in pod_spec(daemonset)["containers"]]
    assert names == ["nfd-worker", "gfd"]
    nfd_worker = pod_spec(daemonset)["containers"][0]
    shared = mounts(gfd_container(daemonset))[FEATURES_DIR]["name"]
    assert shared in {m["name"] for m in nfd_worker["volumeMounts"]}
    assert nfd_worker.get("securityContext", {}).get("privileged") is None
    # Runs on every node NFD covers, GPU or not: it must not crash-loop NFD's pod there.
    settings = gfd_settings(daemonset, gfd_container(daemonset))
    assert settings.fail_on_init_error is False


# ---------------------------------------------------------------------- components


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_mig_components_set_the_strategy_and_the_monitor_device(
    overlay: str, strategy: str, rendered: Render
) -> None:
    obj = workload(overlay, rendered(f"{overlay}+mig-{strategy}"))
    container = gfd_container(obj)
    assert gfd_settings(obj, container).mig_strategy == strategy
    assert container_environment(obj, container)["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    security = effective_security(obj, container)
    # The runtime only grants the monitor device to a container whose bounding set holds
    # SYS_ADMIN; the process is not root, so it never holds the capability itself.
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert_non_root_unprivileged(security)


def all_containers(obj: Obj) -> list[Obj]:
    spec = pod_spec(obj)
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("component", ["", "+mig-single", "+mig-mixed", "+runtime-class-nvidia"])
@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_no_container_runs_as_root_with_a_capability(
    overlay: str, component: str, rendered: Render
) -> None:
    """Root only in the features.d init container, without capability; SYS_ADMIN only non-root."""
    obj = workload(overlay, rendered(overlay + component))
    for container in all_containers(obj):
        security = effective_security(obj, container)
        # runAsNonRoot without a user: the kubelet refuses an image whose user is root
        root = security.get("runAsUser") == 0 or not security.get("runAsNonRoot", False)
        assert security.get("privileged", False) is False, container["name"]
        assert security.get("allowPrivilegeEscalation") is False, container["name"]
        assert "ALL" in security["capabilities"]["drop"], container["name"]
        if root:
            assert container["name"] == "features-d-group", container["name"]
            assert security["capabilities"] == {"drop": ["ALL"]}
        if container["name"] == "gfd":
            assert not root


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_features_d_is_made_group_writable_for_gfd_by_an_init_container(
    overlay: str, rendered: Render
) -> None:
    obj = workload(overlay, rendered(overlay))
    gfd = gfd_container(obj)
    inits = {c["name"]: c for c in pod_spec(obj).get("initContainers", [])}
    writes_host = FEATURES_DIR in mounts(gfd) and not mounts(gfd)[FEATURES_DIR].get("readOnly")
    assert ("features-d-group" in inits) == writes_host
    if not writes_host:
        return
    init = inits["features-d-group"]
    security = effective_security(obj, init)
    gfd_security = effective_security(obj, gfd)
    # the directory goes to gfd's group, which the init container holds as its own
    assert security["runAsUser"] == 0
    assert security["runAsGroup"] == gfd_security["runAsGroup"] == 65532
    assert "65532" in init["args"][0]
    assert init["args"][1] == FEATURES_DIR
    assert mounts(init)[FEATURES_DIR]["name"] == mounts(gfd)[FEATURES_DIR]["name"]
    assert init["image"] == gfd["image"]


def test_the_init_script_needs_no_capability(rendered: Render) -> None:
    """As uid 0, group 65532, no capability: a root 0755 dir becomes 65532 0775, writable by gfd."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to drop every capability")
    init = pod_spec(workload("nfd-features-file", rendered("nfd-features-file")))["initContainers"][
        0
    ]
    # outside pytest's own (0700) tmp tree, so that uid 65532 can reach it
    top = Path(tempfile.mkdtemp(prefix="gfd-features-"))
    top.chmod(0o755)
    directory = top / "features.d"
    directory.mkdir(mode=0o755)
    os.chown(directory, 0, 0)
    no_caps = [setpriv, "--clear-groups", "--bounding-set", "-all", "--inh-caps", "-all"]
    script = init["args"][0]
    as_init = [*no_caps, "--reuid", "0", "--regid", "65532"]
    subprocess.run([*as_init, sys.executable, "-c", script, str(directory)], check=True)
    assert (directory.stat().st_gid, directory.stat().st_mode & 0o777) == (65532, 0o775)
    as_gfd = [*no_caps, "--reuid", "65532", "--regid", "65532"]
    replace = f"echo a=b > {directory}/.gfd-x && mv {directory}/.gfd-x {directory}/gfd"
    subprocess.run([*as_gfd, "sh", "-c", replace], check=True)
    assert (directory / "gfd").read_text() == "a=b\n"
    shutil.rmtree(top)


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_vgpu_component_makes_only_the_gfd_container_privileged(
    overlay: str, rendered: Render
) -> None:
    obj = workload(overlay, rendered(f"{overlay}+vgpu-privileged"))
    container = gfd_container(obj)
    security = effective_security(obj, container)
    assert security["privileged"] is True
    assert security["runAsUser"] == 0
    for other in pod_spec(obj)["containers"]:
        if other is not container:
            assert not (other.get("securityContext") or {}).get("privileged")


@pytest.mark.parametrize("overlay", sorted(WORKLOADS))
def test_runtime_class_component(overlay: str, rendered: Render) -> None:
    obj = workload(overlay, rendered(f"{overlay}+runtime-class-nvidia"))
    assert pod_spec(obj)["runtimeClassName"] == "nvidia"


# ---------------------------------------------------------------------- RBAC


def rules(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
        for resource in rule["resources"] for verb in rule["verbs"]
    }  # fmt: skip


def service_account_of(overlay: str, objects: list[Obj]) -> tuple[str, str]:
    obj = workload(overlay, objects)
    name = pod_spec(obj)["serviceAccountName"]
    account = only(objects, "ServiceAccount", name)
    return account["metadata"]["namespace"], name


def test_nodefeature_rbac_is_namespaced_and_minimal(rendered: Render) -> None:
    objects = rendered("nodefeature")
    assert not [o for o in objects if o["kind"].startswith("Cluster")]
    verbs = ("get", "create", "update", "list", "watch")
    nodefeatures = {("nfd.k8s-sigs.io", "nodefeatures", verb) for verb in verbs}
    assert rules(only(objects, "Role")) == nodefeatures | {("", "pods", "get")}
    binding = only(objects, "RoleBinding")
    namespace, name = service_account_of("nodefeature", objects)
    assert binding["roleRef"]["name"] == only(objects, "Role")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]


def test_node_labels_rbac_is_nodes_get_patch_list_and_watch(rendered: Render) -> None:
    objects = rendered("node-labels")
    verbs = ("get", "patch", "list", "watch")
    assert rules(only(objects, "ClusterRole")) == {("", "nodes", verb) for verb in verbs}
    binding = only(objects, "ClusterRoleBinding")
    namespace, name = service_account_of("node-labels", objects)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]


def test_file_overlays_grant_no_api_access(rendered: Render) -> None:
    for overlay in ("nfd-features-file", "oneshot-job"):
        kinds = {o["kind"] for o in rendered(overlay)}
        assert not kinds & {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def test_cleanup_job_uses_the_node_labels_identity(rendered: Render) -> None:
    policy = only(rendered("node-labels"), "ValidatingAdmissionPolicy")
    cleanup_objects = rendered("node-labels-cleanup-job")
    namespace, name = service_account_of("node-labels-cleanup-job", cleanup_objects)
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert f"'system:serviceaccount:{namespace}:{name}'" in condition


# ---------------------------------------------------------------------- admission policy


class Policy:
    """A ValidatingAdmissionPolicy run by cel-python (it uses no Kubernetes-only CEL library)."""

    #: compiled (immutable) programs by expression text, shared: a rebuilt policy compiles nothing
    _programs: ClassVar[Obj] = {}

    def __init__(self, policy: Obj) -> None:
        self.celpy = _require_module("celpy", "cel-python")
        spec = policy["spec"]
        self.conditions = [self._program(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], self._program(v["expression"])) for v in spec["variables"]]
        self.validations = [(self._program(v["expression"]), v) for v in spec["validations"]]

    def _program(self, expression: str) -> Any:
        program = self._programs.get(expression)
        if program is None:
            env = self.celpy.Environment()
            program = self._programs[expression] = env.program(env.compile(expression))
        return program

    def _activation(self, request: Obj) -> Obj:
        json_to_cel = self.celpy.adapter.json_to_cel
        return {
            "request": json_to_cel(request), "object": json_to_cel(request["object"]),
            "oldObject": json_to_cel(request["oldObject"]),
        }  # fmt: skip

    def denials(self, request: Obj) -> list[str]:
        """Messages of the failed validations; [] when the request is let through."""
        activation = self._activation(request)
        if not all(bool(c.evaluate(activation)) for c in self.conditions):
            return []
        celtypes = self.celpy.celtypes
        computed = celtypes.MapType({})
        for name, program in self.variables:
            computed[celtypes.StringType(name)] = program.evaluate(
                {**activation, "variables": computed}
            )
        activation["variables"] = computed
        failed = []
        for program, validation in self.validations:
            if not bool(program.evaluate(activation)):
                if "messageExpression" in validation:
                    failed.append(
                        str(self._program(validation["messageExpression"]).evaluate(activation))
                    )
                else:
                    failed.append(validation["message"])
        return failed


def node(
    name: str, labels: dict[str, str], annotations: dict[str, str] | None = None, **spec: Any
) -> Obj:
    metadata: Obj = {"name": name, "labels": labels}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec}


BASE_LABELS = {"kubernetes.io/hostname": "gpu-node-1", "nvidia.com/gpu.present": "true"}
BASE_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0"}
OLD = node("gpu-node-1", BASE_LABELS, BASE_ANNOTATIONS, podCIDR="10.0.0.0/24")
GOOD = node(
    "gpu-node-1", {**BASE_LABELS, "nvidia.com/gpu.count": "8"},
    {**BASE_ANNOTATIONS, "nvidia.com/gfd.managed-labels": "nvidia.com/gpu.count"},
    podCIDR="10.0.0.0/24",
)  # fmt: skip


def edited(obj: Obj, path: str, changes: Obj) -> Obj:
    """A copy of obj, the mapping at path ("metadata.labels") updated; None removes a key."""
    copied = copy.deepcopy(obj)
    target = copied
    for part in path.split("."):
        target = target[part]
    for key, value in changes.items():
        if value is None:
            target.pop(key)
        else:
            target[key] = value
    return copied


LABELS, ANNOTATIONS = "metadata.labels", "metadata.annotations"
GPU_COUNT = "nvidia.com/gpu.count"


def request_from(username: str, requester_node: str | None, old: Obj, new: Obj) -> Obj:
    extra = {} if requester_node is None else {
        "authentication.kubernetes.io/node-name": [requester_node],
        "authentication.kubernetes.io/pod-name": ["gfd-x7k2p"],
    }  # fmt: skip
    return {
        "operation": "UPDATE",
        "userInfo": {"username": username, "groups": ["system:serviceaccounts"], "extra": extra},
        "object": new, "oldObject": old,
    }  # fmt: skip


def case(name: str, new: Obj, allowed: bool, old: Obj = OLD, by: str | None = "gpu-node-1") -> Any:
    """One admission request: the requester's node updates old to new; allowed or not."""
    return pytest.param(by, old, new, allowed, id=name)


def denied(name: str, path: str, changes: Obj) -> Any:
    """GOOD with changes at path, from OLD: denied."""
    return case(name, edited(GOOD, path, changes), False)


OPERATOR_LABELS = {
    "nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/device-plugin.config": "a100",
}  # fmt: skip
OLD_WITH_OPERATOR_LABELS = edited(GOOD, LABELS, OPERATOR_LABELS)
POLICY_CASES = [
    case("own node: add nvidia.com/ labels and the annotation", GOOD, True),
    case("own node: remove an owned label", edited(GOOD, LABELS, {GPU_COUNT: None}), True, GOOD),
    case("own node: first labels on a node without labels or annotations",
         node("gpu-node-1", {"nvidia.com/gpu.count": "1"}, None), True,
         node("gpu-node-1", {}, None)),
    case("own node: cleanup removes the annotation",
         edited(GOOD, ANNOTATIONS, {"nvidia.com/gfd.managed-labels": None}), True, GOOD),
    case("another node", GOOD, False, by="gpu-node-2"),
    case("token without a node", GOOD, False, by=None),
    denied("change a label outside nvidia.com/", LABELS, {"kubernetes.io/hostname": "x"}),
    denied("add a label outside nvidia.com/", LABELS, {"node-role.kubernetes.io/x": ""}),
    denied("remove a label outside nvidia.com/", LABELS, {"kubernetes.io/hostname": None}),
    denied("lookalike prefix", LABELS, {"nvidia.com.evil/x": "1"}),
    denied("change another annotation", ANNOTATIONS, {"node.alpha.kubernetes.io/ttl": "30"}),
    denied("add another nvidia.com/ annotation", ANNOTATIONS, {"nvidia.com/x": "1"}),
    denied("add a taint", "spec", {"taints": [{"key": "k", "effect": "NoSchedule"}]}),
    denied("cordon", "spec", {"unschedulable": True}),
    denied("add a finalizer", "metadata", {"finalizers": ["x/y"]}),
    *(
        case(
            f"{verb} {key}",
            edited(OLD_WITH_OPERATOR_LABELS, LABELS, {key: value}),
            False,
            OLD_WITH_OPERATOR_LABELS,
        )
        for key in [*OPERATOR_LABELS, "nvidia.com/gpu.present"]
        for verb, value in (("change", "changed"), ("remove", None))
    ),
    denied("add a nvidia.com/ key gfd cannot produce", LABELS,
           {"nvidia.com/gpu.deploy.gpu-feature-discovery": "false"}),
    case("add gfd keys of a renamed MIG resource",
         edited(GOOD, LABELS, {"nvidia.com/mig-1g.5gb.me.slices.gi": "1"}), True),
    case("gfd keys change while operator labels stay",
         edited(OLD_WITH_OPERATOR_LABELS, LABELS, {GPU_COUNT: "4"}), True,
         OLD_WITH_OPERATOR_LABELS),
]  # fmt: skip


@pytest.fixture(scope="module")
def node_policy(rendered: Render) -> tuple[Policy, str]:
    objects = rendered("node-labels")
    namespace, name = service_account_of("node-labels", objects)
    username = f"system:serviceaccount:{namespace}:{name}"
    return Policy(only(objects, "ValidatingAdmissionPolicy")), username


@pytest.mark.parametrize(("requester", "old", "new", "allowed"), POLICY_CASES)
def test_admission_policy(
    requester: str | None, old: Obj, new: Obj, allowed: bool, node_policy: tuple[Policy, str]
) -> None:
    policy, username = node_policy
    denials = policy.denials(request_from(username, requester, old, new))
    assert (denials == []) == allowed, denials


def test_admission_policy_explains_a_denial_and_ignores_other_users(
    node_policy: tuple[Policy, str],
) -> None:
    policy, username = node_policy
    denied = policy.denials(request_from(username, "gpu-node-2", OLD, GOOD))
    assert denied == ["gfd on node gpu-node-2 may not change node gpu-node-1"]
    cordon = edited(OLD, "spec", {"unschedulable": True})
    assert policy.denials(request_from("kubernetes-admin", None, OLD, cordon)) == []
    other_account = username.rsplit(":", 1)[0] + ":other"
    assert policy.denials(request_from(other_account, "gpu-node-2", OLD, cordon)) == []


def test_admission_policy_is_bound_and_denies(rendered: Render) -> None:
    objects = rendered("node-labels")
    policy = only(objects, "ValidatingAdmissionPolicy")
    binding = only(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]


SAMPLE_KEYS = [
    *(keys.full_key(name) for name in keys.NODE_WIDE),
    *(keys.full_key(f"{r}.{s}") for r in ("gpu", "mig-1g.5gb.me", "a100")
      for s in keys.PER_RESOURCE),
    *(keys.full_key(name) for name in keys.FOREIGN_NAMES),
    *(keys.full_key(p + "x") for p in keys.FOREIGN_NAME_PREFIXES),
    "nvidia.com/gpu.deploy.product", "nvidia.com/mig.config.state", "nvidia.com/gpu.count.extra",
    "nvidia.com/GPU.count", "nvidia.com/-gpu.count", "nvidia.com/.count", "nvidia.com/count",
    "nvidia.com/gpu.", "nvidia.com.evil/gpu.count", "example.com/gpu.count",
    "kubernetes.io/hostname",
]  # fmt: skip


@pytest.mark.parametrize("overlay", ["node-labels", "nodefeature"])
def test_the_policies_admit_exactly_the_keys_gfd_can_produce(
    overlay: str, rendered: Render
) -> None:
    """The CEL spelling of "a key gfd can produce" agrees with gfd/labels/keys.py."""
    policy = Policy(only(rendered(overlay), "ValidatingAdmissionPolicy"))
    variables = dict(policy.variables)
    node_wide = {str(k) for k in variables["nodeWideKeys"].evaluate({})}
    assert node_wide == {keys.full_key(name) for name in keys.NODE_WIDE}
    celtypes = policy.celpy.celtypes
    computed = celtypes.MapType({
        celtypes.StringType(name): variables[name].evaluate({})
        for name in ("nodeWideKeys", "perResourceKey", "foreignKey")
    })  # fmt: skip
    # the test each validation applies to a key (CEL's own matches(), RE2 syntax)
    ours = policy._program(
        "(k in variables.nodeWideKeys || k.matches(variables.perResourceKey))"
        " && !k.matches(variables.foreignKey)"
    )
    for key in SAMPLE_KEYS:
        admitted = bool(ours.evaluate({"k": celtypes.StringType(key), "variables": computed}))
        assert admitted == keys.can_produce(key), key


def nodefeature_request(
    requester: str | None, name: str, node_label: str, labels: dict[str, str]
) -> Obj:
    obj = {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "labels": {"nfd.node.kubernetes.io/node-name": node_label}},
        "spec": {"features": {}, "labels": labels},
    }  # fmt: skip
    return request_from(f"system:serviceaccount:{NAMESPACE}:gfd", requester, obj, obj)


OWN_OBJECT = "nvidia-features-for-gpu-node-1"
N1 = "gpu-node-1"
GFD_LABELS = {GPU_COUNT: "8", "nvidia.com/gfd.timestamp": "1"}
OPERATOR_LABEL = {"nvidia.com/mig.config": "all-disabled"}
FOREIGN_LABEL = {"node-role.kubernetes.io/control-plane": ""}
NODEFEATURE_CASES = [
    # (case, requester node, object name, its node-name label, its labels, allowed)
    ("own node", N1, OWN_OBJECT, N1, {}, True),
    ("own node with gfd labels", N1, OWN_OBJECT, N1, GFD_LABELS, True),
    ("another node's object", "gpu-node-2", OWN_OBJECT, N1, {}, False),
    ("own name, other node's label", N1, OWN_OBJECT, "gpu-node-2", {}, False),
    ("token without a node", None, OWN_OBJECT, N1, {}, False),
    ("another object name", N1, N1, N1, {}, False),
    ("an operator control label", N1, OWN_OBJECT, N1, OPERATOR_LABEL, False),
    ("a label outside nvidia.com/", N1, OWN_OBJECT, N1, FOREIGN_LABEL, False),
]


@pytest.mark.parametrize(
    ("requester", "name", "node_label", "labels", "allowed"), table(NODEFEATURE_CASES)
)
def test_nodefeature_policy_keeps_each_pod_to_its_own_node(
    requester: str | None, name: str, node_label: str, labels: dict[str, str], allowed: bool,
    rendered: Render,
) -> None:  # fmt: skip
    objects = rendered("nodefeature")
    policy = Policy(only(objects, "ValidatingAdmissionPolicy"))
    namespace, account = service_account_of("nodefeature", objects)
    assert (namespace, account) == (NAMESPACE, "gfd")
    denials = policy.denials(nodefeature_request(requester, name, node_label, labels))
    assert (denials == []) == allowed, denials
    binding = only(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": "gfd-nodefeature", "validationActions": ["Deny"]}


# ---------------------------------------------------------------------- probes, for real


def _poll(port: int, path: str, attempts: int = 200) -> Iterator[int | None]:
    """The status of ``GET path`` (None while nothing listens), every 50 ms."""
    for _ in range(attempts):
        try:
            yield http_get(port, path)[0]
        except OSError:
            yield None
        time.sleep(0.05)


def test_the_daemonset_environment_runs_gfd_with_the_probed_endpoints(
    tmp_path: Path, rendered: Render
) -> None:
    """gfd in the DaemonSet's environment (on a snapshot) answers its probes with 200 once
    published and keeps its expiring file on SIGTERM (no gap in a rolling update)."""
    daemonset = only(rendered("nfd-features-file"), "DaemonSet")
    container = gfd_container(daemonset)
    env = container_environment(daemonset, container)
    port = free_port()
    features_file = tmp_path / "gfd"
    snapshots = sorted((ROOT / "examples" / "snapshots").glob("*.yaml"))
    if not snapshots:
        pytest.skip("no example snapshot to run on")
    env.update(
        GFD_OUTPUT_FILE=str(features_file), GFD_METRICS_ADDRESS=f"127.0.0.1:{port}",
        GFD_SNAPSHOT_FILE=str(snapshots[0]),
    )  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "gfd"],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        probes = {
            p["httpGet"]["path"] for p in (container["livenessProbe"], container["readinessProbe"])
        }
        for path in sorted(probes):
            status = next(
                (s for s in _poll(port, path) if s == 200 or process.poll() is not None), None
            )
            assert status == 200, f"{path} never answered 200 (gfd exited: {process.poll()})"
        published = features_file.read_text()
        assert published.startswith("# +expiry-time=") and "\nnvidia.com/" in published
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr[-2000:]
    assert features_file.read_text() == published


def test_settings_rejects_what_the_manifests_must_never_combine() -> None:
    # The manifests select an output with exactly one variable; gfd refuses two.
    with pytest.raises(UsageError):
        resolve(
            {},
            {"GFD_USE_NODE_LABELS": "true", "GFD_USE_NODE_FEATURE_API": "true", "NODE_NAME": "n"},
        )
