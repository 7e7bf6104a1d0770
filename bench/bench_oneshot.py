"""Cold ``gfd --oneshot`` against the interpreter's floor, paired run by run.

Each round runs these fresh processes one after the other (the order rotates every round,
so that none always runs first on a warm CPU):

  snapshot path   gfd --oneshot --no-timestamp --snapshot-file examples/snapshots/dgx-a100.yaml
  NVML path       gfd --oneshot --no-timestamp, discovering the same DGX A100 through the
                  fake NVML of tests/fakes/fake_nvml.py (put in sys.modules["pynvml"] by a
                  sitecustomize, as tests/test_discovery_process.py does) and a fake sysfs
  floor           python -c 'import pynvml'
  harness         python -c pass with that sitecustomize: what the fake NVML costs by itself
  interpreter     python -c pass

and reports, per command, the median wall time (measured around the child), the median
CPU time (user + system, the child's rusage: steadier than wall on a shared machine), the median
peak RSS (from ``/usr/bin/time -v`` in separate, untimed runs: a forked child's own rusage
would count the benchmark's memory at the fork), and the ratio to the floor: the ratio of
the medians and the median of the per-round ratios.

``--baseline VENV`` adds another installation's snapshot and NVML paths to the same rounds
(e.g. a wheel of the main branch, built with ``--build-wheel``), and prints the paired
difference, run by run: the honest way to compare two trees on a noisy machine.

Measure gfd as the image installs it -- from a wheel, into a virtualenv of its own:

    .venv/bin/python bench/bench_oneshot.py --build-wheel /tmp/gfd-wheel   # build + install
    .venv/bin/python bench/bench_oneshot.py --venv /tmp/gfd-wheel          # reuse it

``--build-wheel`` does what tests/test_wheel_install.py does: ``pip wheel --no-deps`` of
what the Dockerfile copies, a fresh ``venv --without-pip``, the wheel installed into it by
an outside pip; the dependencies are the ones of the running interpreter, reached through
a .pth file (offline).  Without either option the bench uses the running interpreter's own
``gfd`` (an editable install adds its import hook to every run).  The machine should be
quiet; on a shared one use many rounds (``--runs 41``).

    .venv/bin/python bench/bench_oneshot.py [--runs N] [--baseline VENV] [--importtime] [--profile]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "snapshots" / "dgx-a100.yaml"
TIME = "/usr/bin/time"

# The fake NVML stands in for pynvml.  gfd itself comes from the measured installation:
# the repository is appended to sys.path (after site-packages) only to reach tests.fakes.
SITECUSTOMIZE = """\
import os
import sys

if os.environ.get("BENCH_FAKE_NVML_SNAPSHOT"):
    sys.path.append(os.environ["BENCH_REPO"])
    from gfd import snapshot
    from tests.fakes.fake_nvml import FakeNvml

    with open(os.environ["BENCH_FAKE_NVML_SNAPSHOT"], encoding="utf-8") as handle:
        sys.modules["pynvml"] = FakeNvml.from_snapshot(snapshot.loads(handle.read())).module
