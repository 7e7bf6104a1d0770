"""Watching what gfd owns (gfd/kube/watch.py): the protocol against the fake API server
in-process, and the repair it brings to a real gfd process.

The watch replaces the periodic re-read (SPEC §6.4's verification every 10 minutes): a
change that undoes gfd's work is repaired as soon as the watch sees it, and nothing is read
at steady state.  Faults of the stream itself (huge, malformed, flooding, stalled, closed)
are cells of tests/test_fault_matrix.py.
"""

from __future__ import annotations

import functools
import json
import random
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gfd import observability
from gfd.kube import watch
from gfd.kube.ratelimit import RateLimiter
from gfd.outputs.nodelabels import MANAGED_LABELS_ANNOTATION, NFD_FEATURE_LABELS_ANNOTATION
from gfd.outputs.topology_extras import PARTITIONS_ANNOTATION
from gfd.settings import resolve
from tests.fakes.fake_apiserver import FakeApiServer, Fault
from tests.process import ROOT, Daemon, eventually

DGX = str(Path(ROOT) / "examples" / "snapshots" / "dgx-a100.yaml")
HGX = str(Path(ROOT) / "examples" / "snapshots" / "hgx-h100-nvswitch.yaml")
#: a guard against a hung test, not a timing assertion
PATIENCE = 30.0

pytestmark = pytest.mark.timeout(120)


