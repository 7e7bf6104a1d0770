"""Where the API client's credential comes from, for the credential kinds that need more
than the ``kubernetes`` client's loaders give: a token file that is re-read, and an exec
credential plugin that is run under bounds.  Both plug into the client through its own
seam, ``Configuration.refresh_api_key_hook``, which the client calls before every request
to fill the ``Authorization`` header; everything else (TLS, client certificates, static
tokens, basic auth) stays the client's.

Token files (a kubeconfig user's ``tokenFile``, and the in-cluster service-account token)
are read as client-go reads them (transport/token_source.go: ``fileTokenSource.Token``
trims surrounding whitespace and refuses an empty token; ``NewCachedFileTokenSource``
keeps a token for a minute and reads the file again 10 s before that; ``cachingTokenSource``
keeps the last good token when a read fails).  gfd also reads it again after a 401, so a
rotated token is picked up by the next pass instead of a minute later.

Exec credential plugins (client.authentication.k8s.io v1 and v1beta1) are run as client-go
runs them (plugin/pkg/client/auth/exec/exec.go: ``refreshCredsLocked``; the credential is
kept until its ``expirationTimestamp``, or until a 401), with bounds client-go does not set:

- the plugin shares the deadline of the request that needs it (at most the request limit of
  10 s, less when the operation's budget has less left); past it, it is killed;
- it runs in its own session, so it and every process it started (in that session) are
  killed together when it ends, fails or runs out of time: nothing is left behind;
- at most :data:`MAX_EXEC_OUTPUT_BYTES` of its standard output is read; standard error is
  drained and only its last :data:`EXEC_STDERR_KEPT_BYTES` kept, of which a short excerpt
  (credentials redacted) may appear in the one line that says why it failed;
- its standard output -- the credential -- never appears in any message.

A plugin that fails is a runtime fault: the request that needed it fails (not retried:
another run within the same pass would fail the same way), and the daemon's next pass runs
it again.  That includes a plugin binary that is missing: it may be installed or mounted
after gfd starts.  What is wrong in the kubeconfig itself (no ``command``, an API version
gfd does not speak, a plugin that needs a terminal) is a usage error at start.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import Any

from gfd import redaction
from gfd.echo import clip
from gfd.kube import kubeconfig as kubeconfig_rules
from gfd.kube.credential_source import (
    CredentialError,
    CredentialSource,
    FileToken,
    unsafe_header_value,
)
from gfd.kube.exec_plugin import ExecPlugin, check_key_pair
from gfd.values import is_host

# ----------------------------------------------------------------- loading


def load(
    kubeconfig: str | None, configuration: Any, origin: str = "--kubeconfig"
) -> CredentialSource | None:
    """Fill ``configuration`` from ``kubeconfig`` (None: the in-cluster service account) with
    the client's own loaders; the source gfd puts in front of them for a token file or an
    exec plugin, or None where the client's static credential is all there is.

    What the client's loaders would do without bounds is taken out of their hands before
    they run: a ``tokenFile`` (read once, untrimmed, without a size limit) and an ``exec``
    plugin (run with no timeout, its stderr echoed whole).  An ``auth-provider`` is refused:
    upstream gpu-feature-discovery registers none with client-go (which then fails with "no
    Auth Provider found"), and the Python client's would fetch tokens from the network
    without a timeout or write the kubeconfig back."""
    if not kubeconfig:
        return _in_cluster(configuration)

    from kubernetes.config import config_exception
    from kubernetes.config import kube_config as untyped

    kube_config: Any = untyped

    merger = _merged(kube_config, kubeconfig, origin)
    if merger.config is None:
        raise config_exception.ConfigException("Invalid kube-config file. No configuration found.")
    kubeconfig_rules.confirm_usable(merger.config)
    kubeconfig_rules.data_in_memory(merger.config)
    # the client's own loader; a context, user or cluster that is missing is its error
    loader = kube_config.KubeConfigLoader(config_dict=merger.config, config_base_path=None)
    context = loader.current_context.get("context") or {}
    user_name, cluster_name = context.get("user"), context.get("cluster")
    entry = merger.config["users"].get_with_name(user_name, safe=True) if user_name else None
    user = entry.value.get("user") if entry is not None else None
    source: CredentialSource | None = None
    where = f"users[name={clip(str(user_name), 60)}].user"
    if isinstance(user, dict):
        source = _user_source(user, user_name, entry, where, (merger, cluster_name))
    loader.load_and_set(configuration)
    if configuration.cert_file and configuration.key_file:
        check_key_pair(
            configuration.cert_file,
            configuration.key_file,
            f"{where}: its client certificate and key",
        )
    if source is None:
        _check_static(configuration, user_name, where)
    return source


def _merged(kube_config: Any, kubeconfig: str, origin: str) -> Any:
    """The client's merger over the files client-go would read, the first file's
    ``current-context`` winning as in client-go (gfd.kube.kubeconfig)."""
    files = kubeconfig_rules.kubeconfig_files(kubeconfig, origin)
    merger = kube_config.KubeConfigMerger("")
    documents = []
    for path in files:
        merger.load_config(path)
        documents.append(merger.config_files.get(path))
    first = kubeconfig_rules.first_current_context(documents)
    if merger.config is not None and first is not None:
        merger.config.value["current-context"] = first
    return merger


def _in_cluster(configuration: Any) -> CredentialSource:
    """The in-cluster service account: the client's loader, and its token file re-read."""
    from kubernetes.config import incluster_config

    incluster: Any = incluster_config  # untyped
    _check_service_address(os.environ)
    incluster.load_incluster_config(client_configuration=configuration)
    service_account = FileToken(incluster.SERVICE_TOKEN_FILENAME, "the service account token")
    service_account.token()  # as the client's loader: no token at start is an error at start
    return service_account


def _check_service_address(environ: Mapping[str, str]) -> None:
    """The API server address the kubelet puts in a pod's environment, checked before the
    client joins it into a URL (it would take ``https://host:not-a-port`` and fail only at
    the first request, naming neither variable)."""
    host = environ.get("KUBERNETES_SERVICE_HOST")
    port = environ.get("KUBERNETES_SERVICE_PORT")
    if host is None or port is None:
        return  # the client's own message: not in a pod
    if not is_host(host):
        raise CredentialError(
            f"environment variable KUBERNETES_SERVICE_HOST {clip(host, 60)!r}: not an "
            "IP address or a DNS name"
        )
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        raise CredentialError(
            f"environment variable KUBERNETES_SERVICE_PORT {clip(port, 60)!r}: not a port "
            "number (1-65535)"
        )


def _user_source(
    user: dict[str, Any], user_name: Any, entry: Any, where: str, cluster_ref: tuple[Any, Any]
) -> CredentialSource | None:
    """The source for a kubeconfig user's ``tokenFile`` or ``exec``, both taken out of the
    user so the client's loaders never see them; an auth provider is refused."""
    source: CredentialSource | None = None
    base = os.path.dirname(os.path.abspath(entry.path)) if entry and entry.path else ""
    provider = user.get("auth-provider")
    if provider:
        name = provider.get("name") if isinstance(provider, dict) else None
        raise CredentialError(
            f"{where}.auth-provider: auth provider {clip(str(name), 60)!r} is not supported "
            "(as in upstream gpu-feature-discovery); use an exec credential plugin"
        )
    _remember_static(user_name, user)
    token_file = user.pop("tokenFile", None)
    exec_config = user.pop("exec", None)
    static_token = user.get("token") if isinstance(user.get("token"), str) else None
    if token_file:
        path = os.path.join(base, str(token_file))
        file_token = FileToken(path, f"{where}.tokenFile", fallback=static_token)
        file_token.token()  # as client-go: a token file that cannot be read is a config error
        source = file_token
    elif exec_config is not None and not static_token:
        if not isinstance(exec_config, dict):
            raise CredentialError(f"{where}.exec: expected a mapping")
        merger, cluster_name = cluster_ref
        cluster = merger.config["clusters"].get_with_name(cluster_name, safe=True)
        source = ExecPlugin(
            exec_config,
            f"{where}.exec",
            cwd=base,
            cluster=(cluster.value.get("cluster") if cluster is not None else None),
        )
    return source


def _check_static(configuration: Any, user_name: Any, where: str) -> None:
    """The static token or password the client loaded: kept out of every message, refused
    when it could not be sent as one header line."""
    value = configuration.api_key.get("BearerToken")
    if isinstance(value, str):
        redaction.remember(f"kubeconfig user {user_name} header", value)
        if unsafe_header_value(value):
            raise CredentialError(
                f"{where}: its token or password contains a line break or another control "
                "character (not shown)"
            )


def _remember_static(user_name: Any, user: Mapping[str, Any]) -> None:
    """The credentials written in a kubeconfig user, to keep out of every message."""

    values = [user.get(key) for key in ("token", "password", "client-key-data")]
    username, password = user.get("username"), user.get("password")
    if isinstance(username, str) and isinstance(password, str):
        pair = f"{username}:{password}"
        values.append(pair)
        values.append(base64.b64encode(pair.encode("utf-8", "replace")).decode("ascii"))
    redaction.remember(
        f"kubeconfig user {user_name}", *(v.strip() for v in values if isinstance(v, str))
    )