"""


@dataclass
class Command:
    name: str
    argv: list[str]
    env: dict[str, str]
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)  # user + system
    rss_mib: list[float] = field(default_factory=list)
    stdout: bytes = b""


_MAX_RSS = re.compile(rb"Maximum resident set size \(kbytes\): (\d+)")


def peak_rss_mib(command: Command) -> float:
    """Peak RSS of one run of ``command`` under ``/usr/bin/time -v``."""
    done = subprocess.run(
        [TIME, "-v", *command.argv], capture_output=True, cwd=ROOT, env=command.env
    )
    match = _MAX_RSS.search(done.stderr)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"{command.name} under {TIME} -v failed: {done.stderr[-2000:]!r}")
    return int(match.group(1)) / 1024


def run_once(command: Command) -> tuple[float, float, bytes]:
    """(wall seconds, CPU seconds, stdout) of one fresh process."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(
            command.argv,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=command.env,
        )
        assert child.stdout is not None
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = code = os.waitstatus_to_exitcode(status)
        child.stdout.close()
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{command.name} failed ({code}): {err.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, out


def build_wheel_venv(venv: Path) -> None:
    """The package installed from its wheel into a fresh venv, as the image does."""
    if venv.exists():
        shutil.rmtree(venv)
    with tempfile.TemporaryDirectory() as work:
        context = Path(work) / "src"
        context.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(ROOT / name, context / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "gfd", context / "gfd", ignore=ignore)
        dist = Path(work) / "dist"
        pip = [sys.executable, "-m", "pip"]
        built = subprocess.run(
            [*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(context)],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            raise SystemExit(f"pip wheel failed: {built.stderr[-3000:]}")
        (wheel,) = dist.glob("gfd-*.whl")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        subprocess.run(
            [*pip, "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
            check=True,
        )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # the dependencies: this interpreter's site-packages, after the venv's own
    (Path(purelib) / "zz-bench-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )


def commands(venv_bin: Path, work: Path) -> list[Command]:
    sys.path.insert(0, str(ROOT))
    from gfd import snapshot
    from tests.fakes.fake_sysfs import build_from_snapshot

    python = str(venv_bin / "python")
    gfd = str(venv_bin / "gfd")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GFD_", "PYTHON", "BENCH_"))
        and key not in ("NODE_NAME", "KUBECONFIG", "CONFIG_FILE", "MIG_STRATEGY")
    }
    shim = work / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
    node = snapshot.load(str(SNAPSHOT))
    as_json = work / "node.json"  # JSON: building the fake reads no YAML
    as_json.write_text(snapshot.dumps_json(node))
    overrides = build_from_snapshot(work / "node", node)
    fake_env = {
        **env,
        "PYTHONPATH": str(shim),
        "BENCH_REPO": str(ROOT),
        "BENCH_FAKE_NVML_SNAPSHOT": str(as_json),
        "GFD_SYSFS_ROOT": overrides["sysfs_root"],
    }
    oneshot = [gfd, "--oneshot", "--no-timestamp"]
    return [
        Command("snapshot path", [*oneshot, "--snapshot-file", str(SNAPSHOT)], env),
        Command(
            "NVML path (fake)",
            [*oneshot, "--machine-type-file", overrides["machine_type_file"]],
            fake_env,
        ),
        Command("floor: import pynvml", [python, "-c", "import pynvml"], env),
        Command("harness alone", [python, "-c", "pass"], fake_env),
        Command("interpreter: pass", [python, "-c", "pass"], env),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=41, help="rounds (>= 5; default 41)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--venv", type=Path, help="a virtualenv with gfd installed (a wheel)")
    where.add_argument(
        "--build-wheel", type=Path, metavar="VENV", help="build the wheel, install it into VENV"
    )
    parser.add_argument(
        "--baseline", type=Path, metavar="VENV", help="also run the gfd of VENV, paired"
    )
    parser.add_argument(
        "--importtime", action="store_true", help="also print the slowest imports (-X importtime)"
    )
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one run")
    args = parser.parse_args(argv)
    runs = max(5, args.runs)
    if args.build_wheel:
        build_wheel_venv(args.build_wheel)
    venv = args.build_wheel or args.venv
    venv_bin = (venv / "bin") if venv else Path(sys.executable).parent
    if not (venv_bin / "gfd").exists():
        raise SystemExit(f"no gfd in {venv_bin}")
    if args.baseline and not (args.baseline / "bin" / "gfd").exists():
        raise SystemExit(f"no gfd in {args.baseline / 'bin'}")

    with tempfile.TemporaryDirectory() as work:
        (Path(work) / "measured").mkdir()
        cmds = commands(venv_bin, Path(work) / "measured")
        if args.baseline:
            (Path(work) / "baseline").mkdir()
            for command in commands(args.baseline / "bin", Path(work) / "baseline")[:2]:
                command.name = f"baseline {command.name}"
                cmds.append(command)
        for command in cmds:  # warm the page cache and check each command works; not counted
            command.stdout = run_once(command)[2]
        snapshot_out, nvml_out = cmds[0].stdout, cmds[1].stdout
        for round_number in range(runs):
            shift = round_number % len(cmds)
            for command in cmds[shift:] + cmds[:shift]:
                wall, cpu, _ = run_once(command)
                command.walls.append(wall)
                command.cpus.append(cpu)
        if shutil.which(TIME):
            for command in cmds:
                command.rss_mib = [peak_rss_mib(command) for _ in range(5)]

    print(f"gfd from: {venv_bin / 'gfd'}")
    print(f"{runs} rounds, each command once per round (order rotated); median wall, peak RSS")
    counts = snapshot_out.count(b"\n"), nvml_out.count(b"\n")
    same = snapshot_out == nvml_out
    print(f"labels printed: snapshot path {counts[0]}, NVML path {counts[1]} (same: {same})")
    print()
    floor = cmds[2]
    floor_median = statistics.median(floor.walls)
    floor_cpu = statistics.median(floor.cpus)
    print(
        f"  {'':24} {'wall':>9} {'x floor':>8} {'(pairs)':>8} {'CPU':>9} {'x floor':>8}"
        f" {'peak RSS':>10}"
    )
    for command in cmds:
        median = statistics.median(command.walls)
        pairs = statistics.median(w / f for w, f in zip(command.walls, floor.walls, strict=True))
        cpu = statistics.median(command.cpus)
        print(
            f"  {command.name:24} {median * 1e3:6.1f} ms {median / floor_median:8.2f} "
            f"{pairs:8.2f} {cpu * 1e3:6.1f} ms {cpu / floor_cpu:8.2f} "
            f"{statistics.median(command.rss_mib or [math.nan]):6.1f} MiB"
        )
    ratio = statistics.median(cmds[0].walls) / floor_median
    print()
    print(f"snapshot path / import pynvml: {ratio:.2f}")
    for measured, baseline in zip(cmds[:2], cmds[5:], strict=False):
        if baseline.stdout != measured.stdout:
            print(f"{measured.name}: the baseline printed other labels")
        print(
            f"{measured.name} minus baseline, paired by round: wall "
            f"{_spread([a - b for a, b in zip(measured.walls, baseline.walls, strict=True)])}, "
            f"CPU {_spread([a - b for a, b in zip(measured.cpus, baseline.cpus, strict=True)])}"
        )
    medians = [statistics.median(c.walls) for c in cmds]
    print(
        f"gfd's own share: snapshot path - pass {(medians[0] - medians[4]) * 1e3:.1f} ms, "
        f"NVML path - harness {(medians[1] - medians[3]) * 1e3:.1f} ms, "
        f"import pynvml - pass {(medians[2] - medians[4]) * 1e3:.1f} ms"
    )
    print(json.dumps({c.name: round(statistics.median(c.walls) * 1e3, 1) for c in cmds}))

    if args.importtime:
        print_import_profile(venv_bin)
    if args.profile:
        print_run_profile(venv_bin)
    return 0


def _spread(values: list[float]) -> str:
    """Median and interquartile range of ``values`` (seconds), in ms."""
    low, _, high = statistics.quantiles(values, n=4)
    return f"{statistics.median(values) * 1e3:+.1f} ms (IQR {low * 1e3:+.1f}..{high * 1e3:+.1f})"


def oneshot_args() -> list[str]:
    return ["--oneshot", "--no-timestamp", "--snapshot-file", str(SNAPSHOT)]


def print_import_profile(venv_bin: Path, min_ms: float = 1.0, max_depth: int = 2) -> None:
    """The import tree of one snapshot-path run, from ``python -X importtime``."""
    done = subprocess.run(
        [str(venv_bin / "python"), "-X", "importtime", str(venv_bin / "gfd"), *oneshot_args()],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    print_import_tree(done.stderr, min_ms, max_depth)


def print_import_tree(stderr: str, min_ms: float, max_depth: int) -> None:
    """The imports of at least ``min_ms`` and at most ``max_depth`` deep, from the stderr of
    a ``python -X importtime`` run (bench_upstream_nvml.py prints its gfd run with it too)."""
    rows = []
    for line in stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if not line.startswith("import time:") or len(fields) != 3:
            continue
        if not fields[0].strip().isdigit():
            continue  # the header line
        name = fields[2]
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append((int(fields[1]), int(fields[0]), depth, name.strip()))
    total = sum(c for c, _, depth, _ in rows if depth == 0)
    print()
    print(f"-X importtime: {total / 1e3:.1f} ms importing (importtime inflates this); imports of")
    print(f"at least {min_ms} ms, nesting depth <= {max_depth} (cumulative ms, self ms):")
    # importtime lists a module after the modules it imported: reverse to read top-down
    for cumulative, self_us, depth, name in reversed(rows):
        if depth <= max_depth and cumulative >= min_ms * 1000:
            print(f"  {cumulative / 1e3:6.1f} {self_us / 1e3:6.1f}  {'  ' * depth}{name}")


_PROFILE = """
import cProfile, io, pstats, sys
sys.argv[0] = "gfd"
profile = cProfile.Profile()
profile.enable()
try:
    from gfd.cli import main
    main()
except SystemExit:
    pass
profile.disable()
out = io.StringIO()
pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats({top})
sys.stderr.write(out.getvalue())
"""


def print_run_profile(venv_bin: Path, top: int = 25) -> None:
    """Where one snapshot-path run spends its time (cProfile, cumulative; with imports)."""
    done = subprocess.run(
        [str(venv_bin / "python"), "-c", _PROFILE.format(top=top), *oneshot_args()],
        capture_output=True,
        cwd=tempfile.gettempdir(),  # not the source tree: gfd from the measured installation
    )
    print()
    print("cProfile of one run (cumulative; profiling roughly doubles the times):")
    lines = done.stderr.decode().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    for line in lines[start : start + top + 1]:
        print("  " + line.replace(str(ROOT) + "/", "")[:150])


if __name__ == "__main__":
    sys.exit(main())
