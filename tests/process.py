"""Running ``gfd`` as a real process in tests."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GFD = [sys.executable, "-m", "gfd"]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any GFD setting that could leak in from outside."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GFD_")
        and k
        not in {
            "MIG_STRATEGY",
            "FAIL_ON_INIT_ERROR",
            "CONFIG_FILE",
            "USE_NODE_FEATURE_API",
            "DEVICE_DISCOVERY_STRATEGY",
            "NODE_NAME",
            "NAMESPACE",
            "POD_NAME",
            "KUBECONFIG",
        }
    }
    env["PYTHONPATH"] = ROOT
    env.update(extra or {})
    return env


def run_gfd(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GFD, *args],
        capture_output=True,
        text=True,
        env=clean_env(env),
        cwd=ROOT,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def spawn_gfd(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*GFD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(env),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


class Daemon:
    """A running gfd whose JSON log lines are read on a thread, so the test can wait for
    events (passes) instead of sleeping for a guessed time."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = spawn_gfd("--log-format", "json", *args, env=env)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            try:
                self.events.put(json.loads(line))
            except json.JSONDecodeError:
                self.events.put({"event": "raw", "line": line})

    def wait_for(self, event: str, count: int = 1, limit: float = 30) -> list[dict[str, Any]]:
        found = []
        while len(found) < count:
            try:
                item = self.events.get(timeout=limit)
            except queue.Empty:
                raise AssertionError(
                    f"no {event!r} event; log so far:\n{''.join(self.lines)}"
                ) from None
            if item.get("event") == event:
                found.append(item)
        return found

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
