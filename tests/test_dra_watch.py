"""The watched ResourceSlices of a node (gfd/dra_source.py over gfd/kube/watch.py) against
the fake API server: a pass reads the watch's cache, a change wakes the loop, 410 relists
once, a refused watch falls back to a list per pass with one line, the object bound; and
--dra-drift-check."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gfd import dra_source
from gfd.kube import watch
from gfd.kube.client import MAX_ANSWER_BYTES, KubeClient
from gfd.settings import resolve
from tests.dra_slices import slices_for
from tests.fakes.fake_apiserver import FakeApiServer, Fault
from tests.helpers import H100, gpu, node
from tests.loop import RecordedMetrics
from tests.process import ROOT, Daemon, assert_refused, eventually, run_gfd
from tests.test_discovery_dra import (
    PROFILES,
    mock_lib,  # noqa: F401 (the fixture)
    nvml_snapshot,
)
from tests.test_watch import PATIENCE

NODE = "n1"
pytestmark = pytest.mark.timeout(180)


class Wakes:
    """Counts the wakes the watch sends to the loop."""

    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()

    def expect(self, what: str) -> None:
        assert self.event.wait(PATIENCE), f"no wake for {what}"
        self.event.clear()


def _publish(api: FakeApiServer, slices: list[dict[str, Any]]) -> None:
    for item in slices:
        api.put_object(item)


def _slice_lists(api: FakeApiServer) -> int:
    return sum(1 for r in api.requests if "/resourceslices" in r.path and "watch=" not in r.query)


def _slice_watches(api: FakeApiServer) -> list[str]:
    return [r.query for r in api.requests if "/resourceslices" in r.path and "watch=" in r.query]


@pytest.fixture
def watched(api: FakeApiServer, kubeconfig: str) -> Iterator[tuple[dra_source.SliceReader, Wakes]]:
    client = KubeClient(kubeconfig, budget=2.0)
    reader = dra_source.SliceReader(NODE, dra_source._client_request(client, NODE))
    wakes = Wakes()
    reader.watch(watch.watch_client(kubeconfig, -1, 0), wakes)
    try:
        yield reader, wakes
    finally:
        reader.unwatch()


def test_a_pass_reads_the_watched_pool_and_a_change_wakes_the_loop(
    api: FakeApiServer, watched: tuple[dra_source.SliceReader, Wakes]
) -> None:
    reader, wakes = watched
    first = slices_for(node(gpu(0)), NODE, split=1)
    _publish(api, first)
    eventually(lambda: reader.watching and api.open_watches == 1, "the watch")
    eventually(lambda: len(reader.snapshot().gpus) == 1, "the pool in the cache")
    lists = _slice_lists(api)
    assert lists == 1  # the watch's one list; passes read its cache
    (query,) = _slice_watches(api)
    assert "fieldSelector=spec.nodeName%3Dn1" in query and "allowWatchBookmarks=true" in query
    # a slice of another driver on this node is not held (and never labelled)
    other = {**first[0], "metadata": {"name": "other-driver"}}
    other["spec"] = {**first[0]["spec"], "driver": "other.example.com"}
    api.put_object(other)
    # the driver writes generation 2 over two slices: the loop is woken, the pass sees it
    wakes.event.clear()
    _publish(api, slices_for(node(gpu(0), gpu(1), gpu(2)), NODE, generation=2, split=2))
    wakes.expect("generation 2")
    eventually(lambda: len(reader.snapshot().gpus) == 3, "generation 2 read")
    assert "other-driver" not in reader._watch.objects  # type: ignore[union-attr]
    # the old generation and then every slice deleted: woken each time, no driver at the end
    for item in api.objects("ResourceSlice"):
        api.delete("ResourceSlice", item["metadata"]["name"])
    wakes.expect("the deletions")
    eventually(lambda: reader.snapshot().gpus == (), "the empty pool")
    assert reader.snapshot().driver is None
    assert _slice_lists(api) == lists  # watched, never polled


def test_neither_the_first_list_nor_a_bookmark_wakes_the_loop(
    api: FakeApiServer, watched: tuple[dra_source.SliceReader, Wakes]
) -> None:
    reader, wakes = watched
    eventually(lambda: reader.watching and api.open_watches == 1, "the watch")
    assert wakes.count == 0  # the first list: no pass read anything yet
    reader.snapshot()  # the pass read the (empty) pool the watch holds
    api.bookmark()  # the stream moves on without a change of the pool
    _publish(api, slices_for(node(gpu(0)), NODE))
    wakes.expect("the new slice")
    assert wakes.count == 1


def test_gone_relists_once(
    api: FakeApiServer, watched: tuple[dra_source.SliceReader, Wakes]
) -> None:
    reader, _ = watched
    _publish(api, slices_for(node(gpu(0)), NODE))
    eventually(lambda: reader.watching and api.open_watches == 1, "the watch")
    assert _slice_lists(api) == 1
    api.compact()  # the history is gone: the resume is answered 410 Gone
    with api.down():
        eventually(lambda: api.open_watches == 0, "the stream to end")
    _publish(api, slices_for(node(gpu(0), gpu(1)), NODE, generation=2))
    eventually(lambda: _slice_lists(api) == 2, "the relist")
    eventually(lambda: len(reader.snapshot().gpus) == 2, "generation 2 from the relist")
    eventually(lambda: api.open_watches == 1, "the watch again")
    assert _slice_lists(api) == 2


def test_a_refused_watch_falls_back_to_a_list_per_pass_with_one_line(
    api: FakeApiServer, kubeconfig: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.01)
    api.refuse_watches(403)
    _publish(api, slices_for(node(gpu(0)), NODE))
    client = KubeClient(kubeconfig, budget=2.0)
    reader = dra_source.SliceReader(NODE, dra_source._client_request(client, NODE))
    reader.watch(watch.watch_client(kubeconfig, -1, 0), Wakes())
    try:
        eventually(lambda: reader._watch is not None and reader._watch.refused, "the refusal")
        assert len(_slice_watches(api)) == watch.REFUSALS_BEFORE_GIVING_UP
        lists = _slice_lists(api)
        for passes in range(1, 4):
            assert len(reader.snapshot().gpus) == 1
            assert _slice_lists(api) == lists + passes  # one list a pass
    finally:
        reader.unwatch()
    lines = [line for line in capsys.readouterr().err.splitlines() if "cannot watch" in line]
    assert len(lines) == 1, lines
    assert "ResourceSlices of node n1; listing them on each pass instead" in lines[0]
    assert "403" in lines[0]


@pytest.mark.parametrize("bound", ["objects", "bytes"])
def test_more_slices_than_the_bound_are_never_held(
    api: FakeApiServer, watched: tuple[dra_source.SliceReader, Wakes],
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bound: str,
) -> None:  # fmt: skip
    reader, _ = watched
    eventually(lambda: reader.watching and api.open_watches == 1, "the watch")
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.01)
    pool = slices_for(node(gpu(0), gpu(1), gpu(2), gpu(3)), NODE, split=4)
    if bound == "objects":
        monkeypatch.setattr(watch, "MAX_OBJECTS", 2)
    for item in pool if bound == "bytes" else ():
        # each slice within an answer's limit, together past what any node's slices take
        item["metadata"]["annotations"] = {"pad": "x" * (MAX_ANSWER_BYTES - 64 * 1024)}
    _publish(api, pool)
    said = "more than 2 objects" if bound == "objects" else "MiB of ResourceSlices"
    eventually(lambda: said in capsys.readouterr().err, "the bound")
    assert reader._watch is not None and len(reader._watch.objects) <= 2
    held = sum(len(json.dumps(item)) for item in reader._watch.objects.values())
    assert held <= 8 * 1024 * 1024


def _slice_event(node_name: str) -> bytes:
    """The node's one slice of two GPUs (as published below) sent again as a change."""
    item = slices_for(node(gpu(0), gpu(1)), node_name)[0]
    item["metadata"]["resourceVersion"] = "7"
    return (json.dumps({"type": "MODIFIED", "object": item}) + "\n").encode()


