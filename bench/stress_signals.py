"""Signals at random moments to real daemons, many times over: a stress check, not a test.

Each round starts a daemon (features file, a snapshot file, ``--metrics-address`` so that
every helper thread runs, and a sleep interval long enough that nothing but a signal ends
its wait), waits for its first pass, then sends ``--hups`` SIGHUPs, each at a random
moment after the previous reload was logged (during the pass that follows it, the
publish, the wait), and checks that each one is logged as ``settings reloaded``; then a
SIGTERM at a random moment, which must end the process with status 0 within
``signals.STOP_BOUND_SECONDS``, through the orderly exit (``signal received; exiting``,
not the watchdog's line).  ``--jobs`` rounds run at once; run CPU burners beside it to see
the machine loaded.

``--stopped`` sends every signal while the process is stopped (SIGSTOP ... SIGCONT): then
whichever thread runs first takes it, which is how a signal reaches a helper thread when
the helper threads do not block it.

    .venv/bin/python bench/stress_signals.py --rounds 100 --jobs 3
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gfd.signals import STOP_BOUND_SECONDS
from tests.process import Daemon

SNAPSHOT = Path(__file__).resolve().parent.parent / "examples" / "snapshots" / "dgx-a100.yaml"
#: how long a round waits for a log line before it calls the signal lost
LIMIT_SECONDS = 20.0


def wait_stopped(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = set()
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except FileNotFoundError:
                continue
            states.add(stat.rsplit(")", 1)[1].split()[0])
        if states == {"T"}:
            return
        time.sleep(0.005)


def send(daemon: Daemon, signum: int, stopped: bool) -> None:
    pid = daemon.process.pid
    if stopped:
        os.kill(pid, signal.SIGSTOP)
        wait_stopped(pid)
    os.kill(pid, signum)
    if stopped:
        os.kill(pid, signal.SIGCONT)


def one_round(directory: str, hups: int, stopped: bool, rng: random.Random) -> str | None:
    """None when every signal was honoured, else what went wrong."""
    daemon = Daemon(
        "--sleep-interval", "9223372036.8", "--use-node-feature-api=false",
        "--output-file", os.path.join(directory, "gfd"), "--snapshot-file", str(SNAPSHOT),
        metrics=True,
    )  # fmt: skip
    try:
        daemon.wait_for("pass finished", limit=60)
        for number in range(hups):
            time.sleep(rng.uniform(0, 0.02))
            send(daemon, signal.SIGHUP, stopped)
            try:
                daemon.wait_for("settings reloaded", limit=LIMIT_SECONDS)
            except AssertionError:
                return f"SIGHUP {number + 1} of {hups}: no reload within {LIMIT_SECONDS:.0f} s"
        time.sleep(rng.uniform(0, 0.02))
        sent = time.monotonic()
        send(daemon, signal.SIGTERM, stopped)
        try:
            status = daemon.wait(LIMIT_SECONDS)
        except Exception:
            return f"SIGTERM: still running after {LIMIT_SECONDS:.0f} s"
        took = time.monotonic() - sent
        log = daemon.log()
        if status != 0:
            return f"SIGTERM: exit status {status}"
        if took > STOP_BOUND_SECONDS:
            return f"SIGTERM: exit after {took:.1f} s"
        if '"signal received; exiting"' not in log or "not honoured" in log:
            return "SIGTERM: ended by the watchdog, not the orderly exit"
        return None
    finally:
        daemon.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--hups", type=int, default=5)
    parser.add_argument("--stopped", action="store_true")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    failures: list[str] = []
    counter = iter(range(args.rounds))
    lock = threading.Lock()

    def worker(seed: int) -> None:
        own = random.Random(seed)
        while True:
            with lock:
                number = next(counter, None)
            if number is None:
                return
            with tempfile.TemporaryDirectory() as directory:
                problem = one_round(directory, args.hups, args.stopped, own)
            if problem:
                with lock:
                    failures.append(f"round {number}: {problem}")
                print(f"round {number}: {problem}", flush=True)

    workers = [
        threading.Thread(target=worker, args=(rng.randrange(1 << 30),)) for _ in range(args.jobs)
    ]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    print(
        f"{args.rounds} rounds x ({args.hups} SIGHUP + 1 SIGTERM)"
        f"{' while stopped' if args.stopped else ''}: {len(failures)} failed rounds"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
