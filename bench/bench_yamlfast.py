"""What reading a document costs, gfd.yamlfast against the PyYAML path (issue 11).

For each example snapshot and config, and for a large node (the DGX A100 snapshot's GPUs
repeated to 1,024), prints the median time of one read by ``gfd.yamlfast.read`` and by the
PyYAML path (``gfd.documents._build_yaml``, libyaml's parser where PyYAML has it), both
warm, and how long ``import yaml`` takes in a fresh interpreter -- the cost a oneshot saves
when its documents are plain YAML.

    .venv/bin/python bench/bench_yamlfast.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gfd import yamlfast
from gfd.documents import MAX_NESTING, MAX_NODES, MAX_NUMBER_CHARS, _build_yaml

ROOT = Path(__file__).resolve().parent.parent


def median_ms(call: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def import_yaml_ms(runs: int) -> float:
    code = "import time; t = time.perf_counter(); import yaml; print(time.perf_counter() - t)"
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(times) * 1000


def documents() -> list[tuple[str, str]]:
    found = [
        (path.name, path.read_text())
        for folder in ("snapshots", "configs")
        for path in sorted((ROOT / "examples" / folder).glob("*.yaml"))
    ]
    dgx = (ROOT / "examples" / "snapshots" / "dgx-a100.yaml").read_text()
    head, gpus = dgx.split("gpus:\n", 1)
    found.append(("1024 x A100 (built)", head + "gpus:\n" + gpus * 128))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    runs = parser.parse_args().runs

    print(f"import yaml in a fresh interpreter: {import_yaml_ms(runs):.1f} ms (median)")
    print(f"\n{'document':32} {'bytes':>9} {'yamlfast':>10} {'PyYAML':>10}")
    for name, text in documents():

        def fast(text: str = text) -> Any:
            return yamlfast.read(text, MAX_NESTING, MAX_NODES, MAX_NUMBER_CHARS)

        if fast() is yamlfast.GIVE_UP:
            shown = "gives up"
        else:
            assert fast() == _build_yaml(text)
            shown = f"{median_ms(fast, runs):7.2f} ms"
        slow = median_ms(lambda text=text: _build_yaml(text), max(3, runs // 4))
        print(f"{name:32} {len(text):9} {shown:>10} {slow:7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
