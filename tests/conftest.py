"""Fixtures shared across test modules: process daemons and the fake API server.

``api`` starts a :class:`FakeApiServer`; a module that wants node ``n1`` to exist declares
``API_NODE_N1 = {"labels": ..., "annotations": ...}`` (its labels and annotations), and
``kubeconfig`` points the real client at the server."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from gfd.observability import configure_logging, use_structlog
from gfd.settings import Settings
from tests.fakes.fake_apiserver import FakeApiServer
from tests.process import ROOT, Daemon
from tests.upstream import Reference, require_reference

#: Every property test: no per-example deadline (a wall-clock limit only fails examples on
#: a loaded machine, it proves nothing about gfd) and no health check for slow or large
#: data generation (snapshots are big on purpose).  Each property keeps its own
#: ``max_examples``; HYPOTHESIS_PROFILE picks another registered profile.
settings.register_profile(
    "gfd", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gfd"))

# gfd configures structlog at its first record; done here first, so that a first record
# inside a test's capture_logs() block is captured rather than configuring structlog anew.
use_structlog()


@pytest.hookimpl(optionalhook=True)  # a plain pytest without xdist runs the suite too
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker more than there are CPUs.  Many tests spend part of their
    time waiting -- on a daemon's next pass, a client's timeout, a server that stalls on
    purpose -- and the extra worker runs on the CPU they leave free.  An explicit
    PYTEST_XDIST_AUTO_NUM_WORKERS still decides (xdist's own reading of it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.fixture
def daemons() -> Iterator[Any]:
    started: list[Daemon] = []

    def start(*args: str, env: dict[str, str] | None = None, metrics: bool = False) -> Daemon:
        daemon = Daemon(*args, env=env, metrics=metrics)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        node = getattr(request.module, "API_NODE_N1", None)
        if node is not None:
            server.add_node("n1", labels=node.get("labels"), annotations=node.get("annotations"))
        yield server


@pytest.fixture(name="settings")
def discovery_settings(tmp_path: Path) -> Settings:
    """Settings for discovery on a fake NVML: an empty sysfs of the test's, no machine file."""
    return replace(Settings(), sysfs_root=str(tmp_path / "sys"), machine_type_file="")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A FIFO nobody writes to: reading it would block."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> str:
    return str(api.write_kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
def log_events(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[str], list[Any]]]:
    """The agent's JSON log records with a given event name, as the process tests read."""
    configure_logging("json", "debug")

    def events(name: str) -> list[Any]:
        err = capsys.readouterr().err
        records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        return [record for record in records if record.get("event") == name]

    yield events
    configure_logging(None, "info")


@pytest.fixture(scope="session")
def upstream_reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """Upstream's binary and NVIDIA's mock NVML (``tests/upstream.py``).  Under xdist they are
    unpacked into the folder above every worker's own (this run's), so all workers share one
    unpack, and never into a folder earlier runs left behind."""
    base = tmp_path_factory.getbasetemp()
    shared_cache = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "nvidia-ref"
    return require_reference(shared_cache)


@pytest.fixture
def node_snapshot(tmp_path: Path) -> Path:
    """A copy of the DGX A100 example snapshot, for a test to replace while gfd runs."""
    target = tmp_path / "node.yaml"
    shutil.copyfile(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml", target)
    return target
