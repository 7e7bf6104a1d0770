"""Time of one discovery of an 8-GPU, 56-MIG-device node (DGX A100, 7 x 1g.5gb per GPU).

Run from the repository root:  ``.venv/bin/python bench/bench_discovery.py [-n 200]``

The node is the fake NVML of ``tests/fakes/fake_nvml.py`` (plus a fake sysfs with the
GPUs' PCI functions), so this measures gfd's own work per pass — the NVML call sequence,
MIG profile naming, the sysfs reads — not the driver's.  On a real node each NVML call also
costs a driver round trip; the call count is printed so the two can be put together.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gfd.discovery import discover  # noqa: E402
from gfd.settings import Settings  # noqa: E402
from tests.fakes.fake_nvml import dgx_a100_mig_node  # noqa: E402
from tests.fakes.fake_sysfs import FakeSysfs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=200, help="discoveries to time")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as directory:
        sysfs = FakeSysfs(Path(directory) / "sys")
        fake = dgx_a100_mig_node(gpu_count=8, migs_per_gpu=7)
        for index in range(8):
            sysfs.add_device(f"0000:{0x07 + 8 * index:02x}:00.0")
        machine = Path(directory) / "product_name"
        machine.write_text("DGXA100 920-23687-2530-000\n")
        settings = replace(Settings(), sysfs_root=str(sysfs.root), machine_type_file=str(machine))

        snapshot = discover(settings, nvml=fake.module)  # warm-up, and a sanity check
        devices = sum(len(g.mig.devices) for g in snapshot.gpus if g.mig)
        assert (len(snapshot.gpus), devices) == (8, 56), (len(snapshot.gpus), devices)
        calls_per_pass = fake.total_calls

        timings = []
        for _ in range(args.runs):
            start = time.perf_counter()
            discover(settings, nvml=fake.module)
            timings.append(time.perf_counter() - start)

    timings.sort()
    median = statistics.median(timings)
    p90 = timings[int(0.9 * (len(timings) - 1))]
    print(f"discovery of 8 GPUs / 56 MIG devices (fake NVML), {args.runs} runs")
    fastest = timings[0]
    print(f"  median {median * 1e3:.2f} ms   p90 {p90 * 1e3:.2f} ms   min {fastest * 1e3:.2f} ms")
    print(f"  NVML calls per discovery: {calls_per_pass}")


if __name__ == "__main__":
    main()
