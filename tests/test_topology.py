"""GPU topology: the snapshot section, discovery through the fake NVML, the partition table
per example node (complete, compared whole), the opt-in labels and ``--dump-partitions``
(the command line run in-process: tests/process.py ``run_gfd_here``)."""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gfd import partitions
from gfd import snapshot as snapshot_io
from gfd.discovery import discover
from gfd.discovery.topology import cpu_list, nvlink_generation
from gfd.errors import ConfigError, SnapshotError
from gfd.labels import build
from gfd.labels.partitions import link_graph, partition_table
from gfd.settings import Config, Settings
from gfd.snapshot import GpuPair, GpuTopology, NvLink, Snapshot, Topology
from tests.process import run_gfd_here

from .fakes.fake_nvml import FUNCTIONS, FakeNvml
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
        "minors": minors,
        "gpuLinkType": "NVLink",
        "ringBusBandwidth": bandwidth,
        "allocationScore": score,
    }


EXPECTED_TABLES: dict[Path, dict[str, Any]] = {
    # Doubled pairs 2-3 and 6-7 beat single-link 0-1 and 4-5; no 4-GPU ring of doubled
    # links exists inside a socket, but 0-3-2-1-5-6-7-4-0 is an 8-GPU ring of doubled links.
    DGX1: {
        "1": singletons({m: 1 for m in range(8)}),
        "2": [
            group([0, 1], "25G", 2),
            group([2, 3], "50G", 1),
            group([4, 5], "25G", 2),
            group([6, 7], "50G", 1),
        ],
        "4": [group([0, 1, 2, 3], "25G", 1), group([4, 5, 6, 7], "25G", 1)],
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
}

EXPECTED_LABELS: dict[Path, dict[str, str]] = {
    DGX1: {
        "gpu.interconnect": "nvlink",
        "gpu.nvlink.version": "2",
        "gpu.nvlink.links": "6",
        "gpu.nvlink.largest-group": "8",
        "gpu.partition-sizes": "1-2-4-8",
        "gpu.numa.nodes": "2",
        "gpu.numa.gpus-per-node": "4",
    },
    H100: {
        "gpu.interconnect": "nvswitch",
        "gpu.nvlink.version": "4",
        "gpu.nvlink.links": "18",
        "gpu.nvlink.largest-group": "8",
        "gpu.partition-sizes": "1-2-4-8",
        "gpu.numa.nodes": "2",
        "gpu.numa.gpus-per-node": "4",
    },
    A100_PCIE: {
        "gpu.interconnect": "nvlink",
        "gpu.nvlink.version": "3",
        "gpu.nvlink.links": "12",
        "gpu.nvlink.largest-group": "2",
        "gpu.partition-sizes": "1-2",
        "gpu.numa.nodes": "2",
        "gpu.numa.gpus-per-node": "2",
    },
    L40S: {
        "gpu.interconnect": "pcie",
        "gpu.nvlink.links": "0",
        "gpu.nvlink.largest-group": "1",
        "gpu.numa.nodes": "2",
        "gpu.numa.gpus-per-node": "2",
    },
}
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


def test_p2p_not_ok_removes_the_pair() -> None:
    snap = load(A100_PCIE)
    assert snap.topology is not None
    pairs = tuple(
        replace(p, nvlink_p2p=False) if p.gpus == (0, 1) else p for p in snap.topology.pairs
    )
    snap = replace(snap, topology=replace(snap.topology, pairs=pairs))
    table = partitions.to_json_document(partition_table(snap, None))
    assert table == {
        "1": singletons({0: 1, 1: 1, 2: 2, 3: 2}),
        "2": [group([2, 3], "300G", 1)],
    }


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


def test_operator_table_replaces_the_computed_one(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\npartitions:\n  2:\n  - {minors: [1, 0], ringBusBandwidth: 40Gi}\n"
        "  '4':\n  - {minors: [0, 1, 2, 3], allocationScore: 3}\n"
    )
    result = run_gfd_here(
        "--dump-partitions", "--snapshot-file", str(A100_PCIE), "--config-file", str(config)
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "2": [group([0, 1], "40Gi", 1)],
        "4": [{"minors": [0, 1, 2, 3], "gpuLinkType": "NVLink", "allocationScore": 3}],
    }
    labels = run_gfd_here(
        "--oneshot",
        "--no-timestamp",
        "--topology-labels",
        "--snapshot-file",
        str(A100_PCIE),
        "--config-file",
        str(config),
    )
    assert "nvidia.com/gpu.partition-sizes=2-4\n" in labels.stdout


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("partitions: {2: [{minors: [0, 1, 2]}]}", "partitions.2[0].minors: expected 2 different"),
        ("partitions: {0: []}", "partitions.0: a size is a positive integer"),
        ("partitions: {2: [{minors: [0, 1], allocationScore: '1'}]}", "allocationScore"),
        ("partitions: {2: [{minors: [0, 1], ringBusBandwidth: fast}]}", "ringBusBandwidth"),
        ("partitions: {2: [{minors: [0, 1], colour: red}]}", "partitions.2[0].colour: unknown"),
        ("partitions: [0, 1]", "partitions: expected a mapping"),
    ],
)
def test_bad_operator_table_is_one_line_and_exit_2(
    tmp_path: Path, document: str, message: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"version: v1\n{document}\n")
    result = run_gfd_here(
        "--dump-partitions", "--snapshot-file", str(L40S), "--config-file", str(config)
    )
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_operator_table_must_fit_the_node(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("partitions: {2: [{minors: [3, 4]}]}\n")
    result = run_gfd_here(
        "--oneshot",
        "--topology-labels",
        "--snapshot-file",
        str(A100_PCIE),
        "--config-file",
        str(config),
    )
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
        (
            "  gpus: [{index: 0, nvlinks: [{link: 0, remote: switch}]}]",
            "topology.gpus[0].nvlinks[0].remote: expected one of gpu, nvswitch, other",
        ),
        (
            "  gpus: [{index: 0, nvlinks: [{link: 1}, {link: 1}]}]",
            "topology.gpus[0].nvlinks[1].link: duplicate link 1",
        ),
        (
            "  gpus: [{index: 0, nvlinks: [{link: 0, version: 0}]}]",
            "topology.gpus[0].nvlinks[0].version: NVLink generations start at 1",
        ),
        ("  gpus: [{index: 0, cpu_affinity: '0-3;8'}]", "topology.gpus[0].cpu_affinity"),
        ("  gpus: [{index: 0, numa_node: -1}]", "topology.gpus[0].numa_node"),
        ("  pairs: [{gpus: [1, 0]}]", "topology.pairs[0].gpus: expected two GPU indices"),
        ("  pairs: [{gpus: [0, 3]}]", "topology.pairs[0].gpus: no GPU has index 3"),
        ("  pairs: [{gpus: [0, 1]}, {gpus: [0, 1]}]", "topology.pairs[1].gpus: duplicate pair"),
        ("  pairs: [{gpus: [0, 1], pcie: near}]", "topology.pairs[0].pcie: expected one of"),
        ("  pairs: [{gpus: [0, 1], nvlink_p2p: 1}]", "topology.pairs[0].nvlink_p2p"),
    ],
)
def test_bad_topology_names_the_exact_path(section: str, message: str) -> None:
    with pytest.raises(SnapshotError) as caught:
        snapshot_io.loads(BASE + section + "\n", "node.yaml")
    assert f"node.yaml: {message}" in str(caught.value)


