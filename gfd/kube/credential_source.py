"""What every credential gfd reads itself has in common: the source the client asks before
each request, the error a bad one raises, and the token file (read again on a schedule and
after a 401, as client-go does).  The module docstring of gfd.kube.credentials tells the
whole story; gfd.kube.exec_plugin holds the exec credential plugin."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gfd import redaction
from gfd.documents import read_text
from gfd.echo import clip
from gfd.errors import UsageError
from gfd.observability import get_logger

#: how long a token read from a file is used before the file is read again (client-go:
#: a minute, re-read 10 s before it runs out)
TOKEN_FILE_PERIOD_SECONDS = 60.0
TOKEN_FILE_LEEWAY_SECONDS = 10.0
#: the largest token file read (a service-account JWT is ~1 KiB)
MAX_TOKEN_FILE_BYTES = 64 * 1024
#: the most of an exec plugin's standard output read (an ExecCredential with a client
#: certificate chain and key is a few KiB)
MAX_EXEC_OUTPUT_BYTES = 1024 * 1024
#: how much of the end of an exec plugin's standard error is kept for the excerpt
EXEC_STDERR_KEPT_BYTES = 4096
#: the longest excerpt of a plugin's standard error a message quotes
EXEC_STDERR_EXCERPT_CHARS = 200
#: the exec credential API versions client-go speaks
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")

Deadline = Callable[[], "float | None"]


class CredentialError(UsageError):
    """A credential cannot be had.  Its message never contains a credential.

    At start it is a usage error (exit 2); while running, the API client turns it into the
    failure of one request (gfd.kube.client)."""


def unsafe_header_value(value: str) -> bool:
    """True when ``value`` cannot be sent as a header value (a line break or another control
    character, or a character HTTP/1.1 cannot carry): http.client would refuse it with an
    error that quotes the whole header, credential included."""
    return any(
        (ord(c) < 0x20 and c != "\t") or 0x7F <= ord(c) <= 0x9F or ord(c) > 0xFF for c in value
    )


def set_authorization(configuration: Any, value: str) -> None:
    """Put ``value`` (a whole ``Authorization`` header value) where the client reads it."""
    configuration.api_key["BearerToken"] = value
    configuration.api_key_prefix.pop("BearerToken", None)


#: told a client certificate and key (PEM) an exec plugin gave, when they change
CertificateUser = Callable[[str, str], None]


class CredentialSource:
    """Gives the ``Authorization`` header value for the next request ("" for none)."""

    def authorization(self, deadline: float | None) -> str:
        raise NotImplementedError

    def rejected(self) -> None:
        """The server answered 401: what is cached is not used again."""

    def install(
        self, configuration: Any, deadline: Deadline, use_certificate: CertificateUser
    ) -> None:
        """Make the client ask this source before every request (its own hook).

        ``use_certificate`` puts a client certificate in use (exec plugins may give one)."""
        del use_certificate
        set_authorization(configuration, "")  # the client asks the hook only for a known key

        def refresh(config: Any) -> None:
            set_authorization(config, self.authorization(deadline()))

        configuration.refresh_api_key_hook = refresh


# ----------------------------------------------------------------- token files


class FileToken(CredentialSource):
    """A bearer token read from ``path`` (trimmed), read again every minute and after a 401.

    ``fallback``: the static token to use while the file cannot be read (client-go uses
    the kubeconfig's ``token`` that way when a user has both)."""

    def __init__(
        self,
        path: str,
        where: str,
        *,
        fallback: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._where = where
        if fallback and unsafe_header_value(fallback):
            raise CredentialError(
                f"{where}: the token beside it contains a line break or another control "
                "character (not shown)"
            )
        self._fallback = fallback or None
        self._clock = clock
        self._token: str | None = None
        self._expires = 0.0
        self._log = get_logger()

    def token(self) -> str:
        now = self._clock()
        if self._token is not None and now < self._expires - TOKEN_FILE_LEEWAY_SECONDS:
            return self._token
        try:
            token = self._read()
        except CredentialError as exc:
            last = self._token or self._fallback
            if last is None:
                raise
            # as client-go: keep using the last good token; the server says whether it is
            self._log.warning(
                "cannot read the token file again; using the last token", error=str(exc)
            )
            self._token = last  # tried again when this runs out (or after a 401)
            self._expires = now + TOKEN_FILE_PERIOD_SECONDS
            return last
        self._token = token
        self._expires = now + TOKEN_FILE_PERIOD_SECONDS
        return token

    def _read(self) -> str:
        text = read_text(self.path, self._where, CredentialError, MAX_TOKEN_FILE_BYTES)
        token = text.strip()
        if not token:
            raise CredentialError(f"{self._where}: {clip(self.path)!r} holds no token")
        if unsafe_header_value(token):
            raise CredentialError(
                f"{self._where}: the token in {clip(self.path)!r} contains a line break or "
                "another control character (not shown)"
            )
        redaction.remember(f"token file {self.path}", token)
        return token

    def authorization(self, deadline: float | None) -> str:
        del deadline  # reading a regular file is bounded by its size
        return f"Bearer {self.token()}"

    def rejected(self) -> None:
        self._expires = 0.0
