"""One watch stream: its opening (a GET whose answer is handed on unread, and the answers
that end it before it starts: 410 Gone, a refusal, any other error status, a compressed
body) and the bounds on what it may bring (events per second, bytes held)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from gfd.kube.client import KubeClient, KubeError, bad_answer, quote_answer
from gfd.kube.limits import REQUEST_TIMEOUT_SECONDS

#: statuses that mean "you may not watch this"
REFUSED_STATUSES = frozenset({403, 405})
#: events accepted at once, and per second after that
EVENT_BURST = 100
EVENTS_PER_SECOND = 10.0
#: the most the objects one watch holds may take together, as compact JSON (a node's
#: ResourceSlices take a few hundred KiB)
MAX_HELD_BYTES = 8 * 1024 * 1024


def held_size(obj: Any) -> int:
    """What ``obj`` takes as compact JSON (ASCII: characters are bytes)."""
    return len(json.dumps(obj, separators=(",", ":")))


class EventBudget:
    """A token bucket over events: a flood ends the stream."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._tokens = float(EVENT_BURST)
        self._last = clock()

    def take(self) -> None:
        now = self._clock()
        refill = (now - self._last) * EVENTS_PER_SECOND
        self._tokens = min(float(EVENT_BURST), self._tokens + refill)
        self._last = now
        if self._tokens < 1:
            raise bad_answer(
                f"more than {EVENT_BURST} events at once or {EVENTS_PER_SECOND:g} a second "
                "on one watch"
            )
        self._tokens -= 1


class Gone(Exception):
    """The version the watch would resume from is no longer available (410)."""


class Refused(Exception):
    """The server will not let gfd list or watch this object."""


def open_stream(client: KubeClient, path: str, reader: Callable[[Any], None]) -> None:
    """GET ``path`` and hand the answer, unread, to ``reader`` (the request's total deadline
    is the client's request timeout: see :func:`gfd.kube.watch.watch_client`)."""

    def call(timeout: float) -> None:
        api = client.api_client
        # the credential (a token file read, an exec plugin run) under an ordinary request's
        # deadline, not the stream's half hour
        stream_deadline = client._request_deadline
        client._request_deadline = time.monotonic() + REQUEST_TIMEOUT_SECONDS
        try:
            serialized = api.param_serialize(
                method="GET",
                resource_path=path,
                header_params={"Accept": "application/json", "Accept-Encoding": "identity"},
                auth_settings=["BearerToken"],
            )
        finally:
            client._request_deadline = stream_deadline
        if not serialized[2].get("authorization"):
            serialized[2].pop("authorization", None)  # a client certificate alone
        response: Any = api.call_api(*serialized, _request_timeout=timeout).response
        try:
            status = int(response.status)
            client.answered(status)  # a stream refused its rotated-out credential asks anew
            if status == 410:
                raise Gone()
            if status != 200:
                error = KubeError(
                    "", status=status, reason=quote_answer(str(response.reason or ""), 60)
                )
                if status in REFUSED_STATUSES:
                    raise Refused(error.describe())
                raise error
            encoding = str(response.headers.get("Content-Encoding") or "identity").lower()
            if encoding.strip() != "identity":
                raise bad_answer("a compressed watch stream, which gfd never asks for")
            reader(response)
        finally:
            response.close()

    client.invoke(call)
