"""A kubeconfig means what client-go says it means: which files are read and how they are
merged (k8s.io/client-go/tools/clientcmd/loader.go), and which kubeconfigs are refused
(tools/clientcmd/validation.go ``ConfirmUsable``, and transport/transport.go's TLS rule).
Line numbers cite github.com/kubernetes/client-go at commit
32ce75a7d6bc6960fd048d3d1e3b34185418d8c8.

The ``kubernetes`` Python client merges and loads differently in places (the last file's
``current-context`` wins, a looping link in the list is skipped, a CA beside
``insecure-skip-tls-verify`` is silently ignored): the rules here run first, and what
client-go refuses is a CredentialError (one line, exit 2 at start).  Which files a value
names is checked where its origin is known (``--kubeconfig`` or ``KUBECONFIG``), so that
the one line names it.

Inline ``*-data`` certificates and keys are put in anonymous in-memory files
(gfd.kube.secret_files) before the client sees them: its own loader would write them to
the temporary directory, where a process killed before its clean-up leaves the key."""

from __future__ import annotations

import base64
import binascii
import errno
import os
import re
from typing import Any

from gfd.echo import clip
from gfd.errors import UsageError
from gfd.kube.credential_source import CredentialError
from gfd.kube.secret_files import SecretFile

#: a namespace name (validation.go:369-373: a DNS-1123 label)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

#: the exec API versions whose interactiveMode defaults to IfAvailable
_MODE_DEFAULTED = ("client.authentication.k8s.io/v1beta1", "client.authentication.k8s.io/v1alpha1")

#: the in-memory files of inline certificates and keys, by content: alive as long as the
#: process (the client opens them again for every connection), one per distinct content
_HELD: dict[bytes, SecretFile] = {}


# ----------------------------------------------------------------- which files are read


def kubeconfig_files(value: str, origin: str) -> list[str]:
    """The files of ``value`` (one path, or a ``:`` list) that are read, in order.

    loader.go:164-168: a list is split and each name kept once (``deduplicate``,
    loader.go:671-682); loader.go:228-233: a file of a list that does not exist is skipped;
    loader.go:235-237: one that exists but cannot be read (no permission, a looping link,
    a directory) is an error; loader.go:208-211: a single named file must exist."""
    names = list(dict.fromkeys(part for part in value.split(os.pathsep) if part))
    found: list[str] = []
    for name in names:
        path = os.path.expanduser(name)
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ENOENT and len(names) > 1:
                continue
            reason = "does not exist" if exc.errno == errno.ENOENT else _reason(exc)
            raise UsageError(f"{origin} {clip(name)!r}: {reason}") from None
        if not os.access(path, os.R_OK):
            raise UsageError(f"{origin} {clip(name)!r}: cannot be read (permission denied)")
        found.append(path)
    if not found:
        listed = ", ".join(repr(clip(name, 60)) for name in names[:4])
        raise UsageError(f"{origin}: none of the files it lists exists ({listed})")
    return found


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "cannot be read (a loop of symbolic links)"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"


def first_current_context(documents: list[Any]) -> str | None:
    """loader.go:256-274: values outside the maps are merged so that the first file that
    sets one wins (the Python client lets the last one win)."""
    for document in documents:
        if isinstance(document, dict) and document.get("current-context"):
            return str(document["current-context"])
    return None


# ----------------------------------------------------------------- ConfirmUsable


def confirm_usable(config: Any) -> None:
    """validation.go:183-224 ``ConfirmUsable`` for the current context, and the TLS rule
    of transport.go:84-86; the first rule broken is a CredentialError."""
    name = config.value.get("current-context") if hasattr(config, "value") else None
    if not name:
        raise CredentialError("no current-context is set")  # validation.go:197-199
    context_entry = _named(config, "contexts", name)
    if context_entry is None:  # validation.go:201-204
        raise CredentialError(f"context {clip(str(name), 60)!r} was not found")
    context = context_entry.value.get("context")
    context = context if isinstance(context, dict) else {}
    where = f"contexts[name={clip(str(name), 60)}]"
    user_name, cluster_name = context.get("user"), context.get("cluster")
    # validation.go:357-367
    for kind, key, ref in (("user", "users", user_name), ("cluster", "clusters", cluster_name)):
        if not ref:
            raise CredentialError(f"{where}: {kind} was not specified")
        if _named(config, key, ref) is None:
            raise CredentialError(f"{where}: {kind} {clip(str(ref), 60)!r} was not found")
    namespace = context.get("namespace")
    if namespace and not _DNS_LABEL.fullmatch(str(namespace)):  # validation.go:369-373
        raise CredentialError(
            f"{where}.namespace {clip(str(namespace), 60)!r}: not a DNS-1123 label"
        )
    _check_user(_named(config, "users", user_name), str(user_name))
    _check_cluster(_named(config, "clusters", cluster_name), str(cluster_name))


def _named(config: Any, key: str, name: Any) -> Any:
    value = getattr(config, "value", None)
    if not isinstance(value, dict) or not isinstance(value.get(key), list):
        return None
    return config[key].get_with_name(name, safe=True)


def _base(entry: Any) -> str:
    return os.path.dirname(os.path.abspath(entry.path)) if getattr(entry, "path", None) else ""


