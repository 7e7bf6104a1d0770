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

What a hostile or broken server cannot do (each is an error of that attempt, retried as a
5xx is; one log line, no traceback):

- hold a request open: every request has a *total* deadline (the time left in its budget,
  at most ``REQUEST_TIMEOUT_SECONDS``), enforced on every read of the socket, so headers
  trickled a line at a time end like a silent server does;
- make the agent read a huge answer: answers over ``MAX_ANSWER_BYTES`` are refused from
  their ``Content-Length`` or once that many bytes arrived, never read whole; compressed
  answers (never asked for) are refused;
- pass off a non-JSON answer, or JSON of the wrong shape, as an object;
- delay a stop: SIGTERM ends a request or a wait between retries at once (gfd.interrupt).
"""

from __future__ import annotations

import io
import json
import random
import re
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from gfd import __version__, interrupt, redaction
from gfd.documents import _yaml_problem
from gfd.echo import bounded_message, clip, describe, one_line
from gfd.errors import PublishError, UsageError
from gfd.kube import credentials
from gfd.kube.credential_source import CredentialError, CredentialSource
from gfd.kube.deadline import guard_connections
from gfd.kube.exec_plugin import CertificateFiles
from gfd.kube.limits import MIN_REQUEST_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS
from gfd.kube.ratelimit import RateLimiter
from gfd.observability import get_logger
from gfd.settings import DEFAULT_KUBE_API_BURST, DEFAULT_KUBE_API_QPS, Settings

T = TypeVar("T")
JSON = dict[str, Any]

#: most seconds one operation may take (requests and waits) when the interval allows it
MAX_BUDGET_SECONDS = 30.0
#: first wait between attempts, and the most any wait may grow to
INITIAL_WAIT_SECONDS = 0.1
MAX_WAIT_SECONDS = 5.0
#: the largest answer read: etcd refuses objects over ~1.5 MiB, so no real Node or
#: NodeFeature comes near this
MAX_ANSWER_BYTES = 3 * 1024 * 1024
#: how much of an error answer is read (a Status object is a few hundred bytes)
MAX_ERROR_BYTES = 64 * 1024
#: how many characters of anything a server sent may appear in a message
MAX_QUOTED_CHARS = 100
#: the deepest nesting of an answer (no object gfd reads nests past ~10): JSON reads ~900,
#: but Python's recursion runs out copying or serialising a few hundred
MAX_NESTING = 100

MERGE_PATCH = "application/merge-patch+json"

_TRANSIENT_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
_CHUNK_BYTES = 64 * 1024


def retry_budget(sleep_interval: float | None) -> float:
    """Seconds one operation may take: half the interval, at most 30 s (30 s when infinite)."""
    if sleep_interval is None:
        return MAX_BUDGET_SECONDS
    return min(sleep_interval / 2, MAX_BUDGET_SECONDS)


def path_segment(value: str) -> str:
    """``value`` as one URL path segment (names are validated earlier; this is a second
    guard that no ``/``, ``?`` or ``#`` can change which object a request addresses)."""
    return quote(value, safe="")


def publishing_client(settings: Settings) -> KubeClient:
    """The client an API output publishes through: the settings' kubeconfig, an operation
    budget of half the interval, and the outputs' client-side rate limit."""
    return KubeClient(
        settings.kubeconfig,
        origin=settings.kubeconfig_origin,
        budget=retry_budget(settings.sleep_interval),
        qps=settings.kube_api_qps,
        burst=settings.kube_api_burst,
    )


class KubeError(Exception):
    """One failed attempt.  ``status`` is the HTTP status, or None when no answer came.

    ``server_fault`` marks an answer that is not what the API returns (not JSON, the wrong
    shape, too large): retried like a 5xx."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
        server_fault: bool = False,
        credential: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.server_fault = server_fault
        self.credential = credential

    @property
    def transient(self) -> bool:
        """Worth another attempt in this operation.  A credential that cannot be had is
        not: the next pass asks again."""
        if self.credential:
            return False
        return self.server_fault or self.status is None or self.status in _TRANSIENT_STATUSES

    @property
    def not_found(self) -> bool:
        return self.status == 404 and not self.server_fault

    def describe(self) -> str:
        if self.status is None or self.server_fault:
            return self.message
        text = f"{self.status} {self.reason}".rstrip()
        if self.message:
            text += f": {self.message}"
        if self.status in (401, 403):
            text += " (check the service account's credentials and RBAC rules)"
        return text


def bad_answer(what: str) -> KubeError:
    """An answer of the wrong shape (a server fault: retried, one line)."""
    return KubeError(f"the API server sent {what}", server_fault=True)


def redact_url(url: str) -> str:
    """``url`` without a user name or password (``https://***@host``)."""
    return re.sub(r"(?<=://)[^/?#@]*@", "***@", url)


def quote_answer(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """At most ``limit`` characters of something a server sent, on one line, printable
    (credentials it echoed are taken out first, so that no part of one survives the cut).
    Every piece of an answer that reaches a message goes through here: a status line, a
    Status object, a watch event's message or type."""
    return clip(one_line(redaction.redact(text)), limit)


#: a Status message is quoted by its two ends: its head names the object, its tail says
#: why (an admission refusal puts the policy's own message last, after ~110 characters of
#: "nodes "n" is forbidden: ValidatingAdmissionPolicy '...' with binding '...' denied")
STATUS_HEAD_CHARS = 60
STATUS_TAIL_CHARS = 160


def _quote_status(text: str) -> str:
    flat = one_line(redaction.redact(text))
    if len(flat) > STATUS_HEAD_CHARS + STATUS_TAIL_CHARS + 5:
        head, tail = flat[:STATUS_HEAD_CHARS], flat[-STATUS_TAIL_CHARS:]
        flat = f"{head} ... ({len(flat)} characters in all) ... {tail}"
    return flat


def _load_configuration(
    kubeconfig: str | None, configuration: Any, where: str, origin: str
) -> CredentialSource | None:
    """Fill ``configuration`` with the client's own loaders, with gfd's bounded token files
    and exec plugins in front; what cannot be loaded is one UsageError naming ``where``."""
    import yaml
    from kubernetes.config.config_exception import ConfigException

    try:
        return credentials.load(kubeconfig, configuration, origin)
    except CredentialError as exc:
        raise UsageError(f"{where}: {exc}") from None
    except (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError) as exc:
        hint = "" if kubeconfig else " (not running in a pod? pass --kubeconfig)"
        # a YAML error's own text quotes the offending line, which may hold a token
        text = _yaml_problem(exc) if isinstance(exc, yaml.YAMLError) else str(exc)
        detail = quote_answer(redact_url(text))
        raise UsageError(
            f"{where}: cannot load Kubernetes client configuration: {detail}{hint}"
        ) from None


class KubeClient:
    """A configured ``ApiClient`` plus the retry policy.

    ``sleep`` and ``clock`` are injectable so tests can drive the policy without waiting."""

    def __init__(
        self,
        kubeconfig: str | None,
        *,
        budget: float,
        origin: str = "--kubeconfig",
        request_timeout: float = REQUEST_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = interrupt.sleep,
        clock: Callable[[], float] = time.monotonic,
        qps: float = DEFAULT_KUBE_API_QPS,
        burst: int = DEFAULT_KUBE_API_BURST,
    ) -> None:
        import kubernetes.client

        # the client's functions are untyped; keep mypy --strict honest at this one seam
        client: Any = kubernetes.client

        # the deadline of the request in flight: its reads, and the credential it needs
        self._request_deadline: float | None = None
        configuration = client.Configuration()
        where = f"{origin} {describe(kubeconfig)}" if kubeconfig else "in-cluster config"
        self._credentials = _load_configuration(kubeconfig, configuration, where, origin)
        host = str(configuration.host or "")
        self._secrets = _userinfo(host)
        self.server: str = redact_url(host)
        if not _is_http_url(host):
            raise UsageError(
                f"{where}: the API server address {quote_answer(self.server)!r} is not an "
                "http:// or https:// URL"
            )
        # tenacity below is the only retry policy; urllib3 must not retry behind its back
        configuration.retries = False
        if self._credentials is not None:
            self._credentials.install(
                configuration, lambda: self._request_deadline, self._use_certificate
            )
        self._certificate_files = CertificateFiles()
        self._api: Any = client.ApiClient(configuration)
        self._api.user_agent = f"gfd/{__version__}"
        # every read of the socket honours the request's total deadline
        guard_connections(self._api.rest_client.pool_manager, lambda: self._request_deadline)
        self._budget = budget
        self._request_timeout = request_timeout
        self._sleep = sleep
        self._clock = clock
        self._deadline: float | None = None
        self._log = get_logger()
        # upstream's --kube-api-qps/--kube-api-burst, which client-go enforces there
        self.rate_limiter = RateLimiter(qps, burst, clock=clock, sleep=sleep)

    @property
    def api_client(self) -> Any:
        return self._api

    def close(self) -> None:
        self._api.close()

    def _use_certificate(self, cert: str, key: str) -> None:
        """Authenticate with the client certificate an exec plugin gave: the connections made
        with the previous one (or none) are closed, as client-go closes them."""
        from kubernetes.client import rest

        configuration = self._api.configuration
        configuration.cert_file, configuration.key_file = self._certificate_files.write(cert, key)
        previous = self._api.rest_client
        self._api.rest_client = rest.RESTClientObject(configuration)
        guard_connections(self._api.rest_client.pool_manager, lambda: self._request_deadline)
        previous.pool_manager.clear()

    def scrub(self, text: str) -> str:
        """``text`` without the credentials of the server URL, nor any other (gfd.redaction)."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return redaction.redact(text)

    # ------------------------------------------------------------- one request

    def timeout(self) -> float:
        """The timeout for the next request: the per-request limit or what the budget has left."""
        if self._deadline is None:
            return self._request_timeout
        left = self._deadline - self._clock()
        return max(MIN_REQUEST_TIMEOUT_SECONDS, min(self._request_timeout, left))

    def _wait_for_rate_limit(self) -> None:
        """Wait for the client-side rate limit, never past the operation's time budget: a
        tiny --kube-api-qps must not hold a pass for minutes (a transient failure instead,
        so the pass fails, is counted, and the next one tries again)."""
        delay = self.rate_limiter.reserve()
        if delay <= 0:
            return
        if self._deadline is not None and self._clock() + delay > self._deadline:
            self.rate_limiter.cancel()
            raise KubeError(
                f"the client-side rate limit (--kube-api-qps {self.rate_limiter.qps:g}, "
                f"--kube-api-burst {self.rate_limiter.burst}) allows the next request in "
                f"{delay:.1f}s, after this operation's time budget"
            )
        self._sleep(delay)

    def invoke(self, call: Callable[[float], T]) -> T:
        """Run one client call (given its timeout) under a total deadline, turning every
        failure into a KubeError.  A stop request ends it with ``interrupt.Interrupted``."""
        import http.client

        import urllib3
        from kubernetes.client.exceptions import ApiException

        self._wait_for_rate_limit()
        timeout = self.timeout()
        self._request_deadline = time.monotonic() + timeout
        try:
            with interrupt.interruptible():
                return call(timeout)
        except CredentialError as exc:
            raise KubeError(str(exc), credential=True) from None
        except ApiException as exc:
            raise _from_api_exception(exc, self.server) from None
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            raise KubeError(
                f"cannot reach the API server at {self.server}: {self.scrub(_short(exc))}"
            ) from None
        except ValueError as exc:
            # http.client refusing a header value quotes the header: the credential
            raise KubeError(
                f"cannot send the request: {type(exc).__name__} (details not shown)",
                credential=True,
            ) from None
        finally:
            self._request_deadline = None

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
    ) -> JSON:
        """One raw request to ``path`` (e.g. ``/api/v1/nodes/n1``); the decoded JSON object.

        Used for every object: the generated API modules cost ~20 MB of memory (more than
        the rest of the agent) and read answers whole; here an answer is read under a cap."""
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if body is not None:
            headers["Content-Type"] = content_type

        def call(timeout: float) -> JSON:
            # serialised for each attempt: the credential is asked for here (token files
            # re-read, exec plugins run) under the attempt's deadline
            serialized = self._api.param_serialize(
                method=method,
                resource_path=path,
                header_params=dict(headers),
                body=dict(body) if body is not None else None,
                auth_settings=["BearerToken"],
            )
            if not serialized[2].get("authorization"):
                serialized[2].pop("authorization", None)  # a client certificate alone
            wrapped: Any = self._api.call_api(*serialized, _request_timeout=timeout)
            response: Any = wrapped.response  # the urllib3 response, not yet read
            status = int(response.status)
            self.answered(status)
            if not 200 <= status <= 299:
                raise _error_from_answer(response, status)
            return _decode_object(_read_capped(response, MAX_ANSWER_BYTES))

        return self.invoke(call)

    def answered(self, status: int) -> None:
        """Told every answer's status: a 401 means the credential was rotated out, and the
        next attempt reads it anew (token files re-read, exec plugins run again)."""
        if status == 401 and self._credentials is not None:
            self._credentials.rejected()

    # ------------------------------------------------------------- the retry policy

    def run(self, what: str, operation: Callable[[], T]) -> T:
        """Run ``operation`` under the retry policy; PublishError naming ``what`` on failure."""
        from tenacity import RetryCallState, Retrying, retry_if_exception

        started = self._clock()
        self._deadline = started + self._budget
        attempts = 0

        def counted() -> T:
            nonlocal attempts
            interrupt.check()
            attempts += 1
            return operation()

        def out_of_budget(state: RetryCallState) -> bool:
            assert self._deadline is not None
            return self._clock() + (state.upcoming_sleep or 0.0) >= self._deadline

        def log_retry(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            text = error.describe() if isinstance(error, KubeError) else str(error)
            self._log.warning(
                "kubernetes API call failed, retrying",
                operation=what,
                attempt=state.attempt_number,
                wait_seconds=round(state.upcoming_sleep, 3),
                error=bounded_message(self.scrub(text)),
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
            raise PublishError(self.scrub(f"{what}: {error.describe()}{tried}")) from None
        except interrupt.Interrupted as stopped:
            raise PublishError(f"{what}: {stopped}") from None
        finally:
            self._deadline = None


# ----------------------------------------------------------------- answers


def _read_capped(response: Any, limit: int) -> bytes:
    """The body of ``response``; a KubeError when it is larger than ``limit`` or compressed.

    A refused answer's connection is closed, never drained."""
    try:
        encoding = str(response.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise bad_answer(
                f"a compressed answer ({quote_answer(encoding)}), which gfd never asks for"
            )
        declared = response.headers.get("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise bad_answer(
                f"an answer of {int(declared)} bytes; no object is larger than {limit} bytes"
            )
        buffer = io.BytesIO()
        while True:
            chunk = response.read(_CHUNK_BYTES, decode_content=False)
            if not chunk:
                break
            buffer.write(chunk)
            if buffer.tell() > limit:
                raise bad_answer(f"an answer of more than {limit} bytes")
    except KubeError:
        response.close()
        raise
    response.release_conn()
    return buffer.getvalue()


def _decode_object(data: bytes) -> JSON:
    try:
        decoded = json.loads(data) if data else None
    except (ValueError, RecursionError):
        raise bad_answer(f"an answer that is not JSON: {quote_answer(_text(data))!r}") from None
    if not isinstance(decoded, dict):
        raise bad_answer(f"{type(decoded).__name__} where an object was expected")
    if not nested_within(decoded, MAX_NESTING):
        raise bad_answer(f"an answer nested more than {MAX_NESTING} levels deep")
    metadata = decoded.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad_answer(f"metadata as {type(metadata).__name__}, not an object")
    return decoded


def nested_within(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether ``value`` (decoded JSON) nests at most ``limit`` objects or lists deep."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return False
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def _error_from_answer(response: Any, status: int) -> KubeError:
    """A KubeError from a non-2xx answer: the Status object's message when there is one."""
    try:
        data = _read_capped(response, MAX_ERROR_BYTES)
    except KubeError:
        data = b""
    reason = str(getattr(response, "reason", "") or "")
    message = ""
    try:
        body = json.loads(data) if data else None
    except (ValueError, RecursionError):
        body = None
        message = quote_answer(_text(data))
    if isinstance(body, dict):
        message = _quote_status(str(body.get("message") or ""))
        reason = quote_answer(str(body.get("reason") or reason))
    return KubeError(
        message,
        status=status,
        reason=quote_answer(reason),
        retry_after=_retry_after(response.headers.get("Retry-After")),
    )


def _retry_after(raw: Any) -> float | None:
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


def _text(data: bytes) -> str:
    return data[: MAX_QUOTED_CHARS * 4].decode("utf-8", "replace")


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
        if isinstance(seen, TimeoutError | socket.timeout):
            return "no complete answer before the request's deadline"
        seen = seen.__cause__ or seen.__context__
    reason = getattr(exc, "reason", None)
    return quote_answer(str(reason if reason is not None else exc) or type(exc).__name__)


def _from_api_exception(exc: Any, server: str) -> KubeError:
    """The client raises ApiException itself only for TLS failures (status 0)."""
    status = exc.status or None
    if status is None:
        return KubeError(
            f"cannot reach the API server at {server}: {quote_answer(str(exc.reason))}"
        )
    return KubeError(quote_answer(str(exc.reason or "")), status=int(status))


# ----------------------------------------------------------------- the server address


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok


def _userinfo(url: str) -> list[str]:
    """The credentials in ``url`` (``user:pass`` and ``pass``), to keep out of messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    secrets = []
    if parts.password:
        secrets.append(parts.password)
    if "@" in parts.netloc:
        secrets.append(parts.netloc.rsplit("@", 1)[0])
    return sorted((s for s in secrets if s), key=len, reverse=True)
