"""Every key of upstream's v0.20.0 values file (verbatim fixture) is honoured with upstream's
meaning, refused at render time by name, or named once in NOTES as ignored: nothing renders
silently wrong."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helm import CHART, IMAGE, NAMESPACE, RELEASE, helm, set_args

Obj = dict[str, Any]
FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "upstream"
    / "nvidia-device-plugin-values-v0.20.0.yaml"
)
#: what a migrating user must add to upstream's file: gfd's image, and GFD switched on
MIGRATING = {"gfd.enabled": True, "image.repository": "registry.example/gfd", "image.tag": "1.0"}


@pytest.fixture(scope="module")
def notes_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart with its NOTES.txt also rendered into a ConfigMap: `helm template` leaves
    NOTES out, and `helm install --dry-run` wants a cluster."""
    chart = tmp_path_factory.mktemp("chart") / "gfd"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes-source.txt")
    (chart / "templates" / "notes-preview.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes-preview}\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes-source.txt") . | quote }}\n'
    )
    return chart


def render(
    helm_bin: Path,
    values: dict[str, Any],
    *,
    chart: Path = CHART,
    upstream_file: bool = True,
    namespace: str = NAMESPACE,
) -> subprocess.CompletedProcess[str]:
    files = ["-f", str(FIXTURE)] if upstream_file else [*set_args(IMAGE)]
    return helm(
        helm_bin,
        "template", RELEASE, str(chart), "--namespace", namespace, *files, *set_args(values),
        check=False,
    )  # fmt: skip


def objects_of(done: subprocess.CompletedProcess[str]) -> list[Obj]:
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def daemonset(objects: list[Obj]) -> Obj:
    (found,) = [o for o in objects if o["kind"] == "DaemonSet"]
    return found


def pod_spec(objects: list[Obj]) -> Obj:
    spec: Obj = daemonset(objects)["spec"]["template"]["spec"]
    return spec


def container(objects: list[Obj]) -> Obj:
    (found,) = pod_spec(objects)["containers"]
    return found


def env(objects: list[Obj]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(objects)["env"]}


def upstream_keys() -> set[str]:
    """The keys of upstream's values file, to the depth this test classifies them."""
    values = yaml.safe_load(FIXTURE.read_text())
    keys = set()
    for key, value in values.items():
        if isinstance(value, dict) and value and key in ("config", "image", "gfd"):
            keys.update(f"{key}.{sub}" for sub in value)
        else:
            keys.add(key)
    return keys


# ----------------------------------------------------------------- honoured

Check = Callable[[list[Obj]], bool]
MAP = {"default": "version: v1\n", "mig-mixed": "version: v1\nflags: {migStrategy: mixed}\n"}

