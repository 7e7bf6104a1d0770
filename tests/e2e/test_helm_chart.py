"""The Helm chart offline: `helm lint --strict`, every mode schema-valid, and each mode (with each
component) renders what the matching kustomize overlay renders, so the two cannot drift; only
helm's bookkeeping labels and the order of name-keyed lists are forgiven."""

from __future__ import annotations

import copy
import difflib
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helm import CHART, IMAGE, NAMESPACE, helm, set_args, template
from tests.test_manifests import rendered, tool, versions  # noqa: F401 (fixtures)

Obj = dict[str, Any]
SAMPLE_NODE = tool.SAMPLE_NODE

# overlay -> chart values that deploy the same thing
OVERLAY_VALUES: dict[str, dict[str, Any]] = {
    "nfd-features-file": {"output": "features-file"},
    "nodefeature": {"output": "node-feature-api"},
    "node-labels": {"output": "node-labels"},
    "oneshot-job": {"output": "features-file", "mode": "oneshot-job", "job.nodes": [SAMPLE_NODE]},
    "node-labels-cleanup-job": {
        "output": "node-labels",
        "mode": "cleanup-job",
        "job.nodes": [SAMPLE_NODE],
    },
}
# component -> chart values that do the same
COMPONENT_VALUES: dict[str, dict[str, Any]] = {
    "mig-single": {"migStrategy": "single"},
    "mig-mixed": {"migStrategy": "mixed"},
    "vgpu-privileged": {"privileged": True},
    "runtime-class-nvidia": {"runtimeClassName": "nvidia"},
    "koordlet": {"koordlet.enabled": True},
    "node-config": {"config.name": "gfd-config"},
    "dra": {"deviceDiscoveryStrategy": "dra"},
}
# Components that make sense on the cleanup Job too (koordlet: the cleanup removes its file).
CLEANUP_COMPONENTS = {"runtime-class-nvidia", "koordlet"}
# Labels Helm adds for its own bookkeeping (release, chart version); kustomize has none.
HELM_LABELS = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
}
NAME_KEYED_LISTS = {"env", "volumes", "volumeMounts", "ports"}


@pytest.fixture(scope="module")
def chart(helm_bin: Path) -> Callable[[dict[str, Any]], list[Obj]]:
    cache: dict[str, list[Obj]] = {}

    def get(values: dict[str, Any]) -> list[Obj]:
        key = repr(sorted(values.items()))
        if key not in cache:
            cache[key] = template(helm_bin, values)
        return copy.deepcopy(cache[key])

    return get


def key(obj: Obj) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


def _strip_helm_labels(labels: dict[str, str] | None) -> None:
    for name in HELM_LABELS & set(labels or {}):
        del labels[name]  # type: ignore[union-attr]


def _affinity_terms(pod_spec: Obj) -> set[str] | None:
    affinity = pod_spec.pop("affinity", None)
    if affinity is None:
        return None
    required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {yaml.safe_dump(t, sort_keys=True) for t in required["nodeSelectorTerms"]}


def _collapse_whitespace(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, list):
        return [_collapse_whitespace(v) for v in value]
    if isinstance(value, dict):
        return {k: _collapse_whitespace(v) for k, v in value.items()}
    return value


def normalise(obj: Obj) -> tuple[Obj, set[str] | None]:
    """The object without Helm's labels, with name-keyed lists sorted; its affinity terms
    returned apart as a set (order of terms carries no meaning: any one selects). CEL ignores
    whitespace, and kustomize re-folds the policy's folded blocks: it is compared collapsed."""
    obj = copy.deepcopy(obj)
    if obj["kind"] == "ValidatingAdmissionPolicy":
        obj["spec"] = _collapse_whitespace(obj["spec"])
    _strip_helm_labels(obj["metadata"].get("labels"))
    spec = obj.get("spec") or {}
    _strip_helm_labels((spec.get("selector") or {}).get("matchLabels"))
    terms = None
    template_ = spec.get("template")
    if template_:
        _strip_helm_labels(template_["metadata"].get("labels"))
        pod = template_["spec"]
        terms = _affinity_terms(pod)
        for container in pod["containers"]:
            for field in NAME_KEYED_LISTS & set(container):
                container[field] = sorted(container[field], key=lambda item: item["name"])
        pod["volumes"] = sorted(pod.get("volumes", []), key=lambda item: item["name"])
    return obj, terms


def expected_objects(overlay: str, render: Callable[[str], list[Obj]], name: str) -> list[Obj]:
    objects = [o for o in render(name) if o["kind"] != "Namespace"]
    if overlay == "node-labels-cleanup-job":
        # The overlay runs beside an installed node-labels overlay and uses its service
        # account, RBAC and policy; the chart in cleanup-job mode keeps those in the release.
        have = {key(o) for o in objects}
        objects += [
            o
            for o in render("node-labels" + name.removeprefix("node-labels-cleanup-job"))
            if o["kind"] != "Namespace" and key(o) not in have and o["kind"] != "DaemonSet"
        ]
    return objects


