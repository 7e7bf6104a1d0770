"""Fixtures shared across test modules: process daemons and the fake API server.

``api`` starts a :class:`FakeApiServer`; a module that wants node ``n1`` to exist declares
``API_NODE_N1 = {"labels": ..., "annotations": ...}`` (its labels and annotations), and
``kubeconfig`` points the real client at the server.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.fakes.fake_apiserver import FakeApiServer
from tests.process import Daemon

#: Every property test: no per-example deadline (a wall-clock limit only fails examples on
#: a loaded machine, it proves nothing about gfd) and no health check for slow or large
#: data generation (snapshots are big on purpose).  Each property keeps its own
#: ``max_examples``; HYPOTHESIS_PROFILE picks another registered profile.
settings.register_profile(
    "gfd",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gfd"))


#: /dev/shm must have this much room to hold the suite's temporary files
_MEMORY_TEMP_ROOM = 4 << 30


def memory_temp_root(mounts_file: str = "/proc/mounts") -> str | None:
    """``/dev/shm`` where it is a roomy tmpfs that allows executables, else None.

    The suite creates and removes tens of thousands of files (fake sysfs trees, outputs,
    sockets, a virtualenv).  On a disk mounted with ``discard`` each removal waits on the
    device (the generated round trip spent half its time there); in memory it does not.
    A small /dev/shm (a container's 64 MiB) or a ``noexec`` one is not used."""
    try:
        with open(mounts_file, encoding="utf-8") as mounts:
            entries = [line.split() for line in mounts]
    except OSError:
        return None
    for fields in entries:
        if len(fields) < 4 or fields[1] != "/dev/shm" or fields[2] != "tmpfs":
            continue
        if "noexec" in fields[3].split(",") or not os.access("/dev/shm", os.W_OK | os.X_OK):
            return None
        room = os.statvfs("/dev/shm")
        return "/dev/shm" if room.f_bavail * room.f_frsize >= _MEMORY_TEMP_ROOM else None
    return None


#: the root pytest_configure chose (None: TMPDIR or PYTEST_DEBUG_TEMPROOT decides, or no room)
chosen_temp_root: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Temporary files (tmp_path, tempfile, the processes the tests start) go to memory
    where :func:`memory_temp_root` finds room, unless TMPDIR or PYTEST_DEBUG_TEMPROOT says
    where.  Set before any temporary directory is made: pytest's base directory is chosen
    at first use, and xdist workers inherit the environment (GFD_TESTS_TEMP_ROOT tells them
    the choice was the controller's) and the controller's base directory."""
    global chosen_temp_root
    chosen_temp_root = os.environ.get("GFD_TESTS_TEMP_ROOT") or None
    if chosen_temp_root is None:
        if os.environ.get("TMPDIR") or os.environ.get("PYTEST_DEBUG_TEMPROOT"):
            return
        chosen_temp_root = memory_temp_root()
        if chosen_temp_root is None:
            return
        os.environ["GFD_TESTS_TEMP_ROOT"] = chosen_temp_root
    os.environ["TMPDIR"] = chosen_temp_root
    tempfile.tempdir = chosen_temp_root


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

    def start(*args: str, env: dict[str, str] | None = None) -> Daemon:
        daemon = Daemon(*args, env=env)
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


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> str:
    return str(api.write_kubeconfig(tmp_path / "kubeconfig"))
