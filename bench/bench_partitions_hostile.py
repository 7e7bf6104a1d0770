"""Worst cases of the partition table: the label pass with
``--topology-labels`` on the largest hostile topologies the snapshot reader accepts
(256 GPUs, links numbered 0-63), and on a random search over link graphs.

The ring search is NP-hard in general; gfd bounds it (README "Limits"): polynomial rules
first, exhaustive search only for groups of <= 8 GPUs, a work budget per table otherwise.
Target: well under 1 s per pass for any accepted input (a signal waits for the pass), and
<= 2 ms for 8 GPUs (bench_topology.py).

    .venv/bin/python bench/bench_partitions_hostile.py [--trials N]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gfd.config import Config  # noqa: E402
from gfd.labels import build  # noqa: E402
from gfd.snapshot import MAX_TOPOLOGY_GPUS, Snapshot  # noqa: E402
from tests.test_probe_topology import band, node, unbalanced_bipartite  # noqa: E402


def seconds(snapshot: Snapshot) -> float:
    fresh = replace(snapshot)  # as each pass discovers a new one
    start = time.perf_counter()
    build(fresh, "none", Config(), None, topology_labels=True)
    return time.perf_counter() - start


def random_node(rng: random.Random) -> tuple[str, Snapshot]:
    n = rng.choice([16, 32, 64, 128, MAX_TOPOLOGY_GPUS])
    p = rng.choice([0.02, 0.05, 0.1, 0.2, 0.4, 0.6])
    edges: list[tuple[int, int]] = []
    degree = [0] * n
    for a in range(n):
        for b in range(a + 1, n):
            if b - a < rng.choice([2, 4, 8, n]) or rng.random() < p:
                links = rng.randint(1, 4)
                if degree[a] + links <= 64 and degree[b] + links <= 64:
                    edges += [(a, b)] * links
                    degree[a] += links
                    degree[b] += links
    return f"random n={n} p={p}", node(n, edges)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    n = MAX_TOPOLOGY_GPUS
    named = {
        f"{n} GPUs, one NVLink cycle": node(n, [(i, (i + 1) % n) for i in range(n)]),
        f"{n} GPUs, band of 3 with 1-3 links a pair": node(n, band(n)),
        f"{n} GPUs, K({n // 2 - 1},{n // 2 + 1}) (no ring, only a search can tell)": node(
            n, unbalanced_bipartite(n)
        ),
        f"{n} GPUs on NVSwitch, 18 links": node(n, [], switch_links=18),
    }
    worst = 0.0
    for name, snapshot in named.items():
        took = seconds(snapshot)
        worst = max(worst, took)
        print(f"{name}: {took * 1000:.0f} ms")
    rng = random.Random(7)
    slowest = (0.0, "")
    for _ in range(args.trials):
        name, snapshot = random_node(rng)
        took = seconds(snapshot)
        slowest = max(slowest, (took, name))
    worst = max(worst, slowest[0])
    print(f"slowest of {args.trials} random link graphs ({slowest[1]}): {slowest[0] * 1000:.0f} ms")
    print(f"worst label pass: {worst * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
