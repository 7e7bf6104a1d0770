"""NodeFeature spec.features at sizes a real API server refuses: the
object stays far below etcd's ~1.5 MiB, the labels are always published."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from gfd import snapshot as snapshot_io
from gfd.labels.features import (
    GPU_FEATURE,
    MAX_FEATURES_BYTES,
    MIG_FEATURE,
    NODE_FEATURE,
    node_features,
)
from tests.fakes.fake_apiserver import FakeApiServer
from tests.process import run_gfd_here

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "snapshots"
ETCD_OBJECT_LIMIT = 1_572_864  # etcd's default request limit (1.5 MiB)


def many_gpus(count: int) -> snapshot_io.Snapshot:
    snap = snapshot_io.load(str(EXAMPLES / "dgx-a100.yaml"))
    first = snap.gpus[0]
    gpus = tuple(replace(first, index=i, uuid=f"GPU-{i:05d}", pci_bus_id="") for i in range(count))
    return replace(snap, gpus=gpus)


def test_small_nodes_keep_every_instance() -> None:
    features = node_features(snapshot_io.load(str(EXAMPLES / "dgx-a100.yaml")))
    assert len(features["instances"][GPU_FEATURE]["elements"]) == 8
    assert "omitted" not in features["attributes"][NODE_FEATURE]["elements"]


def test_thousands_of_gpus_leave_the_instances_out_whole() -> None:
    features = node_features(many_gpus(5000))
    assert len(json.dumps(features)) <= MAX_FEATURES_BYTES
    assert features["instances"][GPU_FEATURE]["elements"] == []
    assert features["instances"][MIG_FEATURE]["elements"] == []
    node = features["attributes"][NODE_FEATURE]["elements"]
    assert node["gpu_count"] == "5000"
    assert node["omitted"] == f"{MIG_FEATURE},{GPU_FEATURE}"


def test_the_nodefeature_object_of_a_huge_node_is_stored(tmp_path: Path) -> None:
    snapshot = tmp_path / "big.json"
    snapshot.write_text(snapshot_io.dumps_json(many_gpus(5000)))
    with FakeApiServer() as api:
        api.add_node("n1")
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        result = run_gfd_here(
            "--oneshot", "--use-node-feature-api", "--node-name", "n1", "--namespace", "default",
            "--kubeconfig", str(kubeconfig), "--snapshot-file", str(snapshot),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-500:]
        (stored,) = api.objects("NodeFeature")
    assert len(json.dumps(stored)) < ETCD_OBJECT_LIMIT
    assert stored["spec"]["labels"]["nvidia.com/gpu.count"] == "5000"
