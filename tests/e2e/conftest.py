"""Fixtures of the e2e layer: a real control plane per server version (session-scoped: it
starts once per version, about two seconds), gfd's RBAC rendered from manifests/, and a gfd
process that talks to the server as its service account over verified TLS.

``make e2e`` builds what is missing first and sets GFD_E2E=1: there, a missing binary fails
the run; elsewhere (a plain ``pytest tests/e2e``) it skips with the command that builds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import controlplane, servers
from tests.e2e.controlplane import ControlPlane

REQUIRED = os.environ.get("GFD_E2E") == "1"
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
    server = servers.SERVERS[request.param]
    missing = server.missing()
    if missing:
        reason = f"{server.version}: missing {', '.join(missing)} (build: {server.build_hint})"
        if REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)
    with controlplane.running(server) as plane:
        yield plane