HONOURED: dict[str, tuple[dict[str, Any], Check]] = {
    "config.name": ({"config.name": "mine"}, lambda o: any(
        v.get("configMap", {}).get("name") == "mine" for v in pod_spec(o)["volumes"])),
    "config.map": ({"config.map": MAP}, lambda o: [
        c["data"] for c in o if c["kind"] == "ConfigMap"] == [MAP]),
    "config.default": ({"config.map": MAP, "config.default": "mig-mixed"},
                       lambda o: env(o)["DEFAULT_CONFIG"] == "mig-mixed"),
    "config.fallbackStrategies": ({"config.map": MAP, "config.fallbackStrategies": ["empty"]},
                                  lambda o: env(o)["FALLBACK_STRATEGIES"] == "empty"),
    "migStrategy": ({"migStrategy": "mixed"}, lambda o: env(o)["MIG_STRATEGY"] == "mixed"),
    "failOnInitError": ({"failOnInitError": False},
                        lambda o: env(o)["GFD_FAIL_ON_INIT_ERROR"] == "false"),
    "deviceDiscoveryStrategy": ({"deviceDiscoveryStrategy": "nvml"},
                                lambda o: env(o)["DEVICE_DISCOVERY_STRATEGY"] == "nvml"),
    "nameOverride": ({"nameOverride": "labeller"},
                     lambda o: daemonset(o)["metadata"]["name"] == "gfd-labeller"),
    "fullnameOverride": ({"fullnameOverride": "gpu-labels"},
                         lambda o: daemonset(o)["metadata"]["name"] == "gpu-labels"),
    "namespaceOverride": ({"namespaceOverride": "elsewhere"}, lambda o: all(
        x["metadata"]["namespace"] == "elsewhere" for x in o
        if x["kind"] in ("DaemonSet", "ServiceAccount"))),
    "selectorLabelsOverride": ({"selectorLabelsOverride": {"app": "gfd-x"}}, lambda o: (
        daemonset(o)["spec"]["selector"]["matchLabels"] == {"app": "gfd-x"}
        and daemonset(o)["spec"]["template"]["metadata"]["labels"]["app"] == "gfd-x")),
    "allowDefaultNamespace": ({"allowDefaultNamespace": True}, lambda o: bool(daemonset(o))),
    "imagePullSecrets": ({"imagePullSecrets": [{"name": "pull"}]},
                         lambda o: pod_spec(o)["imagePullSecrets"] == [{"name": "pull"}]),
    "image.repository": ({"image.repository": "reg.example/team/gfd"},
                         lambda o: container(o)["image"] == "reg.example/team/gfd:1.0"),
    "image.pullPolicy": ({"image.pullPolicy": "Always"},
                         lambda o: container(o)["imagePullPolicy"] == "Always"),
    "image.tag": ({"image.tag": "2.3.4"},
                  lambda o: container(o)["image"] == "registry.example/gfd:2.3.4"),
    "updateStrategy": ({"updateStrategy": {"type": "OnDelete"}},
                       lambda o: daemonset(o)["spec"]["updateStrategy"] == {"type": "OnDelete"}),
    "podAnnotations": ({"podAnnotations": {"team": "gpu"}}, lambda o: daemonset(o)["spec"][
        "template"]["metadata"]["annotations"]["team"] == "gpu"),
    "podSecurityContext": ({"podSecurityContext": {"fsGroup": 2000}}, lambda o: (
        pod_spec(o)["securityContext"]["fsGroup"] == 2000
        and pod_spec(o)["securityContext"]["runAsNonRoot"] is True)),
    "resources": ({"resources": {"limits": {"memory": "300Mi"}}},
                  lambda o: container(o)["resources"]["limits"]["memory"] == "300Mi"),
    "nodeSelector": ({"nodeSelector": {"pool": "gpu"}},
                     lambda o: pod_spec(o)["nodeSelector"] == {"pool": "gpu"}),
    "affinity": ({"affinity": {"nodeAffinity": {}}},
                 lambda o: "requiredDuringSchedulingIgnoredDuringExecution"
                 in pod_spec(o)["affinity"]["nodeAffinity"]),  # maps merge, as in upstream's chart
    "tolerations": ({"tolerations": [{"operator": "Exists"}]},
                    lambda o: pod_spec(o)["tolerations"] == [{"operator": "Exists"}]),
    "priorityClassName": ({"priorityClassName": "gpu-critical"},
                          lambda o: pod_spec(o)["priorityClassName"] == "gpu-critical"),
    "runtimeClassName": ({"runtimeClassName": "nvidia"},
                         lambda o: pod_spec(o)["runtimeClassName"] == "nvidia"),
    "gfd.enabled": ({"gfd.enabled": True}, lambda o: bool(daemonset(o))),
    "gfd.noTimestamp": ({"gfd.noTimestamp": True},
                        lambda o: env(o)["GFD_NO_TIMESTAMP"] == "true"),
    "gfd.sleepInterval": ({"gfd.sleepInterval": "90s"},
                          lambda o: env(o)["GFD_SLEEP_INTERVAL"] == "90s"),
    "gfd.securityContext": ({"gfd.securityContext": {"privileged": True}}, lambda o: (
        container(o)["securityContext"]["privileged"] is True
        and container(o)["securityContext"]["allowPrivilegeEscalation"] is True)),
    # documented (commented out) in upstream's file, read by its template
    "gfd.enableHostNetwork": ({"gfd.enableHostNetwork": True}, lambda o: (
        pod_spec(o)["hostNetwork"] is True
        and pod_spec(o)["dnsPolicy"] == "ClusterFirstWithHostNet")),
    # upstream's template reads these top-level spellings (daemonset-gfd.yml:162-169)
    "noTimestamp": ({"noTimestamp": True}, lambda o: env(o)["GFD_NO_TIMESTAMP"] == "true"),
    "sleepInterval": ({"sleepInterval": "2m"}, lambda o: env(o)["GFD_SLEEP_INTERVAL"] == "2m"),
}  # fmt: skip

