"""The GPU partition table computed from the snapshot's topology (pure).

It follows Koordinator's proposal "GPU Partitioning APIs" (docs/proposals, 2024-10-08):
a partition is a set of GPUs a job may be given, ``ringBusBandwidth`` "the bottleneck
bandwidth between GPUs in the Ring algorithm", ``allocationScore`` "the overall
allocation quality for the node after the partition has been assigned away".  The rules
(README "GPU topology and partitions"), in one place:

- A GPU is named by its minor number (``/dev/nvidia<minor>``, what Koordinator calls a
  minor); when any GPU's minor is unknown, every GPU is named by its NVML index instead.
- A *hop* between two GPUs carries ``direct + via_switch`` NVLinks: ``direct`` is the number
  of active links between them (counted on both ends; the smaller count wins), ``via_switch``
  the smaller of the two GPUs' link counts to NVSwitches.  A pair whose NVLink P2P status
  says "not OK" has no hop, whatever the links say.
- A hop's bandwidth is its links times the per-link, per-direction bandwidth of the older
  of the two GPUs' NVLink generations (:data:`NVLINK_LINK_BANDWIDTH`); unknown when a
  generation is.  It is what the two GPUs can send each other over every NVLink path they
  have, on every board alike: all 18 switch links of an H100, the one or two direct links
  of a DGX-1 pair.
- The candidates, for each size 2, 4, 8, ... up to the GPU count:

  - on an NVSwitch board (a GPU has a link to an NVSwitch), the fabric manager's fixed,
    index-aligned blocks: minors ``[k*size, (k+1)*size)`` (as koordinator's built-in
    Hopper table, ``GPUPartitionIndexOfNVIDIAHopper`` in
    ``pkg/scheduler/plugins/deviceshare/allocator_gpu_helper.go``);
  - elsewhere, the GPU sets NVLink actually joins: every set of that size inside one
    NVLink-connected group of GPUs (aligned or not: the DGX-1's doubled pair 0-3, the
    bridge of a PCIe board that joins GPUs 1 and 2).  A group of more than
    :data:`EXACT_MEMBERS` GPUs, or a node of more than :data:`JOINED_GPUS` (no such board
    is built), falls back to the aligned blocks, which keeps the table small.

  A candidate is a partition when its GPUs can form an NVLink ring: a cycle through every
  member in which every hop has at least one link (two GPUs: the hop itself).
- ``ringBusBandwidth`` is the best such ring's bottleneck hop (the ring whose slowest hop
  is fastest) -- one measure for every board.
- Size 1 is listed only when the node has at least one partition of size 2 or more: every
  GPU, without ``ringBusBandwidth`` (there is no ring).
- ``allocationScore`` (an int, 1 the best; koordinator's ``allocateByPartition`` in
  ``pkg/scheduler/plugins/deviceshare/allocator_gpu.go`` tries the lowest score first):
  what the node still offers once the partition is given away -- the largest partition
  that shares no GPU with it, then the best bandwidth among those of that size
  (:func:`left_after`).  Within one size, the partitions that leave the most score 1, the
  next 2, and so on; equal leftovers score equal (koordinator then bin-packs among them).
- No NVLink partition at all (PCIe-only nodes, or no topology in the snapshot): the table
  is empty ``{}`` -- Koordinator's only link type is NVLink.

koordinator commit cited throughout: a7a1b76bbf81abd26f9c377de1f31a60dd965f6e.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from gfd.errors import ConfigError
from gfd.partition_table import (
    NVLINK,
    Partition,
    PartitionTable,
    check_against_minors,
    format_quantity,
)
from gfd.snapshot import MAX_TOPOLOGY_GPUS, GpuTopology, Snapshot

GB = 10**9
#: Per-link, per-direction NVLink bandwidth in bytes/s, by generation.
#: 1: P100, 4 links = 160 GB/s both ways (Pascal P100 white paper) -> 20 GB/s.
#: 2: V100, 6 links = 300 GB/s both ways (Volta white paper; DGX-1 white paper) -> 25 GB/s.
#: 3: A100, 12 links = 600 GB/s both ways (A100 datasheet) -> 25 GB/s.
#: 4: H100 SXM, 18 links = 900 GB/s both ways (H100 datasheet, HGX H100) -> 25 GB/s.
#: 5: B200, 18 links = 1.8 TB/s both ways (Blackwell datasheet, HGX B200) -> 50 GB/s.
#: 6 (NVML_NVLINK_VERSION_6_0) has no figure here yet: its hops have unknown bandwidth.
NVLINK_LINK_BANDWIDTH = {1: 20 * GB, 2: 25 * GB, 3: 25 * GB, 4: 25 * GB, 5: 50 * GB}


@dataclass(frozen=True, slots=True)
class Hop:
    links: int
    bandwidth: int | None  # bytes/s; None when a generation is unknown


@dataclass(frozen=True, slots=True)
class LinkGraph:
    """The NVLink hops between the node's GPUs, by minor."""

    minors: tuple[int, ...]
    hops: dict[tuple[int, int], Hop]  # (low minor, high minor) -> hop; absent: no NVLink
    link_bandwidth: dict[int, int]  # minor -> all its active links x per-link bandwidth
    switched: bool = False  # a GPU has a link to an NVSwitch: the fabric manager's board

    def hop(self, a: int, b: int) -> Hop | None:
        return self.hops.get((a, b) if a < b else (b, a))