def assert_same_objects(chart_objects: list[Obj], overlay_objects: list[Obj]) -> None:
    ours = {key(o): normalise(o) for o in chart_objects}
    theirs = {key(o): normalise(o) for o in overlay_objects}
    assert sorted(ours) == sorted(theirs), "the chart and the overlay render different objects"
    for k, (obj, terms) in ours.items():
        their_obj, their_terms = theirs[k]
        if obj != their_obj:
            diff = difflib.unified_diff(
                yaml.safe_dump(their_obj, sort_keys=True).splitlines(),
                yaml.safe_dump(obj, sort_keys=True).splitlines(),
                "kustomize",
                "helm",
                lineterm="",
            )
            pytest.fail(f"{k} differs:\n" + "\n".join(diff))
        assert terms == their_terms, f"{k}: node affinity terms differ"


VARIANTS = [(overlay, None) for overlay in OVERLAY_VALUES] + [
    (overlay, component)
    for overlay in OVERLAY_VALUES
    for component in COMPONENT_VALUES
    if overlay != "node-labels-cleanup-job" or component in CLEANUP_COMPONENTS
]


@pytest.mark.parametrize(("overlay", "component"), VARIANTS, ids=lambda v: v or "plain")
def test_chart_renders_what_the_overlay_renders(
    overlay: str,
    component: str | None,
    chart: Callable[[dict[str, Any]], list[Obj]],
    rendered: Callable[[str], list[Obj]],  # noqa: F811
) -> None:
    values = {**OVERLAY_VALUES[overlay], **COMPONENT_VALUES.get(component or "", {})}
    name = overlay + (f"+{component}" if component else "")
    assert_same_objects(chart(values), expected_objects(overlay, rendered, name))


def test_every_overlay_has_a_chart_mode() -> None:
    # The sidecar is a patch of NFD's own DaemonSet: NFD's deployment, not this chart's.
    assert set(OVERLAY_VALUES) | {"nfd-worker-sidecar"} == set(tool.overlays())
    assert set(COMPONENT_VALUES) == set(tool.WORKLOAD_COMPONENTS)


def test_the_chart_passes_helm_lint_strict(helm_bin: Path) -> None:
    done = helm(helm_bin, "lint", "--strict", str(CHART), *set_args(IMAGE), check=False)
    assert done.returncode == 0, done.stdout + done.stderr


MODES: list[dict[str, Any]] = [
    *OVERLAY_VALUES.values(),
    {"output": "node-labels", "mode": "oneshot-job", "job.nodes": ["a", "b"]},
    {"output": "node-feature-api", "migStrategy": "mixed", "privileged": True},
    {"config.map": {"config.yaml": "version: v1\nflags:\n  migStrategy: single\n"}},
    {
        "failOnInitError": False,
        "gfd.noTimestamp": True,
        "gfd.sleepInterval": "90s",
        "deviceDiscoveryStrategy": "nvml",
        "metricsPort": 0,
        "nodeSelector": {"gpu": "yes"},
        "image.tag": "1.2.3",
    },
]


@pytest.mark.parametrize("values", MODES, ids=lambda v: ",".join(f"{k}={v[k]}" for k in v)[:60])
def test_every_mode_is_schema_valid(
    values: dict[str, Any],
    chart: Callable[[dict[str, Any]], list[Obj]],
    versions: list[str],  # noqa: F811
) -> None:
    objects = chart(values)
    assert objects
    assert tool.validate_objects(objects, versions) == []


def only(objects: list[Obj], kind: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def gfd_env(objects: list[Obj]) -> dict[str, Any]:
    pod = only(objects, "DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_flags_as_values_reach_gfd_by_its_environment_variables(
    chart: Callable[[dict[str, Any]], list[Obj]],
) -> None:
    env = gfd_env(chart(MODES[-1]))
    assert env["GFD_FAIL_ON_INIT_ERROR"] == "false"
    assert env["GFD_NO_TIMESTAMP"] == "true"
    assert env["GFD_SLEEP_INTERVAL"] == "90s"
    assert env["DEVICE_DISCOVERY_STRATEGY"] == "nvml"
    assert "GFD_METRICS_ADDRESS" not in env
    ds = only(chart(MODES[-1]), "DaemonSet")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert "livenessProbe" not in container and container["image"] == "gfd:1.2.3"


def test_lifecycle_and_topology_flags_reach_gfd(
    chart: Callable[[dict[str, Any]], list[Obj]],
) -> None:
    assert not {"GFD_EXPIRY_HORIZON", "GFD_TOPOLOGY_LABELS"} & set(gfd_env(chart({})))
    env = gfd_env(chart({"gfd.expiryHorizon": "2h", "gfd.topologyLabels": True}))
    assert env["GFD_EXPIRY_HORIZON"] == "2h"
    assert env["GFD_TOPOLOGY_LABELS"] == "true"
    assert gfd_env(chart({"gfd.topologyLabels": False}))["GFD_TOPOLOGY_LABELS"] == "false"


def test_the_drift_check_reaches_gfd_with_the_resourceslices_role(
    chart: Callable[[dict[str, Any]], list[Obj]],
) -> None:
    plain = chart({})
    assert "GFD_DRA_DRIFT_CHECK" not in gfd_env(plain)
    assert not [o for o in plain if o["kind"] == "ClusterRole" and "dra" in o["metadata"]["name"]]
    checked = chart({"gfd.draDriftCheck": True})
    assert gfd_env(checked)["GFD_DRA_DRIFT_CHECK"] == "true"
    (role,) = [
        o for o in checked if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-dra")
    ]
    assert role["rules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "watch"],
        }
    ]


