"""Two things at once inside one gfd process: a watch's thread (or any other) acting while
the main loop is at the one point where their shared state is read and written.  Each test
holds one thread at that point with a hook at the lowest seam and lets the other run its
whole step there, so the interleaving is the same on every run."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gfd import observability, redaction
from gfd import snapshot as snapshot_io
from gfd.agent import Agent, _Signals
from gfd.kube import exec_plugin
from gfd.kube.credential_source import CredentialError
from gfd.kube.ratelimit import RateLimiter
from gfd.labels.partitioning import partition_table
from gfd.outputs.nodefeature import NodeFeatureOutput
from gfd.outputs.nodelabels import NodeLabelsOutput
from gfd.outputs.topology_extras import PARTITIONS_ANNOTATION, PartitionsAnnotation
from gfd.settings import Settings, resolve
from tests.execplugin import exec_user, write_plugin
from tests.fakes.fake_apiserver import FakeApiServer
from tests.fakes.waits import output_without_waits
from tests.loop import drive
from tests.process import alive

DGX = "examples/snapshots/dgx-a100.yaml"
TOPOLOGY = "examples/snapshots/hgx-h100-nvswitch.yaml"
#: the slot that holds the agent's repair flag (the hook below stands in front of it)
_REPAIR: Any = vars(_Signals)["repair"]


class _WakeWhileRead(_Signals):
    """The agent's flags, where the main thread's next read of ``repair`` lets a watch's
    thread run ``undone()`` whole before the read's value is used (a thread switch between
    the read and whatever the main thread does with it)."""

    def __init__(self, undone: Any) -> None:
        super().__init__()
        self.armed = False
        self._undone = undone

    @property
    def repair(self) -> bool:
        value = bool(_REPAIR.__get__(self))
        if self.armed and threading.current_thread() is threading.main_thread():
            self.armed = False
            watch = threading.Thread(target=self._undone)
            watch.start()
            watch.join()
        return value

    @repair.setter
    def repair(self, value: bool) -> None:
        _REPAIR.__set__(self, value)


def test_a_watch_that_sees_the_labels_undone_while_a_pass_checks_its_flag_is_never_lost(
    tmp_path: Path,
) -> None:
    """A watched output verifies only when its watch says the labels were undone.  When the
    watch's thread says so just as the pass reads the flag (found clear), the next pass
    still checks the destination and publishes again: the flag is never cleared over a wake
    the pass did not act on, or the labels would stay undone until the next reload."""
    out = tmp_path / "gfd"
    flags: list[_WakeWhileRead] = []

    def watched(agent: Agent) -> None:
        agent.output.verify_interval = None  # as a watched output: checked when woken only
        flags.append(_WakeWhileRead(agent._undone))
        agent._signals = flags[0]

    def undo_as_the_pass_reads_the_flag(agent: Agent) -> None:
        out.unlink()  # someone else removes the labels; the watch sees it as the pass runs
        flags[0].armed = True

    settings = resolve({"sleep_interval": "1s", "output_file": str(out), "snapshot_file": DGX}, {})
    run = drive(settings, [watched, undo_as_the_pass_reads_the_flag, lambda agent: None])
    assert not flags[0].armed, "the pass never read the flag"
    assert out.exists(), "the labels the watch saw undone were never published again"
    assert run.metrics.writes == 2


class _HoldsTheFirst:
    """A store whose first caller of the racy read is held once it has read, until
    ``other`` is done (or, when ``other`` cannot run meanwhile, for ``HOLD_SECONDS``)."""

    HOLD_SECONDS = 0.5

    def __init__(self, held: threading.Event, other: threading.Event) -> None:
        super().__init__()
        self._held, self._other = held, other
        self.holder: threading.Thread | None = None

    def _hold_the_first(self) -> None:
        if self.holder is None:
            self.holder = threading.current_thread()
            self._held.set()
            self._other.wait(self.HOLD_SECONDS)


class _HeldWhileOrdering(_HoldsTheFirst, dict[str, tuple[str, ...]]):
    """``redaction``'s store, where the first thread to gather every value to redact is
    held once it has gathered them."""

    def values(self) -> Any:
        gathered = list(super().values())
        self._hold_the_first()
        return gathered


def test_credentials_two_threads_remember_at_once_are_both_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watch's client reads its rotated token while the pass's client reads another (a
    reload's new kubeconfig, another plugin): each is remembered from its own thread.  The
    one remembered second must never be dropped from what is redacted by the first's
    update landing after it, or an API server echoing it puts it in the log in clear."""
    held, other_done = threading.Event(), threading.Event()
    store = _HeldWhileOrdering(held, other_done)
    monkeypatch.setattr(redaction, "_secrets", store)
    monkeypatch.setattr(redaction, "_ordered", ())
    first_token, second_token = "first-token-" + "a" * 20, "second-token-" + "b" * 20

    def other() -> None:
        held.wait()
        redaction.remember("token file /var/run/watch-token", second_token)
        other_done.set()

    second = threading.Thread(target=other)
    second.start()
    redaction.remember("exec plugin /usr/bin/get-token", first_token)
    second.join()
    assert store.holder is threading.main_thread()
    line = redaction.redact(f"echoed: {first_token} and {second_token}")
    assert first_token not in line
    assert second_token not in line


