"""The suite's own set-up (tests/conftest.py): where its temporary files go."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests import conftest
from tests.conftest import memory_temp_root


@pytest.mark.parametrize(
    "line",
    [
        "tmpfs /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime 0 0",  # no executables
        "/dev/vda /dev/shm ext4 rw,relatime 0 0",  # not memory
        "tmpfs /run tmpfs rw,relatime 0 0",  # no /dev/shm listed
    ],
)
def test_a_dev_shm_that_is_not_an_executable_tmpfs_is_not_used(line: str, tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\n{line}\n")
    assert memory_temp_root(str(mounts)) is None


def test_no_mount_table_means_no_memory_root(tmp_path: Path) -> None:
    assert memory_temp_root(str(tmp_path / "missing")) is None


def test_the_session_puts_temporary_files_where_it_chose(tmp_path: Path) -> None:
    chosen = conftest.chosen_temp_root
    if chosen is None:
        pytest.skip("no roomy tmpfs here, or TMPDIR given: temporary files stay put")
    assert os.environ["TMPDIR"] == chosen
    assert tempfile.gettempdir() == chosen
    assert tmp_path.resolve().is_relative_to(Path(chosen).resolve())
