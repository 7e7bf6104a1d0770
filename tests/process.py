"""Running ``gfd`` as a real process in tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

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
