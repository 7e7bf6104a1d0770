"""Raw GPU features for NodeFeature ``spec.features``: a pure function of the
snapshot, in NFD's Features shape, published and kept current by the NodeFeature output."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gfd import snapshot as snapshot_io
from gfd.agent import Agent
from gfd.labels.features import node_features
from gfd.settings import resolve
from gfd.snapshot import LostGpu, Mig
from tests.fakes.fake_apiserver import FakeApiServer
from tests.helpers import H100, gpu, mig, node

ROOT = Path(__file__).resolve().parent.parent


def assert_nfd_features_shape(features: dict[str, Any]) -> None:
    """NFD api/nfd/v1alpha1 Features: flags {name: {elements: {name: {}}}}, attributes
    {name: {elements: {name: str}}}, instances {name: {elements: [{attributes: {..}}]}}."""
    assert set(features) == {"flags", "attributes", "instances"}
    for feature in features["flags"].values():
        assert set(feature) == {"elements"} and all(v == {} for v in feature["elements"].values())
    for name, feature in features["attributes"].items():
        assert name == name.lower() and name.count(".") == 1
        assert set(feature) == {"elements"}
        # a real kube-apiserver v1.20.2 refuses "" in these maps ("null": must be of type
        # string) and with it the whole object (found by tests/e2e)
        assert all(isinstance(v, str) and v for v in feature["elements"].values())
    for name, feature in features["instances"].items():
        assert name == name.lower() and name.count(".") == 1
        assert set(feature) == {"elements"} and isinstance(feature["elements"], list)
        for element in feature["elements"]:
            assert set(element) == {"attributes"}
            assert all(
                isinstance(k, str) and isinstance(v, str) and v
                for k, v in element["attributes"].items()
            )


def test_features_of_a_dgx_a100() -> None:
    features = node_features(snapshot_io.load(str(ROOT / "examples/snapshots/dgx-a100.yaml")))
    assert_nfd_features_shape(features)
    gpus = features["instances"]["nvidia.gpu"]["elements"]
    assert len(gpus) == 8
    assert gpus[0]["attributes"] == {
        "index": "0", "uuid": "GPU-79a2ba02-a537-ccbf-2965-8e9d90c0bd00",
        "name": "NVIDIA A100-SXM4-40GB", "product": "NVIDIA-A100-SXM4-40GB", "memory_mib": "40960",
        "memory_gib": "40", "compute_capability": "8.0", "compute_major": "8", "compute_minor": "0",
        "family": "ampere", "mig_mode": "disabled", "mig_devices": "0",
        "pci_bus_id": "0000:07:00.0", "pci_class": "0302",
    }  # fmt: skip
    assert features["attributes"]["nvidia.driver"]["elements"] == {
        "version": "550.54.15", "major": "550", "minor": "54", "revision": "15", "cuda": "12.4",
        "cuda_major": "12", "cuda_minor": "4",
    }  # fmt: skip
    assert features["attributes"]["nvidia.node"]["elements"] == {"gpu_count": "8", "gpus_lost": "0"}
    assert features["instances"]["nvidia.mig"]["elements"] == []


def test_mig_devices_and_profiles() -> None:
    snap = node(gpu(0, mig=mig("1g.5gb", "2g.10gb", "1g.5gb")), gpu(1, mig=mig(enabled=False)))
    features = node_features(snap)
    first, second = (e["attributes"] for e in features["instances"]["nvidia.gpu"]["elements"])
    mig_facts = (first["mig_mode"], first["mig_profiles"], first["mig_devices"])
    assert mig_facts == ("enabled", "1g.5gb,2g.10gb", "3")
    assert second["mig_mode"] == "disabled"
    assert "mig_profiles" not in second  # no profile: left out, never ""
    migs = [e["attributes"] for e in features["instances"]["nvidia.mig"]["elements"]]
    assert [m["profile"] for m in migs] == ["1g.5gb", "2g.10gb", "1g.5gb"]
    assert migs[1] == {
        "gpu_index": "0", "gpu_uuid": snap.gpus[0].uuid, "profile": "2g.10gb", "memory_mib": "9856",
        "multiprocessors": "28", "slices_gi": "2", "slices_ci": "2",
    }  # fmt: skip


def test_unknown_facts_are_left_out_and_an_h100_is_80_gib() -> None:
    unknown = replace(gpu(0, memory=None, pci_class=None), pci_bus_id="")
    attributes = node_features(node(unknown, gpu(1, H100, memory=81559)))["instances"][
        "nvidia.gpu"
    ]["elements"]
    assert not {"memory_mib", "memory_gib", "pci_bus_id", "pci_class", "numa_node"} & set(
        attributes[0]["attributes"]
    )
    assert attributes[0]["attributes"]["mig_mode"] == "unsupported"
    assert attributes[1]["attributes"]["memory_gib"] == "80"


def test_no_driver_no_features_and_lost_gpus_are_counted() -> None:
    assert node_features(replace(node(), driver=None)) == {
        "flags": {}, "attributes": {}, "instances": {},
    }  # fmt: skip
    lost = replace(node(gpu(0)), lost=(LostGpu(index=1),))
    assert node_features(lost)["attributes"]["nvidia.node"]["elements"]["gpus_lost"] == "1"


def test_features_are_deterministic_whatever_the_gpu_order() -> None:
    snap = node(gpu(0), gpu(1, H100, memory=81559), gpu(2, mig=Mig(True)))
    reordered = replace(snap, gpus=tuple(reversed(snap.gpus)))
    assert node_features(snap) == node_features(reordered)


def nfd_rule_matches(features: dict[str, Any], minimum_gib: int, minimum_count: int) -> bool:
    """The README's NodeFeatureRule, evaluated as NFD does: the instances of nvidia.gpu
    whose memory_gib is Ge the value are matched; ``len`` of them is the var; the second
    rule matches when that var is Ge the count."""
    matched = [
        e for e in features["instances"]["nvidia.gpu"]["elements"]
        if int(e["attributes"].get("memory_gib", "-1")) >= minimum_gib
    ]  # fmt: skip
    return bool(matched) and len(matched) >= minimum_count


def test_the_readme_rule_selects_nodes_with_four_big_gpus() -> None:
    big = node(*(gpu(i, H100, memory=81559) for i in range(4)), gpu(4))
    small = node(*(gpu(i, H100, memory=81559) for i in range(3)), gpu(3), gpu(4))
    assert nfd_rule_matches(node_features(big), 80, 4)
    assert not nfd_rule_matches(node_features(small), 80, 4)
    readme = (ROOT / "README.md").read_text()
    assert 'memory_gib: {op: Ge, value: ["80"]}' in readme
    assert "{{ len .nvidia.gpu }}" in readme


# ----------------------------------------------------------------- through the output


def test_the_nodefeature_object_carries_the_features_and_follows_them(tmp_path: Path) -> None:
    snapshot = tmp_path / "node.yaml"
    snapshot.write_text((ROOT / "examples/snapshots/dgx-a100.yaml").read_text())
    with FakeApiServer() as api:
        api.add_node("n1")
        settings = resolve({
            "use_node_feature_api": True, "node_name": "n1", "snapshot_file": str(snapshot),
            "kubeconfig": str(api.write_kubeconfig(tmp_path / "kubeconfig")), "no_timestamp": True,
        }, {})  # fmt: skip
        agent = Agent(settings, reload_settings=lambda: settings)
        assert agent.run_pass() is True
        stored = api.get("NodeFeature", "nvidia-features-for-n1", "default")
        assert stored is not None
        expected = node_features(snapshot_io.load(str(snapshot)))
        assert stored["spec"]["features"] == expected
        assert stored["spec"]["labels"]["nvidia.com/gpu.count"] == "8"
        # steady state: nothing written
        api.clear_requests()
        assert agent.run_pass() is True
        assert not [r for r in api.requests if r.method in ("PUT", "POST", "PATCH")]
        # a fact that changes no label (a GPU's UUID) still updates the features
        text = snapshot.read_text().replace("8e9d90c0bd00", "8e9d90c0bdff")
        snapshot.write_text(text)
        assert agent.run_pass() is True
        stored = api.get("NodeFeature", "nvidia-features-for-n1", "default")
        assert stored is not None
        first = stored["spec"]["features"]["instances"]["nvidia.gpu"]["elements"][0]
        assert first["attributes"]["uuid"].endswith("8e9d90c0bdff")
        agent.metrics.close()