REFUSED: dict[str, dict[str, Any]] = {
    "gfd.enabled": {"gfd.enabled": False},
    "image.repository": {"image.repository": "nvcr.io/nvidia/k8s-device-plugin"},
    "nfd.enabled": {"nfd.enabled": True},
}

#: named once in NOTES, ignored: they configure the device plugin, MPS, CDI or NFD
IGNORED = {
    "compatWithCPUManager", "deviceListStrategy", "deviceIDStrategy", "nvidiaDriverRoot",
    "gdrcopyEnabled", "gdsEnabled", "mofedEnabled", "securityContext", "devicePlugin", "mps",
    "cdi", "nfd", "gfd.nameOverride", "gfd.namespaceOverride",
}  # fmt: skip


def test_every_upstream_key_is_classified() -> None:
    """A key added to the fixture (a newer upstream) fails here until it is decided."""
    classified = set(HONOURED) | set(REFUSED) | IGNORED
    assert upstream_keys() - classified == set()
    assert not set(HONOURED) & IGNORED


def test_upstreams_values_file_alone_is_refused_naming_each_key(helm_bin: Path) -> None:
    """Its gfd.enabled is false and its image is the device plugin's: both named at once,
    never a render of upstream's image tagged with gfd's chart version."""
    done = render(helm_bin, {})
    assert done.returncode != 0
    assert "gfd.enabled: false" in done.stderr
    assert "image.repository: nvcr.io/nvidia/k8s-device-plugin is upstream's image" in done.stderr


def test_upstreams_values_file_with_gfds_image_renders_honouring_it(helm_bin: Path) -> None:
    objects = objects_of(render(helm_bin, MIGRATING))
    pod = pod_spec(objects)
    assert container(objects)["image"] == "registry.example/gfd:1.0"
    # gfd.securityContext.privileged: true, upstream's default, is the privileged mode
    assert container(objects)["securityContext"]["privileged"] is True
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in pod["tolerations"]


@pytest.mark.parametrize("key", sorted(HONOURED))
def test_an_honoured_upstream_key_has_upstreams_meaning(helm_bin: Path, key: str) -> None:
    values, check = HONOURED[key]
    objects = objects_of(render(helm_bin, {**MIGRATING, **values}))
    assert check(objects), key


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_refused_upstream_key_is_named(helm_bin: Path, key: str) -> None:
    done = render(helm_bin, {**MIGRATING, **REFUSED[key]})
    assert done.returncode != 0
    assert re.search(rf"(^|\n){re.escape(key)}: ", done.stderr), done.stderr


def test_allow_default_namespace_false_refuses_the_default_namespace(helm_bin: Path) -> None:
    done = render(helm_bin, MIGRATING, namespace="default")  # upstream's file: false
    assert done.returncode != 0 and "allowDefaultNamespace: false" in done.stderr
    objects_of(render(helm_bin, {**MIGRATING, "namespaceOverride": "gpu"}, namespace="default"))
    objects_of(render(helm_bin, {}, upstream_file=False, namespace="default"))  # gfd's default


def test_ignored_keys_are_named_once_in_notes(helm_bin: Path, notes_chart: Path) -> None:
    done = render(helm_bin, MIGRATING, chart=notes_chart)
    (preview,) = [o for o in objects_of(done) if o["metadata"]["name"] == "notes-preview"]
    notes: str = preview["data"]["notes"]
    for key in sorted(IGNORED - {"nfd", "gfd.nameOverride", "gfd.namespaceOverride"}):
        assert len(re.findall(rf"\b{re.escape(key)}\b", notes)) == 1, (key, notes)
    assert notes.count("nfd.*") == 1
    assert notes.count("gfd.nameOverride") == 1
    # without upstream's file, no such line
    done = render(helm_bin, {}, chart=notes_chart, upstream_file=False)
    (preview,) = [o for o in objects_of(done) if o["metadata"]["name"] == "notes-preview"]
    assert "Ignored" not in preview["data"]["notes"]


def test_an_unknown_key_is_refused_by_name(helm_bin: Path) -> None:
    done = render(helm_bin, {"migStrategyy": "mixed"}, upstream_file=False)
    assert done.returncode != 0 and "migStrategyy" in done.stderr
