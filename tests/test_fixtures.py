"""Fixture tests: snapshot x strategy x config -> the complete expected label set.

The expected files were reviewed by hand against SPEC §5 and upstream's internal/lm; a
missing or an extra label fails, and so does any changed value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.process import run_gfd

ROOT = Path(__file__).resolve().parent.parent
CASES: list[dict[str, Any]] = yaml.safe_load((ROOT / "tests/fixtures/cases.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["expected"] for c in CASES])
def test_fixture_labels(case: dict[str, Any]) -> None:
    from gfd import labels, snapshot
    from gfd.config import Config
    from gfd.outputs.file import format_labels
    from gfd.settings import load_config_file

    config = load_config_file(str(ROOT / case["config"])).config if "config" in case else Config()
    built = labels.build(
        snapshot.load(str(ROOT / case["snapshot"])), case["strategy"], config, None
    )
    expected = (ROOT / "tests/fixtures/expected" / f"{case['expected']}.labels").read_text()
    assert format_labels(built.labels) == expected


def test_fixture_through_the_command() -> None:
    """The same bytes come out of the real command line for one case per strategy."""
    for case in CASES:
        if case["expected"] not in {
            "dgx-a100-mig-varied.single",
            "dgx-a100-mig-mixed.mixed.renaming",
        }:
            continue
        args = ["--oneshot", "--no-timestamp", "--snapshot-file", case["snapshot"]]
        args += ["--mig-strategy", case["strategy"]]
        if "config" in case:
            args += ["--config-file", case["config"]]
        result = run_gfd(*args)
        assert result.returncode == 0, result.stderr
        expected = (ROOT / "tests/fixtures/expected" / f"{case['expected']}.labels").read_text()
        assert result.stdout == expected