class Seen:
    """A follower that records what the watch told it."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any] | None] = []
        self.refusals = 0
        self.lock = threading.Lock()

    def __call__(self, obj: dict[str, Any] | None) -> None:
        with self.lock:
            self.objects.append(obj)

    def refused(self) -> None:
        self.refusals += 1

    def labels(self) -> list[dict[str, str] | None]:
        with self.lock:
            return [
                None if obj is None else dict(obj["metadata"].get("labels") or {})
                for obj in self.objects
            ]


API_NODE_N1 = {"labels": {"a": "1"}}  # the shared api fixture (tests/conftest.py) adds it


@contextmanager
def following(kubeconfig: str) -> Iterator[tuple[watch.ObjectWatch, Seen]]:
    """Node n1 watched for the block, and the watch ended and joined after it."""
    seen = Seen()
    client = functools.partial(watch.watch_client, kubeconfig, -1, 0)
    followed = watch.follow(client, "/api/v1/nodes", "n1", "Node n1", seen, seen.refused)
    try:
        yield followed, seen
    finally:
        watch.unfollow(followed, seen)
        followed.join(5)


@pytest.fixture
def node_watch(kubeconfig: str) -> Iterator[tuple[watch.ObjectWatch, Seen]]:
    with following(kubeconfig) as watched:
        yield watched


def watch_queries(api: FakeApiServer) -> list[dict[str, str]]:
    from urllib.parse import parse_qsl

    return [dict(parse_qsl(r.query)) for r in api.requests if "watch=" in r.query]


def lists(api: FakeApiServer) -> int:
    return sum(1 for r in api.requests if r.query and "watch=" not in r.query)


def starts(api: FakeApiServer) -> int:
    """Reads of the whole state: lists, and WatchList requests the server served."""
    watch_lists = [r for r in api.requests if "sendInitialEvents=true" in r.query]
    return lists(api) + sum(1 for r in watch_lists if r.status == 200)


SERVERS = pytest.mark.parametrize("served", [True, False], ids=["watch-list", "list-then-watch"])


@SERVERS
def test_the_object_then_every_change_and_the_deletion(
    api: FakeApiServer, kubeconfig: str, served: bool
) -> None:
    """One WatchList request gives the object, then its changes; a server without the
    WatchList refuses its parameters (422), and is listed once and watched from there."""
    api.serve_watch_list(served)
    with following(kubeconfig) as (followed, seen):
        eventually(lambda: seen.labels() == [{"a": "1"}], "the node as it is")
        eventually(lambda: api.open_watches == 1, "the watch")
        api.edit("Node", "n1", "", lambda node: node["metadata"]["labels"].update(a="2"))
        api.delete("Node", "n1")
        eventually(lambda: seen.labels() == [{"a": "1"}, {"a": "2"}, None], "the changes")
        assert followed.watch_list is served
    *refused, query = watch_queries(api)
    assert query["fieldSelector"] == "metadata.name=n1"
    assert query["allowWatchBookmarks"] == "true"
    assert int(query["timeoutSeconds"]) >= watch.WATCH_SECONDS
    asked = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
    if served:
        assert (refused, lists(api)) == ([], 0)
        assert asked.items() <= query.items() and "resourceVersion" not in query
    else:
        assert [r.status for r in api.requests] == [422, 200, 200]  # WatchList, list, watch
        assert asked.items() <= refused[0].items() and lists(api) == 1
        assert "sendInitialEvents" not in query and query["resourceVersion"]


@SERVERS
def test_an_object_that_does_not_exist_is_told_absent(
    api: FakeApiServer, kubeconfig: str, served: bool
) -> None:
    api.serve_watch_list(served)
    api.delete("Node", "n1")
    with following(kubeconfig) as (followed, seen):
        eventually(lambda: followed.synced, "the first state")
        assert seen.labels() == [None]


@pytest.mark.parametrize("ending", ["stream-ends", "plain-bookmark"])
def test_initial_events_without_their_closing_bookmark_are_never_told(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """What a WatchList sent before the bookmark that closes its initial events is no whole
    state: a stream that ends first tells nothing (the next attempt asks again); a bookmark
    of another sort first is a server that took the parameters without serving them, listed
    from then on."""
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.01)
    half = {"type": "ADDED", "object": api.node("n1")}
    half["object"]["metadata"]["labels"] = {"a": "half"}
    mark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}}
    lines = [half] if ending == "stream-ends" else [half, mark]
    api.inject(Fault(status=200, body=b"".join(json.dumps(x).encode() + b"\n" for x in lines)))
    with following(kubeconfig) as (followed, seen):
        eventually(lambda: api.open_watches == 1, "a watch served whole")
        eventually(lambda: seen.labels() == [{"a": "1"}], "the node as it is")
        assert followed.watch_list is (ending == "stream-ends")
        assert lists(api) == (0 if ending == "stream-ends" else 1)


def test_an_event_nested_deeper_than_any_object_is_never_told(
    api: FakeApiServer, node_watch: tuple[watch.ObjectWatch, Seen]
) -> None:
    """JSON reads an object nested 600 deep; Python's recursion runs out copying it (as a
    follower does): the stream ends on it, the followers never see it."""
    _, seen = node_watch
    eventually(lambda: api.open_watches == 1, "the watch")
    node = b'{"metadata":{"name":"n1","resourceVersion":"5000","labels":{"a":"deep"}},"spec":'
    deep = b'{"type":"MODIFIED","object":' + node + b'{"a":' * 600 + b"1" + b"}" * 602 + b"\n"
    api.inject(Fault(status=200, body=deep, watch=True))
    with api.down():  # ends the stream in progress: the next one meets the event
        eventually(lambda: api.open_watches == 0, "the stream to end")
    eventually(lambda: api.watch_requests() >= 3, "the stream with the event, then another")
    assert {"a": "deep"} not in seen.labels()


def test_a_stream_the_server_ends_is_resumed_from_the_last_version_seen(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "WATCH_SECONDS", 1)  # the server ends each stream after ~1 s
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.05)
    with following(kubeconfig) as (_followed, seen):
        eventually(lambda: api.open_watches == 1, "the watch")
        changed = api.edit("Node", "n1", "", lambda node: node["metadata"]["labels"].update(a="3"))
        eventually(lambda: len(watch_queries(api)) >= 3, "two resumed streams")
        assert starts(api) == 1  # resumed, never read whole again
        resumed = watch_queries(api)[-1]["resourceVersion"]
        assert resumed == changed["metadata"]["resourceVersion"]
        assert seen.labels()[-1] == {"a": "3"}


def test_gone_relists_once_and_bookmarks_move_the_version(
    api: FakeApiServer, node_watch: tuple[watch.ObjectWatch, Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume answered 410 reads the state whole again, once (a WatchList here)."""
    followed, seen = node_watch
    eventually(lambda: api.open_watches == 1, "the watch")
    # the stream is open before the watch has read its initial events (and the version)
    eventually(lambda: seen.labels() == [{"a": "1"}], "the node as it is")
    before = followed.resource_version
    api.add_node("n2")  # moves the server's version; no event for n1
    api.bookmark()
    eventually(lambda: followed.resource_version != before, "the bookmark")
    assert seen.labels() == [{"a": "1"}]  # a bookmark is not a change
    # the history is gone and the stream breaks: the resume is answered 410, listed again
    api.compact()
    with api.down():
        eventually(lambda: api.open_watches == 0, "the stream to end")
    api.delete("Node", "n1")
    eventually(lambda: starts(api) == 2, "the relist")
    eventually(lambda: seen.labels()[-1] is None, "the deletion seen by the relist")
    eventually(lambda: api.open_watches == 1, "the watch again")
    assert starts(api) == 2


