"""What a path named by a less trusted channel may name.

The command line and the environment are the pod spec: whoever writes them decides what the
container mounts and runs, so a path they name is taken as given.  The config file is a
ConfigMap (and the per-node entry of ``--config-file-srcdir`` one too): whoever may edit it
controls labels, not the node.  A path it names is read (machine type, snapshot), loaded
from (driver root) or written (features file, koordlet directory), and the content of what
is read can end up in a label or an error line.  So each path-valued option of the option
table (gfd.options) carries a :class:`PathRule`, and :func:`refusal` is the one check of a
value that came from the config file: never a tree of the kernel's (``/proc``, ``/sys``,
``/dev``) except the part the option exists for, never a credential (the service-account
token, kubelet's and the control plane's files, the kubeconfig in use, an exec plugin's
credential folder) -- after ``..`` is folded and again after every symbolic link is
followed, so neither a traversal nor a link planted in an allowed place leads there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

#: trees no path named by the config file may lead into (beyond a rule's ``may_name``)
DENIED_TREES = (
    "/proc",
    "/sys",
    "/dev",
    "/run/secrets",
    "/var/run/secrets",  # the service-account token (in-cluster credentials)
    "/var/lib/kubelet",
    "/etc/kubernetes",
    "/root/.kube",
)
#: the folder an exec plugin's credential is kept in (gfd.kube.exec_plugin)
EXEC_CREDENTIAL_PREFIX = "gfd-exec-credential-"


@dataclass(frozen=True, slots=True)
class PathRule:
    """What the config file may name for one path-valued option."""

    #: trees inside :data:`DENIED_TREES` the option exists for (the machine type's DMI files)
    may_name: tuple[str, ...] = ()
    #: values that are not paths at all ("" for off, "-" for stdout)
    values: tuple[str, ...] = ()
    #: only ``may_name`` may be named (none: the file may not set the option at all), for
    #: an option whose file's content is published or shown (the machine type, a snapshot)
    confined: bool = False


def _forms(path: str) -> set[str]:
    """``path`` with ``..`` folded, and with every link followed too."""
    return {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}


def _under(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def _trees(paths: Iterable[str]) -> set[str]:
    return {form for path in paths for form in _forms(path)}


def refusal(rule: PathRule, value: str, credentials: Iterable[str] = ()) -> str | None:
    """Why the config file may not name ``value``; None when it may.

    ``credentials``: further files this run holds secrets in (its kubeconfig files)."""
    if value in rule.values:
        return None
    try:
        forms = _forms(value)
    except (OSError, ValueError):  # a NUL character: refused by the option's parser first
        return "is not a path a config file may name"
    allowed = _trees(rule.may_name)
    denied = _trees(DENIED_TREES)
    secrets = _trees(path for path in credentials if path)
    for form in forms:
        if any(_under(form, tree) for tree in allowed):
            continue
        if rule.confined:
            where = ", ".join(rule.may_name)
            return (
                f"leads outside {where}, and a config file may not name another place for it"
                if where
                else "a config file may not name one (set it on the command line or in "
                "the environment)"
            )
        if any(_under(form, tree) for tree in secrets) or any(
            part.startswith(EXEC_CREDENTIAL_PREFIX) for part in form.split("/")
        ):
            return "leads to a credential, which a config file may not name"
        for tree in sorted(denied):
            if _under(form, tree):
                return (
                    f"leads into {tree}, which a config file may not name "
                    "(set it on the command line or in the environment)"
                )
    return None
