"""SPEC §6.4 on the real kube-apiserver: gfd watches what it owns and repairs, within
moments, what someone else removed -- its node labels, its NodeFeature -- with an interval
of an hour, so that nothing but the watch can have done it; and where RBAC grants no
``watch``, it says so in one line and re-reads periodically instead."""

from __future__ import annotations

import copy
import signal
from pathlib import Path

import pytest

from tests.e2e.controlplane import ControlPlane
from tests.e2e.gfdrun import Agent, api_args, gfd_requests, rbac_of, writes
from tests.e2e.test_nodefeature import nf_args, nodefeature_path
from tests.e2e.watching import repair_node_label, repair_nodefeature

pytestmark = pytest.mark.timeout(300)


def test_a_removed_node_label_is_repaired_by_the_watch(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    mark = gfd_rbac.audit_mark()
    assert repair_node_label(gfd_rbac, node, tmp_path) is None
    sent = gfd_requests(gfd_rbac, mark, "nodes")
    # the first publish and the repair: one patch each, and the watch of its own node only
    assert writes(sent) == [f"patch nodes/{node} -> 200"] * 2
    assert {r.split(" -> ")[0] for r in sent if r.startswith(("list", "watch"))} <= {
        f"list nodes/{node}",
        f"watch nodes/{node}",
    }


def test_a_deleted_nodefeature_is_created_again_by_the_watch(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    path = nodefeature_path(node)
    mark = gfd_rbac.audit_mark()
    args = nf_args(gfd_rbac, tmp_path, node)
    assert repair_nodefeature(gfd_rbac, node, tmp_path, args, path) is None
    sent = gfd_requests(gfd_rbac, mark, "nodefeatures")
    name = path.rsplit("/", 1)[1]
    assert writes(sent) == [f"create nodefeatures/{name} -> 201"] * 2
    # the watch reads its object whole with the WatchList, never a list, where the server
    # serves it; v1.20 refuses the WatchList's parameters (422), and the object is listed
    lists = [r for r in sent if r.startswith("list ")]
    if gfd_rbac.version == "v1.20.2":
        assert lists and f"watch nodefeatures/{name} -> 422" in sent, sent
    else:
        assert lists == [] and f"watch nodefeatures/{name} -> 200" in sent, sent


def test_a_watch_refused_by_rbac_falls_back_with_one_line(
    gfd_rbac: ControlPlane, node: str, tmp_path: Path
) -> None:
    role = next(obj for obj in rbac_of("node-labels") if obj["kind"] == "ClusterRole")
    reduced = copy.deepcopy(role)
    for rule in reduced["rules"]:
        rule["verbs"] = [verb for verb in rule["verbs"] if verb != "watch"]
    gfd_rbac.apply(reduced)
    try:
        gfd_rbac.wait_for("watch revoked", lambda: not gfd_rbac.gfd_allowed("watch", "nodes"))
        agent = Agent(*api_args(gfd_rbac, tmp_path, node), "--sleep-interval", "0.2s")
        try:
            refused = agent.wait_for(
                "cannot watch Node " + node + "; re-reading it periodically instead", limit=60
            )
            assert "403" in str(refused[0].get("error")), refused
            agent.passes(5)  # it labels on
            assert agent.stop(signal.SIGTERM) == 0
        finally:
            agent.kill()
    finally:
        gfd_rbac.apply(role)
        gfd_rbac.wait_for("watch granted again", lambda: gfd_rbac.gfd_allowed("watch", "nodes"))
    assert agent.log().count("cannot watch") == 1
    assert "Traceback" not in agent.log()
