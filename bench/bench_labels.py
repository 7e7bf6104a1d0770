"""In-process cost of one label pass (``build`` + ``format_labels``).

Nodes of 8, 64 and 512 x A100-SXM4-40GB, each GPU with MIG on and 7 x 1g.5gb, labelled
under the mixed strategy with the seed's renaming config (examples/configs/renaming.yaml).
Prints the median time of one pass and the time per device (GPUs + MIG devices): a flat
per-device figure means the pass grows linearly with the node.

Target: one pass for 8 GPUs <= 2 ms; growth linear in the number of devices.

    .venv/bin/python bench/bench_labels.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from gfd.config import Config
from gfd.labels import build
from gfd.outputs.file import format_labels
from gfd.settings import load_config_file
from gfd.snapshot import Gpu, Snapshot, load

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "snapshots" / "dgx-a100-mig-mixed.yaml"
CONFIG = ROOT / "examples" / "configs" / "renaming.yaml"
SIZES = (8, 64, 512)
TARGET_8_GPU_MS = 2.0


def node_of(template: Snapshot, gpus: int) -> Snapshot:
    """``gpus`` copies of the example's first GPU (7 x 1g.5gb), with their own index,
    UUID and PCI bus id."""
    first: Gpu = template.gpus[0]
    return replace(
        template,
        gpus=tuple(
            replace(
                first,
                index=i,
                uuid=f"GPU-{i:08x}-a537-ccbf-2965-8e9d90c0bd54",
                pci_bus_id=f"{i // 256:04x}:{i % 256:02x}:00.0",
            )
            for i in range(gpus)
        ),
    )


def one_pass(snapshot: Snapshot, config: Config) -> str:
    return format_labels(build(snapshot, "mixed", config, 1700000000).labels)


def median_seconds(snapshot: Snapshot, config: Config, runs: int) -> float:
    one_pass(snapshot, config)  # warm up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        one_pass(snapshot, config)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=0, help="runs per size (default: adaptive)")
    args = parser.parse_args(argv)

    template = load(str(SNAPSHOT))
    devices_per_gpu = 1 + len(template.gpus[0].mig.devices if template.gpus[0].mig else ())
    config = load_config_file(str(CONFIG)).config

    print(f"label pass (build + format_labels), mixed strategy, config {CONFIG.name}")
    print(f"each GPU: {template.gpus[0].name}, {devices_per_gpu - 1} MIG devices")
    print()
    print(
        f"{'GPUs':>6} {'devices':>8} {'labels':>7} {'runs':>6} {'median ms':>10} {'us/device':>10}"
    )
    rows = []
    for gpus in SIZES:
        snapshot = node_of(template, gpus)
        devices = gpus * devices_per_gpu
        labels = one_pass(snapshot, config).count("\n")
        runs = args.runs or max(21, min(2001, 20000 // devices))
        seconds = median_seconds(snapshot, config, runs)
        per_device_us = seconds / devices * 1e6
        rows.append((gpus, seconds, per_device_us))
        print(
            f"{gpus:>6} {devices:>8} {labels:>7} {runs:>6} {seconds * 1e3:>10.3f} "
            f"{per_device_us:>10.2f}"
        )

    print()
    small, large = rows[0], rows[-1]
    print(
        f"growth {small[0]} -> {large[0]} GPUs: time x {large[1] / small[1]:.1f} for devices "
        f"x {large[0] / small[0]:.0f}; per-device cost x {large[2] / small[2]:.2f} "
        "(1.00 = perfectly linear)"
    )
    eight = next(seconds for gpus, seconds, _ in rows if gpus == 8) * 1e3
    verdict = "OK" if eight <= TARGET_8_GPU_MS else "OVER TARGET"
    print(f"8-GPU pass: {eight:.3f} ms (target <= {TARGET_8_GPU_MS} ms): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
