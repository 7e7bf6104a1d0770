"""Cold ``gfd --oneshot`` wall time and peak RSS on the DGX A100 mixed-MIG example.

Each run is a fresh process:

    gfd --oneshot --no-timestamp --snapshot-file examples/snapshots/dgx-a100-mig-mixed.yaml \\
        --mig-strategy mixed

Wall time is measured around the child with ``time.perf_counter``; peak RSS comes from
``/usr/bin/time -v`` ("Maximum resident set size") when it exists, else from the child's
own rusage (``os.wait4``: the per-child form of ``getrusage(RUSAGE_CHILDREN)``).  Prints
every run, the medians, and a baseline (``python -c pass``) for the interpreter alone.

Targets (issue 2): cold oneshot <= 150 ms and <= 40 MB peak RSS (upstream's Go binary:
about 25 ms and 57 MB).

    .venv/bin/python bench/bench_oneshot.py [--runs N] [--importtime]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "examples" / "snapshots" / "dgx-a100-mig-mixed.yaml"
TARGET_MS = 150.0
TARGET_MB = 40.0
TIME = "/usr/bin/time"


def gfd_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m gfd``."""
    script = Path(sys.executable).parent / "gfd"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gfd"]


GFD_ARGS = [
    "--oneshot",
    "--no-timestamp",
    "--snapshot-file",
    str(SNAPSHOT),
    "--mig-strategy",
    "mixed",
]

_MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def run_once(command: list[str], use_time: bool) -> tuple[float, float, bytes]:
    """(wall seconds, peak RSS in MiB, stdout) of one fresh run."""
    if use_time:
        start = time.perf_counter()
        done = subprocess.run([TIME, "-v", *command], capture_output=True, cwd=ROOT)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"run failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
        match = _MAX_RSS.search(done.stderr.decode())
        if match is None:
            raise SystemExit("could not read the peak RSS from /usr/bin/time -v")
        return wall, int(match.group(1)) / 1024, done.stdout
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    assert child.stdout is not None
    out = child.stdout.read()
    # wait4 gives this child's own rusage (getrusage(RUSAGE_CHILDREN) would be the
    # high-water mark over every child so far)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stdout.close()
    if child.returncode != 0:
        raise SystemExit(f"run failed ({child.returncode})")
    return wall, usage.ru_maxrss / 1024, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="timed runs (>= 5; default 11)")
    parser.add_argument(
        "--importtime", action="store_true", help="also print the slowest imports (-X importtime)"
    )
    parser.add_argument(
        "--no-time", action="store_true", help="use os.wait4 even when /usr/bin/time exists"
    )
    args = parser.parse_args(argv)
    runs = max(5, args.runs)
    use_time = not args.no_time and shutil.which(TIME) is not None
    command = gfd_command()

    print("cold oneshot: " + " ".join([Path(command[0]).name, *command[1:], *GFD_ARGS]))
    print(f"peak RSS from: {'/usr/bin/time -v' if use_time else 'os.wait4 rusage'}")
    run_once([*command, *GFD_ARGS], use_time)  # warm the page cache; not counted
    walls, rsss = [], []
    labels = 0
    for i in range(runs):
        wall, rss, out = run_once([*command, *GFD_ARGS], use_time)
        labels = out.count(b"\n")
        walls.append(wall)
        rsss.append(rss)
        print(f"  run {i + 1:>2}: {wall * 1e3:7.1f} ms  {rss:6.1f} MiB")
    base_walls, base_rss = [], []
    for _ in range(runs):
        wall, rss, _ = run_once([sys.executable, "-c", "pass"], use_time)
        base_walls.append(wall)
        base_rss.append(rss)

    wall_ms = statistics.median(walls) * 1e3
    rss_mb = statistics.median(rsss)
    print()
    print(f"labels printed: {labels}")
    print(f"median of {runs}: {wall_ms:.1f} ms wall, {rss_mb:.1f} MiB peak RSS")
    print(
        f"baseline (python -c pass): {statistics.median(base_walls) * 1e3:.1f} ms, "
        f"{statistics.median(base_rss):.1f} MiB"
    )
    print(f"wall time: target <= {TARGET_MS:.0f} ms: {'OK' if wall_ms <= TARGET_MS else 'OVER'}")
    print(f"peak RSS:  target <= {TARGET_MB:.0f} MB: {'OK' if rss_mb <= TARGET_MB else 'OVER'}")

    if args.importtime or wall_ms > TARGET_MS:
        print_import_profile()
        print_run_profile()
    return 0


def print_import_profile(min_ms: float = 2.0, max_depth: int = 2) -> None:
    """The import tree of one run, from ``python -X importtime``."""
    python = sys.executable
    code = "import sys; from gfd.cli import main; sys.argv[0] = 'gfd'; sys.exit(main())"
    done = subprocess.run(
        [python, "-X", "importtime", "-c", code, *GFD_ARGS], capture_output=True, cwd=ROOT
    )
    rows = []
    for line in done.stderr.decode().splitlines():
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


def print_run_profile(top: int = 25) -> None:
    """Where one cold run spends its time (cProfile, cumulative; includes imports)."""
    done = subprocess.run(
        [sys.executable, "-c", _PROFILE.format(top=top), *GFD_ARGS], capture_output=True, cwd=ROOT
    )
    print()
    print("cProfile of one run (cumulative; profiling roughly doubles the times):")
    lines = done.stderr.decode().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    for line in lines[start : start + top + 1]:
        print("  " + line.replace(str(ROOT) + "/", "").replace(sys.prefix + "/", "")[:150])


if __name__ == "__main__":
    sys.exit(main())
