"""What a oneshot imports (recorded at exit by a ``sitecustomize`` in real ``gfd`` processes), so a
mode keeps away from what it does not use: API clients, metrics server, asyncio, structlog while
silent, NVML on the snapshot path, PyYAML with no document. Dataclasses and PyYAML for
documents are imported by design."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gfd import snapshot as snapshot_io

from .fakes.fake_sysfs import build_from_snapshot
from .process import ROOT, clean_env

DGX = os.path.join(ROOT, "examples", "snapshots", "dgx-a100.yaml")

RECORDER = """\
import atexit
import os
import sys

_before = set(sys.modules)
if os.environ.get("RECORD_FAKE_NVML_SNAPSHOT"):
    from gfd import snapshot
    from tests.fakes.fake_nvml import FakeNvml

    with open(os.environ["RECORD_FAKE_NVML_SNAPSHOT"], encoding="utf-8") as handle:
        _fake = FakeNvml.from_snapshot(snapshot.loads(handle.read()))
    sys.modules["pynvml"] = _fake.module


def _record():
    modules = sorted(set(sys.modules) - _before)
    gfd_snapshot = sys.modules.get("gfd.snapshot")
    dumper = getattr(gfd_snapshot, "_yaml_dumper", None)
    import json

    with open(os.environ["RECORD_IMPORTS"], "w", encoding="utf-8") as handle:
        json.dump(
            {
                "modules": modules,
                "yaml_dumper_built": bool(dumper and dumper.cache_info().currsize),
            },
            handle,
        )


atexit.register(_record)
"""

# Never used by a oneshot that writes a file or stdout: the API client, its retry and HTTP
# stacks, the metrics server.  (gfd's own modules are imported at the top of the modules
# that use them, so a oneshot loads them all; what it must not pay for is these.)
NOT_FOR_A_FILE_ONESHOT = [
    "kubernetes", "prometheus_client", "tenacity", "urllib3", "requests", "asyncio",
    "structlog",  # nothing is logged at the default level when the pass succeeds
    "http.server", "socketserver", "importlib.metadata",
]  # fmt: skip
# ... nor, reading a snapshot file, NVML
NOT_FOR_THE_SNAPSHOT_PATH = [*NOT_FOR_A_FILE_ONESHOT, "pynvml"]


def record_imports(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run ``gfd *args`` as the console script does; the modules it imported."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(RECORDER)
    out = tmp_path / "imports.json"
    run_env = clean_env(env)
    run_env.update(PYTHONPATH=f"{shim}{os.pathsep}{ROOT}", RECORD_IMPORTS=str(out))
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from gfd.cli import main; sys.exit(main())", *args],
        capture_output=True, text=True, env=run_env, cwd=tmp_path, stdin=subprocess.DEVNULL,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    recorded = json.loads(out.read_text())
    recorded["stdout"] = done.stdout
    recorded["stderr"] = done.stderr
    return recorded


def loaded(recorded: Any, names: list[str]) -> list[str]:
    """Those of ``names`` that were imported, a package counting with any submodule."""
    modules = recorded["modules"]
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def nvml_oneshot(tmp_path: Path, *extra: str, machine_type_file: str | None = None) -> Any:
    """A oneshot on the NVML path (the fake NVML, a fake sysfs), its imports recorded."""
    tmp_path.mkdir(exist_ok=True)
    node = snapshot_io.load(DGX)
    as_json = tmp_path / "node.json"
    as_json.write_text(snapshot_io.dumps_json(node))
    overrides = build_from_snapshot(tmp_path / "node", node)
    return record_imports(
        tmp_path, "--oneshot", "--no-timestamp",
        "--machine-type-file", machine_type_file or overrides["machine_type_file"], *extra,
        env={"RECORD_FAKE_NVML_SNAPSHOT": str(as_json), "GFD_SYSFS_ROOT": overrides["sysfs_root"]},
    )  # fmt: skip


def test_snapshot_oneshot_to_stdout_imports_only_what_it_uses(tmp_path: Path) -> None:
    recorded = record_imports(tmp_path, "--oneshot", "--no-timestamp", "--snapshot-file", DGX)
    assert "nvidia.com/gpu.count=8\n" in recorded["stdout"]
    assert loaded(recorded, NOT_FOR_THE_SNAPSHOT_PATH) == []
    assert not recorded["yaml_dumper_built"]
    # what it does use is seen (the recorder works)
    used = ["yaml", "gfd.outputs.file", "gfd.labels"]
    assert loaded(recorded, used) == used


def test_snapshot_oneshot_to_a_file_imports_only_what_it_uses(tmp_path: Path) -> None:
    features = tmp_path / "features"
    recorded = record_imports(
        tmp_path, "--oneshot", "--no-timestamp", "--snapshot-file", DGX,
        "--output-file", str(features),
    )  # fmt: skip
    assert "nvidia.com/gpu.count=8\n" in features.read_text()
    assert loaded(recorded, NOT_FOR_THE_SNAPSHOT_PATH) == []
    assert not recorded["yaml_dumper_built"]


def test_nvml_oneshot_imports_no_yaml_and_no_api_client(tmp_path: Path) -> None:
    recorded = nvml_oneshot(tmp_path)
    assert "nvidia.com/gpu.count=8\n" in recorded["stdout"]
    # no config file and no snapshot file: nothing to parse.  (Building the fake NVML
    # imports gfd.snapshot and the real pynvml, so its imports are counted too.)
    # nothing is logged and the output has no expiry: no clock to format (json is the
    # fake's: it is built from a JSON snapshot; datetime and uuid come with click)
    assert recorded["stderr"] == ""
    assert loaded(recorded, [*NOT_FOR_A_FILE_ONESHOT, "yaml"]) == []
    assert loaded(recorded, ["pynvml"]) == ["pynvml"]


def test_the_recorder_sees_what_a_mode_does_import(tmp_path: Path) -> None:
    """The other side: a run that logs on the console format loads structlog (a JSON line
    does not: tests/test_imports_logging.py)."""
    debug = record_imports(
        tmp_path, "--oneshot", "--snapshot-file", DGX, "--log-level", "debug",
        "--log-format", "console",
    )  # fmt: skip
    assert loaded(debug, ["structlog"]) == ["structlog"]
