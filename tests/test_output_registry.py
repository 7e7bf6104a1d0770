"""The output registry: one declaration per output kind, read by settings, the factory and
the agent."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from gfd.errors import UsageError
from gfd.output_kinds import OUTPUT_KINDS, OutputKind, output_identity, output_kind_of
from gfd.outputs import make_output
from gfd.settings import Settings, resolve


@pytest.mark.parametrize("kind", OUTPUT_KINDS, ids=lambda kind: kind.name)
def test_every_kind_names_a_constructor_that_exists(kind: OutputKind) -> None:
    module, _, attribute = kind.factory.partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))


@pytest.mark.parametrize(("cli", "kind"), [
    ({"output_file": "-"}, "stdout"), ({"oneshot": True}, "stdout"), ({"output_file": "F"}, "file"),
])  # fmt: skip
def test_the_factory_builds_the_kind_the_settings_name(
    tmp_path: Path, cli: dict[str, object], kind: str
) -> None:
    settings = resolve({k: str(tmp_path / "gfd") if v == "F" else v for k, v in cli.items()}, {})
    assert settings.output_kind == kind
    assert make_output(settings).kind == kind


def test_the_node_name_is_checked_where_the_kind_is_chosen() -> None:
    for kind in OUTPUT_KINDS:
        if kind.needs_node_name:
            assert kind.selected_by is not None
            unnamed = Settings(**{kind.selected_by: True})  # type: ignore[arg-type]
            with pytest.raises(UsageError, match=f"--node-name .* required with {kind.flag}"):
                output_kind_of(unnamed)
            with pytest.raises(UsageError, match="--node-name"):
                make_output(unnamed)


def test_reload_identity_follows_what_the_output_is_built_from() -> None:
    base = Settings(output_file="/tmp/a")
    assert output_identity(base) == output_identity(Settings(output_file="/tmp/a"))
    assert output_identity(base) != output_identity(Settings(output_file="/tmp/b"))
    assert output_identity(base) != output_identity(Settings(output_file="-"))
    api = Settings(use_node_labels=True, node_name="n1")
    assert output_identity(api) != output_identity(Settings(use_node_labels=True, node_name="n2"))
