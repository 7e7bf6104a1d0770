"""Fixtures shared by the process tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.process import Daemon


@pytest.fixture
def daemons() -> Iterator[Any]:
    started: list[Daemon] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Daemon:
        daemon = Daemon(*args, env=env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill()
