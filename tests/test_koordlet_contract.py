"""gfd's koordlet device-info file against koordlet's contract, on every example node.

koordlet's side is :mod:`tests.koordlet_model`, a reading of koordinator-sh/koordinator at
commit a7a1b76bbf81abd26f9c377de1f31a60dd965f6e: Go's JSON decoding into ``XPUDeviceInfo``
(``pkg/koordlet/util/device.go``), ``getPartitionTableFromXPUDevices``,
``buildXPUDeviceLabels`` and ``getXPUDeviceTopology``
(``pkg/koordlet/statesinformer/impl/states_device_linux.go``), ``GetXPUDevice``
(``pkg/koordlet/metricsadvisor/devices/xpu/collector_xpu.go``).  Every snapshot of
``examples/snapshots`` (and the variants of tests/test_topology.py) is turned into the file
gfd writes and read back as koordlet would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gfd import partition_table as partitions
from gfd import snapshot as snapshot_io
from gfd.labels.partitioning import partition_table
from gfd.outputs.koordlet import (
    DEFAULT_DIR,
    FILE_NAME,
    UNKNOWN_NUMA_NODE,
    KoordletDeviceInfos,
    device_infos,
)
from gfd.snapshot import Snapshot
from tests import koordlet_model as koordlet
from tests.test_topology import DGX1, H100, agreement_cases, bridged

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples" / "snapshots").glob("*.yaml"))
CASES = agreement_cases()  # every example, a DGX-1 without GPU 7, two bridged PCIe nodes


def load(path: Path) -> Snapshot:
    return snapshot_io.load(str(path))


def written(snap: Snapshot) -> str:
    """The file's content, as :class:`KoordletDeviceInfos` writes it."""
    return json.dumps(device_infos(snap, partition_table(snap, None)), indent=2) + "\n"


def names(snap: Snapshot) -> dict[int, int]:
    """GPU index -> its minor in the file: the minor when every GPU's is known and
    distinct, else the NVML index (as the table names them)."""
    entries = {e.index: e.minor for e in (snap.topology.gpus if snap.topology else ())}
    known = [entries.get(g.index) for g in snap.gpus]
    if all(m is not None for m in known) and len(set(known)) == len(known):
        return {g.index: int(entries[g.index] or 0) for g in snap.gpus}
    return {g.index: g.index for g in snap.gpus}


def test_the_model_is_the_commit_the_docs_cite() -> None:
    """README and gfd/outputs/koordlet.py cite the same koordinator commit as the model."""
    readme = (REPO / "README.md").read_text()
    source = (REPO / "gfd" / "outputs" / "koordlet.py").read_text()
    assert koordlet.COMMIT in readme and koordlet.COMMIT in source


@pytest.mark.parametrize(("name", "snap"), CASES, ids=lambda v: str(v)[:40])
def test_the_file_decodes_into_xpu_device_info_exactly(name: str, snap: Snapshot) -> None:
    """Every key is a field of koordlet's Go structs, spelled exactly (no key Go would drop
    or match only case-insensitively), with the field's JSON type."""
    devices = koordlet.decode_devices(written(snap), strict=True)
    assert len(devices) == len(snap.gpus)
    for device in devices:
        keys = {"vendor", "model", "uuid", "minor", "resources", "topology", "status"}
        assert set(device) == keys
        assert koordlet._go_int(device["minor"], 32) is not None  # ParseInt(minor, 10, 32)
        for value in device["resources"].values():
            partitions.parse_quantity(value)  # resource.ParseQuantity
        assert device["status"] == {"healthy": True}
        assert "mustHonorPartition" not in device["topology"]


