"""Fixtures of the e2e layer: a real control plane per server version (session-scoped: it
starts once per version, about two seconds), gfd's RBAC rendered from manifests/, and a gfd
process that talks to the server as its service account over verified TLS.

``make e2e`` builds what is missing first and sets GFD_E2E=1: there, a missing binary fails
the run; elsewhere (a plain ``pytest tests/e2e``) it skips with the command that builds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e import servers
from tests.e2e.controlplane import GFD_NAMESPACE, ControlPlane
from tests.e2e.current import started
from tests.e2e.gfdrun import CRD, FOREIGN_ANNOTATIONS, FOREIGN_LABELS, apply_rbac, node_name_for
from tests.e2e.helm import REQUIRED, require_tool

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Part of a whole-suite run (``pytest`` with no path into tests/e2e), the e2e tests
    skip: they start servers, and ``make test`` is the fast layer.  ``make e2e`` (GFD_E2E=1)
    or a path into tests/e2e runs them."""
    asked = any(
        str(Path(arg.split("::")[0]).resolve()).startswith(str(HERE)) for arg in config.args
    )
    if REQUIRED or asked:
        return
    skip = pytest.mark.skip(reason="e2e layer: run with `make e2e` or `pytest tests/e2e`")
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(skip)


@pytest.fixture(scope="session", params=[s.version for s in servers.selected()])
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    with started(servers.SERVERS[request.param]) as plane:
        yield plane


@pytest.fixture(scope="session")
def gfd_rbac(control_plane: ControlPlane) -> ControlPlane:
    """The RBAC of the node-labels and NodeFeature overlays, rendered from manifests/ with
    kustomize and applied as rendered; NFD's NodeFeature CRD.  Returns the control plane."""
    apply_rbac(control_plane, ["node-labels", "nodefeature", "node-labels-cleanup-job"])
    control_plane.apply_all([yaml.safe_load(CRD.read_text())])
    # RBAC reaches the authorizer through an informer: wait until the server says yes
    control_plane.wait_for("RBAC in force", lambda: control_plane.gfd_allowed("patch", "nodes"))
    control_plane.wait_for(
        "RBAC in force",
        lambda: control_plane.gfd_allowed(
            "update", "nodefeatures", group="nfd.k8s-sigs.io", namespace=GFD_NAMESPACE
        ),
    )
    return control_plane


@pytest.fixture
def node(request: pytest.FixtureRequest, gfd_rbac: ControlPlane) -> Iterator[str]:
    """A Node of the test's own, as a kubelet registers it, with labels someone else set."""
    name = node_name_for(request.node.name)
    gfd_rbac.create_node(name, FOREIGN_LABELS)
    gfd_rbac.ok(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"annotations": FOREIGN_ANNOTATIONS}},
        content_type="application/merge-patch+json",
    )
    yield name
    gfd_rbac.delete(f"/api/v1/nodes/{name}")


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return require_tool("helm")