def _readable(base: str, value: Any, what: str) -> None:
    """validation.go:251-258, 290-305: a file the kubeconfig names must be readable
    (relative paths are the file's own: loader.go ``ResolveLocalPaths``)."""
    path = os.path.join(base, os.path.expanduser(str(value)))
    if not os.path.exists(path):
        raise CredentialError(f"{what} {clip(str(value))!r}: does not exist")
    if not os.access(path, os.R_OK):
        raise CredentialError(f"{what} {clip(str(value))!r}: cannot be read (permission denied)")


def _check_user(entry: Any, name: str) -> None:
    """validation.go:264-347 ``validateAuthInfo``."""
    user = entry.value.get("user") if entry is not None else None
    user = user if isinstance(user, dict) else {}
    where = f"users[name={clip(name, 60)}].user"
    methods = []
    if user.get("token"):
        methods.append("token")
    if user.get("username") or user.get("password"):
        methods.append("basic auth (username/password)")
    if len(methods) > 1:  # validation.go:338-340
        raise CredentialError(
            f"{where}: more than one authentication method: " + ", ".join(methods)
        )
    cert, key = "client-certificate", "client-key"
    if user.get(cert) or user.get(f"{cert}-data"):
        for field in (cert, key):  # validation.go:278-284
            if user.get(field) and user.get(f"{field}-data"):
                raise CredentialError(f"{where}: both {field} and {field}-data are set")
        if not user.get(key) and not user.get(f"{key}-data"):  # validation.go:286-288
            raise CredentialError(f"{where}: a client certificate without client-key(-data)")
        for field in (cert, key):
            if user.get(field):
                _readable(_base(entry), user[field], f"{where}.{field}")
    plugin = user.get("exec")
    if plugin is not None:
        _check_exec(plugin, user, where)
    if (user.get("as-uid") or user.get("as-groups") or user.get("as-user-extra")) and not user.get(
        "as"
    ):  # validation.go:343-345
        raise CredentialError(f"{where}: impersonation of a uid or groups without a user ('as')")


def _check_exec(plugin: Any, user: dict[str, Any], where: str) -> None:
    """validation.go:308-335: the exec plugin's required fields."""
    if not isinstance(plugin, dict):
        raise CredentialError(f"{where}.exec: expected a mapping")
    for field in ("command", "apiVersion", "interactiveMode"):
        if not isinstance(plugin.get(field) or "", str):  # client-go cannot even decode it
            raise CredentialError(f"{where}.exec.{field}: expected str")
    if user.get("auth-provider"):
        raise CredentialError(f"{where}: both exec and auth-provider are set")
    if not plugin.get("command"):
        raise CredentialError(f"{where}.exec.command: required")
    if not plugin.get("apiVersion"):
        raise CredentialError(f"{where}.exec.apiVersion: required")
    for index, item in enumerate(plugin.get("env") or []):
        if not isinstance(item, dict) or not item.get("name"):
            raise CredentialError(f"{where}.exec.env[{index}].name: required")
    # validation.go:323-330, with api/v1/defaults.go:27-36: v1beta1 defaults the mode to
    # IfAvailable, v1 must say
    if not plugin.get("interactiveMode") and plugin.get("apiVersion") not in _MODE_DEFAULTED:
        raise CredentialError(f"{where}.exec.interactiveMode: required")


def _check_cluster(entry: Any, name: str) -> None:
    """validation.go:227-261 ``validateClusterInfo``, and transport.go:84-86."""
    cluster = entry.value.get("cluster") if entry is not None else None
    where = f"clusters[name={clip(name, 60)}].cluster"
    if not isinstance(cluster, dict) or not cluster:  # validation.go:230-233
        raise CredentialError(f"{where}: empty")
    if not cluster.get("server"):  # validation.go:235-241
        raise CredentialError(f"{where}.server: required")
    ca = "certificate-authority"
    if cluster.get(ca) and cluster.get(f"{ca}-data"):  # validation.go:248-250
        raise CredentialError(f"{where}: both {ca} and {ca}-data are set")
    if cluster.get(ca):
        _readable(_base(entry), cluster[ca], f"{where}.{ca}")
    if cluster.get("insecure-skip-tls-verify") is True and (
        cluster.get(ca) or cluster.get(f"{ca}-data")
    ):
        raise CredentialError(
            f"{where}: insecure-skip-tls-verify with a {ca}: specifying a root certificate "
            "with the insecure flag is not allowed (client-go refuses it)"
        )


# ----------------------------------------------------------------- inline data


def data_in_memory(config: Any) -> None:
    """Replace the current context's inline ``*-data`` (base64 PEM) with the paths of
    in-memory files holding them, so the client never writes them to disk."""
    context_entry = _named(config, "contexts", config.value.get("current-context"))
    context = context_entry.value.get("context") if context_entry is not None else None
    if not isinstance(context, dict):
        return
    user_entry = _named(config, "users", context.get("user"))
    cluster_entry = _named(config, "clusters", context.get("cluster"))
    for entry, key, fields in (
        (user_entry, "user", ("client-certificate", "client-key")),
        (cluster_entry, "cluster", ("certificate-authority",)),
    ):
        values = entry.value.get(key) if entry is not None else None
        if not isinstance(values, dict):
            continue
        for field in fields:
            data = values.get(f"{field}-data")
            if not data:
                continue
            try:
                content = base64.standard_b64decode(str(data).encode())
            except (binascii.Error, ValueError):
                raise CredentialError(f"{key}.{field}-data: not base64 (not shown)") from None
            if content not in _HELD:
                _HELD[content] = SecretFile(content, field)
            values[field] = _HELD[content].path
            del values[f"{field}-data"]