@pytest.mark.parametrize(("name", "snap"), CASES, ids=lambda v: str(v)[:40])
def test_koordlet_publishes_the_table_gfd_computes_for_every_size_it_can_carry(
    name: str, snap: Snapshot
) -> None:
    """koordlet's table is gfd's, size by size from 2 up: the same partitions, each once,
    of type NVLink, score 1 (what koordlet writes; gfd's scores and bandwidths stay in
    gfd's own Node annotation)."""
    ours = partition_table(snap, None)
    devices = koordlet.decode_devices(written(snap))
    derived = koordlet.partition_table(devices)
    expected = {
        size: sorted(list(p.minors) for p in items) for size, items in ours.items() if size > 1
    }
    assert {size: sorted(p["minors"] for p in items) for size, items in derived.items()} == (
        expected
    )
    for items in derived.values():
        assert all(p["gpuLinkType"] == "NVLink" and p["allocationScore"] == 1 for p in items)
    annotation = koordlet.annotation(devices)
    if expected:
        assert annotation is not None  # and the scheduler reads it as a table
        parsed = partitions.parse_table(json.loads(annotation), "koordlet")
        assert {s: sorted(list(p.minors) for p in items) for s, items in parsed.items()} == (
            expected
        )
        assert {(p.ring_bus_bandwidth, p.allocation_score) for i in parsed.values() for p in i} == {
            (None, 1)
        }
    else:
        assert annotation is None  # no table: koordlet writes no annotation


@pytest.mark.parametrize(("name", "snap"), CASES, ids=lambda v: str(v)[:40])
def test_the_policy_label_is_prefer_with_a_table_and_never_honor(name: str, snap: Snapshot) -> None:
    table = partition_table(snap, None)
    label = koordlet.policy_label(koordlet.decode_devices(written(snap)))
    assert label == ("Prefer" if any(size > 1 for size in table) else None)


@pytest.mark.parametrize(("name", "snap"), CASES, ids=lambda v: str(v)[:40])
def test_numa_node_pcie_root_and_bus_id_as_koordlets_collectors_give_them(
    name: str, snap: Snapshot
) -> None:
    """``nodeID`` always present (koordlet's -1 for an absent one would take the GPU out of
    the scheduler's NUMA topology), the kernel's node or 0 as koordlet's collectors give
    for -1; ``pcieID`` in koordlet's form where gfd knows the root; ``busID`` the bus id."""
    entries = {e.index: e for e in (snap.topology.gpus if snap.topology else ())}
    devices = koordlet.decode_devices(written(snap))
    by_minor = {int(d["minor"]): d for d in devices}
    for gpu in snap.gpus:
        device = by_minor[names(snap)[gpu.index]]
        topology = koordlet.device_topology(device)
        assert topology is not None
        entry = entries.get(gpu.index)
        numa = entry.numa_node if entry is not None else None
        assert topology["nodeID"] == (UNKNOWN_NUMA_NODE if numa is None else numa)
        root = entry.pcie_root if entry is not None else None
        assert topology["pcieID"] == (root or "")
        if root:
            assert koordlet.PCIE_REGEXP.fullmatch(root)
        assert topology["busID"] == gpu.pci_bus_id


def test_examples_name_pcie_roots() -> None:
    """The example nodes with a topology carry a PCIe root per GPU (so the checks above
    compare real values)."""
    for path in (DGX1, H100):
        devices = koordlet.decode_devices(written(load(path)))
        assert all(d["topology"]["pcieID"].startswith("pci0000:") for d in devices)


def test_koordlets_reader_accepts_the_directory_gfd_leaves(tmp_path: Path) -> None:
    """GetXPUDevice reads every entry but directories: gfd's temporary directory is one,
    and its file decodes; the whole read would fail on one bad file."""
    snap = load(DGX1)
    output = KoordletDeviceInfos(str(tmp_path))
    assert output.publish(snap, partition_table(snap, None))
    devices = koordlet.read_dir(str(tmp_path))
    assert [d["minor"] for d in devices] == [str(m) for m in range(8)]
    assert (tmp_path / FILE_NAME).is_file()
    (tmp_path / "zz-broken.json").write_text("{")
    with pytest.raises(koordlet.DecodeError):
        koordlet.read_dir(str(tmp_path))


