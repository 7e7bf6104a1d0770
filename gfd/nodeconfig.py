"""Per-node configuration: the node label ``nvidia.com/device-plugin.config`` picks one entry
of a config directory (a ConfigMap mounted as files) as the node's config file.

This is what upstream's ``config-manager`` sidecar does for gpu-feature-discovery
(NVIDIA/k8s-device-plugin v0.20.0, ``cmd/config-manager/main.go``), built into the agent:

- the entries are the directory's plain files, less the ``..``-prefixed names a ConfigMap
  volume adds (main.go:477-492);
- a label naming an entry picks it; a label naming no entry is an error, never a fallback
  (main.go:351-357);
- no label: ``--default-config`` when set (and it must exist, main.go:359-366), else the
  ``--fallback-strategies`` in order -- ``named``: the entry called ``default``, ``single``:
  the only entry, ``empty``: no config file at all (main.go:368-392).

Upstream watches the Node (an informer, main.go:257-294) and SIGHUPs gfd; here the agent
reads its own Node once per pass (one GET) and switches through the same reload as SIGHUP.

The label is written by whoever may patch the Node.  Its value only ever selects among the
names the directory listing returned -- it is compared, never joined to a path -- so
``../../etc/passwd`` or a 10 MB value selects nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gfd.config_choice import _LABEL_VALUE, NAMED_FALLBACK_ENTRY, ConfigChoice
from gfd.echo import clip
from gfd.errors import ConfigError
from gfd.kube.client import KubeClient, bad_answer, path_segment, retry_budget
from gfd.kube.shapes import string_map
from gfd.kube.watch import JSON, ObjectWatch, follow, watch_client

if TYPE_CHECKING:
    from gfd.settings import Settings

#: the most entries a config directory may hold (a ConfigMap is at most 1 MiB in all)
MAX_ENTRIES = 1000
#: how many characters of a label value a message shows
SHOWN_VALUE_CHARS = 80


class NodeConfigError(ConfigError):
    """No entry of the config directory can be chosen for this node."""


def list_entries(srcdir: str) -> frozenset[str]:
    """The names of the config directory's entries: plain files (or links to them), less the
    ``..`` names of a ConfigMap volume's own bookkeeping."""
    names: set[str] = set()
    try:
        with os.scandir(srcdir) as scan:
            for item in scan:
                if item.name.startswith("..") or item.is_dir():
                    continue
                names.add(item.name)
                if len(names) > MAX_ENTRIES:
                    raise NodeConfigError(
                        f"--config-file-srcdir {clip(srcdir)!r}: more than {MAX_ENTRIES} entries"
                    )
    except OSError as exc:
        raise NodeConfigError(
            f"--config-file-srcdir {clip(srcdir)!r}: cannot list it: {exc.strerror or exc}"
        ) from None
    if not names:
        raise NodeConfigError(f"--config-file-srcdir {clip(srcdir)!r}: no config entries in it")
    return frozenset(names)


def _shown(value: str) -> str:
    return repr(clip(value, SHOWN_VALUE_CHARS))


def choose(
    label_key: str,
    label_value: str | None,
    entries: frozenset[str],
    default: str | None,
    fallbacks: Sequence[str],
) -> ConfigChoice:
    """The entry for a node whose label ``label_key`` is ``label_value`` (None or "": not set)."""
    available = ", ".join(sorted(entries)[:20]) + (" ..." if len(entries) > 20 else "")
    if label_value:
        if len(label_value) > 63 or not re.fullmatch(_LABEL_VALUE, label_value):
            raise NodeConfigError(
                f"node label {label_key}={_shown(label_value)}: not a label value "
                f"({len(label_value)} characters), so it names no config entry"
            )
        if label_value not in entries:
            raise NodeConfigError(
                f"node label {label_key}={_shown(label_value)}: no such config entry "
                f"(entries: {available})"
            )
        return ConfigChoice(label_value, f"node label {label_key}={label_value}")
    unset = f"node label {label_key} not set"
    if default:
        if default not in entries:
            raise NodeConfigError(
                f"{unset}, and the default config {_shown(default)} is no config entry "
                f"(entries: {available})"
            )
        return ConfigChoice(default, f"{unset}; default config {default}")
    for fallback in fallbacks:
        if fallback == "named" and NAMED_FALLBACK_ENTRY in entries:
            return ConfigChoice(
                NAMED_FALLBACK_ENTRY, f"{unset}, no default config; fallback named: entry default"
            )
        if fallback == "single" and len(entries) == 1:
            (only,) = entries
            return ConfigChoice(
                only, f"{unset}, no default config; fallback single: the only entry"
            )
        if fallback == "empty":
            return ConfigChoice(None, f"{unset}, no default config; fallback empty: no config file")
    tried = ",".join(fallbacks) or "none"
    raise NodeConfigError(
        f"{unset}, no default config (--default-config), and no fallback strategy applies "
        f"(--fallback-strategies {tried}; entries: {available})"
    )


def choose_for(settings: Settings, label_value: str | None) -> ConfigChoice:
    """:func:`choose` with the settings' directory, label, default and fallbacks."""
    assert settings.config_file_srcdir
    return choose(
        settings.node_label,
        label_value,
        list_entries(settings.config_file_srcdir),
        settings.default_config,
        settings.fallback_strategies,
    )


class NodeLabelReader:
    """Reads one label of this node: one GET of the Node per call, under the API outputs'
    retry policy -- or, once :meth:`watch` follows the Node (``list`` and ``watch`` on
    ``nodes``), the label as the watch last saw it, with no request at all."""

    def __init__(self, settings: Settings, *, client: KubeClient | None = None) -> None:
        self.node_name = settings.node_name or ""
        self.label = settings.node_label
        self._path = f"/api/v1/nodes/{path_segment(self.node_name)}"
        self._client = client or KubeClient(
            settings.kubeconfig,
            origin=settings.kubeconfig_origin,
            budget=retry_budget(settings.sleep_interval),
        )
        self._settings = settings
        self._watch: ObjectWatch | None = None
        self._seen: str | None = None

    def watch(self, wake: Callable[[], None]) -> None:
        """Follow the Node (gfd.kube.watch): ``wake()`` when the label changes."""

        def seen(node: JSON | None) -> None:
            value = _label_of(node, self.label)
            if value != self._seen:
                self._seen = value
                wake()

        settings = self._settings
        self._watch = follow(
            lambda: watch_client(
                settings.kubeconfig,
                settings.kube_api_qps,
                settings.kube_api_burst,
                self._client.rate_limiter,
            ),
            "/api/v1/nodes",
            self.node_name,
            f"Node {self.node_name}",
            seen,
            lambda: None,
        )

    def __call__(self) -> str | None:
        """The label's value; None when the node has no such label.  PublishError when the
        node cannot be read."""

        watch = self._watch
        if watch is not None and watch.synced and not watch.refused and watch.current:
            return _label_of(watch.current, self.label)

        def read() -> str | None:
            node = self._client.request("GET", self._path)
            if (node.get("metadata") or {}).get("name") != self.node_name:
                raise bad_answer(f"an object that is not node {self.node_name}")
            return string_map(node, "metadata", "labels").get(self.label)

        return self._client.run(f"read label {self.label} of node {self.node_name}", read)

    def close(self) -> None:
        self._client.close()


def _label_of(node: JSON | None, label: str) -> str | None:
    """The value of ``label`` on ``node`` as a watch saw it (None: absent, or not a string)."""
    labels = ((node or {}).get("metadata") or {}).get("labels")
    value = labels.get(label) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None