def _names(entries: Sequence[GpuTopology]) -> dict[int, int]:
    """GPU index -> the number it goes by in the table (minor when all minors are known)."""
    minors = [entry.minor for entry in entries]
    if all(m is not None for m in minors) and len(set(minors)) == len(minors):
        return {entry.index: int(entry.minor or 0) for entry in entries}
    return {entry.index: entry.index for entry in entries}


#: the last snapshot's graph and computed table: a pass asks for them up to three times
#: (labels, node annotation, koordlet file) and a 256-GPU graph costs 0.2 s.  Keyed by
#: identity, holding the snapshot so its id is not reused: the answer is the same as
#: computing afresh, so the functions stay pure in what they return.
_last_graph: tuple[Snapshot | None, LinkGraph | None] = (None, None)
_last_table: tuple[LinkGraph | None, dict[int, tuple[Partition, ...]]] = (None, {})


def link_graph(snapshot: Snapshot) -> LinkGraph | None:
    """The NVLink graph of the node; None when the snapshot has no topology."""
    global _last_graph
    if _last_graph[0] is snapshot:
        return _last_graph[1]
    graph = _link_graph(snapshot)
    _last_graph = (snapshot, graph)
    return graph


def _link_graph(snapshot: Snapshot) -> LinkGraph | None:
    topology = snapshot.topology
    if topology is None or len(snapshot.gpus) > MAX_TOPOLOGY_GPUS:
        return None  # no snapshot read from a file or NVML has more (a hand-built one)
    entries = {entry.index: entry for entry in topology.gpus}
    for gpu in snapshot.gpus:  # a GPU the topology does not mention has no known links
        entries.setdefault(gpu.index, GpuTopology(index=gpu.index))
    ordered = [entries[index] for index in sorted(entries)]
    name = _names(ordered)
    by_bus = {gpu.pci_bus_id: gpu.index for gpu in snapshot.gpus if gpu.pci_bus_id}
    direct: Counter[tuple[int, int]] = Counter()  # (from, to) indices -> links
    to_switch: Counter[int] = Counter()
    generation: dict[int, int | None] = {}
    link_bandwidth: dict[int, int] = {}
    for entry in ordered:
        versions = [link.version for link in entry.nvlinks]
        known = [v for v in versions if v is not None]
        generation[entry.index] = min(known) if known and len(known) == len(versions) else None
        per_link = NVLINK_LINK_BANDWIDTH.get(generation[entry.index] or 0, 0)
        link_bandwidth[name[entry.index]] = per_link * len(entry.nvlinks)
        for link in entry.nvlinks:
            if link.remote == "nvswitch":
                to_switch[entry.index] += 1
            elif link.remote == "gpu" and link.remote_pci_bus_id in by_bus:
                peer = by_bus[link.remote_pci_bus_id]
                if peer != entry.index:
                    direct[(entry.index, peer)] += 1
    no_p2p = {pair.gpus for pair in topology.pairs if pair.nvlink_p2p is False}
    hops: dict[tuple[int, int], Hop] = {}
    for position, a in enumerate(ordered):
        for b in ordered[position + 1 :]:
            if (a.index, b.index) in no_p2p:
                continue
            links = min(direct[(a.index, b.index)], direct[(b.index, a.index)]) + min(
                to_switch[a.index], to_switch[b.index]
            )
            if links == 0:
                continue
            gens = (generation[a.index], generation[b.index])
            bandwidth: int | None = None
            if gens[0] is not None and gens[1] is not None:
                hop_link = NVLINK_LINK_BANDWIDTH.get(min(gens[0], gens[1]))
                bandwidth = None if hop_link is None else links * hop_link
            low, high = sorted((name[a.index], name[b.index]))
            hops[(low, high)] = Hop(links=links, bandwidth=bandwidth)
    return LinkGraph(
        minors=tuple(sorted(name.values())),
        hops=hops,
        link_bandwidth=link_bandwidth,
        switched=bool(to_switch),
    )


