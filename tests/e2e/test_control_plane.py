"""The harness itself, against each server: TLS verified with the server's own CA, the static
identities authenticated as the manifests' service account, the audit log recording them, and
NFD's NodeFeature CRD (apiextensions.k8s.io/v1) accepted and served."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

import pytest
import yaml

from tests.e2e.controlplane import GFD_TOKEN, GFD_USER, ControlPlane
from tests.e2e.gfdrun import CRD


def test_tls_is_verified_against_the_servers_own_ca(control_plane: ControlPlane) -> None:
    assert control_plane.request("GET", "/version")[0] == 200
    # without the server's CA the certificate is refused: the kubeconfig's CA is what trusts it
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(control_plane.url + "/version", context=ssl.create_default_context())
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)


def test_the_gfd_token_is_the_service_account(control_plane: ControlPlane) -> None:
    review = control_plane.ok(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": GFD_TOKEN},
        },
    )
    user = review["status"]["user"]
    assert user["username"] == GFD_USER
    assert "system:serviceaccounts:gpu-feature-discovery" in user["groups"]
    # RBAC applies to it: no rule of gfd's grants deleting nodes
    status, _ = control_plane.request("DELETE", "/api/v1/nodes/nobody", token=GFD_TOKEN)
    assert status == 403


def test_the_audit_log_records_who_did_what(control_plane: ControlPlane) -> None:
    mark = control_plane.audit_mark()
    control_plane.request("DELETE", "/api/v1/nodes/audited-node", token=GFD_TOKEN)
    events = control_plane.audit_events(mark, user=GFD_USER, resource="nodes")
    assert [(e["verb"], e["objectRef"]["name"], e["responseStatus"]["code"]) for e in events] == [
        ("delete", "audited-node", 403)
    ]


def test_nfds_nodefeature_crd_is_accepted(control_plane: ControlPlane) -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    control_plane.apply_all([crd])
    served = control_plane.ok("GET", "/apis/nfd.k8s-sigs.io/v1alpha1")
    assert "nodefeatures" in [r["name"] for r in served["resources"]]
