"""--device-discovery-strategy dra on the real kube-apiserver: ResourceSlices shaped as
NVIDIA's DRA driver publishes them (tests/dra_slices.py, with the driver's source lines) for
each mock-NVML profile give the labels gfd's NVML path gives on the mock, on the derivable
subset; generations, deletions and a node without the driver; gfd never writes a slice.
A daemon watches the slices: a change relabels within seconds under an interval of an hour;
a watch RBAC refuses falls back to a list per pass with one line; --dra-drift-check beside
NVML says once that the slices disagree."""

from __future__ import annotations

import copy
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd.discovery import dra
from gfd.labels import build
from gfd.settings import Config
from tests.dra_slices import slices_for
from tests.e2e.controlplane import GFD_USER, ControlPlane
from tests.e2e.gfdrun import Agent, run_ok
from tests.helpers import gpu, node
from tests.test_discovery_dra import (
    NOT_IN_SLICES,
    PROFILES,
    SEMVER_LOSSY,
    labels_of,
    mock_lib,  # noqa: F401 (the fixture)
    nvml_snapshot,
)
from tests.upstream import Reference

pytestmark = pytest.mark.timeout(600)
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
RBAC = Path(__file__).resolve().parents[2] / "manifests/components/dra/rbac.yaml"


@pytest.fixture
def plane(gfd_rbac: ControlPlane) -> Iterator[ControlPlane]:
    if gfd_rbac.get("/apis/resource.k8s.io/v1") is None:
        pytest.skip(f"{gfd_rbac.version}: no resource.k8s.io/v1 (DRA is GA from 1.34)")
    gfd_rbac.apply_all(list(yaml.safe_load_all(RBAC.read_text())))
    gfd_rbac.wait_for(
        "RBAC in force",
        lambda: gfd_rbac.gfd_allowed("list", "resourceslices", group="resource.k8s.io"),
    )
    yield gfd_rbac
    gfd_rbac.ok("DELETE", SLICES)  # deletecollection, as the admin


def _labels(plane: ControlPlane, name: str, tmp_path: Path) -> dict[str, str]:
    out = tmp_path / f"labels-{name}"
    run_ok(
        "--oneshot", "--no-timestamp", "--device-discovery-strategy", "dra",
        "--node-name", name, "--kubeconfig", str(plane.kubeconfig(tmp_path / "kube")),
        "--output-file", str(out),
    )  # fmt: skip
    return dict(line.split("=", 1) for line in out.read_text().splitlines() if line)


def _create(plane: ControlPlane, slices: list[dict[str, Any]]) -> None:
    for item in slices:
        plane.create(item)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_mock_profile_labels_as_nvml_does(
    plane: ControlPlane,
    mock_lib: Reference,  # noqa: F811
    profile: str,
    tmp_path: Path,
) -> None:
    name = f"dra-{profile}"
    from_nvml = nvml_snapshot(mock_lib, profile)
    _create(plane, slices_for(from_nvml, name, split=2))
    mark = plane.audit_mark()
    got = _labels(plane, name, tmp_path)
    expected = labels_of(from_nvml)
    derivable = set(expected) - NOT_IN_SLICES - SEMVER_LOSSY
    assert {k: got.get(k) for k in derivable} == {k: expected[k] for k in derivable}
    assert "nvidia.com/gpu.clique" not in got
    verbs = {e["verb"] for e in plane.audit_events(mark, user=GFD_USER, resource="resourceslices")}
    assert verbs == {"list"}


def test_generations_deletion_and_no_driver(plane: ControlPlane, tmp_path: Path) -> None:
    name = "dra-generations"
    assert "nvidia.com/gpu.count" not in _labels(plane, name, tmp_path)  # no driver
    first = slices_for(node(gpu(0)), name)
    _create(plane, first)
    assert _labels(plane, name, tmp_path)["nvidia.com/gpu.count"] == "1"
    second = slices_for(node(gpu(0), gpu(1), gpu(2)), name, generation=2, split=3)
    _create(plane, second)
    for item in first:
        plane.delete(f"{SLICES}/{item['metadata']['name']}")
    labels = _labels(plane, name, tmp_path)
    assert labels["nvidia.com/gpu.count"] == "3"
    assert labels == dict(build(dra.to_snapshot(second), "none", Config(), None).labels)
    for item in second:
        plane.delete(f"{SLICES}/{item['metadata']['name']}")
    assert "nvidia.com/gpu.count" not in _labels(plane, name, tmp_path)