def test_minimal_topology_loads_and_round_trips() -> None:
    snap = snapshot_io.loads(BASE + "  gpus: [{index: 1}]\n  pairs: [{gpus: [0, 1]}]\n")
    assert snap.topology == Topology(gpus=(GpuTopology(index=1),), pairs=(GpuPair(gpus=(0, 1)),))
    assert snapshot_io.loads(snapshot_io.dumps(snap)) == snap


# ----------------------------------------------------------------------------- discovery


def discover_node(snap: Snapshot, root: Path, **options: Any) -> Snapshot:
    overrides = build_from_snapshot(root, snap)
    settings = replace(Settings(), **overrides)
    fake = FakeNvml.from_snapshot(snap, **options)
    found = discover(settings, nvml=fake.module)
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


TOPOLOGY_CALLS = [
    name
    for name in FUNCTIONS
    if FUNCTIONS.index(name) >= FUNCTIONS.index("nvmlDeviceGetMinorNumber")
]


@pytest.mark.parametrize("how", ["missing_functions", "missing_symbols"])
def test_no_topology_call_can_fail_the_pass(how: str, tmp_path: Path) -> None:
    """Bindings without the entry points, or a driver without them: fields left out."""
    snap = load(DGX1)
    overrides = build_from_snapshot(tmp_path, snap)
    fake = FakeNvml.from_snapshot(snap, **{how: TOPOLOGY_CALLS})
    found = discover(replace(Settings(), **overrides), nvml=fake.module)
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
    overrides = build_from_snapshot(tmp_path, snap)
    found = discover(replace(Settings(), **overrides), nvml=fake.module)
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
    overrides = build_from_snapshot(tmp_path, snap)
    found = discover(replace(Settings(), **overrides), nvml=fake.module)
    assert found.topology is not None
    assert [n.link for n in found.topology.gpus[0].nvlinks] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    # 12 links answered, the 13th said INVALID_ARGUMENT: no walk to NVML_NVLINK_MAX_LINKS
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 4 * 13


def test_pcie_only_gpu_costs_one_state_call(tmp_path: Path) -> None:
    snap = load(L40S)
    fake = FakeNvml.from_snapshot(snap)
    discover(replace(Settings(), **build_from_snapshot(tmp_path, snap)), nvml=fake.module)
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 4


@pytest.mark.parametrize(
    ("raw", "major", "generation"),
    [
        (5, 8, 3),  # A100 on a real driver
        (7, 9, 4),  # H100 on a real driver
        (2, 7, 2),  # V100
        (8, 10, 5),  # Blackwell
        (1, 6, 1),  # P100
        (3, 8, 3),  # A100 on NVIDIA's mock: the generation itself
        (4, 9, 4),  # H100 on the mock
        (5, 10, 5),  # B200 on the mock
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
    assert [partitions.format_quantity(v) for v in (450 * 10**9, 25 * 10**9, 10**12, 7, 0)] == [
        "450G",
        "25G",
        "1T",
        "7",
        "0",
    ]
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
    snap = replace(
        snap,
        topology=Topology(
            gpus=(GpuTopology(index=0, nvlinks=(link,)),),
            pairs=(GpuPair(gpus=(0, 1), pcie="system", nvlink_p2p=p2p),),
        ),
    )
    assert snapshot_io.loads(snapshot_io.dumps(snap)) == snap
    assert snapshot_io.loads(snapshot_io.dumps_json(snap)) == snap
