"""The API client's client-side rate limit (``--kube-api-qps``, ``--kube-api-burst``).

Upstream hands both to client-go (internal/flags/kubeclient.go), whose token bucket
(k8s.io/client-go/util/flowcontrol, golang.org/x/time/rate) lets ``burst`` requests go at
once and then one every ``1/qps`` seconds; a QPS of 0 means client-go's default of 5 and a
burst of 0 its default of 10; a negative QPS turns the limit off.  The Python client has no
such limiter, so this is the same bucket, with the clock and the sleep injected so tests
drive it without waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: client-go's defaults for a zero QPS or burst (k8s.io/client-go/rest: DefaultQPS, DefaultBurst)
CLIENT_GO_DEFAULT_QPS = 5.0
CLIENT_GO_DEFAULT_BURST = 10


class RateLimiter:
    """A token bucket: ``burst`` tokens, refilled at ``qps`` per second, one per request."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> None:
        self.qps = CLIENT_GO_DEFAULT_QPS if qps == 0 else qps
        self.burst = CLIENT_GO_DEFAULT_BURST if burst == 0 else burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        # one bucket serves the outputs' client and each watch's, each in its own thread: a
        # token counted by two at once would be given twice
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return self.qps < 0

    def reserve(self) -> float:
        """Take one token; the seconds until it is there (0.0: now).  The caller waits
        that long, or gives the token back with :meth:`cancel`."""
        if self.unlimited:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            # a reservation, as golang.org/x/time/rate makes one: the token is owed and the
            # caller waits until the bucket has refilled it
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def cancel(self) -> None:
        """Give back the token of a reservation the caller will not wait for."""
        if not self.unlimited:
            with self._lock:
                self._tokens += 1.0

    def wait(self) -> float:
        """Take one token, sleeping until it is there; the seconds slept."""
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay
