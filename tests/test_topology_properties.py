"""Property tests for the partition table, against an independent brute-force model.

Generated nodes: 1-8 GPUs, random direct NVLinks (0-3 per pair, some pairs P2P-disabled),
random NVSwitch links, one NVLink generation per GPU.  The model enumerates every cycle
through a group's members; the table must list exactly the candidate groups that have one
(on a node with NVSwitch links the index-aligned blocks, elsewhere every set of 2, 4, 8
GPUs NVLink joins), with the best cycle's bottleneck as bandwidth, and score each by what
it leaves (seed 003: the largest disjoint partition, then its best bandwidth)."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gfd import partition_table as partitions
from gfd.labels.partitioning import NVLINK_LINK_BANDWIDTH, partition_table
from gfd.snapshot import (
    ComputeCapability,
    Driver,
    Gpu,
    GpuPair,
    GpuTopology,
    NvLink,
    Snapshot,
    Topology,
)
from tests.strategies import draw_indices

SWITCH = "0000:f0:00.0"


@dataclass(frozen=True)
class Node:
    snapshot: Snapshot
    links: dict[tuple[int, int], int]  # the model's hop links, (low, high) -> count
    generation: dict[int, int]
    total_links: dict[int, int]
    switched: bool  # a GPU has a link to an NVSwitch


#: the tables each per-GPU or per-pair decision picks from (a repeat is more likely)
GENERATIONS = (2, 3, 4, 5)
DIRECT_LINKS = (0, 0, 1, 2, 3)
SWITCH_LINKS = (0, 0, 0, 2, 6)
P2P = (None, True, True, False)


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    n = draw(st.integers(1, 8))
    bus = [f"0000:{i + 1:02x}:00.0" for i in range(n)]
    pairs = list(itertools.combinations(range(n), 2))
    # each decision is an index into its table, all of a kind drawn as one string (one
    # Hypothesis choice, tests/strategies.py draw_indices) instead of one choice apiece
    generation = dict(enumerate(GENERATIONS[i] for i in draw_indices(draw, 4, n, n)))
    link_picks = draw_indices(draw, len(DIRECT_LINKS), len(pairs), len(pairs))
    direct = {pair: DIRECT_LINKS[i] for pair, i in zip(pairs, link_picks, strict=True)}
    switch = dict(enumerate(SWITCH_LINKS[i] for i in draw_indices(draw, len(SWITCH_LINKS), n, n)))
    p2p_picks = draw_indices(draw, len(P2P), len(pairs), len(pairs))
    p2p = {pair: P2P[i] for pair, i in zip(pairs, p2p_picks, strict=True)}
    entries = []
    total_links = {}
    for i in range(n):
        links = []
        for j in range(n):
            count = direct.get((min(i, j), max(i, j)), 0) if i != j else 0
            links += [("gpu", bus[j])] * count
        links += [("nvswitch", SWITCH)] * switch[i]
        total_links[i] = len(links)
        nvlinks = tuple(NvLink(link=k, version=generation[i], remote=r, remote_pci_bus_id=b)
                        for k, (r, b) in enumerate(links))  # fmt: skip
        entries.append(GpuTopology(index=i, minor=i, nvlinks=nvlinks))
    model = {}
    for pair, count in direct.items():
        hop = count + min(switch[pair[0]], switch[pair[1]])
        if p2p[pair] is not False and hop:
            model[pair] = hop
    snapshot = Snapshot(
        driver=Driver("550.54.15", 12040),
        gpus=tuple(
            Gpu(index=i, uuid=f"GPU-{i}", name="GPU", pci_bus_id=bus[i],
                compute_capability=ComputeCapability(9, 0))
            for i in range(n)
        ),
        topology=Topology(
            gpus=tuple(entries),
            pairs=tuple(GpuPair(gpus=pair, nvlink_p2p=p2p[pair]) for pair in direct),
        ),
    )  # fmt: skip
    return Node(snapshot, model, generation, total_links, any(switch.values()))


def hop_bandwidth(node: Node, a: int, b: int) -> int:
    links = node.links.get((min(a, b), max(a, b)), 0)
    return links * NVLINK_LINK_BANDWIDTH[min(node.generation[a], node.generation[b])]


def best_ring(node: Node, members: tuple[int, ...]) -> int | None:
    """The best bottleneck over every cycle through ``members`` (None: no cycle)."""
    if len(members) == 2:
        bandwidth = hop_bandwidth(node, *members)
        return bandwidth or None
    hop = {(a, b): hop_bandwidth(node, a, b) for a in members for b in members if a != b}
    best = None
    first, rest = members[0], members[1:]
    for order in itertools.permutations(rest):
        if order[0] > order[-1]:
            continue  # the cycle of the reversed order, which has the same hops
        cycle = (first, *order, first)
        bottleneck = min(hop[a, b] for a, b in itertools.pairwise(cycle))
        if bottleneck and (best is None or bottleneck > best):
            best = bottleneck
    return best


def candidates(node: Node, size: int) -> list[tuple[int, ...]]:
    n = len(node.snapshot.gpus)
    if node.switched:
        return [tuple(range(k, k + size)) for k in range(0, n - size + 1, size)]
    reach = {i: {i} for i in range(n)}  # the NVLink-connected group of each GPU
    for _ in range(n):
        for a, b in node.links:
            reach[a] |= reach[b]
            reach[b] = reach[a]
    return [c for c in itertools.combinations(range(n), size) if set(c) <= reach[c[0]]]


def expected_table(node: Node) -> dict[int, dict[tuple[int, ...], int]]:
    n = len(node.snapshot.gpus)
    expected: dict[int, dict[tuple[int, ...], int]] = {}
    size = 2
    while size <= n:
        for members in candidates(node, size):
            bandwidth = best_ring(node, members)
            if bandwidth is not None:
                expected.setdefault(size, {})[members] = bandwidth
        size *= 2
    return expected


@settings(max_examples=60, deadline=None)
@given(nodes())
def test_table_is_exactly_the_ring_connected_candidates(node: Node) -> None:
    table = partition_table(node.snapshot, None)
    n = len(node.snapshot.gpus)
    expected = expected_table(node)
    got = {
        size: {p.minors: partitions.parse_quantity(p.ring_bus_bandwidth or "0") for p in items}
        for size, items in table.items() if size > 1
    }  # fmt: skip
    assert got == expected
    if expected:
        assert [p.minors for p in table[1]] == [(i,) for i in range(n)]
    else:
        assert table == {}


@settings(max_examples=60, deadline=None)
@given(nodes())
def test_bandwidth_never_exceeds_a_members_own_nvlink_bandwidth(node: Node) -> None:
    for size, items in partition_table(node.snapshot, None).items():
        for partition in items:
            if size == 1:
                assert partition.ring_bus_bandwidth is None
                continue
            assert partition.ring_bus_bandwidth is not None
            bandwidth = partitions.parse_quantity(partition.ring_bus_bandwidth)
            for m in partition.minors:
                own = node.total_links[m] * NVLINK_LINK_BANDWIDTH[node.generation[m]]
                assert 0 < bandwidth <= own


@settings(max_examples=60, deadline=None)
@given(nodes(), st.randoms(use_true_random=False))
def test_table_does_not_depend_on_gpu_order(node: Node, rng: random.Random) -> None:
    snap = node.snapshot
    assert snap.topology is not None
    gpus, entries, pairs = list(snap.gpus), list(snap.topology.gpus), list(snap.topology.pairs)
    for items in (gpus, entries, pairs):
        rng.shuffle(items)
    shuffled = Snapshot(
        driver=snap.driver, gpus=tuple(gpus),
        topology=Topology(gpus=tuple(entries), pairs=tuple(pairs)),
    )  # fmt: skip
    assert partitions.dumps(partition_table(shuffled, None)) == partitions.dumps(
        partition_table(snap, None)
    )


@settings(max_examples=60, deadline=None)
@given(nodes())
def test_scores_rank_what_is_left_and_the_table_reads_back_as_an_override(node: Node) -> None:
    table = partition_table(node.snapshot, None)
    every = [
        (set(p.minors), len(p.minors), partitions.parse_quantity(p.ring_bus_bandwidth or "0"))
        for items in table.values() for p in items
    ]  # fmt: skip
    for items in table.values():
        left = {}
        for p in items:
            rest = [(k, bw) for members, k, bw in every if not members & set(p.minors)]
            largest = max((k for k, _ in rest), default=0)
            best = max((bw for k, bw in rest if k == largest), default=0)
            left[p.minors] = (largest, best)
        ranked = sorted(set(left.values()), reverse=True)
        for p in items:
            assert p.allocation_score == 1 + ranked.index(left[p.minors])
    document = json.loads(partitions.dumps(table))
    assert partitions.parse_table(document, "partitions") == table
