"""Every output kind, declared once: how settings select it, what it needs, what identifies
it across a reload, and where its constructor lives.

``settings`` reads this table for the mutual-exclusion and node-name checks and for
``Settings.output_kind``; ``outputs.make_output`` reads it to build the output; the agent
reads it to decide whether a reload needs a new output.  Adding an output kind means one
entry here and one module that defines its class (taking the Settings as its argument).

This module imports nothing from gfd at module level, and constructors are named by a
dotted path, so settings can read the table without pulling in any output's dependencies
(the Kubernetes client stays unimported on the file and stdout paths).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from gfd.errors import UsageError
from gfd.files import real_path_or_same


@dataclass(frozen=True, slots=True)
class OutputKind:
    #: the output's short name, as in logs and metrics ("file", "nodefeature", ...)
    name: str
    #: "module:attribute" of a callable taking the Settings and returning the Output
    factory: str
    #: the Settings attributes this kind's output is built from: when one of them changes on
    #: reload, a new output is built
    identity: tuple[str, ...]
    #: the Settings attributes that say where this kind publishes (a subset of identity): a
    #: reload that changes the place retires the old one as --cleanup would
    place: tuple[str, ...] = ()
    #: the place is a path: compared once resolved (``./gfd`` and ``$PWD/gfd`` are one file)
    place_is_path: bool = False
    #: the boolean Settings attribute (the option of that name) that selects this kind;
    #: None: chosen by the features-file setting when no flag selects another kind
    selected_by: str | None = None
    #: the API outputs name the node they publish for
    needs_node_name: bool = False

    @property
    def flag(self) -> str:
        """The selecting flag, as messages name it."""
        return "--" + (self.selected_by or "output_file").replace("_", "-")

    def build(self, settings: Any) -> Any:
        module, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module), attribute)(settings)


def _api_kind(name: str, selected_by: str, factory: str) -> OutputKind:
    """An output that publishes to the API server, for one node, with a client whose retries
    are bounded by the interval."""
    identity = (
        "node_name",
        "namespace",
        "kubeconfig",
        "sleep_interval",
        "kube_api_qps",
        "kube_api_burst",
    )
    # not the kubeconfig: another file may well name the same cluster, and retiring the
    # "old" object there would delete what the new output just published
    place = ("node_name", "namespace") if name == "nodefeature" else ("node_name",)
    return OutputKind(name, factory, identity, place, selected_by=selected_by, needs_node_name=True)


OUTPUT_KINDS: tuple[OutputKind, ...] = (
    _api_kind("nodefeature", "use_node_feature_api", "gfd.outputs.nodefeature:NodeFeatureOutput"),
    _api_kind("node-labels", "use_node_labels", "gfd.outputs.nodelabels:NodeLabelsOutput"),
    OutputKind(
        "file",
        "gfd.outputs.file:file_output",
        ("effective_output_file", "sleep_interval", "effective_expiry_horizon"),
        ("effective_output_file",),
        place_is_path=True,
    ),
    OutputKind("stdout", "gfd.outputs.file:stdout_output", ()),
)

OUTPUT_KINDS_BY_NAME = {kind.name: kind for kind in OUTPUT_KINDS}


def output_kind_of(settings: Any) -> OutputKind:
    """The kind the settings select, checked: at most one selecting flag, and a node name
    where the kind needs one.  Raises UsageError naming the flags."""
    chosen = [
        kind for kind in OUTPUT_KINDS if kind.selected_by and getattr(settings, kind.selected_by)
    ]
    if len(chosen) > 1:
        flags = " and ".join(kind.flag for kind in chosen)
        raise UsageError(f"{flags}: choose at most one output")
    if chosen:
        kind = chosen[0]
    else:
        kind = OUTPUT_KINDS_BY_NAME["stdout" if settings.effective_output_file is None else "file"]
    if kind.needs_node_name and not settings.node_name:
        hint = ""
        if kind.name == "nodefeature":
            # the daemon's default output since upstream v0.20.0: say how to leave it
            hint = (
                " (the default output; --use-node-feature-api=false writes the NFD "
                "features file, --use-node-labels patches the Node)"
            )
        raise UsageError(f"--node-name (or NODE_NAME) is required with {kind.flag}{hint}")
    return kind


def output_identity(settings: Any) -> tuple[Any, ...]:
    """What identifies the output the settings build: equal identities, same output."""
    kind = output_kind_of(settings)
    return (kind.name, *(getattr(settings, name) for name in kind.identity))


def output_place(settings: Any) -> tuple[Any, ...]:
    """Where the output the settings build publishes: equal places, same destination."""
    kind = output_kind_of(settings)
    values = [getattr(settings, name) for name in kind.place]
    if kind.place_is_path:
        values = [real_path_or_same(value) for value in values]
    return (kind.name, *values)
