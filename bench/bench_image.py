"""The container image: its size, and cold ``gfd --oneshot`` time inside it.

Builds the image with scripts/image.sh (`make image`: docker where an engine answers, else
buildah), then reports

- the image size (uncompressed, as ``buildah images`` counts it) and its layers' sizes;
- the size of /opt/gfd (the virtualenv) and its five largest packages;
- the cold oneshot time inside the container: N runs of

      gfd --oneshot --no-timestamp --snapshot-file dgx-a100-mig-mixed.yaml --mig-strategy mixed

  timed inside the container (``date +%s%N`` around each run, so the engine's own start-up is
  not counted), median and min; plus the median wall time of a whole ``buildah run`` of
  ``gfd --version`` for the engine's overhead.

    .venv/bin/python bench/bench_image.py [--runs N] [--no-build]   (root; buildah)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e import image  # noqa: E402

SNAPSHOT = "dgx-a100-mig-mixed.yaml"


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-build", action="store_true", help="use the image already built")
    args = parser.parse_args()

    if not args.no_build:
        started = time.perf_counter()
        image.build()
        print(f"build (scripts/image.sh, bases cached): {time.perf_counter() - started:.1f} s")
    (info,) = json.loads(
        subprocess.run(
            ["podman", "image", "inspect", image.IMAGE], capture_output=True, text=True, check=True
        ).stdout
    )
    print(
        f"image {image.IMAGE}: {mib(info['Size'])} uncompressed, "
        f"{len(info['RootFS']['Layers'])} layers"
    )

    with image.container(image.IMAGE) as ctr:
        du = image.run(
            ctr,
            [
                "sh",
                "-c",
                "du -sb /opt/gfd; du -sb /opt/gfd/lib/python3*/site-packages/* | sort -n | tail -5",
            ],
        )
        lines = du.stdout.split("\n")
        print(f"/opt/gfd: {mib(int(lines[0].split()[0]))}; largest packages:")
        for line in reversed([line for line in lines[1:] if line.strip()]):
            size, path = line.split(maxsplit=1)
            print(f"  {mib(int(size)):>10}  {Path(path).name}")

        loop = (
            'for i in $(seq "$1"); do s=$(date +%s%N); '
            f"gfd --oneshot --no-timestamp --snapshot-file /snap/{SNAPSHOT} --mig-strategy mixed"
            " >/dev/null"
            " || exit 1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); done"
        )
        done = image.run(
            ctr,
            ["sh", "-c", loop, "sh", str(args.runs)],
            volumes=[f"{ROOT / 'examples' / 'snapshots'}:/snap:ro"],
            user="65532:65532",
        )
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        runs_ms = [int(us) / 1000 for us in done.stdout.split()]
        print(
            f"cold oneshot in the container ({SNAPSHOT}, mixed), {len(runs_ms)} runs: "
            f"median {statistics.median(runs_ms):.0f} ms, min {min(runs_ms):.0f} ms"
        )
        walls = []
        for _ in range(min(args.runs, 5)):
            started = time.perf_counter()
            image.run(ctr, ["gfd", "--version"])
            walls.append(time.perf_counter() - started)
        median_ms = statistics.median(walls) * 1000
        print(f"buildah run of gfd --version (engine included): median {median_ms:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
