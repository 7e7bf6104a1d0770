"""--device-discovery-strategy dra against the fake API server: the reader, the process."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gfd import dra_source
from gfd.discovery import dra
from gfd.errors import DiscoveryError
from gfd.kube.client import MAX_ANSWER_BYTES, KubeClient
from gfd.labels import build
from gfd.settings import Config
from tests.dra_slices import slices_for
from tests.fakes.fake_apiserver import FakeApiServer, Fault
from tests.helpers import H100, gpu, node

NODE = "node-a"
WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE"}


def _reader(kubeconfig: str) -> dra_source.SliceReader:
    client = KubeClient(kubeconfig, budget=2.0)
    return dra_source.SliceReader(NODE, dra_source._client_request(client, NODE))


def _publish(api: FakeApiServer, slices: list[dict[str, Any]]) -> None:
    for item in slices:
        api.put_object(item)


def _delete(api: FakeApiServer, name: str) -> None:
    api.delete("ResourceSlice", name)


def _no_writes(api: FakeApiServer) -> None:
    """gfd never creates, changes or deletes a ResourceSlice."""
    slice_requests = [r for r in api.requests if "/resourceslices" in r.path]
    assert slice_requests
    assert {r.method for r in slice_requests} == {"GET"}
    assert not [r for r in api.requests if r.method in WRITE_VERBS and "resource.k8s.io" in r.path]


def test_the_list_asks_the_server_for_this_node_only() -> None:
    path = dra_source.list_path("node-a", "tok/en")
    assert path.startswith("/apis/resource.k8s.io/v1/resourceslices?")
    assert "fieldSelector=spec.nodeName%3Dnode-a" in path and "continue=tok%2Fen" in path


def _paged(
    pages: list[list[dict[str, Any]]], *, loop: bool = False, endless: bool = False
) -> dra_source.Request:
    """A server that answers the list in ``pages``, each page's token naming the next;
    ``loop``: the first page's token names itself; ``endless``: past the last page, empty
    pages whose tokens never end."""

    def request(path: str) -> dict[str, Any]:
        at = int(path.rpartition("continue=p")[2]) if "continue=p" in path else 0
        more = endless or at + 1 < len(pages)
        token = "p0" if loop else f"p{at + 1}" if more else ""
        items = pages[at] if at < len(pages) else []
        return {"items": items, "metadata": {"resourceVersion": "1", "continue": token}}

    return request


def _padded(pool: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for item in pool:  # each page within an answer's limit, together past any node's slices
        item["metadata"]["annotations"] = {"pad": "x" * (MAX_ANSWER_BYTES - 64 * 1024)}
    return pool


POOL = slices_for(node(gpu(0), gpu(1), gpu(2), gpu(3)), NODE, split=4)


@pytest.mark.parametrize(("server", "said"), [
    (lambda: _paged([[item] for item in _padded(copy.deepcopy(POOL))]), "MiB"),
    (lambda: _paged([POOL], loop=True), "more than 1600 slices"),
    (lambda: _paged([POOL], endless=True), "more than 1600 slices"),
], ids=["bytes", "looping-token", "endless-tokens"])  # fmt: skip
def test_a_list_past_what_any_node_takes_fails_the_pass_in_one_line(server: Any, said: str) -> None:
    with pytest.raises(DiscoveryError) as caught:
        dra_source.SliceReader(NODE, server()).snapshot()
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_generations_deletions_and_no_driver(api: FakeApiServer, kubeconfig: str) -> None:
    reader = _reader(kubeconfig)
    # no driver: nothing published, no GPUs, nothing invented
    empty = reader.snapshot()
    assert empty.gpus == () and empty.driver is None
    # another node's pool is not read (the server filters on spec.nodeName)
    _publish(api, slices_for(node(gpu(0), gpu(1)), "node-b"))
    assert reader.snapshot().gpus == ()
    # generation 1, split over two slices
    first = slices_for(node(gpu(0), gpu(1)), NODE, split=2)
    _publish(api, first)
    assert len(reader.snapshot().gpus) == 2
    # generation 2 is being written: one of its three slices so far → keep generation 1
    second = slices_for(node(gpu(0), gpu(1), gpu(2)), NODE, generation=2, split=3)
    _publish(api, second[:1])
    assert len(reader.snapshot().gpus) == 2
    _publish(api, second[1:])
    assert len(reader.snapshot().gpus) == 3
    # the driver deletes the old generation; then one of the new slices goes
    for item in first:
        _delete(api, item["metadata"]["name"])
    assert len(reader.snapshot().gpus) == 3
    _delete(api, second[0]["metadata"]["name"])
    assert len(reader.snapshot().gpus) == 3  # incomplete: the last complete state stays
    _no_writes(api)


def test_an_incomplete_pool_before_any_complete_one_fails_the_pass(
    api: FakeApiServer, kubeconfig: str
) -> None:
    _publish(api, slices_for(node(gpu(0), gpu(1)), NODE, split=2)[:1])
    with pytest.raises(DiscoveryError, match="resourceSliceCount"):
        _reader(kubeconfig).snapshot()


def test_a_server_that_refuses_fails_the_pass_in_one_line(
    api: FakeApiServer, kubeconfig: str
) -> None:
    api.inject(Fault(status=403, method="GET", path_contains="/resourceslices", count=None))
    with pytest.raises(DiscoveryError) as caught:
        _reader(kubeconfig).snapshot()
    assert "403" in str(caught.value) and "\n" not in str(caught.value)


def test_oneshot_labels_from_slices_without_nvml(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    snap = node(gpu(0, H100, memory=81559, cc=(9, 0)), gpu(1, H100, memory=81559, cc=(9, 0)))
    slices = slices_for(snap, NODE, split=2)
    _publish(api, slices)
    out = tmp_path / "labels"
    done = subprocess.run(
        [sys.executable, "-m", "gfd", "--oneshot", "--no-timestamp",
         "--device-discovery-strategy", "dra", "--node-name", NODE,
         "--kubeconfig", kubeconfig, "--output-file", str(out)],
        capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(tmp_path)},  # no NVML anywhere
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    labels = dict(line.split("=", 1) for line in out.read_text().splitlines())
    expected = build(dra.to_snapshot(slices), "none", Config(), None).labels
    assert labels == dict(expected)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert "nvidia.com/gpu.clique" not in labels
    _no_writes(api)


ROOT = Path(__file__).resolve().parent.parent


def _slice_rules(documents: list[Any]) -> list[dict[str, Any]]:
    return [
        rule for doc in documents if isinstance(doc, dict) and doc.get("kind") == "ClusterRole"
        for rule in doc.get("rules") or [] if "resourceslices" in rule.get("resources", [])
    ]  # fmt: skip


def test_rbac_reads_resourceslices_and_never_writes_them() -> None:
    import yaml

    rbac = ROOT / "manifests/components/dra/rbac.yaml"
    rules = _slice_rules(list(yaml.safe_load_all(rbac.read_text())))
    assert rules == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["list", "watch"]},
    ]  # fmt: skip
    chart = (ROOT / "manifests/helm/gfd/templates/rbac-dra.yaml").read_text()
    assert 'verbs: ["list", "watch"]' in chart
    for path in (ROOT / "manifests").rglob("*.yaml"):
        if "helm" in path.parts or "resourceslices" not in path.read_text():
            continue
        for rule in _slice_rules(list(yaml.safe_load_all(path.read_text()))):
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, path


def test_gfd_sends_no_write_to_resourceslices() -> None:
    """The one module that talks to the API about resourceslices asks with GET only (the
    mapping module is pure: it imports no client)."""
    naming = [
        path for path in (ROOT / "gfd").rglob("*.py")
        if "resourceslices" in path.read_text() or "resource.k8s.io" in path.read_text()
    ]  # fmt: skip
    assert sorted(p.name for p in naming) == ["dra.py", "dra_source.py"]
    assert "gfd.kube" not in (ROOT / "gfd/discovery/dra.py").read_text()
    text = (ROOT / "gfd/dra_source.py").read_text()
    assert 'request("GET"' in text
    assert not any(f'"{verb}"' in text for verb in ("POST", "PUT", "PATCH", "DELETE"))