def test_gfd_runs_as_its_own_user_and_only_the_init_container_as_root(
    chart: Callable[[dict[str, Any]], list[Obj]],
) -> None:
    """features-file: gfd is uid 65532; the one-off init container is uid 0 with no capability."""
    for output in ("features-file", "node-feature-api", "node-labels"):
        pod = only(chart({"output": output}), "DaemonSet")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert pod["securityContext"]["runAsUser"] == 65532
        assert container["securityContext"]["runAsNonRoot"] is True
        assert "runAsUser" not in container["securityContext"]
        inits = pod.get("initContainers", [])
        assert [c["name"] for c in inits] == (
            ["features-d-group"] if output == "features-file" else []
        )
        for init in inits:
            assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert init["securityContext"]["allowPrivilegeEscalation"] is False


def test_config_map_is_mounted_and_its_entry_chosen_by_the_node_label(
    chart: Callable[[dict[str, Any]], list[Obj]],
) -> None:
    """As upstream's chart runs config-manager whenever a ConfigMap is used
    (deployments/helm/nvidia-device-plugin/templates/daemonset-gfd.yml:60-136 at v0.20.0),
    gfd gets config-manager's variables and reads its own Node (get, nothing more)."""
    values = MODES[-2]
    objects = chart(values)
    config_map = only(objects, "ConfigMap")
    assert config_map["data"] == values["config.map"]
    pod = only(objects, "DaemonSet")["spec"]["template"]
    assert pod["metadata"]["annotations"]["checksum/config"]
    (container,) = pod["spec"]["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    env = gfd_env(objects)
    assert "GFD_CONFIG_FILE" not in env
    assert env["CONFIG_FILE_SRCDIR"] == mount["mountPath"]
    assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    assert (env["DEFAULT_CONFIG"], env["FALLBACK_STRATEGIES"]) == ("", "named,single")
    assert pod["spec"]["automountServiceAccountToken"] is True
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]


def test_without_the_node_label_one_entry_is_read_by_every_node(
    chart: Callable[[dict[str, Any]], list[Obj]],
) -> None:
    # features-file: an output that needs no API, so only the config could need the token
    objects = chart({**MODES[-2], "config.selectByNodeLabel": False, "output": "features-file"})
    env = gfd_env(objects)
    assert env["GFD_CONFIG_FILE"] == "/config/config.yaml"
    assert "CONFIG_FILE_SRCDIR" not in env
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    assert (
        only(objects, "DaemonSet")["spec"]["template"]["spec"]["automountServiceAccountToken"]
        is False
    )