# ----------------------------------------------------------------------------- rings

#: a group of at most this many GPUs is always searched exactly (subsets: 8 GPUs need
#: 2^7 sets of paths at most)
EXACT_MEMBERS = 8
#: search work (candidate vertices and the neighbours each makes checked) the whole table
#: may spend on groups larger than EXACT_MEMBERS that no polynomial rule settles; past it
#: such a group counts as no ring (README "Limits": never claimed, never a hang)
SEARCH_STEPS = 200_000


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps


def _has_cycle(adjacency: Sequence[int], budget: _Budget) -> bool:
    """Whether a cycle runs through every vertex (a Hamiltonian cycle), for 3+ vertices;
    ``adjacency[i]`` is the bit mask of ``i``'s neighbours.

    Settled in polynomial time where a rule applies: a vertex of degree < 2 or a
    disconnected graph has none; Dirac's (every degree >= n/2) and Ore's (every
    non-adjacent pair's degrees sum to >= n) conditions guarantee one.  Otherwise an
    exact subset search for small groups, and for larger ones a depth-first search with
    dead-state memo bounded by ``budget`` (a search cut short answers no)."""
    n = len(adjacency)
    full = (1 << n) - 1
    degrees = [mask.bit_count() for mask in adjacency]
    if min(degrees) < 2:
        return False
    reached = frontier = 1
    while frontier:
        spread = 0
        while frontier:
            low = frontier & -frontier
            frontier ^= low
            spread |= adjacency[low.bit_length() - 1]
        frontier = spread & ~reached
        reached |= spread
    if reached != full:
        return False
    if min(degrees) * 2 >= n:  # Dirac's theorem
        return True
    if all(
        degrees[i] + degrees[j] >= n
        for i in range(n)
        for j in range(i + 1, n)
        if not adjacency[i] >> j & 1
    ):  # Ore's theorem
        return True
    if n <= EXACT_MEMBERS:
        return _exact(adjacency)
    return _search(adjacency, budget)


def _exact(adjacency: Sequence[int]) -> bool:
    """Held-Karp over subsets: ``ends[mask]`` holds the vertices a path from vertex 0
    through exactly ``mask`` can end at (at most 2^(n-1) masks of n ends: bounded work)."""
    full = (1 << len(adjacency)) - 1
    ends = [0] * (full + 1)
    ends[1] = 1
    for mask in range(1, full + 1, 2):  # the masks holding vertex 0
        at = ends[mask]
        while at:
            low = at & -at
            at ^= low
            onward = adjacency[low.bit_length() - 1] & ~mask
            while onward:
                step = onward & -onward
                onward ^= step
                ends[mask | step] |= step
    return bool(ends[full] & adjacency[0])


