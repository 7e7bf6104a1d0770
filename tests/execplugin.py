"""Exec credential plugins for tests: a shell script that prints an ``ExecCredential``
(client.authentication.k8s.io), and the kubeconfig user that runs it."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

EXEC_API = "client.authentication.k8s.io/v1"


def write_plugin(directory: Path, body: str, *, name: str = "plugin") -> str:
    """An exec plugin: a shell script (starts in milliseconds, so even a short deadline
    leaves it time); its path."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def exec_credential(token: str, **status: str) -> str:
    """The one line a plugin prints: an ``ExecCredential`` holding ``token`` (and any
    other ``status`` field, e.g. ``expirationTimestamp``)."""
    answer = {
        "apiVersion": EXEC_API, "kind": "ExecCredential", "status": {"token": token, **status},
    }  # fmt: skip
    return json.dumps(answer)


def exec_user(command: str, **extra: Any) -> dict[str, Any]:
    """A kubeconfig user that runs ``command`` (never interactively)."""
    return {
        "exec": {"apiVersion": EXEC_API, "command": command, "interactiveMode": "Never", **extra}
    }
