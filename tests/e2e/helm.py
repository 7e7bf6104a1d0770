"""The helm binary scripts/e2e-tools.sh builds, and the chart rendered with it.

`make e2e` builds helm once (cached by version); without it the helm tests skip with the
reason -- except under `make e2e` (GFD_E2E=1), where a missing part is a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import servers

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "manifests" / "helm" / "gfd"
TOOLS_SCRIPT = ROOT / "scripts" / "e2e-tools.sh"
# Set by `make e2e`: everything must be there, a skip would hide a broken build.
REQUIRED = os.environ.get("GFD_E2E", "") == "1"
RELEASE = "gfd"
#: the chart refuses to install without an image (none is published): the tests' stand-in,
#: the name `make image` gives its build
IMAGE = {"image.repository": "gfd"}
NAMESPACE = "gpu-feature-discovery"


def tool_path(name: str) -> Path:
    """Where scripts/e2e-tools.sh keeps NAME's binary (built or not)."""
    done = subprocess.run(
        ["bash", str(TOOLS_SCRIPT), "path", name], capture_output=True, text=True, check=True
    )
    return Path(done.stdout.strip())


def require_tool(name: str) -> Path:
    path = tool_path(name)
    if not os.access(path, os.X_OK):
        reason = f"{name} is not built ({path}); `make e2e` or scripts/e2e-tools.sh builds it"
        if REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def set_args(values: Mapping[str, Any]) -> list[str]:
    """--set-json for each dotted key: types survive (true stays a bool, lists stay lists)."""
    args: list[str] = []
    for key, value in values.items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def helm(helm_bin: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_bin), *args], capture_output=True, text=True, check=check)


def template(
    helm_bin: Path,
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    kube_version: str = "",
) -> list[dict[str, Any]]:
    kube_version = kube_version or servers.CURRENT.version
    done = helm(
        helm_bin,
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        # as installed on the current release (offline, helm assumes v1.20)
        "--kube-version",
        kube_version,
        *set_args({**IMAGE, **(values or {})}),
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"helm template failed: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]