def _search(adjacency: Sequence[int], budget: _Budget | None) -> bool:
    """Depth-first search for a Hamiltonian cycle from vertex 0 (iterative: no recursion
    limit), trying the neighbour with the fewest onward choices first (Warnsdorff's rule)
    and pruning paths that strand a vertex; ``budget`` None: exhaustive."""
    full = (1 << len(adjacency)) - 1
    dead: set[tuple[int, int]] = set()  # (vertex, visited) known not to complete a cycle

    def choices(vertex: int, visited: int) -> list[int]:
        mask, found = adjacency[vertex] & ~visited, []
        while mask:
            low = mask & -mask
            mask ^= low
            found.append(low.bit_length() - 1)
        found.sort(key=lambda v: ((adjacency[v] & ~visited).bit_count(), v), reverse=True)
        return found  # popped from the end: fewest onward choices first

    stack = [(0, 1, choices(0, 1))]
    while stack:
        vertex, visited, candidates = stack[-1]
        if visited == full and adjacency[vertex] & 1:
            return True
        if not candidates:
            dead.add((vertex, visited))
            stack.pop()
            continue
        following = candidates.pop()
        now = visited | 1 << following
        if budget is not None:  # charged for the work: the neighbours looked at
            if budget.left <= 0:
                return False
            budget.left -= 1 + (adjacency[vertex] & ~now).bit_count()
        if (following, now) in dead or not _viable(adjacency, vertex, following, now, full):
            continue
        stack.append((following, now, choices(following, now)))
    return False


def _viable(adjacency: Sequence[int], inner: int, end: int, visited: int, full: int) -> bool:
    """Whether a path from vertex 0 that has just made ``inner`` an inner vertex and ends
    at ``end`` can still close a cycle: the start needs a way back, and every unvisited
    neighbour of ``inner`` still two usable neighbours (unvisited ones, the end, the start)."""
    if visited == full:
        return True
    usable = (full & ~visited) | 1 << end | 1
    if not adjacency[0] & ((full & ~visited) | 1 << end):
        return False
    mask = adjacency[inner] & ~visited
    while mask:
        low = mask & -mask
        mask ^= low
        if (adjacency[low.bit_length() - 1] & usable).bit_count() < 2:
            return False
    return True


def ring(
    graph: LinkGraph, members: Sequence[int], budget: _Budget | None = None
) -> tuple[bool, int | None]:
    """(whether ``members`` form an NVLink ring, the best ring's bottleneck bandwidth)."""
    if len(members) < 2:
        return True, None
    budget = _Budget(SEARCH_STEPS) if budget is None else budget
    hops = [
        (i, j, hop)
        for i, a in enumerate(members)
        for j in range(i + 1, len(members))
        if (hop := graph.hop(a, members[j])) is not None
    ]
    if len(members) == 2:
        return (True, hops[0][2].bandwidth) if hops else (False, None)
    if not hops:
        return False, None
    known = all(hop.bandwidth is not None for _, _, hop in hops)

    def weight(hop: Hop) -> int:
        return hop.bandwidth if known and hop.bandwidth is not None else hop.links

    def cycle_at(threshold: int) -> bool:
        adjacency = [0] * len(members)
        for i, j, hop in hops:
            if weight(hop) >= threshold:
                adjacency[i] |= 1 << j
                adjacency[j] |= 1 << i
        return _has_cycle(adjacency, budget)

    # a ring at a threshold is one at every lower threshold: search for the highest
    thresholds = sorted({weight(hop) for _, _, hop in hops})
    if not cycle_at(thresholds[0]):
        return False, None
    low, high = 0, len(thresholds) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if cycle_at(thresholds[middle]):
            low = middle
        else:
            high = middle - 1
    return True, (thresholds[low] if known else None)


# ----------------------------------------------------------------------------- table

#: a node without NVSwitch of at most this many GPUs lists every joined set (module
#: docstring); a larger one (no such board exists) only the aligned blocks, so that the
#: table stays small enough for a node annotation
JOINED_GPUS = 16


def computed_table(graph: LinkGraph | None) -> dict[int, tuple[Partition, ...]]:
    """The partition table the topology allows (module docstring for the rules)."""
    global _last_table
    if graph is not None and _last_table[0] is graph:
        return dict(_last_table[1])
    table = _computed_table(graph)
    _last_table = (graph, table)
    return dict(table)


def components(graph: LinkGraph) -> list[tuple[int, ...]]:
    """The groups of GPUs NVLink connects (directly or through NVSwitches), each sorted."""
    parent = {m: m for m in graph.minors}

    def root(m: int) -> int:
        while parent[m] != m:
            parent[m] = parent[parent[m]]
            m = parent[m]
        return m

    for a, b in graph.hops:
        parent[root(a)] = root(b)
    groups: dict[int, list[int]] = {}
    for m in graph.minors:
        groups.setdefault(root(m), []).append(m)
    return sorted(tuple(g) for g in groups.values())


