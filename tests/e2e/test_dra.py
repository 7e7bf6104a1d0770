"""--device-discovery-strategy dra on the real kube-apiserver: ResourceSlices shaped as
NVIDIA's DRA driver publishes them (tests/dra_slices.py, with the driver's source lines) for
each mock-NVML profile give the labels gfd's NVML path gives on the mock, on the derivable
subset; generations, deletions and a node without the driver; gfd never writes a slice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gfd.discovery import dra
from gfd.labels import build
from gfd.settings import Config
from tests.dra_slices import slices_for
from tests.e2e.controlplane import GFD_USER, ControlPlane
from tests.e2e.gfdrun import run_ok
from tests.helpers import gpu, node
from tests.test_discovery_dra import (
    NOT_IN_SLICES,
    PROFILES,
    SEMVER_LOSSY,
    labels_of,
    mock_lib,  # noqa: F401 (the fixture)
    nvml_snapshot,
)

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
    mock_lib: Path,  # noqa: F811
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
