"""The credentials this process holds, so that no message it writes can carry one.

Every credential the API client reads (a kubeconfig token or password, a token file's
content, an exec plugin's token, a client key's data) is remembered here under the name of
its source, and :func:`redact` replaces each of them with ``***``.  Redaction runs where
text leaves the process -- every log record (gfd.observability) and the CLI's one error
line -- and, before any cutting to an excerpt, wherever something a server or a plugin sent
is quoted (gfd.kube.client), so that not even a prefix of a credential survives.

This is the last line of defence, not the first: gfd never formats a credential into a
message on purpose.  It catches what gfd cannot control: an API server or proxy that echoes
the request's ``Authorization`` header into its error, a plugin that prints its token on
stderr, an exception from the HTTP stack that quotes a header.
"""

from __future__ import annotations

import threading

#: values shorter than this are not redacted: replacing every "abc" in every line would
#: garble the log and protect nothing (a credential that short is guessed, not stolen)
MIN_SECRET_CHARS = 6
#: how many values one source keeps: the current one and those it replaced (a rotated
#: token may still be quoted by a request made before the rotation)
KEPT_PER_SOURCE = 4

_secrets: dict[str, tuple[str, ...]] = {}
_ordered: tuple[str, ...] = ()
#: one update at a time: the pass's client and a watch's each read their credentials in
#: their own thread, and an update computed before another's but stored after it would
#: drop the other's value from what is redacted
_lock = threading.Lock()


def remember(source: str, *values: str | None) -> None:
    """Hold ``values`` as the credentials of ``source`` (added to what it held before)."""
    global _ordered
    with _lock:
        kept = list(_secrets.get(source, ()))
        for value in values:
            if value and len(value) >= MIN_SECRET_CHARS and value not in kept:
                kept.insert(0, value)
        _secrets[source] = tuple(kept[:KEPT_PER_SOURCE])
        # the longest first: a token that contains another credential is replaced whole
        every = {v for vs in _secrets.values() for v in vs}
        _ordered = tuple(sorted(every, key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with every remembered credential replaced by ``***`` (``_ordered`` is read
    once: a tuple that an update replaces whole, never changes in place)."""
    for secret in _ordered:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def forget_all() -> None:
    """Drop every remembered credential (tests)."""
    global _ordered
    with _lock:
        _secrets.clear()
        _ordered = ()
