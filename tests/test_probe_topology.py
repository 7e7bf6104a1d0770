"""Hostile topologies: the ring search and the partition table stay
bounded for every snapshot the reader accepts, a bigger one is refused with one line, and
NVML topology calls that raise or answer garbage never fail discovery."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gfd import snapshot as snapshot_io
from gfd.discovery import discover
from gfd.errors import SnapshotError
from gfd.labels.partitioning import SEARCH_STEPS, _Budget, _has_cycle, computed_table, link_graph
from gfd.settings import Settings
from gfd.snapshot import (
    MAX_TOPOLOGY_GPUS,
    ComputeCapability,
    Driver,
    Gpu,
    GpuTopology,
    NvLink,
    Snapshot,
    Topology,
)
from tests.process import run_gfd_here

from .fakes.fake_nvml import TOPOLOGY_FUNCTIONS, FakeGpu, FakeNvml
from .fakes.fake_sysfs import build_from_snapshot

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "snapshots"
SWITCH = "0000:ff:00.0"


def bus(i: int) -> str:
    return f"0000:{i // 256 + 1:02x}:{i % 256 // 8:02x}.{i % 8}"


def node(n: int, edges: list[tuple[int, int]], *, switch_links: int = 0) -> Snapshot:
    """``n`` V100-class GPUs, one direct NVLink per listed edge (repeat an edge for more)."""
    links: dict[int, list[tuple[str, str]]] = {i: [] for i in range(n)}
    for a, b in edges:
        links[a].append(("gpu", bus(b)))
        links[b].append(("gpu", bus(a)))
    for i in range(n):
        links[i] += [("nvswitch", SWITCH)] * switch_links
    return Snapshot(
        driver=Driver("550.54.15", 12040),
        gpus=tuple(
            Gpu(index=i, uuid=f"GPU-{i}", name="Tesla V100", pci_bus_id=bus(i),
                compute_capability=ComputeCapability(7, 0))
            for i in range(n)
        ),
        topology=Topology(gpus=tuple(
            GpuTopology(index=i, minor=i, nvlinks=tuple(
                NvLink(link=k % 64, version=2, remote=r, remote_pci_bus_id=b)
                for k, (r, b) in enumerate(links[i][:64])
            ))
            for i in range(n)
        )),
    )  # fmt: skip


def band(n: int, reach: int = 3, seed: int = 1) -> list[tuple[int, int]]:
    """Each GPU linked to the next ``reach`` ones, with 1-3 links a pair (varying
    bandwidth): Hamiltonian at every size, but no polynomial rule says so."""
    rng = random.Random(seed)
    edges = []
    for i in range(n):
        for j in range(i + 1, min(n, i + reach + 1)):
            edges += [(i, j)] * rng.randint(1, 3)
    return edges


def unbalanced_bipartite(n: int) -> list[tuple[int, int]]:
    """K(n/2 - 1, n/2 + 1): 2-connected, every degree >= 2, no Hamiltonian cycle."""
    k = n // 2 - 1
    return [(a, b) for a in range(k) for b in range(k, n)]


def write(tmp_path: Path, snap: Snapshot, name: str = "node.json") -> Path:
    """The snapshot as a JSON file: ``dumps_json``'s document without its indentation (the
    reader does not care; ``json.dumps`` with an indent is the pure-Python encoder, which
    took longer than reading a 256-GPU document back)."""
    path = tmp_path / name
    path.write_text(json.dumps(snapshot_io.to_dict(snap)))
    return path


def dump_partitions(path: Path) -> Any:
    # in-process (tests/process.py run_gfd_here); the test's timeout guards against a
    # hang, the bound itself is shown in bench/
    return run_gfd_here("--dump-partitions", "--snapshot-file", str(path))


# ------------------------------------------------------------------ the ring search


def test_a_ring_through_a_large_sparse_group_is_found_without_recursion(tmp_path: Path) -> None:
    """256 GPUs in one NVLink cycle: the search was recursive (RecursionError at 1024)."""
    n = MAX_TOPOLOGY_GPUS
    result = dump_partitions(write(tmp_path, node(n, [(i, (i + 1) % n) for i in range(n)])))
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert sorted(table, key=int) == ["1", "2", str(n)]
    assert table[str(n)][0]["minors"] == list(range(n))
    assert "Traceback" not in result.stderr


def test_varying_bandwidth_on_sparse_links_does_not_hang(tmp_path: Path) -> None:
    """32 GPUs, each linked to its next 3 with 1-3 links: the exhaustive search per
    bandwidth threshold ran for over half a minute (exponential); now every buddy group's
    ring is found."""
    result = dump_partitions(write(tmp_path, node(32, band(32))))
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert sorted(table, key=int) == ["1", "2", "4", "8", "16", "32"]
    assert [p["minors"] for p in table["32"]] == [list(range(32))]


def test_a_group_without_a_ring_that_no_rule_settles_is_bounded(tmp_path: Path) -> None:
    """The largest accepted node made of groups with no Hamiltonian cycle that only a
    search can tell: the command ends, the groups are not listed."""
    n = MAX_TOPOLOGY_GPUS
    result = dump_partitions(write(tmp_path, node(n, unbalanced_bipartite(n))))
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert str(n) not in table and "16" not in table


def test_nvswitch_board_of_the_largest_accepted_size_lists_every_buddy_group() -> None:
    snap = node(MAX_TOPOLOGY_GPUS, [], switch_links=18)
    table = computed_table(link_graph(snap))
    assert sorted(table) == [2**k for k in range(9)]
    for size, items in table.items():
        assert len(items) == MAX_TOPOLOGY_GPUS // size
        if size > 1:
            assert {p.ring_bus_bandwidth for p in items} == {"450G"}


def test_search_answers_exactly_for_small_groups_and_no_when_the_budget_is_spent() -> None:
    # the Petersen graph plus 6 isolated-free padding is not a power of two; use K(3,5)
    # (no cycle) and an 8-cycle with chords (a cycle) exhaustively, whatever the budget
    def masks(n: int, edges: list[tuple[int, int]]) -> list[int]:
        adjacency = [0] * n
        for a, b in edges:
            adjacency[a] |= 1 << b
            adjacency[b] |= 1 << a
        return adjacency

    spent = _Budget(0)
    assert not _has_cycle(masks(8, unbalanced_bipartite(8)), spent)
    assert _has_cycle(masks(8, [(i, (i + 3) % 8) for i in range(8)]), spent)
    # 16 members: the band is found within the budget, a spent budget says no
    assert _has_cycle(masks(16, band(16, reach=2)), _Budget(SEARCH_STEPS))
    assert not _has_cycle(masks(16, band(16, reach=2)), _Budget(0))


# ------------------------------------------------------------------ snapshot limits


def test_more_gpus_with_topology_than_the_limit_is_one_line_exit_2(tmp_path: Path) -> None:
    n = MAX_TOPOLOGY_GPUS + 1
    result = dump_partitions(write(tmp_path, node(n, [(i, (i + 1) % n) for i in range(n)])))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "topology" in lines[0] and str(MAX_TOPOLOGY_GPUS) in lines[0]
    assert len(lines[0]) < 300


def test_many_gpus_without_topology_still_load(tmp_path: Path) -> None:
    snap = replace(node(MAX_TOPOLOGY_GPUS + 1, []), topology=None)
    assert snapshot_io.loads(snapshot_io.dumps_json(snap)) == snap


def test_a_link_number_past_the_limit_is_refused() -> None:
    document = json.loads(snapshot_io.dumps_json(node(2, [(0, 1)])))
    document["topology"]["gpus"][0]["nvlinks"][0]["link"] = 10**6
    with pytest.raises(SnapshotError, match=r"topology\.gpus\[0\]\.nvlinks\[0\]\.link"):
        snapshot_io.from_dict(document)


@pytest.mark.parametrize("key", ["minor", "numa_node"])
def test_a_minor_or_numa_node_koordinator_cannot_read_is_refused(key: str) -> None:
    """A minor past Go's int32 went into the partition table, whose JSON Koordinator then
    rejects whole."""
    document = json.loads(snapshot_io.dumps_json(node(2, [(0, 1)])))
    document["topology"]["gpus"][1][key] = 2**31
    with pytest.raises(SnapshotError, match=rf"topology\.gpus\[1\]\.{key}: expected at most"):
        snapshot_io.from_dict(document)


def test_a_minor_past_the_limit_from_nvml_is_left_out(tmp_path: Path) -> None:
    snap = snapshot_io.load(str(EXAMPLES / "l40s-pcie.yaml"))
    fake = FakeNvml.from_snapshot(snap)
    fake.module.nvmlDeviceGetMinorNumber = lambda handle: 2**31
    found = discover(replace(Settings(), **build_from_snapshot(tmp_path, snap)), nvml=fake.module)
    assert found.topology is not None
    assert {entry.minor for entry in found.topology.gpus} == {None}
    assert snapshot_io.loads(snapshot_io.dumps(found)) == found


def test_sparse_large_minors_cost_nothing(tmp_path: Path) -> None:
    """Two linked GPUs with minors 0 and 2^31 - 2: the table walked every buddy group up to
    the largest minor (a billion candidates)."""
    snap = node(4, [(0, 1), (2, 3)])
    assert snap.topology is not None
    far = 2**31 - 2
    entries = list(snap.topology.gpus)
    entries[2] = replace(entries[2], minor=far)
    entries[3] = replace(entries[3], minor=far + 1)
    snap = replace(snap, topology=Topology(gpus=tuple(entries)))
    result = dump_partitions(write(tmp_path, snap))
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert [p["minors"] for p in table["2"]] == [[0, 1], [far, far + 1]]


def test_link_graph_of_a_hand_built_oversized_snapshot_is_none() -> None:
    assert link_graph(node(MAX_TOPOLOGY_GPUS + 1, [])) is None


# ------------------------------------------------------------------ hostile NVML


def hostile(fake: FakeNvml, names: tuple[str, ...], behaviour: Any) -> None:
    for name in names:
        setattr(fake.module, name, behaviour)


def raising(*args: Any) -> Any:
    raise RuntimeError("driver went away " + "x" * 10_000)


class Garbage:
    busId = object()

    def __int__(self) -> int:
        raise ValueError("not a number")


GARBAGE_ANSWERS = [
    pytest.param(raising, id="raises-RuntimeError"),
    pytest.param(lambda *a: "seven", id="answers-a-string"),
    pytest.param(lambda *a: None, id="answers-None"),
    pytest.param(lambda *a: -1, id="answers-negative"),
    pytest.param(lambda *a: 2**80, id="answers-huge"),
    pytest.param(lambda *a: Garbage(), id="answers-an-object"),
    pytest.param(lambda *a: True, id="answers-a-bool"),
]


@pytest.mark.parametrize("behaviour", GARBAGE_ANSWERS)
def test_topology_calls_that_raise_or_answer_garbage_never_fail_discovery(
    behaviour: Any, tmp_path: Path
) -> None:
    snap = snapshot_io.load(str(EXAMPLES / "dgx1-v100-cube-mesh.yaml"))
    fake = FakeNvml.from_snapshot(snap)
    hostile(fake, TOPOLOGY_FUNCTIONS, behaviour)
    overrides = build_from_snapshot(tmp_path, snap)
    found = discover(replace(Settings(), **overrides), nvml=fake.module)
    assert found.gpus == snap.gpus
    assert found.topology is not None
    for entry in found.topology.gpus:
        assert (entry.minor, entry.cpu_affinity, entry.nvlinks) == (None, None, ())
    assert {(p.pcie, p.nvlink_p2p) for p in found.topology.pairs} == {(None, None)}
    # what discovery found is a snapshot that reads back
    assert snapshot_io.loads(snapshot_io.dumps(found)) == found


def _not_utf8_bus_id() -> Any:
    info = pynvml.nvmlPciInfo_t()  # reading busId decodes it strictly, as pynvml does
    info.busId = b"00000000:07:00.\xff"
    return info


@pytest.mark.parametrize("remote_pci", [
    lambda: type("Pci", (), {"busId": "z" * 1_000_000})(),
    _not_utf8_bus_id,
], ids=["huge", "not-utf8"])  # fmt: skip
def test_garbage_remote_bus_ids_and_affinity_are_left_out(
    tmp_path: Path, remote_pci: Callable[[], Any]
) -> None:
    snap = snapshot_io.load(str(EXAMPLES / "dgx1-v100-cube-mesh.yaml"))
    fake = FakeNvml.from_snapshot(snap)
    fake.module.nvmlDeviceGetNvLinkRemotePciInfo = lambda *a: remote_pci()
    fake.module.nvmlDeviceGetCpuAffinity = lambda *a: [1] * 1_000_000
    overrides = build_from_snapshot(tmp_path, snap)
    found = discover(replace(Settings(), **overrides), nvml=fake.module)
    assert found.topology is not None
    assert {e.cpu_affinity for e in found.topology.gpus} == {None}
    assert {link.remote_pci_bus_id for e in found.topology.gpus for link in e.nvlinks} == {None}


def test_bindings_declaring_a_billion_links_walk_at_most_the_limit(tmp_path: Path) -> None:
    snap = snapshot_io.load(str(EXAMPLES / "l40s-pcie.yaml"))
    fake = FakeNvml.from_snapshot(snap)
    fake.module.NVML_NVLINK_MAX_LINKS = 10**9
    states = []
    fake.module.nvmlDeviceGetNvLinkState = lambda handle, link: states.append(link) or 0
    overrides = build_from_snapshot(tmp_path, snap)
    found = discover(replace(Settings(), **overrides), nvml=fake.module)
    assert found.topology is not None
    assert len(states) <= 64 * len(snap.gpus)


def test_more_gpus_than_the_limit_skip_topology_not_the_pass(tmp_path: Path) -> None:
    gpus = [
        FakeGpu(
            uuid=f"GPU-{i:04d}", name="NVIDIA L40S",
            bus_id=f"00000000:{i // 8 + 1:02X}:{i % 8:02X}.0", memory_total=None,
        )
        for i in range(MAX_TOPOLOGY_GPUS + 1)
    ]  # fmt: skip
    fake = FakeNvml(gpus)
    settings = replace(Settings(), topology_labels=True, sysfs_root=str(tmp_path))
    found = discover(settings, nvml=fake.module)
    assert len(found.gpus) == MAX_TOPOLOGY_GPUS + 1
    assert found.topology is None
    assert fake.calls["nvmlDeviceGetP2PStatus"] == 0
