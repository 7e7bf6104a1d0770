"""The Kubernetes client both API outputs share, and their one retry policy.

The real ``kubernetes`` client is imported here, and only when an API output is built, so the
file and stdout paths never pay for it.  Configuration comes from ``--kubeconfig`` or, without
it, the in-cluster service account.

Retry policy (SPEC §6.4): an *operation* (e.g. "get the NodeFeature, then create or update it")
is retried as a whole on connection errors, 429, 5xx and 409 — re-running it re-reads the
object, which is how a conflict is resolved.  Waits grow exponentially with jitter, honour
``Retry-After``, and the whole operation (requests and waits) is bounded by a budget of
``min(sleep interval / 2, 30 s)`` so that a pass never hangs past the sleep interval.  urllib3's
own retries are switched off: this is the only retry policy.  Anything else (403, 404 where an
object must exist, 422, ...) fails at once.  A final failure is a :class:`PublishError` whose
message says what was attempted, what went wrong and for how long it was tried.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gfd import __version__
from gfd.errors import PublishError, UsageError
from gfd.observability import get_logger

T = TypeVar("T")
JSON = dict[str, Any]

#: most seconds one operation may take (requests and waits) when the interval allows it
MAX_BUDGET_SECONDS = 30.0
#: most seconds one request may take
REQUEST_TIMEOUT_SECONDS = 10.0
#: shortest timeout a request is given, however little budget is left
MIN_REQUEST_TIMEOUT_SECONDS = 0.1
#: first wait between attempts, and the most any wait may grow to
INITIAL_WAIT_SECONDS = 0.1
MAX_WAIT_SECONDS = 5.0

MERGE_PATCH = "application/merge-patch+json"

_TRANSIENT_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


def retry_budget(sleep_interval: float | None) -> float:
    """Seconds one operation may take: half the interval, at most 30 s (30 s when infinite)."""
    if sleep_interval is None:
        return MAX_BUDGET_SECONDS
    return min(sleep_interval / 2, MAX_BUDGET_SECONDS)


class KubeError(Exception):
    """One failed attempt.  ``status`` is the HTTP status, or None when no answer came."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        return self.status is None or self.status in _TRANSIENT_STATUSES

    @property
    def not_found(self) -> bool:
        return self.status == 404

    def describe(self) -> str:
        if self.status is None:
            return self.message
        text = f"{self.status} {self.reason}".rstrip()
        if self.message:
            text += f": {self.message}"
        if self.status in (401, 403):
            text += " (check the service account's credentials and RBAC rules)"
        return text