#: what the server may send on the slices' watch instead of events of this node's slices
SLICE_WATCH_FAULTS: dict[str, Callable[[], Fault]] = {
    "flood": lambda: Fault(status=200, body=_slice_event(NODE) * 1000, watch=True, count=None),
    "another-node": lambda: Fault(status=200, body=_slice_event("n2"), watch=True, count=None),
    "huge": lambda: Fault(huge=8 * 1024 * 1024, watch=True, count=None),
}


@pytest.mark.parametrize("fault", sorted(SLICE_WATCH_FAULTS))
def test_the_slices_watch_under_faults_keeps_the_pool_and_comes_back(
    fault: str, api: FakeApiServer, watched: tuple[dra_source.SliceReader, Wakes],
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.01)
    reader, wakes = watched
    _publish(api, slices_for(node(gpu(0), gpu(1)), NODE))
    eventually(lambda: reader.watching and api.open_watches == 1, "the watch")
    # the watch may have listed before the slice was published: its event comes after
    eventually(lambda: len(reader.snapshot().gpus) == 2, "the pool in the cache")
    api.inject(SLICE_WATCH_FAULTS[fault]())
    with api.down():  # ends the stream in progress: the next ones meet the fault
        eventually(lambda: api.open_watches == 0, "the stream to end")
    eventually(lambda: len(_slice_watches(api)) >= 3, "attempts against the fault")
    assert len(reader.snapshot().gpus) == 2  # the pool held stays
    api.clear_faults()
    eventually(lambda: api.open_watches == 1, "the watch back")
    wakes.event.clear()
    _publish(api, slices_for(node(gpu(0), gpu(1), gpu(2)), NODE, generation=2))
    wakes.expect("generation 2 after the fault")
    eventually(lambda: len(reader.snapshot().gpus) == 3, "generation 2")
    err = capsys.readouterr().err
    assert err.count("watch of ResourceSlices of node n1 interrupted; reconnecting") == 1, err
    assert "Traceback" not in err


