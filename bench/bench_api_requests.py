"""API requests per node per hour at steady state, and the daemon's peak RSS per output mode.

Run from the repository root:  ``.venv/bin/python bench/bench_api_requests.py``

Requests: a real ``gfd`` daemon publishes a snapshot to the fake API server with a short
interval; after the first publish we count the requests made over many unchanged passes and
scale to a 60 s interval (60 passes an hour).  The verification read happens every 600 s, far
beyond a short run, so it is measured separately (one ``verify`` against the fake, counted)
and added at 6 an hour.  Upstream GFD in NodeFeature mode makes one GET per pass: 60 an hour.

Peak RSS: ``VmHWM`` from ``/proc/<pid>/status`` of a daemon (metrics endpoint on) after a few
passes, for each output mode.  Upstream GFD's figure to beat: 57 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.fake_apiserver import FakeApiServer  # noqa: E402

SNAPSHOT = ROOT / "examples" / "snapshots" / "dgx-a100-mig-mixed.yaml"
TARGET_INTERVAL = 60.0
VERIFY_INTERVAL = 600.0
UPSTREAM_PER_HOUR = 3600 / TARGET_INTERVAL  # one GET per pass
UPSTREAM_RSS_MB = 57.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def passes(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return -1
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("gfd_passes_total{")
        )
    )


def wait_passes(process: subprocess.Popen[bytes], port: int, target: int) -> None:
    deadline = time.monotonic() + 300
    while passes(port) < target:
        if process.poll() is not None:
            raise SystemExit(f"gfd exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit("gfd made no progress")
        time.sleep(0.02)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_daemon(args: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GFD_")}
    env.pop("KUBECONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gfd", *args, "--metrics-address", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)


def verify_requests(flag: str, kubeconfig: str, api: FakeApiServer) -> int:
    """Requests one verification read makes when nothing changed."""
    from gfd import labels as labelling
    from gfd import snapshot
    from gfd.config import Config
    from gfd.outputs import make_output
    from gfd.settings import Settings

    labels = labelling.build(snapshot.load(str(SNAPSHOT)), "none", Config(), None).labels
    settings = Settings(
        use_node_feature_api=flag == "--use-node-feature-api",
        use_node_labels=flag == "--use-node-labels",
        node_name="bench",
        kubeconfig=kubeconfig,
    )
    output = make_output(settings)
    output.publish(labels)
    before = api.count()
    republished = output.verify(labels)
    assert not republished
    return api.count() - before


def bench_requests(interval: float, steady_passes: int) -> list[tuple[str, float, float, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp, FakeApiServer() as api:
        kubeconfig = str(api.write_kubeconfig(Path(tmp) / "kubeconfig"))
        api.add_node("n1")
        api.add_node("bench")
        for flag, name in (
            ("--use-node-feature-api", "nodefeature"),
            ("--use-node-labels", "node-labels"),
        ):
            port = free_port()
            process = start_daemon(
                [
                    flag,
                    "--node-name",
                    "n1",
                    "--kubeconfig",
                    kubeconfig,
                    "--snapshot-file",
                    str(SNAPSHOT),
                    "--sleep-interval",
                    f"{interval}s",
                ],
                port,
            )
            try:
                wait_passes(process, port, 1)
                start_passes = passes(port)
                api.clear_requests()
                wait_passes(process, port, start_passes + steady_passes)
                counted = api.count()
                done_passes = passes(port) - start_passes
            finally:
                stop(process)
            per_pass = counted / done_passes
            steady = per_pass * 3600 / TARGET_INTERVAL
            verify = verify_requests(flag, kubeconfig, api) * 3600 / VERIFY_INTERVAL
            rows.append((name, per_pass, steady, steady + verify))
    return rows


def bench_rss(interval: float, settle_passes: int) -> list[tuple[str, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp, FakeApiServer() as api:
        kubeconfig = str(api.write_kubeconfig(Path(tmp) / "kubeconfig"))
        api.add_node("n1")
        snapshot_copy = Path(tmp) / "node.yaml"
        shutil.copyfile(SNAPSHOT, snapshot_copy)
        common = ["--snapshot-file", str(snapshot_copy), "--sleep-interval", f"{interval}s"]
        modes = {
            "features file": ["--output-file", str(Path(tmp) / "features")],
            "nodefeature": [
                "--use-node-feature-api",
                "--node-name",
                "n1",
                "--kubeconfig",
                kubeconfig,
            ],
            "node-labels": ["--use-node-labels", "--node-name", "n1", "--kubeconfig", kubeconfig],
        }
        for name, args in modes.items():
            port = free_port()
            process = start_daemon([*args, *common], port)
            try:
                wait_passes(process, port, settle_passes)
                rows.append((name, peak_rss_mb(process.pid)))
            finally:
                stop(process)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.1, help="daemon interval (s)")
    parser.add_argument("--passes", type=int, default=100, help="steady-state passes to count")
    args = parser.parse_args()
    from gfd.observability import configure_logging

    configure_logging("json", "error")  # the in-process verify run stays quiet

    print(
        f"snapshot: {SNAPSHOT.relative_to(ROOT)}; daemon interval {args.interval}s, "
        f"{args.passes} steady passes, scaled to a {TARGET_INTERVAL:.0f}s interval"
    )
    print()
    print(
        f"{'output':<14}{'req/pass':>10}{'req/h (passes)':>16}{'req/h (+verify)':>17}"
        f"{'upstream':>10}"
    )
    for name, per_pass, steady, total in bench_requests(args.interval, args.passes):
        upstream = f"{UPSTREAM_PER_HOUR:.0f}" if name == "nodefeature" else "-"
        print(f"{name:<14}{per_pass:>10.2f}{steady:>16.1f}{total:>17.1f}{upstream:>10}")
    print("target: <= 6 requests per node per hour")
    print()
    print(f"{'output':<14}{'peak RSS (MB)':>14}")
    for name, rss in bench_rss(args.interval, 20):
        print(f"{name:<14}{rss:>14.1f}")
    print(f"target: < {UPSTREAM_RSS_MB:.0f} MB (upstream GFD)")


if __name__ == "__main__":
    main()