def test_the_model_refuses_what_go_refuses() -> None:
    """The decoder model is no rubber stamp: a number where Go wants a string, an unknown
    or mis-cased key under ``strict``."""
    with pytest.raises(koordlet.DecodeError):
        koordlet.decode_devices('[{"minor": 0}]')
    with pytest.raises(koordlet.DecodeError):
        koordlet.decode_devices('[{"topology": {"p2pLinks": {}}}]')
    with pytest.raises(koordlet.DecodeError):
        koordlet.decode_devices('[{"Minor": "0"}]', strict=True)
    assert koordlet.decode_devices('[{"Minor": "0"}]') == [{"minor": "0"}]
    assert koordlet.partition_table([{"minor": "0", "topology": {"p2pLinks": []}}]) == {}
    # a device without p2pLinks is skipped, not the whole table
    devices: list[dict[str, Any]] = [
        {"minor": "0", "topology": {}},
        {"minor": "1", "topology": {"p2pLinks": [{"peerMinor": "2", "type": "NVLink"}]}},
    ]
    assert koordlet.partition_table(devices) == {
        2: [{"minors": [1, 2], "gpuLinkType": "NVLink", "allocationScore": 1}]
    }
    assert koordlet.policy_label(devices) is None  # the first device decides


# ------------------------------------------------------- what a pod with a partition spec gets


def test_partition_spec_pods_on_a_node_fed_through_koordlet() -> None:
    """README: on a node whose table comes through koordlet, a pod with a
    ``scheduling.koordinator.sh/gpu-partition-spec`` asking 1 GPU or a ``ringBusBandwidth``
    is refused, though gfd's own table (the Node annotation) admits both; 2, 4 and 8 GPUs
    without a bandwidth get one of gfd's partitions."""
    snap = load(H100)
    ours = partitions.to_json_document(partition_table(snap, None))
    gfd_table = {int(size): items for size, items in ours.items()}
    through_koordlet = koordlet.partition_table(koordlet.decode_devices(written(snap)))
    assert koordlet.allocate_by_partition(gfd_table, 1) == ([0], None)
    assert koordlet.allocate_by_partition(through_koordlet, 1) == (None, koordlet.ERR_UNSUPPORTED)
    assert koordlet.allocate_by_partition(gfd_table, 2, 400 * 10**9)[1] is None
    assert koordlet.allocate_by_partition(through_koordlet, 2, 400 * 10**9) == (
        None, koordlet.ERR_INSUFFICIENT,
    )  # fmt: skip
    for size in (2, 4, 8):
        given, reason = koordlet.allocate_by_partition(through_koordlet, size)
        assert reason is None and given is not None and len(given) == size


def test_pcie_only_nodes_write_no_table_and_no_policy() -> None:
    """A PCIe-only node: no p2pLinks at all, so koordlet writes no partitions annotation
    and no policy label (pods with a partition spec then meet "node(s) missing GPU
    Partition Table" unless the node is an H100/H800/H20 one with koordinator's built-in
    table)."""
    for snap in (load(REPO / "examples" / "snapshots" / "l40s-pcie.yaml"), bridged([])):
        devices = koordlet.decode_devices(written(snap))
        assert all("p2pLinks" not in d["topology"] for d in devices)
        assert koordlet.annotation(devices) is None
        assert koordlet.policy_label(devices) is None
        assert partition_table(snap, None) == {}


# ----------------------------------------------------------------------------- the path


def test_the_deployed_default_is_koordlets_directory() -> None:
    """koordlet's ``--xpu-device-infos-dir`` default, ``/var/run/koordlet/xpu-device-infos/``
    (``pkg/koordlet/util/system/config.go``), in the kustomize component and the chart."""
    assert DEFAULT_DIR == "/var/run/koordlet/xpu-device-infos"
    component = (REPO / "manifests" / "components" / "koordlet" / "koordlet.yaml").read_text()
    # the env value, the mount, the host path, and the init container's argument and mount
    # (it gives the directory to gfd's group so that gfd writes it as uid 65532)
    assert component.count(DEFAULT_DIR) == 5
    values = (REPO / "manifests" / "helm" / "gfd" / "values.yaml").read_text()
    assert f"deviceInfosDir: {DEFAULT_DIR}\n" in values
    for path in (*sorted((REPO / "manifests").rglob("*.yaml")), *sorted(REPO.glob("gfd/**/*.py"))):
        assert "/etc/kubernetes/koordlet" not in path.read_text(), path