def test_an_external_config_map_needs_the_entry_named_without_the_node_label(
    helm_bin: Path,
) -> None:
    objects = template(helm_bin, {"config.name": "mine"})
    assert gfd_env(objects)["CONFIG_FILE_SRCDIR"] == "/config"
    fixed = {"config.name": "mine", "config.selectByNodeLabel": False}
    with pytest.raises(AssertionError, match=re.escape("config.default")):
        template(helm_bin, fixed)
    objects = template(helm_bin, {**fixed, "config.default": "a.yaml"})
    assert not [o for o in objects if o["kind"] == "ConfigMap"]
    assert gfd_env(objects)["GFD_CONFIG_FILE"] == "/config/a.yaml"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"output": "nodefeature"}, "output"),
        ({"migStrategy": "all"}, "migStrategy"),
        ({"mode": "oneshot-job"}, "job.nodes"),
        ({"output": "features-file", "mode": "cleanup-job", "job.nodes": ["n"]}, "features-file"),
        ({"config.name": "a", "config.map": {"b": "c"}}, "config"),
    ],
)
def test_bad_values_are_refused_naming_the_value(
    helm_bin: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(AssertionError, match=re.escape(message)):
        template(helm_bin, values)


def test_a_cleanup_job_removes_the_koordlet_file_beside_the_features_file(
    helm_bin: Path,
) -> None:
    """The koordlet file has no expiry (koordlet reports its GPUs until it goes), so with
    koordlet on, features-file output still gets its cleanup Job: gfd --cleanup with the
    directory, which removes the file (and the features file)."""
    objects = template(
        helm_bin,
        {
            "mode": "cleanup-job",
            "job.nodes": ["n"],
            "koordlet.enabled": True,
            "output": "features-file",
        },
    )
    pod = only(objects, "Job")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["args"][0] == "--cleanup"
    assert env["GFD_KOORDLET_DEVICE_INFOS_DIR"] == "/var/run/koordlet/xpu-device-infos"
    assert env["GFD_OUTPUT_FILE"].endswith("/features.d/gfd")


def test_release_name_and_namespace_carry_into_the_policy_and_bindings(helm_bin: Path) -> None:
    objects = template(helm_bin, {"output": "node-labels"}, release="lab", namespace="gpu")
    policy = only(objects, "ValidatingAdmissionPolicy")
    (condition,) = policy["spec"]["matchConditions"]
    assert "'system:serviceaccount:gpu:lab-gfd'" in condition["expression"]
    binding = only(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "lab-gfd", "namespace": "gpu"}
    ]
    assert (
        only(objects, "ValidatingAdmissionPolicyBinding")["spec"]["policyName"]
        == (policy["metadata"]["name"])
    )
    assert only(objects, "ServiceAccount")["metadata"]["namespace"] == "gpu"
    assert NAMESPACE not in subprocess.list2cmdline([yaml.safe_dump(o) for o in objects])


def test_the_admission_policies_follow_the_servers_release(helm_bin: Path) -> None:
    """ValidatingAdmissionPolicy v1 is 1.30+: node-feature-api leaves its policy out on an
    older server; node-labels, which has no other guard, is refused there."""

    def kinds(values: dict[str, Any], kube_version: str) -> set[str]:
        return {o["kind"] for o in template(helm_bin, values, kube_version=kube_version)}

    nf = {"output": "node-feature-api"}
    assert "ValidatingAdmissionPolicy" in kinds(nf, "v1.30.0")
    assert "ValidatingAdmissionPolicy" not in kinds(nf, "v1.29.9")
    assert "Role" in kinds(nf, "v1.20.2")
    with pytest.raises(AssertionError, match="output node-labels"):
        template(helm_bin, {"output": "node-labels"}, kube_version="v1.29.9")
    assert "ValidatingAdmissionPolicy" in kinds({"output": "node-labels"}, "v1.30.0")


def test_fields_of_newer_releases_are_left_out_for_older_ones(helm_bin: Path) -> None:
    """recursiveReadOnly (1.30+) makes a v1.20 API server refuse the DaemonSet."""

    def host_sys(kube_version: str) -> dict[str, Any]:
        objects = template(helm_bin, {}, kube_version=kube_version)
        (container,) = only(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
        return next(m for m in container["volumeMounts"] if m["name"] == "host-sys")

    assert "recursiveReadOnly" not in host_sys("v1.20.2")
    assert "recursiveReadOnly" not in host_sys("v1.29.9")
    assert host_sys("v1.30.0")["recursiveReadOnly"] == "IfPossible"


def test_per_node_configs_that_may_enable_mig_get_the_mig_monitor(
    chart: Callable[[dict[str, Any]], list[Obj]],
) -> None:
    """As upstream's allPossibleMigStrategiesAreNone (templates/_helpers.tpl:140-159 at
    v0.20.0): an entry with migStrategy single/mixed, or an external ConfigMap, may turn MIG
    on, and NVML then needs the MIG monitor device; no MIG_STRATEGY variable overrides the
    entries."""

    def mig_ready(values: dict[str, Any]) -> bool:
        objects = chart(values)
        container = only(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
        assert "MIG_STRATEGY" not in gfd_env(objects)
        monitor = gfd_env(objects).get("NVIDIA_MIG_MONITOR_DEVICES") == "all"
        assert monitor == (
            "SYS_ADMIN" in container["securityContext"]["capabilities"].get("add", [])
        )
        return monitor

    plain = {"default": "version: v1\n", "other": "version: v1\nflags: {migStrategy: none}\n"}
    assert not mig_ready({"config.map": plain})
    assert mig_ready(
        {"config.map": {**plain, "mig": "version: v1\nflags:\n  migStrategy: mixed\n"}}
    )
    assert mig_ready({"config.name": "mine"})
    fixed = {"config.selectByNodeLabel": False, "config.default": "default"}
    assert not mig_ready({"config.map": {**plain, "mig": "flags: {migStrategy: mixed}"}, **fixed})