def _aligned(present: set[int], size: int) -> list[tuple[int, ...]]:
    """The index-aligned blocks of ``size`` whose minors are all present (minors may be
    sparse and large: only the blocks that hold a GPU are looked at)."""
    blocks = []
    for start in sorted({minor - minor % size for minor in present}):
        members = tuple(range(start, start + size))
        if present.issuperset(members):
            blocks.append(members)
    return blocks


def _candidates(graph: LinkGraph, size: int) -> list[tuple[int, ...]]:
    """The GPU sets of ``size`` that may be partitions, before the ring check."""
    present = set(graph.minors)
    if graph.switched or len(present) > JOINED_GPUS:
        return _aligned(present, size)
    found: list[tuple[int, ...]] = []
    for component in components(graph):
        if len(component) < size:
            continue
        if len(component) <= EXACT_MEMBERS:
            found.extend(itertools.combinations(component, size))
        else:
            found.extend(_aligned(set(component), size))
    return sorted(found)


def _computed_table(graph: LinkGraph | None) -> dict[int, tuple[Partition, ...]]:
    if graph is None or not graph.minors:
        return {}
    present = set(graph.minors)
    rings: dict[int, list[tuple[tuple[int, ...], int | None]]] = {}
    budget = _Budget(SEARCH_STEPS)
    size = 2
    while size <= len(present):
        for members in _candidates(graph, size):
            ok, bandwidth = ring(graph, members, budget)
            if ok:
                rings.setdefault(size, []).append((members, bandwidth))
        size *= 2
    if not rings:
        return {}
    rings[1] = [((m,), None) for m in sorted(present)]
    scores = _scores([found for size in sorted(rings) for found in rings[size]])
    return {
        size: tuple(
            Partition(
                minors=members,
                allocation_score=scores[members],
                gpu_link_type=NVLINK,
                ring_bus_bandwidth=None if bandwidth is None else format_quantity(bandwidth),
            )
            for members, bandwidth in rings[size]
        )
        for size in sorted(rings)
    }


#: what is left when nothing is: no GPU, no bandwidth
_NOTHING = (0, -1)


def left_after(
    partitions: Sequence[tuple[tuple[int, ...], int | None]],
) -> dict[tuple[int, ...], tuple[int, int]]:
    """For each partition, the quality of what the node still offers once it is given
    away: the size of the largest partition that shares no GPU with it, and the best
    ``ringBusBandwidth`` among those of that size (-1: unknown or none, a singleton has
    no ring); ``(0, -1)`` when nothing is left."""
    ranked = sorted(
        (
            (sum(1 << m for m in members), len(members), -1 if bw is None else bw)
            for members, bw in partitions
        ),
        key=lambda item: (item[1], item[2]),
        reverse=True,
    )
    left: dict[tuple[int, ...], tuple[int, int]] = {}
    for members, _ in partitions:
        mask = sum(1 << m for m in members)
        # the first disjoint one in (size, bandwidth) order is the best left
        left[members] = next(
            ((size, bw) for other, size, bw in ranked if not other & mask), _NOTHING
        )
    return left


def _scores(
    partitions: Sequence[tuple[tuple[int, ...], int | None]],
) -> dict[tuple[int, ...], int]:
    """``allocationScore`` per partition: within one size, 1 for the partitions that leave
    the best (:func:`left_after`), 2 for the next best, and so on (equal: equal score)."""
    left = left_after(partitions)
    by_size: dict[int, set[tuple[int, int]]] = {}
    for members, _ in partitions:
        by_size.setdefault(len(members), set()).add(left[members])
    order = {size: sorted(found, reverse=True) for size, found in by_size.items()}
    return {members: 1 + order[len(members)].index(left[members]) for members, _ in partitions}


def partition_table(snapshot: Snapshot, override: PartitionTable | None) -> PartitionTable:
    """The table to publish: the operator's (checked against this node) or the computed one.

    Raises ConfigError when the operator's table names GPUs the node does not have."""
    graph = link_graph(snapshot)
    if override is None:
        return computed_table(graph)
    minors = set(graph.minors) if graph is not None else {gpu.index for gpu in snapshot.gpus}
    problem = check_against_minors(override, minors)
    if problem is not None:
        raise ConfigError(problem)
    return override