class _HeldWhileEvicting(_HoldsTheFirst, dict[str, list[float]]):
    """The log's record of recent lines, where the first thread to pick the oldest one to
    forget is held once it has picked it."""

    def __iter__(self) -> Any:
        names = iter(list(super().__iter__()))
        self._hold_the_first()
        return names


def test_two_threads_logging_new_lines_at_once_both_reach_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the log has seen its fill of distinct lines, each new one makes it forget the
    oldest.  A watch's thread and the main loop logging a new line at once must not both
    forget the same one: the second would fail on it, and a log call that raises ends the
    watch (or fails the pass) instead of saying what it had to say."""
    held, other_done = threading.Event(), threading.Event()
    seen = _HeldWhileEvicting(held, other_done)
    for number in range(observability.COALESCE_KEYS):
        seen[f"an older line {number}"] = [0.0, 0]
    monkeypatch.setattr(observability, "_seen", seen)
    told: list[object] = []

    def other() -> None:
        held.wait()
        try:
            told.append(observability.coalesce(None, "warning", {"event": "from the watch"}))
        except Exception as exc:
            told.append(exc)
        other_done.set()

    watch = threading.Thread(target=other)
    watch.start()
    record = observability.coalesce(None, "info", {"event": "from the loop"})
    watch.join()
    assert seen.holder is threading.main_thread()
    assert record == {"event": "from the loop"}
    assert told == [{"event": "from the watch"}]
    assert len(seen) == observability.COALESCE_KEYS


def test_a_plugin_a_watch_starts_as_the_process_exits_is_ended_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """At exit gfd kills every credential plugin still running (each in a session of its
    own, so nothing else would), whichever thread started it.  A watch's thread (never
    waited for at exit) that starts one just as the exit collects them must not leave it
    out: started, it is ended with the others; not yet started, it is never started."""
    monkeypatch.setattr(exec_plugin, "_RUNNING", set())
    monkeypatch.setattr(exec_plugin, "_exit", exec_plugin._Exit())
    command = write_plugin(tmp_path, "exec sleep 1000\n")
    plugin = exec_plugin.ExecPlugin(
        exec_user(command)["exec"], "users[0].user.exec", cwd=None, cluster=None
    )
    started, exited = threading.Event(), threading.Event()
    pids: list[int] = []
    start = exec_plugin.ExecPlugin._start

    def held_once_started(self: Any, env: Any, what: str) -> Any:
        process = start(self, env, what)
        pids.append(process.pid)
        started.set()
        exited.wait(0.5)  # the exit collects the plugins now (or waits for this start)
        return process

    monkeypatch.setattr(exec_plugin.ExecPlugin, "_start", held_once_started)
    failed: list[BaseException] = []

    def watch() -> None:
        try:
            plugin.authorization(time.monotonic() + 30)
        except CredentialError as exc:
            failed.append(exc)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        started.wait(10)
        exec_plugin._end_running()
        exited.set()
        for _ in range(100):  # a SIGKILL ends its target once the target is scheduled
            if not alive(pids[0]):
                break
            threading.Event().wait(0.05)
        assert not alive(pids[0]), "the plugin outlived the exit"
        thread.join()
        assert failed  # killed: that run gave no credential
        with pytest.raises(CredentialError, match="exiting"):
            plugin.authorization(time.monotonic() + 30)  # after the exit: never started
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        thread.join()


class _HeldAfterCounting(RateLimiter):
    """The outputs' rate limit, where the first thread to take a token is held once it has
    counted the tokens left (at its read of the refill rate, which comes after), until
    ``other`` is done (or, when ``other`` cannot run meanwhile, for ``HOLD_SECONDS``)."""

    HOLD_SECONDS = 0.5

    def __init__(self, held: threading.Event, other: threading.Event) -> None:
        self._held, self._other = held, other
        self.holder: threading.Thread | None = None
        self._rate = 0.001
        super().__init__(0.001, 1, clock=lambda: 100.0, sleep=lambda seconds: None)

    @property
    def qps(self) -> float:
        # a reservation reads the rate twice: whether there is a limit, then the refill
        self._reads = getattr(self, "_reads", 0) + 1
        if self.holder is None and self._reads == 2:  # the first reservation's refill
            self.holder = threading.current_thread()
            self._held.set()
            self._other.wait(self.HOLD_SECONDS)
        return self._rate

    @qps.setter
    def qps(self, value: float) -> None:
        self._rate = value


def test_the_rate_limit_shared_by_the_outputs_and_the_watches_gives_each_token_once() -> None:
    """The pass's client and each watch's take their tokens from one bucket, each from its
    own thread.  Two taking the last token at once must not both get it: the burst is a
    promise about the load the fleet puts on the API server."""
    held, other_done = threading.Event(), threading.Event()
    bucket = _HeldAfterCounting(held, other_done)
    delays: list[float] = []

    def other() -> None:
        held.wait()
        delays.append(bucket.reserve())
        other_done.set()

    watch = threading.Thread(target=other)
    watch.start()
    delays.append(bucket.reserve())
    watch.join()
    assert bucket.holder is threading.main_thread()
    assert sorted(delays)[0] == 0.0
    assert sorted(delays)[1] > 0, "both took the one token the burst allows"


API_NODE_N1: dict[str, Any] = {"labels": {}, "annotations": {}}


def test_a_change_the_watch_tells_while_gfds_write_is_answered_is_still_repaired(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch of the Node tells its events from its own thread, and while gfd's patch of
    the labels is in flight their owner cannot yet tell its own write's event from someone
    else's.  Someone else removing the labels just after gfd's write, told before the
    write's answer is read, must still wake the loop to publish them again: a watched
    output re-reads the node only when woken."""
    output = output_without_waits(NodeLabelsOutput, kubeconfig, use_node_labels=True)
    woken = threading.Event()
    output._watched._wake = woken.set  # as watch() hands it the agent's wake
    request = output._client.request

    def answered_after_an_edit(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        answer = request(method, path, *args, **kwargs)
        if method == "PATCH":
            edited = api.edit_node("n1", labels={})

            def watch() -> None:  # gfd's own write, then the edit, as the stream orders them
                for told in (answer, edited):
                    output._watched._seen(told)

            teller = threading.Thread(target=watch)
            teller.start()
            teller.join()
        return answer

    monkeypatch.setattr(output._client, "request", answered_after_an_edit)
    output.publish({"nvidia.com/gpu.count": "8"})
    assert api.node_labels("n1") == {}
    assert woken.is_set(), "the edit told while the write was in flight was never acted on"


def _told_before_answered(monkeypatch: pytest.MonkeyPatch, output: Any, verb: str) -> None:
    """The output's watch tells the answer of each ``verb`` request from a thread of its
    own, before the request's caller reads that answer."""
    request = output._client.request

    def told(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        answer = request(method, path, *args, **kwargs)
        if method == verb:
            teller = threading.Thread(target=output._watched._seen, args=(answer,))
            teller.start()
            teller.join()
        return answer

    monkeypatch.setattr(output._client, "request", told)


def test_gfds_own_annotation_write_told_before_its_answer_is_read_wakes_nothing(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch of the Node tells gfd's own write of the partitions annotation from its
    thread, as often before the write's answer is read as after it.  Told first, it must
    not be taken for someone else's edit: that woke the loop for a pass that read the node
    again after every change of the table."""
    settings = Settings(
        use_node_labels=True, node_name="n1", kubeconfig=kubeconfig, topology_labels=True
    )
    annotation = PartitionsAnnotation(settings)
    assert annotation.publish(partition_table(snapshot_io.load(TOPOLOGY), None))
    woken = threading.Event()
    annotation._watched._wake = woken.set  # as watch() hands it the agent's wake
    _told_before_answered(monkeypatch, annotation, "PATCH")
    assert annotation.publish({})  # the table emptied: the annotation removed
    assert PARTITIONS_ANNOTATION not in api.node_annotations("n1")
    assert not woken.is_set(), "gfd's own write was taken for someone else's"
    before = len(api.requests)
    assert not annotation.publish({})
    assert len(api.requests) == before, "the node was read again for gfd's own write"


def test_gfds_own_nodefeature_write_told_before_its_answer_is_read_wakes_nothing(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for the annotation: the watch's thread telling gfd's own update of its NodeFeature
    before the update's answer gives its version must not wake the loop for a pass of its
    own after every change of the labels."""
    output = output_without_waits(NodeFeatureOutput, kubeconfig, use_node_feature_api=True)
    output.publish({"nvidia.com/gpu.count": "8"})
    woken = threading.Event()
    output._watched._wake = woken.set  # as watch() hands it the agent's wake
    _told_before_answered(monkeypatch, output, "PUT")
    output.publish({"nvidia.com/gpu.count": "4"})
    assert api.count("PUT") == 1
    assert not woken.is_set(), "gfd's own write was taken for someone else's"


def test_a_state_from_before_gfds_write_told_while_it_is_answered_wakes_nothing(
    api: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the test above: what the watch told during the write from before
    it (the watch's first state, as gfd starts) is what the write has replaced, and wakes
    no pass to read the node again."""
    output = output_without_waits(NodeLabelsOutput, kubeconfig, use_node_labels=True)
    woken = threading.Event()
    output._watched._wake = woken.set  # as watch() hands it the agent's wake
    request = output._client.request

    def answered_after_an_old_state(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        before = api.node("n1")
        answer = request(method, path, *args, **kwargs)
        if method == "PATCH":
            teller = threading.Thread(target=output._watched._seen, args=(before,))
            teller.start()
            teller.join()
        return answer

    monkeypatch.setattr(output._client, "request", answered_after_an_old_state)
    output.publish({"nvidia.com/gpu.count": "8"})
    assert api.node_labels("n1") == {"nvidia.com/gpu.count": "8"}
    assert not woken.is_set(), "a state the write replaced woke a pass"