def test_after_the_server_was_unreachable_the_watch_lists_instead_of_resuming(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that did not answer has most likely restarted and kept no history: the next
    attempt lists at once rather than spend a request on a resume answered 410."""
    waits: list[int] = []
    draw = watch.reconnect_wait

    def counted(failures: int, answered: bool = False) -> float:
        waits.append(failures)
        return min(draw(failures, answered), 0.05)

    monkeypatch.setattr(watch, "reconnect_wait", counted)
    with following(kubeconfig) as (followed, seen):
        eventually(lambda: api.open_watches == 1, "the watch")
        # the stream is open before the watch has read its initial events (and the version)
        eventually(lambda: seen.labels() == [{"a": "1"}], "the node as it is")
        before = followed.resource_version
        api.compact()  # a resume would now be answered 410
        with api.down():
            eventually(lambda: max(waits, default=0) >= 2, "an attempt refused while down")
        eventually(lambda: api.open_watches == 1, "the watch again")
        assert starts(api) == 2
        # the version held before the outage resumes no stream after it
        _, *after = watch_queries(api)
        assert str(before) not in [query.get("resourceVersion") for query in after]


def test_an_outage_after_a_healthy_stream_is_a_new_run_of_failures(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch,
    log_events: Callable[[str], list[Any]],
) -> None:  # fmt: skip
    """A stream that served long enough before it broke ends the last run of failures:
    the next outage is reported again in its own line and starts from the shortest wait,
    rather than from where the previous outage left off, silent."""
    monkeypatch.setattr(watch, "HEALTHY_STREAM_SECONDS", 0.3)
    monkeypatch.setattr(observability, "COALESCE_SECONDS", 0.0)  # the watch's own reporting
    waits: list[int] = []
    answers: list[bool] = []

    def counted(failures: int, answered: bool = False) -> float:
        waits.append(failures)
        answers.append(answered)
        return 0.02

    monkeypatch.setattr(watch, "reconnect_wait", counted)
    interrupted = "watch of Node n1 interrupted; reconnecting"
    with following(kubeconfig) as (followed, _):
        for outage in range(2):
            eventually(lambda: api.open_watches == 1, "the watch")
            # the stream serves past the (shortened) healthy mark, counted from when the
            # watch's thread began to read it (which may be a moment after the server sent
            # the headers), not from when the test saw the stream open
            eventually(followed._served_healthy, "the stream served past the healthy mark")
            waits.clear()
            with api.down():
                eventually(lambda: len(waits) >= 3, "three attempts refused while down")
            assert waits[:3] == [1, 2, 3], (outage, waits)
            assert not any(answers[-3:])  # refused connections: no answer, the phase is kept
            assert len(log_events(interrupted)) == 1, outage


def test_a_failing_list_is_retried_only_after_the_jittered_reconnect_wait(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fast retry schedule inside the watch's list: every failed attempt is followed by a
    reconnect wait drawn at random, so a fleet does not come back in step; each of these
    failures the server answered, which the wait is told (its phase is drawn anew)."""
    waits: list[int] = []
    answers: list[bool] = []

    def counted(failures: int, answered: bool = False) -> float:
        waits.append(failures)
        answers.append(answered)
        return 0.01

    monkeypatch.setattr(watch, "reconnect_wait", counted)
    api.fail(503, count=None, method="GET")
    with following(kubeconfig) as (_followed, _seen):
        eventually(lambda: len(waits) >= 3, "three failed lists")
        api.clear_faults()
        eventually(lambda: api.open_watches == 1, "the watch")
        failed = [r for r in api.requests if r.status == 503]
        assert len(failed) == len(waits)
        assert waits == list(range(1, len(waits) + 1))  # the bound doubles with each
        assert all(answers)


@SERVERS
def test_back_from_an_outage_the_state_is_read_whole_in_one_request(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch, served: bool
) -> None:
    """A server that was away may have restarted and forgotten every version: the watch
    reads the state whole instead of a resume answered 410 -- one WatchList request; on a
    server without it, a list, and the watch from its version after a wait drawn at random
    (only when coming back from failures), so that it does not add to the second of the list
    and of the write it called for."""
    api.serve_watch_list(served)
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.05)
    waits: list[float] = []

    def stream_wait() -> float:
        waits.append(0.01)
        return 0.01

    monkeypatch.setattr(watch, "stream_wait", stream_wait)
    with following(kubeconfig) as (_followed, seen):
        eventually(lambda: api.open_watches == 1, "the watch")
        assert waits == []  # the first list is followed by its watch at once
        with api.down():
            api.compact()  # as a restarted server: every version seen so far is gone
            api.delete("Node", "n1")
            # the old stream's end is not instant: until then it still counts as the watch
            eventually(lambda: api.open_watches == 0, "the stream to end")
            time.sleep(0.5)  # let a reconnect meet the closed port (not a timing assertion)
            api.clear_requests()
        eventually(lambda: api.open_watches == 1, "the watch back")
        eventually(lambda: seen.labels()[-1] is None, "the deletion seen by the list")
        sent = ["watch" if "watch=" in r.query else r.method for r in api.requests]
        assert sent == (["watch"] if served else ["GET", "watch"]), sent
        assert api.count("GET", "/api/v1/nodes/n1") == 0  # no read besides the list
        assert waits == ([] if served else [0.01])


