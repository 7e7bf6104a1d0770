"""GPU topology: the snapshot section, discovery through the fake NVML, the partition table
per example node (complete, compared whole), the opt-in labels and ``--dump-partitions``
(the command line run in-process: tests/process.py ``run_gfd_here``)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from dataclasses import replace
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gfd import partition_table as partitions
from gfd import snapshot as snapshot_io
from gfd.config import Config
from gfd.discovery import discover
from gfd.discovery.gpu_links import cpu_list, nvlink_generation, read_pcie_root
from gfd.errors import ConfigError, SnapshotError
from gfd.labels import build
from gfd.labels.partitioning import left_after, link_graph, partition_table
from gfd.settings import Settings
from gfd.snapshot import GpuPair, GpuTopology, NvLink, Snapshot, Topology
from tests.process import run_gfd_here

from .fakes.fake_nvml import TOPOLOGY_FUNCTIONS, FakeNvml
from .fakes.fake_sysfs import build_from_snapshot

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "snapshots"
DGX1 = EXAMPLES / "dgx1-v100-cube-mesh.yaml"
H100 = EXAMPLES / "hgx-h100-nvswitch.yaml"
A100_PCIE = EXAMPLES / "a100-pcie-nvlink-bridges.yaml"
L40S = EXAMPLES / "l40s-pcie.yaml"
TOPOLOGY_FREE = sorted(
    p
    for p in [*EXAMPLES.glob("*.yaml"), *REPO.glob("tests/fixtures/snapshots/*.yaml")]
    if p not in (DGX1, H100, A100_PCIE, L40S)
)


@functools.cache
def load(path: Path) -> Snapshot:
    """An example snapshot, read once per process (a Snapshot is frozen: tests share it)."""
    return snapshot_io.load(str(path))


def singletons(scores: dict[int, int]) -> list[dict[str, Any]]:
    return [
        {"minors": [m], "gpuLinkType": "NVLink", "allocationScore": s}
        for m, s in sorted(scores.items())
    ]


def group(minors: list[int], bandwidth: str, score: int) -> dict[str, Any]:
    return {
        "minors": minors, "gpuLinkType": "NVLink", "ringBusBandwidth": bandwidth,
        "allocationScore": score,
    }  # fmt: skip


#: the DGX-1's NVLink pairs (examples/snapshots/dgx1-v100-cube-mesh.yaml): the hybrid cube
#: mesh, two fully linked quads 0-3 and 4-7 plus the links i - i+4, some of them doubled
DGX1_DOUBLED = [(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)]  # 50G
DGX1_SINGLE = [(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)]  # 25G
#: the 4-GPU sets with a ring: the two quads and the six "faces" {a, b, a+4, b+4}
DGX1_QUADS = [[0, 1, 2, 3], *([a, b, a + 4, b + 4] for a, b in combinations(range(4), 2))]
DGX1_QUADS.append([4, 5, 6, 7])

EXPECTED_TABLES: dict[Path, dict[str, Any]] = {
    # Every pair NVLink joins is a 2-GPU partition, aligned or not (0-3, 1-2, ... are
    # the doubled, faster ones); every 4-set with a ring, each of whose rings has a
    # single-link hop (25G); 0-3-2-1-5-6-7-4-0 is an 8-GPU ring of doubled links (50G).
    # Scores: all 1 -- test_scores_derived_from_what_is_left shows why.
    DGX1: {
        "1": singletons({m: 1 for m in range(8)}),
        "2": sorted([group(list(p), "50G", 1) for p in DGX1_DOUBLED]
                    + [group(list(p), "25G", 1) for p in DGX1_SINGLE], key=lambda g: g["minors"]),
        "4": [group(q, "25G", 1) for q in DGX1_QUADS],
        "8": [group(list(range(8)), "50G", 1)],
    },
    # Every hop goes through the NVSwitches on all 18 links: 18 x 25 GB/s.
    H100: {
        "1": singletons({m: 1 for m in range(8)}),
        "2": [group([k, k + 1], "450G", 1) for k in (0, 2, 4, 6)],
        "4": [group([0, 1, 2, 3], "450G", 1), group([4, 5, 6, 7], "450G", 1)],
        "8": [group(list(range(8)), "450G", 1)],
    },
    # Two bridged pairs (12 links each); no NVLink between the pairs, so no 4-GPU ring.
    A100_PCIE: {
        "1": singletons({m: 1 for m in range(4)}),
        "2": [group([0, 1], "300G", 1), group([2, 3], "300G", 1)],
    },
    L40S: {},
}  # fmt: skip


def labels(text: str) -> dict[str, str]:
    """'gpu.a=x gpu.b=y' as a mapping."""
    return dict(item.split("=") for item in text.split())


NUMA = "gpu.numa.nodes=2 gpu.numa.gpus-per-node="
EXPECTED_LABELS: dict[Path, dict[str, str]] = {
    DGX1: labels("gpu.interconnect=nvlink gpu.nvlink.version=2 gpu.nvlink.links=6"
                 f" gpu.nvlink.largest-group=8 gpu.partition-sizes=1-2-4-8 {NUMA}4"),
    H100: labels("gpu.interconnect=nvswitch gpu.nvlink.version=4 gpu.nvlink.links=18"
                 f" gpu.nvlink.largest-group=8 gpu.partition-sizes=1-2-4-8 {NUMA}4"),
    A100_PCIE: labels("gpu.interconnect=nvlink gpu.nvlink.version=3 gpu.nvlink.links=12"
                      f" gpu.nvlink.largest-group=2 gpu.partition-sizes=1-2 {NUMA}2"),
    L40S: labels(f"gpu.interconnect=pcie gpu.nvlink.links=0 gpu.nvlink.largest-group=1 {NUMA}2"),
}  # fmt: skip
TOPOLOGY_KEYS = {f"nvidia.com/{k}" for labels in EXPECTED_LABELS.values() for k in labels}


# ----------------------------------------------------------------------------- the table


@pytest.mark.parametrize("path", list(EXPECTED_TABLES), ids=lambda p: p.stem)
def test_partition_table_of_each_example_node(path: Path) -> None:
    table = partition_table(load(path), None)
    assert partitions.to_json_document(table) == EXPECTED_TABLES[path]


@pytest.mark.parametrize("path", list(EXPECTED_LABELS), ids=lambda p: p.stem)
def test_topology_labels_of_each_example_node(path: Path) -> None:
    labels = build(load(path), "none", Config(), None, topology_labels=True).labels
    topology = {k: v for k, v in labels.items() if k in TOPOLOGY_KEYS}
    assert topology == {f"nvidia.com/{k}": v for k, v in EXPECTED_LABELS[path].items()}


@pytest.mark.parametrize("path", list(EXPECTED_LABELS), ids=lambda p: p.stem)
def test_topology_labels_are_opt_in(path: Path) -> None:
    snap = load(path)
    default = build(snap, "none", Config(), None).labels
    assert default == build(replace(snap, topology=None), "none", Config(), None).labels
    assert not set(default) & TOPOLOGY_KEYS


@pytest.mark.parametrize("path", TOPOLOGY_FREE, ids=lambda p: p.stem)
def test_snapshots_without_topology_label_exactly_as_before(path: Path) -> None:
    snap = load(path)
    assert snap.topology is None
    for strategy in ("none", "mixed"):
        plain = build(snap, strategy, Config(), 7).labels
        assert build(snap, strategy, Config(), 7, topology_labels=True).labels == plain
    assert "topology" not in snapshot_io.dumps(snap)


# ------------------------------------------------- allocationScore: the worked tables
#
# koordinator's allocateByPartition (pkg/scheduler/plugins/deviceshare/allocator_gpu.go,
# commit a7a1b76bbf81abd26f9c377de1f31a60dd965f6e) tries the lowest score first, and its
# proposal "GPU Partitioning APIs" defines the score by what is left once a partition is
# given away.  So per partition P: LEFT = (size, best ringBusBandwidth) of the largest
# partition sharing no GPU with P; within a size the best LEFT scores 1, the next 2, ...
# On the symmetric DGX-1 mesh and the HGX H100 (koordinator's own Hopper table,
# GPUPartitionIndexOfNVIDIAHopper in allocator_gpu_helper.go) every P leaves a 4-set ring,
# so every score is 1; the DGX-1 without GPU 7 keeps only four 4-set rings, all through
# 0-2, so the pairs 0-1, 0-2, 1-2 (which break all four) score 2.

QUAD_25G = (4, 25 * 10**9)


def _left(table: dict[int, tuple[partitions.Partition, ...]]) -> dict[tuple[int, ...], Any]:
    bandwidth = partitions.parse_quantity
    found = [
        (p.minors, None if p.ring_bus_bandwidth is None else bandwidth(p.ring_bus_bandwidth))
        for size in sorted(table) for p in table[size]
    ]  # fmt: skip
    return left_after(found)


@pytest.mark.parametrize(
    ("path", "quad"), [(DGX1, QUAD_25G), (H100, (4, 450 * 10**9))], ids=["dgx1", "hgx_nvswitch"]
)
def test_scores_derived_from_what_is_left(path: Path, quad: tuple[int, int]) -> None:
    table = partition_table(load(path), None)
    left = _left(dict(table))
    assert left[tuple(range(8))] == (0, -1)
    for size in (1, 2, 4):
        assert {left[p.minors] for p in table[size]} == {quad}
    assert {p.allocation_score for size in table for p in table[size]} == {1}


def without_gpus(snap: Snapshot, gone: set[int]) -> Snapshot:
    """``snap`` without the GPUs (by index) in ``gone``, and without their pairs."""
    topology = snap.topology
    assert topology is not None
    return replace(snap, gpus=tuple(g for g in snap.gpus if g.index not in gone), topology=replace(
        topology, gpus=tuple(e for e in topology.gpus if e.index not in gone),
        pairs=tuple(p for p in topology.pairs if not gone & set(p.gpus)),
    ))  # fmt: skip


def test_dgx1_without_a_gpu_scores_the_pairs_that_break_every_quad_lower() -> None:
    table = partition_table(without_gpus(load(DGX1), {7}), None)
    left = _left(dict(table))
    assert [p.minors for p in table[4]] == [(0, 1, 2, 3), (0, 1, 4, 5), (0, 2, 4, 6), (1, 2, 5, 6)]
    assert {left[p.minors] for p in table[4]} == {(2, 50 * 10**9)}
    assert {p.allocation_score for p in table[4]} == {1}
    scores = {p.minors: p.allocation_score for p in table[2]}
    assert {pair for pair, score in scores.items() if score == 2} == {(0, 1), (0, 2), (1, 2)}
    for pair, score in scores.items():
        assert left[pair] == ((2, 50 * 10**9) if score == 2 else QUAD_25G)
    assert {p.allocation_score for p in table[1]} == {1}


def bridged(pairs: list[tuple[int, int]]) -> Snapshot:
    """The four A100 PCIe cards of A100_PCIE with their NVLink bridges moved: all 12 links
    of each card in ``pairs`` go to its partner; the other cards have none."""
    snap = load(A100_PCIE)
    topology = snap.topology
    assert topology is not None
    bus = {g.index: g.pci_bus_id for g in snap.gpus}
    partner = {a: b for pair in pairs for a, b in (pair, pair[::-1])}
    gpus = []
    for entry in topology.gpus:
        links: tuple[NvLink, ...] = ()
        if entry.index in partner:
            links = tuple(
                NvLink(link=k, version=3, remote="gpu", remote_pci_bus_id=bus[partner[entry.index]])
                for k in range(12)
            )
        gpus.append(replace(entry, nvlinks=links))
    joined = {tuple(sorted(p)) for p in pairs}
    pairs = tuple(replace(p, nvlink_p2p=p.gpus in joined) for p in topology.pairs)
    return replace(snap, topology=replace(topology, gpus=tuple(gpus), pairs=pairs))


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        # aligned bridges: as the example node
        ([(0, 1), (2, 3)], EXPECTED_TABLES[A100_PCIE]),
        # bridges joining 1-2 and 0-3: unaligned, still two 300G partitions
        (
            [(1, 2), (0, 3)],
            {
                "1": singletons({m: 1 for m in range(4)}),
                "2": [group([0, 3], "300G", 1), group([1, 2], "300G", 1)],
            },
        ),
        # one bridge, 1-2: giving 1 or 2 away breaks the only pair (score 2); 0 and 3 on
        # their own break nothing (score 1)
        ([(1, 2)], {"1": singletons({0: 1, 1: 2, 2: 2, 3: 1}), "2": [group([1, 2], "300G", 1)]}),
        ([], {}),  # no bridge: PCIe only, the empty table
    ],
    ids=["0-1+2-3", "1-2+0-3", "1-2", "none"],
)
def test_bridged_pcie_cards_aligned_or_not(
    pairs: list[tuple[int, int]], expected: dict[str, Any]
) -> None:
    snap = bridged(pairs)
    table = partition_table(snap, None)
    assert partitions.to_json_document(table) == expected
    labels = build(snap, "none", Config(), None, topology_labels=True).labels
    assert labels["nvidia.com/gpu.nvlink.largest-group"] == ("2" if pairs else "1")
    assert labels.get("nvidia.com/gpu.partition-sizes") == ("1-2" if pairs else None)


def agreement_cases() -> list[tuple[str, Snapshot]]:
    cases = [(p.stem, load(p)) for p in sorted(EXAMPLES.glob("*.yaml"))]
    cases += [("dgx1-without-gpu-7", without_gpus(load(DGX1), {7}))]
    cases += [(f"bridged-{pairs}", bridged(pairs)) for pairs in ([(1, 2)], [(1, 2), (0, 3)])]
    return cases


@pytest.mark.parametrize(("name", "snap"), agreement_cases(), ids=lambda v: str(v)[:40])
def test_table_labels_and_annotation_agree(name: str, snap: Snapshot) -> None:
    """On every topology: the partition-sizes label lists the table's sizes, the Node
    annotation is the table, no partition is larger than the largest NVLink group, and
    a node whose GPUs NVLink joins at all has a table (and one whose GPUs it does not, none)."""
    table = partition_table(snap, None)
    labels = build(snap, "none", Config(), None, topology_labels=True).labels
    sizes = "-".join(str(size) for size in sorted(table))
    assert labels.get("nvidia.com/gpu.partition-sizes") == (sizes or None)
    annotation = partitions.dumps(table) if table else None  # PartitionsAnnotation.publish
    assert (json.loads(annotation) if annotation else {}) == partitions.to_json_document(table)
    if snap.topology is None:
        assert table == {}
        return
    largest = int(labels["nvidia.com/gpu.nvlink.largest-group"])
    assert max(table, default=1) <= largest
    assert bool(table) == (largest >= 2)


def test_p2p_not_ok_removes_the_pair() -> None:
    snap = load(A100_PCIE)
    assert snap.topology is not None
    pairs = tuple(
        replace(p, nvlink_p2p=False) if p.gpus == (0, 1) else p for p in snap.topology.pairs
    )
    snap = replace(snap, topology=replace(snap.topology, pairs=pairs))
    table = partitions.to_json_document(partition_table(snap, None))
    assert table == {"1": singletons({0: 1, 1: 1, 2: 2, 3: 2}), "2": [group([2, 3], "300G", 1)]}


def test_nvswitch_is_recognised_by_the_remote_type_not_the_pci_id() -> None:
    """A switch link whose remote PCI id happens to be another GPU's still counts as a
    switch link, and a GPU link whose peer id matches no GPU gives no hop."""
    snap = load(H100)
    assert snap.topology is not None
    other = snap.gpus[1].pci_bus_id
    gpus = []
    for entry in snap.topology.gpus:
        links = tuple(replace(n, remote_pci_bus_id=other) for n in entry.nvlinks)
        gpus.append(replace(entry, nvlinks=links))
    moved = replace(snap.topology, gpus=tuple(gpus))
    table = partition_table(replace(snap, topology=moved), None)
    assert partitions.to_json_document(table) == EXPECTED_TABLES[H100]
    as_gpu = tuple(
        replace(e, nvlinks=tuple(replace(n, remote="gpu") for n in e.nvlinks))
        for e in snap.topology.gpus
    )
    lost = replace(snap.topology, gpus=as_gpu)
    for entry in as_gpu:
        assert entry.nvlinks[0].remote_pci_bus_id == "0000:05:00.0"  # a switch, not a GPU
    assert partition_table(replace(snap, topology=lost), None) == {}


def test_a_gpu_on_no_pair_is_the_best_single() -> None:
    snap = load(A100_PCIE)
    assert snap.topology is not None
    entries = list(snap.topology.gpus)
    entries[2] = replace(entries[2], nvlinks=())
    entries[3] = replace(entries[3], nvlinks=())
    snap = replace(snap, topology=replace(snap.topology, gpus=tuple(entries)))
    table = partitions.to_json_document(partition_table(snap, None))
    assert table["1"] == singletons({0: 2, 1: 2, 2: 1, 3: 1})
    labels = build(snap, "none", Config(), None, topology_labels=True).labels
    assert "nvidia.com/gpu.nvlink.links" not in labels  # 12, 12, 0, 0: no common value


def test_minors_name_the_gpus_when_known() -> None:
    snap = load(A100_PCIE)
    assert snap.topology is not None
    renamed = tuple(
        replace(e, minor=m) for e, m in zip(snap.topology.gpus, (2, 3, 0, 1), strict=True)
    )
    snap = replace(snap, topology=replace(snap.topology, gpus=renamed))
    graph = link_graph(snap)
    assert graph is not None and set(graph.hops) == {(0, 1), (2, 3)}


# ----------------------------------------------------------------------------- override


def with_config(
    tmp_path: Path, text: str, snapshot: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """gfd in-process on ``snapshot`` with a config file holding ``text``."""
    config = tmp_path / "config.yaml"
    config.write_text(text)
    return run_gfd_here(*args, "--snapshot-file", str(snapshot), "--config-file", str(config))


def test_operator_table_replaces_the_computed_one(tmp_path: Path) -> None:
    text = (
        "version: v1\npartitions:\n  2:\n  - {minors: [1, 0], ringBusBandwidth: 40Gi}\n"
        "  '4':\n  - {minors: [0, 1, 2, 3], allocationScore: 3}\n"
    )
    result = with_config(tmp_path, text, A100_PCIE, "--dump-partitions")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "2": [group([0, 1], "40Gi", 1)],
        "4": [{"minors": [0, 1, 2, 3], "gpuLinkType": "NVLink", "allocationScore": 3}],
    }
    labels = with_config(
        tmp_path, text, A100_PCIE, "--oneshot", "--no-timestamp", "--topology-labels"
    )
    assert "nvidia.com/gpu.partition-sizes=2-4\n" in labels.stdout


@pytest.mark.parametrize(("document", "message"), [
    ("partitions: {2: [{minors: [0, 1, 2]}]}", "partitions.2[0].minors: expected 2 different"),
    ("partitions: {0: []}", "partitions.0: a size is a positive integer"),
    ("partitions: {2: [{minors: [0, 1], allocationScore: '1'}]}", "allocationScore"),
    ("partitions: {2: [{minors: [0, 1], ringBusBandwidth: fast}]}", "ringBusBandwidth"),
    ("partitions: {2: [{minors: [0, 1], colour: red}]}", "partitions.2[0].colour: unknown"),
    ("partitions: [0, 1]", "partitions: expected a mapping"),
])  # fmt: skip
def test_bad_operator_table_is_one_line_and_exit_2(
    tmp_path: Path, document: str, message: str
) -> None:
    result = with_config(tmp_path, f"version: v1\n{document}\n", L40S, "--dump-partitions")
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_operator_table_must_fit_the_node(tmp_path: Path) -> None:
    text = "partitions: {2: [{minors: [3, 4]}]}\n"
    result = with_config(tmp_path, text, A100_PCIE, "--oneshot", "--topology-labels")
    assert result.returncode == 2
    assert "partitions.2[0].minors: no GPU has minor 4" in result.stderr
    assert result.stdout == ""
    with pytest.raises(ConfigError, match="only 4 GPUs"):
        partition_table(load(A100_PCIE), {8: (partitions.Partition(minors=tuple(range(8))),)})


# ----------------------------------------------------------------------------- snapshot


@pytest.mark.parametrize("path", list(EXPECTED_TABLES), ids=lambda p: p.stem)
def test_topology_round_trips(path: Path) -> None:
    snap = load(path)
    assert snapshot_io.loads(snapshot_io.dumps(snap)) == snap
    assert snapshot_io.loads(snapshot_io.dumps_json(snap)) == snap


BASE = """\
version: v1
driver: {version: "550.54.15", cuda: 12040}
gpus:
- {index: 0, uuid: GPU-a, name: x, pci_bus_id: "0000:01:00.0",
   compute_capability: {major: 9, minor: 0}}
