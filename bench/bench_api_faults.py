"""How fast gfd gets out of a misbehaving API server's way.

Run from the repository root:  ``.venv/bin/python bench/bench_api_faults.py``

- SIGTERM latency: a real ``gfd`` daemon (node-labels output, the default 60 s interval, so a
  pass may retry for 30 s and a request take 10 s) against the fake API server stuck in one
  state -- a request never answered, headers trickled forever, retrying a 503 -- is sent
  SIGTERM; the figure is the time from the signal to the process's exit.
- A oneshot against a server that trickles its headers, with the default interval: the time
  until it gives up (the 30 s budget bounds it; before the total deadline it ran for good).
- Peak RSS of a oneshot whose GET is answered with 300 MiB (``VmHWM`` via wait4's rusage).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.fake_apiserver import FakeApiServer, Fault  # noqa: E402
from tests.process import GFD, clean_env  # noqa: E402

SNAPSHOT = str(ROOT / "examples" / "snapshots" / "dgx-a100.yaml")


def gfd(kubeconfig: str, *extra: str) -> subprocess.Popen[str]:
    args = ["--use-node-labels", "--node-name", "n1", "--kubeconfig", kubeconfig]
    return subprocess.Popen(
        [*GFD, *args, "--snapshot-file", SNAPSHOT, "--log-format", "json", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        cwd=ROOT,
    )


def wait_until(condition: object, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit("gave up waiting")
        time.sleep(0.01)


def stop_latency(state: str, fault: Fault, tmp: Path) -> float:
    with FakeApiServer() as api:
        api.add_node("n1")
        kubeconfig = str(api.write_kubeconfig(tmp / f"kubeconfig-{state}"))
        api.inject(fault)
        process = gfd(kubeconfig)
        wait_until(lambda: api.count("GET") >= (3 if fault.status else 1))
        time.sleep(0.3)  # well inside the request or the wait
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        return time.monotonic() - sent


def oneshot_against_trickle(tmp: Path) -> tuple[float, int]:
    with FakeApiServer() as api:
        api.add_node("n1")
        kubeconfig = str(api.write_kubeconfig(tmp / "kubeconfig-trickle"))
        api.inject(Fault(trickle=0.5, count=None))
        started = time.monotonic()
        process = gfd(kubeconfig, "--oneshot")
        process.communicate(timeout=120)
        return time.monotonic() - started, process.returncode


def oneshot_peak_rss_against_huge(tmp: Path) -> tuple[float, int]:
    with FakeApiServer() as api:
        api.add_node("n1")
        kubeconfig = str(api.write_kubeconfig(tmp / "kubeconfig-huge"))
        api.inject(Fault(huge=300 * 1024 * 1024, declare_length=False, count=None))
        process = gfd(kubeconfig, "--oneshot", "--sleep-interval", "4s")
        _, _, usage = os.wait4(process.pid, 0)
        return usage.ru_maxrss / 1024, api.huge_bytes_sent


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        results: dict[str, object] = {}
        for state, fault in {
            "request never answered": Fault(hang=True, count=None),
            "headers trickling": Fault(trickle=0.2, count=None),
            "retrying a 503": Fault(status=503, count=None),
        }.items():
            latency = stop_latency(state, fault, tmp)
            results[f"SIGTERM -> exit, {state} (s)"] = round(latency, 3)
            print(f"SIGTERM to exit, {state}: {latency:.3f} s")
        seconds, status = oneshot_against_trickle(tmp)
        results["oneshot vs trickled headers, default interval (s)"] = round(seconds, 2)
        print(
            f"oneshot against trickled headers (default interval): {seconds:.1f} s, exit {status}"
        )
        rss, sent = oneshot_peak_rss_against_huge(tmp)
        results["oneshot peak RSS vs a 300 MiB answer (MB)"] = round(rss, 1)
        print(f"oneshot peak RSS against a 300 MiB answer: {rss:.1f} MB ({sent >> 20} MiB sent)")
        print(json.dumps(results))


if __name__ == "__main__":
    main()