@pytest.mark.parametrize("status", [403, 405])
def test_a_refused_watch_gives_up_with_one_line_and_tells_its_followers(
    api: FakeApiServer, kubeconfig: str, status: int, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.01)
    api.refuse_watches(status)
    with following(kubeconfig) as (followed, seen):
        followed.join(PATIENCE)
        assert not followed._thread or not followed._thread.is_alive()
        assert seen.refusals == 1 and followed.refused
        lines = [line for line in capsys.readouterr().err.splitlines() if "cannot watch" in line]
        assert len(lines) == 1 and str(status) in lines[0], lines
        # a few tries (a starting server refuses for a moment), then never again
        assert len(watch_queries(api)) == watch.REFUSALS_BEFORE_GIVING_UP


def test_a_refusal_after_the_watch_worked_is_a_server_starting_and_retried(
    api: FakeApiServer, node_watch: tuple[watch.ObjectWatch, Seen], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted API server answers 403 until its authorizer has read RBAC: a few
    refusals are retried, and the watch goes on once the server lets it."""
    monkeypatch.setattr(watch, "RECONNECT_INITIAL_SECONDS", 0.05)
    followed, seen = node_watch
    eventually(lambda: api.open_watches == 1, "the watch")
    api.refuse_watches(403)
    with api.down():
        eventually(lambda: api.open_watches == 0, "the stream to end")
    eventually(lambda: len(watch_queries(api)) >= 3, "refused attempts")
    api.refuse_watches(None)
    eventually(lambda: api.open_watches == 1, "the watch back")
    assert not followed.refused and seen.refusals == 0


CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("framing", [
    b"zz\r\n{}\r\n", b"5;" + b"x" * 100_000 + b"\r\n", b"ffffffffffffffff\r\n{}\r\n",
], ids=["not-hex", "endless-size-line", "size-beyond-the-data"])  # fmt: skip
def test_a_watch_stream_whose_chunks_are_malformed_is_one_line_and_reconnected(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch,
    log_events: Callable[[str], list[Any]], framing: bytes,
) -> None:  # fmt: skip
    """The stream's transfer framing is the server's too: a chunk size that is not a number,
    never ends or promises more than comes breaks the stream with one line, the object
    held is kept, and the watch comes back once the server streams properly."""
    monkeypatch.setattr(watch, "reconnect_wait", lambda failures, answered=False: 0.05)
    api.inject(Fault(raw=CHUNKED + framing, count=2, watch=True))
    with following(kubeconfig) as (_followed, seen):
        eventually(lambda: api.open_watches == 1, "the watch past the faults")
        eventually(lambda: bool(seen.labels()), "the node told by that watch")
        told = seen.labels()
        assert told and all(labels == {"a": "1"} for labels in told)  # never told it went
    lines = log_events("watch of Node n1 interrupted; reconnecting")
    assert len(lines) == 1 and "Traceback" not in str(lines)


def test_reconnect_waits_double_up_to_the_cap_then_keep_a_period_of_their_own() -> None:
    cap = watch.RECONNECT_MAX_SECONDS
    for failures in range(1, 12):
        doubled = watch.RECONNECT_INITIAL_SECONDS * 2 ** (failures - 1)
        draws = [watch.reconnect_wait(failures) for _ in range(200)]
        if doubled / 2 >= cap:  # past the first wait at the cap: about the node's own period
            assert all(0.9 * cap <= draw <= 1.1 * cap for draw in draws), failures
            assert statistics.pstdev(draws) > 0  # nodes put in step drift apart again
            continue
        base = min(cap, doubled)
        assert all(0 <= draw <= base for draw in draws)
        # spread over the whole window: a fleet that lost its server does not come back at once
        assert statistics.pstdev(draws) > base / 5
        assert min(draws) < base / 4 < base * 3 / 4 < max(draws)
    assert watch.reconnect_wait(10**6) <= 1.1 * cap  # an outage of days: no overflow
    # a failure the server answered put every node it answered then in step: drawn anew
    anew = [watch.reconnect_wait(20, answered=True) for _ in range(200)]
    assert min(anew) < cap / 4 < cap * 3 / 4 < max(anew) <= cap


@pytest.mark.parametrize("down", [30.0, 600.0])
def test_a_fleet_back_from_an_outage_comes_back_evenly_over_one_cap(
    down: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes that lost the server together try again, once it is back, spread evenly over one
    cap: the first quarter of it holds no more of the fleet than the last, rather than the
    bunch in the first seconds that a fresh random draw for every capped wait gives."""
    monkeypatch.setattr(watch, "random", random.Random(7))
    cap, nodes = watch.RECONNECT_MAX_SECONDS, 4000
    back = []
    for _ in range(nodes):
        waited, failures = 0.0, 0
        while waited < down:
            failures += 1
            waited += watch.reconnect_wait(failures)
        back.append(waited - down)
    assert max(back) <= 1.1 * cap
    quarters = Counter(int(4 * seconds / cap) for seconds in back)
    assert all(0.2 < quarters[quarter] / nodes < 0.3 for quarter in range(4)), quarters


def test_the_watch_takes_the_outputs_rate_limit(api: FakeApiServer, kubeconfig: str) -> None:
    taken: list[float] = []

    class Counting(RateLimiter):
        def reserve(self) -> float:
            taken.append(1)
            return super().reserve()

    api.serve_watch_list(False)  # three requests: the WatchList refused, the list, the watch
    limiter = Counting(5, 10, clock=time.monotonic, sleep=time.sleep)
    client = watch.watch_client(kubeconfig, 5, 10, limiter)
    assert client.rate_limiter is limiter
    seen = Seen()
    followed = watch.ObjectWatch(client, "/api/v1/nodes", "n1", "Node n1")
    followed.follow(seen, seen.refused)
    followed.start()
    try:
        eventually(lambda: api.open_watches == 1, "the watch")
        assert len(taken) == len(api.requests) == 3
    finally:
        followed.stop()
        followed.join(5)


def test_the_outputs_go_back_to_periodic_reads_when_the_watch_is_refused(
    api: FakeApiServer, kubeconfig: str
) -> None:
    from gfd.outputs.nodefeature import VERIFY_INTERVAL_SECONDS, NodeFeatureOutput

    api.refuse_watches(403)
    settings = resolve(
        {"node_name": "n1", "kubeconfig": kubeconfig, "use_node_feature_api": True}, {}
    )
    output = NodeFeatureOutput(settings)
    output.watch(lambda: None)
    assert output.verify_interval is None  # while the watch may run: nothing polled
    eventually(lambda: output.verify_interval == VERIFY_INTERVAL_SECONDS, "the fallback")
    output.unwatch()
    assert not watch._watches  # nothing left registered for the next output to find


def test_an_output_that_stops_watching_ends_its_watch(api: FakeApiServer, kubeconfig: str) -> None:
    """An output retired by a reload stops following its object: the watch's thread ends
    and its stream closes, rather than run for the life of the process waking the loop."""
    from gfd.outputs.nodefeature import NodeFeatureOutput

    settings = resolve(
        {"node_name": "n1", "kubeconfig": kubeconfig, "use_node_feature_api": True}, {}
    )
    output = NodeFeatureOutput(settings)
    output.watch(lambda: None)
    eventually(lambda: api.open_watches == 1, "the watch")
    output.unwatch()
    eventually(lambda: api.open_watches == 0, "the stream closed")
    assert not watch._watches
    assert not [t for t in threading.enumerate() if t.name.startswith("gfd-watch")]


# ------------------------------------------------------------------ a real gfd process


def daemon(kubeconfig: str, *args: str) -> Daemon:
    return Daemon("--sleep-interval", "1h", "--node-name", "n1", "--kubeconfig", kubeconfig,
                  "--snapshot-file", DGX, *args)  # fmt: skip


def test_a_deleted_nodefeature_is_created_again_long_before_the_interval(
    api: FakeApiServer, kubeconfig: str
) -> None:
    with daemon(kubeconfig, "--use-node-feature-api") as gfd:
        gfd.wait_for("pass finished")
        gfd.wait_until(lambda: api.open_watches == 1, "the watch")
        published = api.objects("NodeFeature")[0]
        reads = api.count("GET", published["metadata"]["name"])
        api.delete("NodeFeature", published["metadata"]["name"], "default")
        gfd.wait_until(lambda: len(api.objects("NodeFeature")) == 1, "the repair", PATIENCE)
        assert api.objects("NodeFeature")[0]["spec"] == published["spec"]
        assert api.count("POST") == 2
        # what the watch saw stands for a read: the repair is the create alone
        assert api.count("GET", published["metadata"]["name"]) == reads
        assert gfd.stop(signal.SIGTERM) == 0


def test_after_an_outage_a_node_sends_one_watch_and_one_create(
    api: FakeApiServer, kubeconfig: str
) -> None:
    """The object deleted while the server was away (as NFD's reinstall does): once it is
    back, the WatchList that restarts the watch is the check of the object, so the repair
    is the create alone; no resume answered 410, no read of the object, no list."""
    with daemon(kubeconfig, "--use-node-feature-api") as gfd:
        gfd.wait_for("pass finished")
        gfd.wait_until(lambda: api.open_watches == 1, "the watch")
        name = api.objects("NodeFeature")[0]["metadata"]["name"]
        with api.down():
            api.compact()
            api.delete("NodeFeature", name, "default")
            gfd.wait_for(f"watch of NodeFeature default/{name} interrupted; reconnecting")
            api.clear_requests()
        gfd.wait_until(lambda: len(api.objects("NodeFeature")) == 1, "the repair", PATIENCE)
        gfd.wait_until(lambda: api.open_watches == 1, "the watch back", PATIENCE)
        requests = api.requests
        sent = sorted("watch" if "watch=" in r.query else r.method for r in requests)
        assert sent == ["POST", "watch"], [(r.method, r.path, r.query) for r in requests]
        (watched,) = [r for r in requests if r.method == "GET"]
        assert "sendInitialEvents=true" in watched.query and "fieldSelector" in watched.query
        assert gfd.stop(signal.SIGTERM) == 0


#: what gfd owns on its node, each with how someone else removes it and the requests that
#: repair it (the labels' read of the node, and the annotation's own, then the patch)
OWNED_ON_THE_NODE = [
    pytest.param((), "labels", "nvidia.com/gpu.count", ["GET", "PATCH"], id="label"),
    pytest.param(("--topology-labels", "--snapshot-file", HGX), "annotations",
                 PARTITIONS_ANNOTATION, ["GET", "GET", "PATCH"], id="partitions annotation"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "field", "key", "repair"), OWNED_ON_THE_NODE)
def test_a_removed_node_label_is_restored_and_steady_state_reads_nothing(
    api: FakeApiServer, kubeconfig: str, args: tuple[str, ...], field: str, key: str,
    repair: list[str],
) -> None:  # fmt: skip
    with daemon(kubeconfig, "--use-node-labels", "--sleep-interval", "100ms", *args) as gfd:
        gfd.wait_for("pass finished")
        gfd.wait_until(lambda: api.open_watches == 1, "the watch")
        before = len(api.requests)
        gfd.wait_for("pass finished", count=10)  # passes at 100 ms: not one request
        assert len(api.requests) == before
        metadata = api.node("n1")["metadata"]
        api.edit("Node", "n1", "", lambda node: node["metadata"][field].pop(key))
        gfd.wait_until(
            lambda: api.node("n1")["metadata"][field] == metadata[field], "the repair", PATIENCE
        )
        assert [r.method for r in api.requests[before:] if "watch=" not in r.query] == repair
        assert gfd.stop(signal.SIGTERM) == 0


def test_labels_nfd_gives_up_are_published_by_gfd_at_once(
    api: FakeApiServer, kubeconfig: str
) -> None:
    """A key NFD's master records as its own is left to NFD; once NFD lets it go (its
    NodeFeature deleted, as a reload from the NodeFeature output to node labels does) the
    watch sees it and gfd publishes the key itself, not at its next change."""
    claimed = "nvidia.com/gpu.count"
    api.edit_node("n1", labels={claimed: "7"}, annotations={NFD_FEATURE_LABELS_ANNOTATION: claimed})
    with daemon(kubeconfig, "--use-node-labels") as gfd:
        gfd.wait_for("pass finished")
        gfd.wait_until(lambda: api.open_watches == 1, "the watch")
        assert api.node_labels("n1")[claimed] == "7"  # NFD's

        def nfd_lets_go(node: dict[str, Any]) -> None:
            del node["metadata"]["labels"][claimed]
            del node["metadata"]["annotations"][NFD_FEATURE_LABELS_ANNOTATION]

        api.edit("Node", "n1", "", nfd_lets_go)
        gfd.wait_until(lambda: api.node_labels("n1").get(claimed) == "8", "gfd's", PATIENCE)
        managed = api.node_annotations("n1")[MANAGED_LABELS_ANNOTATION].split(",")
        assert claimed in managed
        assert gfd.stop(signal.SIGTERM) == 0


def test_a_server_whose_version_went_back_is_listed_again_not_resumed_forever(
    api: FakeApiServer, kubeconfig: str
) -> None:
    """etcd restored from an older backup: the resume asks for a version the server has not
    reached and is answered 504 "Too large resource version" however often it is tried;
    the watch lists again (as client-go's reflector does), so a removed label is repaired."""
    with daemon(kubeconfig, "--use-node-labels") as gfd:
        gfd.wait_for("pass finished")
        gfd.wait_until(lambda: api.open_watches == 1, "the watch")
        labels = api.node_labels("n1")
        api.restore()
        gfd.wait_for("watch of Node n1 interrupted; reconnecting")  # the 504
        api.edit(
            "Node", "n1", "", lambda node: node["metadata"]["labels"].pop("nvidia.com/gpu.count")
        )
        gfd.wait_until(lambda: api.node_labels("n1") == labels, "the repair", PATIENCE)
        assert gfd.stop(signal.SIGTERM) == 0


def test_a_watch_refused_by_rbac_falls_back_with_one_line(
    api: FakeApiServer, kubeconfig: str
) -> None:
    api.refuse_watches(403)
    with daemon(kubeconfig, "--use-node-labels", "--sleep-interval", "100ms") as gfd:
        gfd.wait_for("cannot watch Node n1; re-reading it periodically instead", limit=60)
        gfd.wait_for("pass finished", count=5)  # it labels on
        assert gfd.stop(signal.SIGTERM) == 0
    refused = [line for line in gfd.lines if "cannot watch" in line]
    assert len(refused) == 1 and "403" in refused[0], refused
    assert "Traceback" not in gfd.log()
