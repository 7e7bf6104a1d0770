"""The loop over the API outputs, in-process (SPEC §6.2-6.4, §7): the real outputs and the
real ``kubernetes`` client against the fake API server, the Agent's waits scripted (a real
process's restarts, ``--cleanup`` and health endpoints: test_kube_e2e.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from gfd.agent import Agent
from gfd.kube.client import retry_budget
from gfd.outputs.nodefeature import NodeFeatureOutput
from gfd.settings import Settings, resolve
from tests.fakes.fake_apiserver import FakeApiServer
from tests.fakes.waits import client_without_waits
from tests.helpers import FOREIGN, FOREIGN_ANNOTATIONS, SNAPSHOT_A, SNAPSHOT_B, expected_labels
from tests.loop import drive

API_NODE_N1 = {"labels": FOREIGN, "annotations": FOREIGN_ANNOTATIONS}


def api_settings(kubeconfig: str, node_snapshot: Path, **cli: Any) -> Settings:
    # a short interval bounds each operation's retries at half of it (kube.retry_budget)
    values = {"node_name": "n1", "kubeconfig": kubeconfig, "snapshot_file": str(node_snapshot),
              "sleep_interval": "200ms", "no_timestamp": True, **cli}  # fmt: skip
    return resolve(values, {})


def test_node_labels_publish_once_stay_quiet_and_follow_a_change(
    api: FakeApiServer, kubeconfig: str, node_snapshot: Path
) -> None:
    seen: list[int] = []

    def first_publish(agent: Agent) -> None:
        assert api.node_labels("n1") == {**FOREIGN, **expected_labels(SNAPSHOT_A)}
        assert [r.method for r in api.requests] == ["GET", "PATCH"]
        seen.append(api.count())

    def quiet(agent: Agent) -> None:
        # steady state: no request at all (the verification read is 10 minutes away)
        assert api.count() == seen[0]

    def change_the_node(agent: Agent) -> None:
        quiet(agent)
        shutil.copyfile(SNAPSHOT_B, node_snapshot)

    def followed(agent: Agent) -> None:
        assert api.node_labels("n1") == {**FOREIGN, **expected_labels(SNAPSHOT_B)}
        assert [r.method for r in api.requests[seen[0] :]] == ["PATCH"]
        managed = {"nvidia.com/gfd.managed-labels": ",".join(sorted(expected_labels(SNAPSHOT_B)))}
        assert api.node_annotations("n1") == {**FOREIGN_ANNOTATIONS, **managed}

    run = drive(
        api_settings(kubeconfig, node_snapshot, use_node_labels=True),
        [first_publish, quiet, quiet, change_the_node, followed],
    )
    assert ("node-labels", "error") not in run.metrics.publishes
    assert run.status == 0
    # SIGTERM removes nothing: no flapping during a rolling update
    assert api.node_labels("n1") == {**FOREIGN, **expected_labels(SNAPSHOT_B)}


def nodefeature_labels(api: FakeApiServer) -> list[dict[str, str]]:
    return [obj["spec"]["labels"] for obj in api.objects("NodeFeature")]


def test_nodefeature_outage_of_three_passes_is_survived(
    api: FakeApiServer, kubeconfig: str, node_snapshot: Path
) -> None:
    seen: list[int] = []

    def published(agent: Agent) -> None:
        assert nodefeature_labels(api) == [expected_labels(SNAPSHOT_A)]
        seen.append(api.count())

    def quiet(agent: Agent) -> None:
        assert api.count() == seen[0]  # steady state: silent

    def outage(agent: Agent) -> None:
        quiet(agent)
        api.go_down()
        shutil.copyfile(SNAPSHOT_B, node_snapshot)

    def still_down(agent: Agent) -> None:
        assert agent.last_error is not None

    def back(agent: Agent) -> None:
        still_down(agent)
        api.come_up()

    def caught_up(agent: Agent) -> None:
        assert nodefeature_labels(api) == [expected_labels(SNAPSHOT_B)]

    settings = api_settings(kubeconfig, node_snapshot, use_node_feature_api=True)
    # the real output, its client's waits between attempts skipped (tests/fakes/waits.py):
    # each pass of the outage retries until its budget is spent without waiting it out
    budget = retry_budget(settings.sleep_interval)
    output = NodeFeatureOutput(settings, client=client_without_waits(kubeconfig, budget=budget))
    steps = [published, quiet, quiet, outage, still_down, still_down, back, caught_up]
    run = drive(settings, steps, output=output)
    assert run.metrics.passes == ["success"] * 4 + ["error"] * 3 + ["success"] * 2
    assert run.metrics.publishes.count(("nodefeature", "error")) == 3
    assert run.status == 0
    assert len(api.objects("NodeFeature")) == 1  # never deleted on exit
