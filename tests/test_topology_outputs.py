"""The partition table beside the labels: koordlet device-info files and the Node annotation.

koordlet's side is :mod:`tests.koordlet_model` (a reading of koordinator's
``getPartitionTableFromXPUDevices`` and ``buildXPUDeviceLabels`` at the commit it names);
tests/test_koordlet_contract.py checks the file against it on every example node.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gfd import snapshot as snapshot_io
from gfd.agent import Agent
from gfd.labels.partitioning import partition_table
from gfd.outputs.koordlet import DEFAULT_DIR, FILE_NAME, KoordletDeviceInfos, device_infos
from gfd.outputs.nodelabels import VERIFY_INTERVAL_SECONDS
from gfd.outputs.topology_extras import PARTITIONS_ANNOTATION, PartitionsAnnotation
from gfd.settings import Settings
from tests import koordlet_model as koordlet
from tests.fakes.fake_apiserver import FakeApiServer
from tests.helpers import Clock
from tests.process import run_gfd_here
from tests.test_manifests import (  # the manifest helpers and their fixture
    DAEMONSETS,
    effective_security,
    gfd_container,
    gfd_settings,
    mounts,
    rendered,  # noqa: F401 -- a fixture, requested by name below
    volumes,
    workload,
)

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "snapshots"
TOPOLOGY_EXAMPLES = [
    EXAMPLES / name for name in ("dgx1-v100-cube-mesh.yaml", "hgx-h100-nvswitch.yaml",
                                 "a100-pcie-nvlink-bridges.yaml", "l40s-pcie.yaml")
]  # fmt: skip


def koordlet_partition_table(
    devices: list[dict[str, Any]],
) -> tuple[dict[int, list[list[int]]] | None, str | None]:
    """(koordlet's partition table -- None when it writes none --, its policy label)."""
    table = koordlet.partition_table(devices)
    groups = {size: [p["minors"] for p in items] for size, items in table.items()}
    return groups or None, koordlet.policy_label(devices)


def load(path: Path) -> snapshot_io.Snapshot:
    return snapshot_io.load(str(path))


@pytest.mark.parametrize("path", TOPOLOGY_EXAMPLES, ids=lambda p: p.stem)
def test_koordlet_derives_exactly_our_groups(path: Path) -> None:
    snap = load(path)
    table = partition_table(snap, None)
    derived, policy = koordlet_partition_table(device_infos(snap, table))
    ours = {size: [list(p.minors) for p in items] for size, items in table.items() if size > 1}
    if not ours:
        assert (derived, policy) == (None, None)  # no table, no policy label: as without gfd
        return
    assert derived is not None
    assert {size: sorted(groups) for size, groups in derived.items()} == ours
    assert policy == "Prefer"


def test_device_infos_describe_each_gpu() -> None:
    snap = load(EXAMPLES / "hgx-h100-nvswitch.yaml")
    infos = device_infos(snap, partition_table(snap, None))
    assert infos[3] == {
        "vendor": "nvidia", "model": "H100-80GB-HBM3", "uuid": snap.gpus[3].uuid, "minor": "3",
        "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "81559Mi"},
        "topology": {"p2pLinks": [], "nodeID": "0", "pcieID": "pci0000:5b",
                     "busID": "0000:61:00.0"},
        "status": {"healthy": True},
    }  # fmt: skip
    assert infos[0]["topology"]["p2pLinks"] == [
        {"peerMinor": "1", "type": "NVLink"}, {"peerMinor": "1,2,3", "type": "NVLink"},
        {"peerMinor": "1,2,3,4,5,6,7", "type": "NVLink"},
    ]  # fmt: skip


def test_file_is_written_on_change_only_and_removed_by_cleanup(tmp_path: Path) -> None:
    snap = load(EXAMPLES / "a100-pcie-nvlink-bridges.yaml")
    output = KoordletDeviceInfos(str(tmp_path))
    table = partition_table(snap, None)
    assert output.publish(snap, table) is True
    path = tmp_path / FILE_NAME
    written = json.loads(path.read_text())
    assert [d["minor"] for d in written] == ["0", "1", "2", "3"]
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    # koordlet reads every entry but directories: only ours is one (the temp dir is a directory)
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == [FILE_NAME]
    assert output.publish(snap, table) is False
    path.unlink()
    assert output.publish(snap, table) is True  # someone removed it: written again
    output.cleanup()
    assert not path.exists()
    output.cleanup()  # nothing there: fine


def test_koordlet_flag_writes_the_file_in_a_oneshot_run(tmp_path: Path) -> None:
    snapshot = str(EXAMPLES / "dgx1-v100-cube-mesh.yaml")
    result = run_gfd_here("--oneshot", "--no-timestamp", "--snapshot-file", snapshot,
                          "--koordlet-device-infos-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "gpu.interconnect" not in result.stdout  # the labels stay opt-in
    derived, _ = koordlet_partition_table(json.loads((tmp_path / FILE_NAME).read_text()))
    assert derived is not None and sorted(derived) == [2, 4, 8]
    nowhere = ("--koordlet-device-infos-dir", str(tmp_path / "nope" / "deeper"))
    missing = run_gfd_here("--oneshot", "--snapshot-file", snapshot, *nowhere)
    assert missing.returncode == 1
    assert "cannot write koordlet device infos" in missing.stderr
    assert "Traceback" not in missing.stderr


# ----------------------------------------------------------------------------- annotation


API_NODE_N1 = {"annotations": {"someone/else": "x"}}  # the shared api fixture adds it


def settings_for(kubeconfig: str, snapshot: Path, **extra: Any) -> Settings:
    values = {"use_node_labels": True, "node_name": "n1", "kubeconfig": kubeconfig,
              "sleep_interval": 1.0, "snapshot_file": str(snapshot), "no_timestamp": True,
              "topology_labels": True, **extra}  # fmt: skip
    return Settings(**values)


def test_node_annotation_is_owned_like_the_labels(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    dgx1 = EXAMPLES / "dgx1-v100-cube-mesh.yaml"
    settings = settings_for(kubeconfig, dgx1)
    agent = Agent(settings, reload_settings=lambda: settings)
    assert agent.run_pass()
    annotations = api.node_annotations("n1")
    table = json.loads(annotations[PARTITIONS_ANNOTATION])
    assert sorted(table) == ["1", "2", "4", "8"]
    assert table["8"][0]["ringBusBandwidth"] == "50G"
    assert annotations["someone/else"] == "x"
    assert api.node_labels("n1")["nvidia.com/gpu.partition-sizes"] == "1-2-4-8"
    patches = api.count("PATCH")
    assert agent.run_pass()
    assert api.count("PATCH") == patches  # steady: nothing written

    # the node's GPUs lose their NVLinks: the annotation goes, other annotations stay
    pcie = tmp_path / "pcie.yaml"
    snap = load(dgx1)
    assert snap.topology is not None
    bare = replace(snap.topology, gpus=tuple(replace(e, nvlinks=()) for e in snap.topology.gpus))
    pcie.write_text(snapshot_io.dumps(replace(snap, topology=bare)))
    agent.settings = replace(settings, snapshot_file=str(pcie))
    assert agent.run_pass()
    assert PARTITIONS_ANNOTATION not in api.node_annotations("n1")
    assert api.node_annotations("n1")["someone/else"] == "x"


def test_a_restart_on_an_annotated_node_writes_nothing(api: FakeApiServer, kubeconfig: str) -> None:
    """A start on a node that already carries the right labels (and, here, the
    right partition annotation) sends no write at all."""
    settings = settings_for(kubeconfig, EXAMPLES / "hgx-h100-nvswitch.yaml")
    assert Agent(settings, reload_settings=lambda: settings).run_pass()
    patches = api.count("PATCH")
    restarted = Agent(settings, reload_settings=lambda: settings)
    assert restarted.run_pass()
    assert api.count("PATCH") == patches
    assert PARTITIONS_ANNOTATION in api.node_annotations("n1")


def test_without_the_watch_a_removed_annotation_is_put_back_at_the_interval(
    api: FakeApiServer, kubeconfig: str
) -> None:
    """Where the node cannot be watched, the annotation is checked as the labels are: one
    read of the node every VERIFY_INTERVAL_SECONDS (the watched repair: tests/test_watch.py)."""
    clock = Clock()
    settings = settings_for(kubeconfig, EXAMPLES / "hgx-h100-nvswitch.yaml")
    annotation = PartitionsAnnotation(settings, clock=clock)
    table = partition_table(load(EXAMPLES / "hgx-h100-nvswitch.yaml"), None)
    assert annotation.publish(table)
    api.edit(
        "Node", "n1", "", lambda node: node["metadata"]["annotations"].pop(PARTITIONS_ANNOTATION)
    )
    reads = api.count("GET")
    clock.now += VERIFY_INTERVAL_SECONDS - 1
    assert not annotation.publish(table)
    assert api.count("GET") == reads  # within the interval: nothing read
    clock.now += 1
    assert annotation.publish(table)
    assert PARTITIONS_ANNOTATION in api.node_annotations("n1")


def test_cleanup_removes_the_annotation(api: FakeApiServer, kubeconfig: str) -> None:
    settings = settings_for(kubeconfig, EXAMPLES / "hgx-h100-nvswitch.yaml")
    agent = Agent(settings, reload_settings=lambda: settings)
    assert agent.run_pass()
    assert PARTITIONS_ANNOTATION in api.node_annotations("n1")
    env = {"KUBECONFIG": settings.kubeconfig or "", "NODE_NAME": "n1"}
    result = run_gfd_here("--cleanup", "--use-node-labels", env=env)  # topology labels or not
    assert result.returncode == 0, result.stderr
    assert PARTITIONS_ANNOTATION not in api.node_annotations("n1")
    assert not any(k.startswith("nvidia.com/gpu") for k in api.node_labels("n1"))
    assert api.node_annotations("n1")["someone/else"] == "x"


def test_reload_without_topology_labels_removes_the_annotation(
    api: FakeApiServer, kubeconfig: str
) -> None:
    settings = settings_for(kubeconfig, EXAMPLES / "hgx-h100-nvswitch.yaml")
    plain = replace(settings, topology_labels=False)
    agent = Agent(settings, reload_settings=lambda: plain)
    assert agent.run_pass()
    assert PARTITIONS_ANNOTATION in api.node_annotations("n1")
    agent._signals.reload = True
    agent._reload()
    # retired once the reloaded settings have published (README "Switching output by reload")
    assert agent.run_pass()
    assert PARTITIONS_ANNOTATION not in api.node_annotations("n1")
    assert "nvidia.com/gpu.interconnect" not in api.node_labels("n1")


def test_reload_without_the_koordlet_dir_removes_the_file(tmp_path: Path) -> None:
    snapshot = str(EXAMPLES / "a100-pcie-nvlink-bridges.yaml")
    settings = Settings(oneshot=False, output_file="-", snapshot_file=snapshot,
                        koordlet_device_infos_dir=str(tmp_path))  # fmt: skip
    plain = replace(settings, koordlet_device_infos_dir="")
    agent = Agent(settings, reload_settings=lambda: plain)
    assert agent.run_pass()
    assert (tmp_path / FILE_NAME).exists()
    agent._reload()
    assert agent.run_pass()  # retired once the reloaded settings have published
    assert not (tmp_path / FILE_NAME).exists()


def test_no_annotation_without_topology_labels(api: FakeApiServer, kubeconfig: str) -> None:
    settings = settings_for(kubeconfig, EXAMPLES / "hgx-h100-nvswitch.yaml", topology_labels=False)
    agent = Agent(settings, reload_settings=lambda: settings)
    assert agent.run_pass()
    assert PARTITIONS_ANNOTATION not in api.node_annotations("n1")
    assert agent.topology_outputs is None
    assert os.environ.get("GFD_TOPOLOGY_LABELS") is None


# ----------------------------------------------------------------------------- manifests


KOORDLET_DIR = DEFAULT_DIR  # koordlet's --xpu-device-infos-dir default


@pytest.mark.parametrize("overlay", DAEMONSETS)
def test_koordlet_component_mounts_koordlets_directory(
    overlay: str,
    rendered: Any,  # noqa: F811
) -> None:
    obj = workload(overlay, rendered(f"{overlay}+koordlet"))
    container = gfd_container(obj)
    assert gfd_settings(obj, container).koordlet_device_infos_dir == KOORDLET_DIR
    mount = mounts(container)[KOORDLET_DIR]
    assert not mount.get("readOnly", False)
    host_path = volumes(obj)[mount["name"]]["hostPath"]
    assert host_path == {"path": KOORDLET_DIR, "type": "DirectoryOrCreate"}
    # gfd stays uid 65532: a one-off init container without any capability gives the
    # root-owned directory to gfd's group (README, "Deploy")
    security = effective_security(obj, container)
    assert security["runAsUser"] == 65532 and security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    inits = {c["name"]: c for c in obj["spec"]["template"]["spec"]["initContainers"]}
    opener = inits["koordlet-dir-group"]
    assert opener["args"][-1] == KOORDLET_DIR
    assert opener["securityContext"]["runAsUser"] == 0
    assert opener["securityContext"]["runAsGroup"] == 65532
    assert opener["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert opener["securityContext"]["allowPrivilegeEscalation"] is False
    assert mounts(opener)[KOORDLET_DIR]["name"] == mount["name"]
    plain = gfd_container(workload(overlay, rendered(overlay)))
    assert KOORDLET_DIR not in mounts(plain)