# ------------------------------------------------------------------ the drift check


@pytest.mark.parametrize("profile", PROFILES)
def test_no_drift_where_the_slices_say_what_nvml_says(
    mock_lib: Path,  # noqa: F811
    profile: str,
) -> None:
    from gfd.discovery import dra

    from_nvml = nvml_snapshot(mock_lib, profile)
    for release in ("v25.12.0", "v25.8.0", "v25.3.0"):
        slices = slices_for(from_nvml, NODE, release=release, split=2)
        assert dra_source.drift(from_nvml, dra.to_snapshot(slices)) == {}, release


def test_drift_names_each_disagreeing_label_with_both_values() -> None:
    from gfd.discovery import dra

    nvml = node(gpu(0), gpu(1))
    differences = dra_source.drift(nvml, dra.to_snapshot(slices_for(node(gpu(0)), NODE)))
    assert differences == {"nvidia.com/gpu.count": ("2", "1")}
    h100 = node(gpu(0, H100, memory=81559, cc=(9, 0)), gpu(1, H100, memory=81559, cc=(9, 0)))
    differences = dra_source.drift(nvml, dra.to_snapshot(slices_for(h100, NODE)))
    assert differences["nvidia.com/gpu.product"][1] == "NVIDIA-H100-80GB-HBM3"
    assert differences["nvidia.com/gpu.memory"][1] == "81559"
    assert "nvidia.com/gpu.count" not in differences


