"""Cost of matching one ``resources`` pattern against one name (SPEC §5.3 matching).

Hostile patterns of the shape ``*a*a*...*a*b`` (N stars) against names of ``a``s that
never match (no ``b``): a backtracking regular expression takes time that grows like
len(name)**N here (over 20 minutes for 13 stars and 90 characters); the
matcher must stay linear.  Also a realistic pattern against a real GPU name.

Target: <= 1 ms for a 96-character name and a 20-star pattern.

    .venv/bin/python bench/bench_patterns.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from gfd.labels.resources import wildcard_match

TARGET_MS = 1.0
CASES = (
    ("*A100*", "NVIDIA A100-SXM4-40GB"),
    ("*a" * 13 + "*b", "a" * 90),
    ("*a" * 20 + "*b", "a" * 96),
    ("*a" * 20 + "*b", "a" * 20_000),
    ("*a*a*b", "a" * 20_000),
    ("*" + "a" * 500 + "b*", "a" * 20_000),
)


def median_ms(pattern: str, name: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        wildcard_match(pattern, name)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    worst_target_case = 0.0
    print(f"{'pattern':<28} {'name chars':>10} {'median ms':>10}")
    for pattern, name in CASES:
        elapsed = median_ms(pattern, name, runs)
        shown = pattern if len(pattern) <= 28 else pattern[:25] + "..."
        print(f"{shown:<28} {len(name):>10} {elapsed:>10.4f}")
        if pattern.count("*") == 21 and len(name) == 96:
            worst_target_case = elapsed
    verdict = "ok" if worst_target_case <= TARGET_MS else "OVER TARGET"
    print(
        f"20-star pattern, 96-character name: {worst_target_case:.4f} ms "
        f"(target <= {TARGET_MS} ms): {verdict}"
    )
    return 0 if worst_target_case <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