def _file_labels(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _until(condition: Callable[[], bool], what: str, limit: float = 20.0) -> None:
    """A guard against a hung test (the watch relabels in about a second; the interval
    these daemons run with is an hour)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def _daemon(plane: ControlPlane, name: str, tmp_path: Path, *args: str, **env: str) -> Agent:
    return Agent(
        "--node-name", name, "--kubeconfig", str(plane.kubeconfig(tmp_path / "kube")),
        "--no-timestamp", "--output-file", str(tmp_path / "labels"), *args,
        env={"LD_LIBRARY_PATH": str(tmp_path), **env},
    )  # fmt: skip


def test_a_slice_change_relabels_within_seconds(plane: ControlPlane, tmp_path: Path) -> None:
    name = "dra-watched"
    out = tmp_path / "labels"
    first = slices_for(node(gpu(0)), name)
    _create(plane, first)
    mark = plane.audit_mark()
    agent = _daemon(plane, name, tmp_path, "--device-discovery-strategy", "dra",
                    "--sleep-interval", "1h")  # fmt: skip
    try:
        agent.passes(1)
        assert _file_labels(out)["nvidia.com/gpu.count"] == "1"
        second = slices_for(node(gpu(0), gpu(1), gpu(2)), name, generation=2, split=3)
        _create(plane, second)  # the generation bump
        _until(lambda: _file_labels(out).get("nvidia.com/gpu.count") == "3", "generation 2")
        for item in first:
            plane.delete(f"{SLICES}/{item['metadata']['name']}")
        plane.delete(f"{SLICES}/{second[0]['metadata']['name']}")  # a slice deleted
        agent.passes(1)  # incomplete: the last complete state stays
        assert _file_labels(out)["nvidia.com/gpu.count"] == "3"
        for item in second[1:]:
            plane.delete(f"{SLICES}/{item['metadata']['name']}")
        _until(lambda: "nvidia.com/gpu.count" not in _file_labels(out), "the driver gone")
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    assert "Traceback" not in agent.log()
    events = plane.audit_events(mark, user=GFD_USER, resource="resourceslices")
    verbs = [e["verb"] for e in events if e.get("stage") in (None, "ResponseComplete")]
    assert set(verbs) <= {"list", "watch"} and "watch" in verbs, verbs
    # the first pass's list and the watch's: every pass after reads the watch's cache
    assert verbs.count("list") <= 2, verbs


def test_a_watch_refused_by_rbac_falls_back_with_one_line(
    plane: ControlPlane, tmp_path: Path
) -> None:
    name = "dra-refused"
    role = next(o for o in yaml.safe_load_all(RBAC.read_text()) if o["kind"] == "ClusterRole")
    reduced = copy.deepcopy(role)
    for rule in reduced["rules"]:
        rule["verbs"] = [verb for verb in rule["verbs"] if verb != "watch"]
    plane.apply(reduced)
    _create(plane, slices_for(node(gpu(0)), name))
    try:
        plane.wait_for(
            "watch revoked",
            lambda: not plane.gfd_allowed("watch", "resourceslices", group="resource.k8s.io"),
        )
        agent = _daemon(plane, name, tmp_path, "--device-discovery-strategy", "dra",
                        "--sleep-interval", "0.2s")  # fmt: skip
        try:
            refused = agent.wait_for(
                f"cannot watch ResourceSlices of node {name}; listing them on each pass instead",
                limit=60,
            )
            assert "403" in str(refused[0].get("error")), refused
            agent.passes(5)  # it labels on, listing each pass
            assert _file_labels(tmp_path / "labels")["nvidia.com/gpu.count"] == "1"
            assert agent.stop(signal.SIGTERM) == 0
        finally:
            agent.kill()
    finally:
        plane.apply(role)
        plane.wait_for(
            "watch granted again",
            lambda: plane.gfd_allowed("watch", "resourceslices", group="resource.k8s.io"),
        )
    assert agent.log().count("cannot watch") == 1
    assert "Traceback" not in agent.log()


def test_drift_between_nvml_and_the_slices_is_said_once(
    plane: ControlPlane,
    mock_lib: Reference,  # noqa: F811
    tmp_path: Path,
) -> None:
    name = "dra-drift"
    from_nvml = nvml_snapshot(mock_lib, "h100")
    _create(plane, slices_for(from_nvml, name))
    agent = _daemon(
        plane, name, tmp_path, "--device-discovery-strategy", "nvml", "--dra-drift-check",
        "--sleep-interval", "0.3s",
        LD_LIBRARY_PATH=str(mock_lib.library_dir),
        MOCK_NVML_CONFIG=str(mock_lib.profile("h100")),
    )  # fmt: skip
    try:
        agent.passes(3)
        assert "drift check" not in agent.log()  # the slices say what NVML says
        fewer = replace(from_nvml, gpus=from_nvml.gpus[:1])
        _create(plane, slices_for(fewer, name, generation=2))
        said = agent.wait_for("drift check: NVML and the ResourceSlices disagree", limit=30)
        assert said[0]["labels"] >= 1
        count = said[0]["differences"]["nvidia.com/gpu.count"]
        assert count == {"nvml": str(len(from_nvml.gpus)), "slices": "1"}
        agent.passes(5)
        assert agent.stop(signal.SIGTERM) == 0
    finally:
        agent.kill()
    assert agent.log().count("NVML and the ResourceSlices disagree") == 1
    assert "Traceback" not in agent.log()