class KubeClient:
    """A configured ``ApiClient`` plus the retry policy.

    ``sleep`` and ``clock`` are injectable so tests can drive the policy without waiting."""

    def __init__(
        self,
        kubeconfig: str | None,
        *,
        budget: float,
        request_timeout: float = REQUEST_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import kubernetes.client
        import kubernetes.config
        import yaml
        from kubernetes.config.config_exception import ConfigException

        # the client's functions are untyped; keep mypy --strict honest at this one seam
        client: Any = kubernetes.client
        config: Any = kubernetes.config

        configuration = client.Configuration()
        try:
            if kubeconfig:
                config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError) as exc:
            where = f"--kubeconfig {kubeconfig!r}" if kubeconfig else "in-cluster config"
            hint = "" if kubeconfig else " (not running in a pod? pass --kubeconfig)"
            detail = " ".join(str(exc).split())  # YAML errors span several lines
            raise UsageError(
                f"{where}: cannot load Kubernetes client configuration: {detail}{hint}"
            ) from None
        # tenacity below is the only retry policy; urllib3 must not retry behind its back
        configuration.retries = False
        self.server: str = configuration.host
        self._api: Any = client.ApiClient(configuration)
        self._api.user_agent = f"gfd/{__version__}"
        self._budget = budget
        self._request_timeout = request_timeout
        self._sleep = sleep
        self._clock = clock
        self._deadline: float | None = None
        self._log = get_logger()

    @property
    def api_client(self) -> Any:
        return self._api

    def close(self) -> None:
        self._api.close()

    # ------------------------------------------------------------- one request

    def timeout(self) -> float:
        """The timeout for the next request: the per-request limit or what the budget has left."""
        if self._deadline is None:
            return self._request_timeout
        left = self._deadline - self._clock()
        return max(MIN_REQUEST_TIMEOUT_SECONDS, min(self._request_timeout, left))

    def invoke(self, call: Callable[[float], T]) -> T:
        """Run one client call (given its timeout), turning every failure into a KubeError."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            return call(self.timeout())
        except ApiException as exc:
            raise _from_api_exception(exc, self.server) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeError(
                f"cannot reach the API server at {self.server}: {_short(exc)}"
            ) from None

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
    ) -> JSON:
        """One raw request to ``path`` (e.g. ``/api/v1/nodes/n1``); the decoded JSON answer.

        Used for core objects: the generated ``CoreV1Api`` module alone costs ~20 MB of
        memory, more than the whole rest of the agent."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self._api.param_serialize(
            method=method,
            resource_path=path,
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )

        def call(timeout: float) -> JSON:
            response: Any = self._api.call_api(*serialized, _request_timeout=timeout)
            data = response.read()
            if not 200 <= response.status <= 299:
                from kubernetes.client.exceptions import ApiException

                raise ApiException(http_resp=response)
            decoded = json.loads(data) if data else {}
            return decoded if isinstance(decoded, dict) else {}

        return self.invoke(call)

    # ------------------------------------------------------------- the retry policy

    def run(self, what: str, operation: Callable[[], T]) -> T:
        """Run ``operation`` under the retry policy; PublishError naming ``what`` on failure."""
        from tenacity import RetryCallState, Retrying, retry_if_exception

        started = self._clock()
        self._deadline = started + self._budget
        attempts = 0

        def counted() -> T:
            nonlocal attempts
            attempts += 1
            return operation()

        def out_of_budget(state: RetryCallState) -> bool:
            assert self._deadline is not None
            return self._clock() + (state.upcoming_sleep or 0.0) >= self._deadline

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            self._log.warning(
                "kubernetes API call failed, retrying",
                operation=what,
                attempt=state.attempt_number,
                wait_seconds=round(state.upcoming_sleep, 3),
                error=error.describe() if isinstance(error, KubeError) else str(error),
            )

        retrying = Retrying(
            retry=retry_if_exception(lambda exc: isinstance(exc, KubeError) and exc.transient),
            stop=out_of_budget,
            wait=_backoff,
            sleep=self._sleep,
            before_sleep=log_retry,
            reraise=True,
        )
        try:
            return retrying(counted)
        except KubeError as error:
            elapsed = self._clock() - started
            tried = (
                f" (gave up after {attempts} attempts in {elapsed:.1f}s)" if error.transient else ""
            )
            raise PublishError(f"{what}: {error.describe()}{tried}") from None
        finally:
            self._deadline = None


def _backoff(state: Any) -> float:
    """Exponential backoff with equal jitter, at least any Retry-After, capped."""
    base = min(MAX_WAIT_SECONDS, INITIAL_WAIT_SECONDS * 2 ** (state.attempt_number - 1))
    wait = base / 2 + random.uniform(0, base / 2)
    error = state.outcome.exception() if state.outcome else None
    if isinstance(error, KubeError) and error.retry_after:
        wait = max(wait, error.retry_after)
    return float(min(wait, MAX_WAIT_SECONDS))


def _short(exc: BaseException) -> str:
    """The root cause of a connection failure ("Connection refused"), not urllib3's wrapping."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc) or type(exc).__name__


def _from_api_exception(exc: Any, server: str) -> KubeError:
    status = exc.status or None
    if status is None:
        return KubeError(f"cannot reach the API server at {server}: {exc.reason}")
    message = ""
    reason = str(exc.reason or "")
    try:
        body = json.loads(exc.body) if exc.body else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        message = str(body.get("message") or "")
        reason = str(body.get("reason") or reason)
    retry_after: float | None = None
    headers = exc.headers or {}
    raw_retry = headers.get("Retry-After") if hasattr(headers, "get") else None
    if raw_retry:
        try:
            retry_after = float(raw_retry)
        except ValueError:
            retry_after = None
    return KubeError(message, status=int(status), reason=reason, retry_after=retry_after)
