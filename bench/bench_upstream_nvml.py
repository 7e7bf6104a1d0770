"""gfd's oneshot on the NVML path against upstream's binary, both on NVIDIA's mock NVML.

Each round runs these fresh processes one after the other (the order rotates every round, so
that none always runs first on a warm CPU):

  upstream   gpu-feature-discovery v0.20.0 (NVIDIA/k8s-device-plugin, built from its tag with
             its vendored modules) --oneshot
  gfd        gfd --oneshot with the same flags
  floor      python -c 'import pynvml' (the interpreter gfd runs on, and the NVML binding)

Both programs load NVIDIA's mock ``libnvidia-ml.so.1`` (NVIDIA/k8s-test-infra,
pkg/gpu/mocknvml; a DGX A100 unless ``--mock-config`` names another profile) through
``LD_LIBRARY_PATH``: upstream through go-nvml's dlopen, gfd through pynvml's.  The flags:
``--oneshot --no-timestamp --use-node-feature-api=false --output-file F
--machine-type-file M`` (upstream v0.20.0 defaults to the NodeFeature API).

It prints the median wall time of each, the ratio gfd / upstream (target: <= 3) and gfd /
floor, and checks that both wrote the same labels (any difference is printed).

The mock and the upstream binary are built once by scripts/bench-nvml-tools.sh into
``~/.cache/gfd-bench`` (Go at /usr/local/go/bin/go, or $GO); without Go and without a cached
build the bench says so and exits 0.  Sources: see that script (GFD_BENCH_TEST_INFRA_GIT,
GFD_BENCH_DEVICE_PLUGIN_GIT).

    .venv/bin/python bench/bench_upstream_nvml.py [--runs N] [--gfd PATH] [--baseline PATH]
                                                  [--importtime]

``--gfd`` and ``--baseline`` take a ``gfd`` console script, e.g. of a wheel installed as
``bench/bench_oneshot.py --build-wheel VENV`` installs it (an editable install adds its
import hook to every run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "scripts" / "bench-nvml-tools.sh"
TARGET_RATIO = 3.0
FLAGS = ["--oneshot", "--no-timestamp", "--use-node-feature-api=false"]


def tool_path(name: str) -> Path:
    done = subprocess.run(
        [str(TOOLS), "path", name], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return Path(done.stdout.strip())


def build_tools() -> tuple[Path, Path] | str:
    """(mock NVML directory, upstream binary), built when missing; or why they cannot be."""
    mock, upstream = tool_path("mock-nvml"), tool_path("upstream")
    if (mock / "libnvidia-ml.so.1").exists() and upstream.exists():
        return mock, upstream
    go = os.environ.get("GO", "/usr/local/go/bin/go")
    if not os.access(go, os.X_OK):
        return f"no Go toolchain at {go} (set GO=...) and no cached build in {mock.parent}"
    done = subprocess.run([str(TOOLS)], cwd=ROOT)
    if done.returncode != 0:
        return f"{TOOLS.name} failed (exit {done.returncode})"
    return mock, upstream


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one fresh process, which must succeed."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{argv[0]} failed ({code}): {err.read()[-2000:]!r}")
    return wall, usage.ru_utime + usage.ru_stime


def labels_of(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line)
    return {key: value for key, value in pairs}


def compare_labels(upstream: dict[str, str], gfd: dict[str, str]) -> list[str]:
    """One line per label that differs (missing on one side, or another value)."""
    lines = []
    for key in sorted(upstream.keys() | gfd.keys()):
        ours, theirs = gfd.get(key), upstream.get(key)
        if ours != theirs:
            lines.append(f"  {key}: upstream {theirs!r}, gfd {ours!r}")
    return lines


def print_import_profile(
    python: str, gfd: list[str], env: dict[str, str], min_ms: float = 2.0, max_depth: int = 1
) -> None:
    """The import tree of one gfd run (the console script run by ``python -X importtime``)."""
    from bench_oneshot import print_import_tree  # beside this file (sys.path[0])

    done = subprocess.run(
        [python, "-X", "importtime", *gfd], capture_output=True, text=True, env=env
    )
    print_import_tree(done.stderr, min_ms, max_depth)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="rounds (>= 3; default 21)")
    parser.add_argument(
        "--gfd",
        default=str(Path(sys.executable).parent / "gfd"),
        help="the gfd command (default: the console script beside this interpreter)",
    )
    parser.add_argument(
        "--baseline",
        help="another gfd command to run in the same rounds (e.g. an earlier commit's install)",
    )
    parser.add_argument(
        "--mock-config",
        default="configs/mock-nvml-config-a100.yaml",
        help="the mock's YAML profile, relative to the mock's directory (default: DGX A100)",
    )
    parser.add_argument(
        "--importtime", action="store_true", help="also print gfd's slowest imports"
    )
    args = parser.parse_args(argv)
    runs = max(3, args.runs)

    tools = build_tools()
    if isinstance(tools, str):
        print(f"bench_upstream_nvml: skipped: {tools}")
        return 0
    mock, upstream = tools
    python = str(Path(args.gfd).parent / "python")
    if not os.access(python, os.X_OK):
        python = sys.executable

    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        machine_type = work / "product_name"
        machine_type.write_text("DGXA100 920-23687-2530-000\n")
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("GFD_", "PYTHON", "MOCK_NVML"))
            and key not in ("NODE_NAME", "KUBECONFIG", "CONFIG_FILE", "MIG_STRATEGY")
        }
        env.update(
            LD_LIBRARY_PATH=os.pathsep.join(
                [str(mock), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
            ),
            MOCK_NVML_CONFIG=str(mock / args.mock_config),
        )
        common = [*FLAGS, "--machine-type-file", str(machine_type)]
        commands = {
            "upstream": [str(upstream), *common, "--output-file", str(work / "upstream")],
            "gfd": [args.gfd, *common, "--output-file", str(work / "gfd")],
            "floor": [python, "-c", "import pynvml"],
        }
        if args.baseline:
            commands["baseline"] = [args.baseline, *common, "--output-file", str(work / "baseline")]
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():  # warm the page cache, check each works; not counted
            run_once(argv, env)
        difference = compare_labels(labels_of(work / "upstream"), labels_of(work / "gfd"))
        label_count = len(labels_of(work / "gfd"))
        if args.baseline:
            difference += compare_labels(labels_of(work / "gfd"), labels_of(work / "baseline"))
        names = list(commands)
        for round_number in range(runs):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                wall, cpu = run_once(commands[name], env)
                walls[name].append(wall)
                cpus[name].append(cpu)

        print(f"mock NVML: {mock} ({args.mock_config}); upstream: {upstream}")
        print(f"gfd: {args.gfd}" + (f"; baseline: {args.baseline}" if args.baseline else ""))
        print(f"{runs} rounds, each command once per round (order rotated); medians of the")
        print("wall time and of the CPU time (user + system; all threads: Go's runtime has many)")
        medians = {name: statistics.median(values) for name, values in walls.items()}
        for name in names:
            pairs = statistics.median(
                w / u for w, u in zip(walls[name], walls["upstream"], strict=True)
            )
            versus_upstream = medians[name] / medians["upstream"]
            print(
                f"  {name:9} {medians[name] * 1e3:7.1f} ms   x upstream {versus_upstream:5.2f}"
                f" (pairs {pairs:5.2f})   x floor {medians[name] / medians['floor']:5.2f}"
                f"   CPU {statistics.median(cpus[name]) * 1e3:6.1f} ms"
            )
        ratio = medians["gfd"] / medians["upstream"]
        print()
        verdict = "OK" if ratio <= TARGET_RATIO else "OVER"
        print(f"gfd / upstream: {ratio:.2f} (target <= {TARGET_RATIO:g}: {verdict})")
        if difference:
            print(f"labels DIFFER ({label_count} from gfd):")
            print("\n".join(difference))
        else:
            print(f"labels identical ({label_count})")
        if args.importtime:
            print_import_profile(python, commands["gfd"], env)
    return 0 if not difference else 1


if __name__ == "__main__":
    sys.exit(main())
