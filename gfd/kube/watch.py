"""Watching what gfd follows on the API server -- the one object of a kind that gfd owns, or
the objects of a collection a field selector picks (this node's ResourceSlices) -- so that
a change is seen within moments and nothing is re-read at steady state.

A :class:`CollectionWatch` holds the objects its field selector picks, by name;
:class:`ObjectWatch` is the same watch narrowed to one object (its NodeFeature, its Node),
shared by everything that follows that object.  It runs in a thread, with a client of its
own (the API client is not thread-safe), and tells its followers what the object is now,
after each list and on every event; they decide whether that undoes what gfd published.

The protocol is client-go's reflector's: a paged list gives the objects and a
``resourceVersion``; a watch from there with ``allowWatchBookmarks`` streams the changes; a
stream the server ends is resumed from the last version (listed once more on 410 Gone); after
no answer or an error answer (but 429) the watch lists again rather than resumes.  The watch
of one object asks for the API's WatchList instead of a list (``sendInitialEvents``): one
request gives the object as it is now, a bookmark marking the end of that, then the changes,
so a node back from an outage sends one request where a list and a watch were two.  A server
that does not serve it (before Kubernetes 1.27, or with its feature gate off) refuses the
parameters with 422, and that watch lists from then on.

The stream is a channel from the API server and bounded as such:

- an event (one JSON line) is at most :data:`MAX_EVENT_BYTES`; a longer line ends the stream;
- at most :data:`EVENT_BURST` lines at once and :data:`EVENTS_PER_SECOND` after, blank ones
  included: a flood ends the stream (one object, or one node's handful of slices: nobody
  edits them that fast);
- at most :data:`MAX_OBJECTS` objects held, of at most :data:`MAX_HELD_BYTES` together
  (each within an answer's limit, many could otherwise add up to gigabytes): more ends the
  stream;
- a stream asks the server to end it after ``timeoutSeconds``; one still open
  :data:`STALL_GRACE_SECONDS` later is stalled: the total deadline of the request ends it;
- anything that is not an event of an object the selector picks ends the stream.

A failed stream is reconnected after :func:`reconnect_wait` (client-go's reflector's doubling,
drawn at random, then a period of about the cap from a phase of each node's own, so that a
fleet comes back evenly spread rather than in its first seconds), each request a token of
the outputs' rate limit (``--kube-api-qps``/``--kube-api-burst``).  A watch refused (403, 405)
:data:`REFUSALS_BEFORE_GIVING_UP` times in a row is given up with one line, and its followers
re-read the object periodically.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from gfd import interrupt, signals
from gfd.errors import PublishError
from gfd.kube.client import (
    MAX_ANSWER_BYTES,
    MAX_NESTING,
    KubeClient,
    KubeError,
    bad_answer,
    nested_within,
    quote_answer,
)
from gfd.kube.stream import (
    MAX_HELD_BYTES,
    REFUSED_STATUSES,
    EventBudget,
    Gone,
    Refused,
    held_size,
    open_stream,
)
from gfd.observability import get_logger

JSON = dict[str, Any]

#: seconds a watch asks the server to keep the stream open (each asks up to a quarter more,
#: at random, so that a fleet's streams do not end together)
WATCH_SECONDS = 1800
#: the most objects one watch holds (pages of PAGE_SIZE on a list)
MAX_OBJECTS = 1600
PAGE_SIZE = 100
#: a stream still open this long after its timeoutSeconds is stalled
STALL_GRACE_SECONDS = 30.0
#: the longest event read: one object (the answers' own limit) and its envelope
MAX_EVENT_BYTES = MAX_ANSWER_BYTES + 64 * 1024
#: the first wait before reconnecting after a failure, and the longest
RECONNECT_INITIAL_SECONDS = 1.0
RECONNECT_MAX_SECONDS = 30.0
#: the longest wait, drawn at random, between a list made after failures and its watch: the
#: watch starts from the list's version (nothing is missed), and a fleet back from an outage
#: does not add every node's watch to the second of its list and of the write it called for
STREAM_SPREAD_SECONDS = 5.0
#: a stream open this long was healthy: however it ends, the next failure starts a new run
#: (its wait from the shortest bound, its line said again)
HEALTHY_STREAM_SECONDS = 60.0
#: the annotation of the bookmark that ends a WatchList's initial events
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
#: statuses that mean "these parameters are not served here": the WatchList's, on a server
#: without it (422 Invalid: resourceVersionMatch is forbidden for a watch)
NO_WATCH_LIST_STATUSES = frozenset({400, 422})
#: a watch refused (stream.REFUSED_STATUSES) this many times in a row is given up, and its
#: followers re-read periodically: an API server that is starting answers 403 for a few
#: seconds, until its authorizer has read the RBAC objects
REFUSALS_BEFORE_GIVING_UP = 5

_READ_BYTES = 64 * 1024

Follower = Callable[[JSON | None], None]
#: what a collection's followers are told: the objects held, by name
Objects = dict[str, JSON]


def reconnect_wait(failures: int, answered: bool = False) -> float:
    """Seconds before reconnecting after ``failures`` failures in a row, the last one
    ``answered`` by the server (an error status, a refusal, a stream it ended) or not.

    While the doubling wait is below its cap, drawn at random up to it ("full jitter": a
    blip is ridden out in a second or two).  The first wait at the cap is drawn up to the cap
    too, and every one after it within a tenth of the cap: each node then tries again on a
    period of about the cap from a phase drawn at random, so a fleet whose server comes back
    after a long outage arrives evenly over one cap.  Drawing every capped wait from zero
    instead would bunch the fleet into its first seconds back (from the moment the server
    returns, a node's next try is then more often near than far); a period kept exactly
    would keep in step the nodes that one moment put in step: a failure the server answered
    is such a moment (a server that is starting answers everyone who asks at once, 403
    until its authorizer is ready), so after one the phase is drawn anew.

    The doubling stops at the cap: an outage of hours is thousands of failures, and two to
    the thousandth power is no float."""
    base = RECONNECT_INITIAL_SECONDS * 2 ** min(max(0, failures - 1), 64)
    if base / 2 < RECONNECT_MAX_SECONDS or answered:  # below the cap, or a new phase
        return float(random.uniform(0, min(base, RECONNECT_MAX_SECONDS)))
    return float(random.uniform(0.9, 1.1) * RECONNECT_MAX_SECONDS)


def stream_wait() -> float:
    return float(random.uniform(0, STREAM_SPREAD_SECONDS))


class CollectionWatch:
    """Follow the objects of ``collection`` (an API path such as ``/api/v1/nodes``) that the
    field selector ``selector`` picks (``spec.nodeName=n1``).  ``belongs(obj)`` says whether
    an object is one the selector picks (anything else on the stream ends it); ``keep(obj)``
    whether to hold it (an object not kept is followed as absent); ``fallback`` what the
    followers do instead when the watch is refused (the one line says it).  Followers are told the
    view (:meth:`_view`): here the objects held, by name."""

    def __init__(
        self,
        client: KubeClient,
        collection: str,
        selector: str,
        what: str,
        *,
        belongs: Callable[[JSON], bool],
        keep: Callable[[JSON], bool] = lambda obj: True,
        fallback: str = "re-reading it periodically instead",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._collection = collection
        self.selector = selector
        self.name = selector.partition("=")[2]
        self.what = what
        self._belongs = belongs
        self._keep = keep
        self._fallback = fallback
        self._clock = clock
        self._followers: list[tuple[Callable[[Any], None], Callable[[], None]]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._response: Any = None
        self._opened: float | None = None
        self._thread: threading.Thread | None = None
        self.refused = False
        #: the objects held, by name, once the first list answered, and each one's size
        self.objects: Objects = {}
        self._sizes: dict[str, int] = {}
        #: what the followers were last told (see _view)
        self.current: Any = None
        self.synced = False
        self.resource_version: str | None = None
        #: whether to ask for the WatchList rather than list (off for good once refused)
        self.watch_list = False
        #: the objects of a WatchList's initial events so far, until its closing bookmark
        self._initial: Objects | None = None
        self._initial_sizes: dict[str, int] = {}
        self._log = get_logger(watch=what)

    def _view(self) -> Any:
        """What the followers are told (under the lock): a copy of the objects held."""
        return dict(self.objects)

    # ------------------------------------------------------------- followers

    def follow(self, on_change: Callable[[Any], None], on_refused: Callable[[], None]) -> None:
        """Call ``on_change(view)`` whenever what is held may have changed, and
        ``on_refused()`` once if the server refuses the watch."""
        with self._lock:
            self._followers.append((on_change, on_refused))
            refused, synced, current = self.refused, self.synced, self.current
        if refused:
            on_refused()
        elif synced:
            on_change(current)

    def unfollow(self, on_change: Callable[[Any], None]) -> bool:
        """Stop telling ``on_change``; True when nobody follows any longer."""
        with self._lock:
            # equal, not identical: each reading of a bound method is a new object
            self._followers = [pair for pair in self._followers if pair[0] != on_change]
            return not self._followers

    def _tell(self) -> None:
        with self._lock:
            self.current, self.synced = self._view(), True
            current = self.current
            followers = [pair[0] for pair in self._followers]
        for follower in followers:
            try:
                follower(current)
            except Exception:  # a follower's bug must not end the watch
                self._log.exception("a follower of the watch failed")

    def _hold(self, held: Objects, sizes: dict[str, int], obj: JSON, present: bool) -> None:
        name = name_of(obj)
        if present and self._keep(obj):
            if name not in held and len(held) >= MAX_OBJECTS:
                raise bad_answer(f"more than {MAX_OBJECTS} objects of {self.what}")
            size = held_size(obj)
            if sum(sizes.values()) - sizes.get(name, 0) + size > MAX_HELD_BYTES:
                raise bad_answer(f"more than {MAX_HELD_BYTES >> 20} MiB of {self.what}")
            held[name], sizes[name] = obj, size
        else:
            held.pop(name, None)
            sizes.pop(name, None)

    def _give_up(self, reason: str) -> None:
        with self._lock:
            self.refused = True
            followers = [pair[1] for pair in self._followers]
        self._log.warning(f"cannot watch {self.what}; {self._fallback}", error=reason)
        for follower in followers:
            follower()

    # ------------------------------------------------------------- the thread

    def start(self) -> None:
        thread = threading.Thread(target=self._run, name=f"gfd-watch-{self.name}", daemon=True)
        self._thread = thread
        signals.start_thread(thread)

    def stop(self) -> None:
        """End the thread: a stream in progress is shut down (its blocking read ends)."""
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # already closed, or gone between the test and the call
                self._log.debug("watch stream already closed")

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        except interrupt.Interrupted:
            return
        except Refused as exc:
            self._give_up(str(exc))
        except Exception as exc:  # a bug: fall back to re-reading rather than follow nothing
            self._log.exception("the watch ended unexpectedly")
            self._give_up(f"{type(exc).__name__}")
        finally:
            self._client.close()

    def _loop(self) -> None:
        failures = 0
        refusals = 0  # 403 or 405 in a row
        warned = False  # the failures since the last healthy stream were reported
        listed = False  # this attempt reads the state whole (a 410 then is no resume's)
        while not self._stopping.is_set():
            self._opened = None
            answered = True  # whether the server answered this attempt's failure
            try:
                if self.resource_version is None:
                    if not self.watch_list:
                        self._list()
                        if failures and self._stopping.wait(stream_wait()):
                            return
                    listed = True  # the state is read whole: by the list, or the WatchList
                self._stream()
                listed = False
            except Gone:
                if not listed:
                    self.resource_version = None  # list once more, at once
                    continue
                self.resource_version = None
                failures += 1  # gone right after a list: wait before listing again
            except NoWatchList:
                continue  # list at once: the server is there, it only lacks the WatchList
            except Refused:
                refusals += 1
                if refusals >= REFUSALS_BEFORE_GIVING_UP:
                    raise
                failures += 1
            except (KubeError, PublishError) as exc:
                if self._served_healthy():
                    failures, warned = 0, False  # a new outage: said again, waits from the start
                failures += 1
                answered = isinstance(exc, KubeError) and exc.status is not None
                if not isinstance(exc, KubeError) or exc.status != 429:
                    # list again rather than resume: no answer is most often a restarted
                    # server, which answers a resume 410; an error answer may be about the
                    # version itself (one the server has not reached, after a restore of
                    # etcd, is answered 504 however often it is asked for), as client-go's
                    # reflector relists after a failed watch; "too many requests" is not
                    self.resource_version = None
                if not warned:  # one line for a run of failures, not one per attempt
                    warned = True
                    self._log.warning(
                        f"watch of {self.what} interrupted; reconnecting", error=_text(exc)
                    )
            else:
                refusals = 0
                if self._served_healthy():
                    failures, warned = 0, False
                else:
                    failures += 1  # ended early: never a tight loop against a flaky server
            if self._stopping.is_set():
                return
            if failures:
                self._stopping.wait(reconnect_wait(failures, answered))

    # ------------------------------------------------------------- list and stream

    def _list(self) -> None:
        """List what the selector picks, page by page: the objects and the version to watch
        from."""
        objects: Objects = {}
        sizes: dict[str, int] = {}
        token = ""
        for _ in range(-(-MAX_OBJECTS // PAGE_SIZE)):
            query = {"fieldSelector": self.selector, "limit": str(PAGE_SIZE)}
            if token:
                query["continue"] = token
            answer = self._page(urlencode(query))
            items = answer.get("items")
            meta = answer.get("metadata") or {}
            version = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if not isinstance(items, list) or not isinstance(version, str) or not version:
                raise bad_answer("a list without items or a resourceVersion")
            for item in items:
                if isinstance(item, dict) and self._belongs(item) and self._keep(item):
                    objects[name_of(item)], sizes[name_of(item)] = item, held_size(item)
            if sum(sizes.values()) > MAX_HELD_BYTES:
                raise bad_answer(f"more than {MAX_HELD_BYTES >> 20} MiB of {self.what}")
            token = cont if isinstance(cont := meta.get("continue"), str) else ""
            if not token:
                break
        if token or len(objects) > MAX_OBJECTS:  # pages left after the last one allowed
            raise bad_answer(f"more than {MAX_OBJECTS} objects of {self.what}")
        self.objects, self._sizes = objects, sizes
        self.resource_version = version
        self._tell()

    def _page(self, query: str) -> JSON:
        # one attempt: the loop's jittered reconnect is the retry policy, so that a fleet
        # whose server went away does not come back in step with a fast retry schedule
        try:
            return self._client.request("GET", f"{self._collection}?{query}")
        except KubeError as error:
            if error.status in REFUSED_STATUSES:
                raise Refused(error.describe()) from None
            raise

    def _stream(self) -> None:
        seconds = int(WATCH_SECONDS * random.uniform(1.0, 1.25))
        query = {
            "watch": "1",
            "fieldSelector": self.selector,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        if self.resource_version is not None:
            query["resourceVersion"] = self.resource_version
        else:  # the object as it is now, a bookmark closing that, then the changes
            query.update(sendInitialEvents="true", resourceVersionMatch="NotOlderThan")
            self._initial, self._initial_sizes = {}, {}
        path = f"{self._collection}?{urlencode(query)}"
        try:
            open_stream(self._client, path, self._read_events)
        except KubeError as error:
            if self._initial is None or error.status not in NO_WATCH_LIST_STATUSES:
                raise
            self.watch_list = False
            self._log.debug("the server does not serve the WatchList; listing instead")
            raise NoWatchList() from None
        finally:
            self._initial = None  # a stream that ended before its closing bookmark told nothing

    def _served_healthy(self) -> bool:
        opened = self._opened  # when this attempt's stream began to be read, if it did
        return opened is not None and self._clock() - opened >= HEALTHY_STREAM_SECONDS

    def _read_events(self, response: Any) -> None:
        self._opened = self._clock()
        budget = EventBudget(self._clock)
        self._response = response
        buffer = b""
        try:
            while not self._stopping.is_set():
                chunk = response.read1(_READ_BYTES)
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    # a blank line counts too: the server never sends one, and a stream
                    # of them would cost as much to read as events, for as long as it lasts
                    budget.take()
                    if line.strip():
                        self._event(line)
                if len(buffer) > MAX_EVENT_BYTES:
                    raise bad_answer(f"a watch event of more than {MAX_EVENT_BYTES} bytes")
        finally:
            self._response = None

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            raise bad_answer("a watch event that is not JSON") from None
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise bad_answer("a watch event that is not an object with an object")
        if not nested_within(event, MAX_NESTING + 1):
            raise bad_answer(f"a watch event nested more than {MAX_NESTING} levels deep")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise KubeError(quote_answer(str(obj.get("message") or "")), status=_code(obj))
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if not isinstance(version, str) or not version:
            raise bad_answer("a watch event without a resourceVersion")
        if kind == "BOOKMARK":
            if self._initial is not None:
                self._initial_events_end(metadata, version)
            else:
                self.resource_version = version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not self._belongs(obj):
            raise bad_answer(
                f"a watch event of another kind or object ({quote_answer(str(kind), 20)})"
            )
        if self._initial is not None:  # the state as it is now: told whole, at its end
            self._hold(self._initial, self._initial_sizes, obj, kind != "DELETED")
            return
        self._hold(self.objects, self._sizes, obj, kind != "DELETED")
        self.resource_version = version
        self._tell()

    def _initial_events_end(self, metadata: JSON, version: str) -> None:
        annotations = metadata.get("annotations")
        if not isinstance(annotations, dict) or annotations.get(INITIAL_EVENTS_END) != "true":
            # a bookmark before the closing one: the server took the parameters but does not
            # serve the WatchList (what it sent is no whole state): list from now on
            self.watch_list = False
            raise bad_answer("a bookmark before the end of a WatchList's initial events")
        self.objects, self._sizes = self._initial or {}, self._initial_sizes
        self._initial = None
        self.resource_version = version
        self._tell()


class NoWatchList(Exception):
    """The server does not serve the WatchList's parameters."""


class ObjectWatch(CollectionWatch):
    """Follow the one object ``name`` of ``collection``: the followers are told the object
    (None: absent).  Its first state, and its state after each failure, come from the
    WatchList: one object's initial events are one, well within the stream's bounds."""

    def __init__(
        self,
        client: KubeClient,
        collection: str,
        name: str,
        what: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            client,
            collection,
            f"metadata.name={name}",
            what,
            belongs=lambda obj: name_of(obj) == name,
            clock=clock,
        )
        self.name = name
        self.watch_list = True

    def _view(self) -> JSON | None:
        return self.objects.get(self.name)


def watch_client(kubeconfig: str | None, qps: float, burst: int, limiter: Any = None) -> KubeClient:
    """A client for one watch's thread: its requests end by the stream's deadline, and it
    shares the outputs' rate limit (``limiter``) when given."""
    client = KubeClient(
        kubeconfig,
        budget=30.0,
        request_timeout=WATCH_SECONDS * 1.25 + STALL_GRACE_SECONDS,
        qps=qps,
        burst=burst,
    )
    if limiter is not None:
        client.rate_limiter = limiter
    return client


def name_of(obj: JSON) -> str:
    """An object's ``metadata.name`` ("" when it has none)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _code(status: JSON) -> int | None:
    code = status.get("code")
    return code if isinstance(code, int) and 100 <= code <= 599 else None


def _text(exc: Exception) -> str:
    return exc.describe() if isinstance(exc, KubeError) else str(exc)


# ----------------------------------------------------------------- one watch per object

_watches: dict[tuple[str, str], ObjectWatch] = {}
_registry_lock = threading.Lock()


def follow(
    client: Callable[[], KubeClient],
    collection: str,
    name: str,
    what: str,
    on_object: Follower,
    on_refused: Callable[[], None],
) -> ObjectWatch:
    """Follow one object, with the watch already running for it or a new one (whose client
    ``client()`` makes)."""
    key = (collection, name)
    with _registry_lock:
        watch = _watches.get(key)
        if watch is None or watch._stopping.is_set():
            watch = ObjectWatch(client(), collection, name, what)
            _watches[key] = watch
            watch.start()
    watch.follow(on_object, on_refused)
    return watch


def unfollow(watch: ObjectWatch, on_object: Follower) -> None:
    """Stop following; the watch ends with its last follower."""
    with _registry_lock:
        if watch.unfollow(on_object):
            watch.stop()
            if _watches.get((watch._collection, watch.name)) is watch:
                del _watches[(watch._collection, watch.name)]