- {index: 1, uuid: GPU-b, name: x, pci_bus_id: "0000:02:00.0",
   compute_capability: {major: 9, minor: 0}}
topology:
"""


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("  gpus: [{index: 2}]", "topology.gpus[0].index: no GPU has index 2"),
        ("  gpus: [{index: 0}, {index: 0}]", "topology.gpus[1].index: duplicate index 0"),
        ("  gpus: [{index: 0, colour: red}]", "topology.gpus[0].colour: unknown key"),
        ("  gpus: [{index: 0, nvlinks: [{link: 0, remote: switch}]}]",
         "topology.gpus[0].nvlinks[0].remote: expected one of gpu, nvswitch, other"),
        ("  gpus: [{index: 0, nvlinks: [{link: 1}, {link: 1}]}]",
         "topology.gpus[0].nvlinks[1].link: duplicate link 1"),
        ("  gpus: [{index: 0, nvlinks: [{link: 0, version: 0}]}]",
         "topology.gpus[0].nvlinks[0].version: NVLink generations start at 1"),
        ("  gpus: [{index: 0, cpu_affinity: '0-3;8'}]", "topology.gpus[0].cpu_affinity"),
        ("  gpus: [{index: 0, numa_node: -1}]", "topology.gpus[0].numa_node"),
        ("  gpus: [{index: 0, pcie_root: 0000:3a}]", "topology.gpus[0].pcie_root: expected"),
        ("  gpus: [{index: 0, pcie_root: pci000a:3a}]", "topology.gpus[0].pcie_root: expected"),
        ("  gpus: [{index: 0, pcie_root: 'pci0000:3a/x'}]", "topology.gpus[0].pcie_root"),
        ("  pairs: [{gpus: [1, 0]}]", "topology.pairs[0].gpus: expected two GPU indices"),
        ("  pairs: [{gpus: [0, 3]}]", "topology.pairs[0].gpus: no GPU has index 3"),
        ("  pairs: [{gpus: [0, 1]}, {gpus: [0, 1]}]", "topology.pairs[1].gpus: duplicate pair"),
        ("  pairs: [{gpus: [0, 1], pcie: near}]", "topology.pairs[0].pcie: expected one of"),
        ("  pairs: [{gpus: [0, 1], nvlink_p2p: 1}]", "topology.pairs[0].nvlink_p2p"),
    ],
)  # fmt: skip
def test_bad_topology_names_the_exact_path(section: str, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        snapshot_io.loads(BASE + section + "\n", "node.yaml")
    assert f"node.yaml: {message}" in str(caught.value)


def test_minimal_topology_loads_and_round_trips() -> None:
    snap = snapshot_io.loads(BASE + "  gpus: [{index: 1}]\n  pairs: [{gpus: [0, 1]}]\n")
    assert snap.topology == Topology(gpus=(GpuTopology(index=1),), pairs=(GpuPair(gpus=(0, 1)),))
    assert snapshot_io.loads(snapshot_io.dumps(snap)) == snap


# ----------------------------------------------------------------------------- discovery


def discover_node(
    snap: Snapshot, root: Path, fake: FakeNvml | None = None, **options: Any
) -> Snapshot:
    """Discovery on the fake NVML (``fake``, else one made from ``snap``) and sysfs."""
    fake = fake or FakeNvml.from_snapshot(snap, **options)
    found = discover(replace(Settings(), **build_from_snapshot(root, snap)), nvml=fake.module)
    assert fake.init_depth == 0
    return found


@pytest.mark.parametrize("path", list(EXPECTED_TABLES), ids=lambda p: p.stem)
@pytest.mark.parametrize("style", ["driver", "mock"])
def test_discovery_reads_the_topology_back(path: Path, style: str, tmp_path: Path) -> None:
    """Real drivers' version enum and the mock's generation both give the generation."""
    snap = load(path)
    assert discover_node(snap, tmp_path, nvlink_version_style=style) == snap


def test_topology_is_read_only_when_wanted(tmp_path: Path) -> None:
    snap = load(H100)
    overrides = build_from_snapshot(tmp_path, snap)
    overrides.pop("topology_labels")
    fake = FakeNvml.from_snapshot(snap)
    found = discover(replace(Settings(), **overrides), nvml=fake.module)
    assert found == replace(snap, topology=None)
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 0


def test_pcie_root_is_the_root_complex_the_sysfs_link_resolves_under(tmp_path: Path) -> None:
    """koordlet's form (helper/topology.go parsePCIEID): the first pci<dddd>:<xx> of the
    resolved path -- the root complex, not a PCIe switch below it; the sysfs mount point's
    own name does not count; a missing or looping link gives None."""
    root = tmp_path / "pci0000:99-mount"  # a mount point that looks like a root
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    below = root / "devices" / "pci0000:3a" / "0000:3a:00.0" / "0000:3b:00.0" / "0000:3c:08.0"
    (below / "0000:3d:00.0").mkdir(parents=True)
    (devices / "0000:3d:00.0").symlink_to(
        "../../../" + str(below.relative_to(root)) + "/0000:3d:00.0"
    )
    assert read_pcie_root(str(root), "0000:3d:00.0") == "pci0000:3a"
    (devices / "0000:01:00.0").mkdir()  # a plain directory: no root in its path
    assert read_pcie_root(str(root), "0000:01:00.0") is None
    (devices / "0000:02:00.0").symlink_to("0000:02:00.0")  # a loop
    assert read_pcie_root(str(root), "0000:02:00.0") is None
    assert read_pcie_root(str(root), "0000:04:00.0") is None  # not there
    assert read_pcie_root(str(root), "../../../etc") is None
    assert read_pcie_root(str(root), "") is None


def test_discovery_reads_each_gpus_pcie_root_from_sysfs(tmp_path: Path) -> None:
    snap = load(H100)
    assert snap.topology is not None
    roots = [e.pcie_root for e in snap.topology.gpus]
    assert all(roots) and len(set(roots)) == 8
    found = discover_node(snap, tmp_path)
    assert found.topology is not None
    assert [e.pcie_root for e in found.topology.gpus] == roots
    rootless = tuple(replace(e, pcie_root=None) for e in snap.topology.gpus)
    bare = replace(snap, topology=replace(snap.topology, gpus=rootless))
    found = discover_node(bare, tmp_path / "bare")  # GPUs not below a root in sysfs
    assert found.topology is not None
    assert {e.pcie_root for e in found.topology.gpus} == {None}


@pytest.mark.parametrize("how", ["missing_functions", "missing_symbols"])
def test_no_topology_call_can_fail_the_pass(how: str, tmp_path: Path) -> None:
    """Bindings without the entry points, or a driver without them: fields left out."""
    snap = load(DGX1)
    found = discover_node(snap, tmp_path, **{how: TOPOLOGY_FUNCTIONS})
    assert found.gpus == snap.gpus
    assert found.topology is not None
    assert [e.nvlinks for e in found.topology.gpus] == [()] * 8
    assert {(e.minor, e.cpu_affinity) for e in found.topology.gpus} == {(None, None)}
    assert [e.numa_node for e in found.topology.gpus] == [0] * 4 + [1] * 4  # from sysfs
    assert {(p.pcie, p.nvlink_p2p) for p in found.topology.pairs} == {(None, None)}


def test_each_link_field_is_optional(tmp_path: Path) -> None:
    snap = load(H100)
    fake = FakeNvml.from_snapshot(snap)
    for gpu in fake.gpus:
        for number, link in gpu.nvlinks.items():
            if number % 3 == 0:
                link.version = None
            if number % 3 == 1:
                link.remote_type = None
            if number % 3 == 2:
                link.remote_bus_id = None
    fake.common_ancestor.clear()
    found = discover_node(snap, tmp_path, fake)
    assert found.topology is not None
    links = found.topology.gpus[0].nvlinks
    assert len(links) == 18
    assert links[0] == NvLink(link=0, remote="nvswitch", remote_pci_bus_id="0000:05:00.0")
    assert links[1] == NvLink(link=1, version=4, remote_pci_bus_id="0000:05:00.0")
    assert links[2] == NvLink(link=2, version=4, remote="nvswitch")
    assert {p.pcie for p in found.topology.pairs} == {None}


def test_walk_stops_at_the_last_link_and_skips_inactive_ones(tmp_path: Path) -> None:
    snap = load(A100_PCIE)
    fake = FakeNvml.from_snapshot(snap)
    fake.gpus[0].nvlinks[5].active = False
    found = discover_node(snap, tmp_path, fake)
    assert found.topology is not None
    assert [n.link for n in found.topology.gpus[0].nvlinks] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    # 12 links answered, the 13th said INVALID_ARGUMENT: no walk to NVML_NVLINK_MAX_LINKS
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 4 * 13


def test_pcie_only_gpu_costs_one_state_call(tmp_path: Path) -> None:
    snap = load(L40S)
    fake = FakeNvml.from_snapshot(snap)
    discover_node(snap, tmp_path, fake)
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 4


@pytest.mark.parametrize(
    ("raw", "major", "generation"),
    [
        (5, 8, 3),  # A100 on a real driver
        (7, 9, 4),  # H100 on a driver said to report 7: never newer than Hopper's NVLink 4
        (2, 7, 2),  # V100
        (8, 10, 5),  # Blackwell reporting 8: never newer than its own NVLink 5
        (1, 6, 1),  # P100
        (3, 8, 3),  # A100 on NVIDIA's mock: the generation itself
        (4, 9, 4),  # H100 on the mock
        (5, 10, 5),  # B200 on the mock
        (6, 9, 4),  # H100 as nvml.h declares it: NVML_NVLINK_VERSION_4_0 = 6
        (7, 10, 5),  # Blackwell as nvml.h declares it: NVML_NVLINK_VERSION_5_0 = 7
        (8, 11, 6),  # NVML_NVLINK_VERSION_6_0 = 8 on an architecture gfd does not know
        (0, 9, None),
        (42, 9, None),
    ],
)
def test_nvlink_version_enum_and_generation(raw: int, major: int, generation: int | None) -> None:
    assert nvlink_generation(raw, major) == generation


def test_cpu_list() -> None:
    assert cpu_list([0b1111 | 1 << 8 | 1 << 63, 0b1]) == "0-3,8,63-64"
    assert cpu_list([0, 0]) is None


def test_quantities() -> None:
    quantities = [partitions.format_quantity(v) for v in (450 * 10**9, 25 * 10**9, 10**12, 7, 0)]
    assert quantities == ["450G", "25G", "1T", "7", "0"]
    assert partitions.parse_quantity("400Gi") == 400 * 2**30
    assert partitions.parse_quantity("1.5T") == 1_500_000_000_000
    with pytest.raises(ValueError, match="whole number"):
        partitions.parse_quantity("1.5")


# ----------------------------------------------------------------------------- the command


def test_dump_partitions_from_a_snapshot_file() -> None:
    result = run_gfd_here("--dump-partitions", "--snapshot-file", str(DGX1))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == EXPECTED_TABLES[DGX1]
    assert '"allocationScore": 1}' in result.stdout  # an int, never a string


def test_dump_partitions_of_a_snapshot_without_topology_is_empty() -> None:
    result = run_gfd_here("--dump-partitions", "--snapshot-file", str(EXAMPLES / "dgx-a100.yaml"))
    assert (result.returncode, result.stdout) == (0, "{}\n")
    assert "no topology section" in result.stderr


def test_dump_partitions_and_dump_snapshot_exclude_each_other() -> None:
    result = run_gfd_here("--dump-partitions", "--dump-snapshot", "--snapshot-file", str(DGX1))
    assert result.returncode == 2
    assert "choose one" in result.stderr


def test_dump_partitions_on_live_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fake NVML in place of pynvml, as tests/test_discovery_process.py's shim puts it
    # in a gfd process
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml.from_snapshot(load(H100)).module)
    overrides = build_from_snapshot(tmp_path / "node", load(H100))
    env = {"GFD_SYSFS_ROOT": overrides["sysfs_root"]}
    result = run_gfd_here("--dump-partitions", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == EXPECTED_TABLES[H100]
    labels = run_gfd_here("--oneshot", "--no-timestamp", "--topology-labels", env=env)
    assert "nvidia.com/gpu.interconnect=nvswitch\n" in labels.stdout, labels.stderr
    assert "nvidia.com/gpu.numa.gpus-per-node=4\n" in labels.stdout


@functools.cache
def _two_gpus_without_links() -> Snapshot:
    """Read once: a Snapshot is frozen, and each example replaces its topology."""
    return snapshot_io.loads(BASE + "  gpus: []\n")


#: any text: every code point UTF-8 can encode, which is what st.text() draws, spelled as
#: the categories (all but lone surrogates) -- the same intervals, without Hypothesis
#: scanning all 1.1M code points for the codec in a process with no cached scan (~1 s)
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",)))


@settings(max_examples=150, deadline=None)
@given(
    ANY_TEXT,
    st.none() | st.integers(1, 8),
    st.none() | st.sampled_from(["gpu", "nvswitch", "other"]),
    st.none() | st.booleans(),
)
def test_any_link_text_round_trips(
    bus_id: str, version: int | None, remote: str | None, p2p: bool | None
) -> None:
    snap = _two_gpus_without_links()
    link = NvLink(link=3, version=version, remote=remote, remote_pci_bus_id=bus_id)
    snap = replace(snap, topology=Topology(
        gpus=(GpuTopology(index=0, nvlinks=(link,)),),
        pairs=(GpuPair(gpus=(0, 1), pcie="system", nvlink_p2p=p2p),),
    ))  # fmt: skip
    assert snapshot_io.loads(snapshot_io.dumps(snap)) == snap
    assert snapshot_io.loads(snapshot_io.dumps_json(snap)) == snap