def test_drift_is_one_line_per_change_and_a_metric_each_pass(
    api: FakeApiServer, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = resolve({"node_name": NODE, "kubeconfig": kubeconfig, "dra_drift_check": True}, {})
    nvml = node(gpu(0), gpu(1))
    metrics = RecordedMetrics()
    _publish(api, slices_for(nvml, NODE))
    dra_source._readers.clear()
    for _ in range(3):
        dra_source.check_drift(settings, nvml, metrics)
    _publish(api, slices_for(node(gpu(0)), NODE, generation=2))
    for _ in range(3):
        dra_source.check_drift(settings, nvml, metrics)
    _publish(api, slices_for(nvml, NODE, generation=3))
    dra_source.check_drift(settings, nvml, metrics)
    dra_source._readers.clear()
    assert metrics.drift_checks == ["success"] * 7
    assert [len(labels) for labels in metrics.drift] == [0, 0, 0, 1, 1, 1, 0]
    assert metrics.drift[3] == ("nvidia.com/gpu.count",)
    err = capsys.readouterr().err.splitlines()
    disagree = [line for line in err if "disagree" in line]
    assert len(disagree) == 1 and "nvidia.com/gpu.count" in disagree[0], err
    assert len([line for line in err if "agree again" in line]) == 1


def test_a_drift_check_that_cannot_read_the_slices_says_so_once(
    api: FakeApiServer, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.fakes.fake_apiserver import Fault

    settings = resolve({"node_name": NODE, "kubeconfig": kubeconfig, "dra_drift_check": True}, {})
    api.inject(Fault(status=403, method="GET", path_contains="/resourceslices", count=None))
    metrics = RecordedMetrics()
    dra_source._readers.clear()
    for _ in range(3):
        dra_source.check_drift(settings, node(gpu(0)), metrics)
    dra_source._readers.clear()
    assert metrics.drift_checks == ["error"] * 3 and metrics.drift == []
    lines = [line for line in capsys.readouterr().err.splitlines() if "drift check" in line]
    assert len(lines) == 1 and "403" in lines[0], lines


# ------------------------------------------------------------------ a real gfd process


def test_the_drift_check_without_a_node_name_is_one_line_and_exit_2() -> None:
    snapshot = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")
    done = run_gfd("--oneshot", "--dra-drift-check", "--snapshot-file", snapshot)
    assert_refused(done, "--dra-drift-check", "NODE_NAME")
    done = run_gfd("--oneshot", "--snapshot-file", snapshot, env={"GFD_DRA_DRIFT_CHECK": "maybe"})
    assert_refused(done, "GFD_DRA_DRIFT_CHECK", "maybe")


def _labels(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_a_daemon_relabels_on_a_slice_change_long_before_the_interval(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    out = tmp_path / "labels"
    _publish(api, slices_for(node(gpu(0)), NODE))
    gfd = Daemon(
        "--device-discovery-strategy", "dra", "--node-name", NODE, "--kubeconfig", kubeconfig,
        "--sleep-interval", "1h", "--no-timestamp", "--output-file", str(out),
        env={"LD_LIBRARY_PATH": str(tmp_path)},  # no NVML anywhere
    )  # fmt: skip
    try:
        gfd.wait_for("pass finished")
        gfd.wait_until(lambda: api.open_watches == 1, "the watch")
        assert _labels(out)["nvidia.com/gpu.count"] == "1"
        lists = _slice_lists(api)
        _publish(api, slices_for(node(gpu(0), gpu(1)), NODE, generation=2))
        gfd.wait_until(
            lambda: _labels(out).get("nvidia.com/gpu.count") == "2", "the relabel", PATIENCE
        )
        for item in api.objects("ResourceSlice"):
            api.delete("ResourceSlice", item["metadata"]["name"])
        gfd.wait_until(lambda: "nvidia.com/gpu.count" not in _labels(out), "no driver", PATIENCE)
        assert _slice_lists(api) == lists  # the passes read the watch's cache
        assert not [r for r in api.requests if r.method != "GET"]
        assert gfd.stop(signal.SIGTERM) == 0
    finally:
        gfd.kill()
    assert "Traceback" not in gfd.log()
