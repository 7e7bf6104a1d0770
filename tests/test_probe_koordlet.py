"""The koordlet device-info directory as a hostile node would leave it:
nothing planted inside it is followed, written through, renamed over or removed."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gfd import snapshot as snapshot_io
from gfd.errors import PublishError
from gfd.labels.partitioning import partition_table
from gfd.outputs.koordlet import FILE_NAME, TEMP_DIR, KoordletDeviceInfos
from gfd.partition_table import PartitionTable
from tests.process import run_gfd, run_gfd_here

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "snapshots"
DGX1 = EXAMPLES / "dgx1-v100-cube-mesh.yaml"


def symlink_to_victim(directory: Path, victim: Path) -> None:
    (directory / FILE_NAME).symlink_to(victim)


def fifo(directory: Path, victim: Path) -> None:
    os.mkfifo(directory / FILE_NAME)


def subdirectory(directory: Path, victim: Path) -> None:
    (directory / FILE_NAME).mkdir()


def temp_dir_symlink(directory: Path, victim: Path) -> None:
    (directory / TEMP_DIR).symlink_to(victim.parent)


def temp_dir_file(directory: Path, victim: Path) -> None:
    (directory / TEMP_DIR).write_text("not a directory")


def temp_dir_of_another_user(directory: Path, victim: Path) -> None:
    (directory / TEMP_DIR).mkdir()
    os.chmod(directory / TEMP_DIR, 0o777)
    os.chown(directory / TEMP_DIR, 4242, 4242)  # could swap the file before its rename


PLANTED: list[object] = [
    pytest.param(symlink_to_victim, id="file-is-symlink"),
    pytest.param(fifo, id="file-is-fifo"),
    pytest.param(subdirectory, id="file-is-directory"),
    pytest.param(temp_dir_symlink, id="temp-dir-is-symlink"),
    pytest.param(temp_dir_file, id="temp-dir-is-file"),
    pytest.param(temp_dir_of_another_user, id="temp-dir-of-another-user",
                 marks=pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")),
]  # fmt: skip


def snapshot_and_table() -> tuple[snapshot_io.Snapshot, PartitionTable]:
    snap = snapshot_io.load(str(DGX1))
    return snap, partition_table(snap, None)


def tree(path: Path) -> dict[str, str]:
    """Every entry under ``path`` (not following symlinks) with its kind and content."""
    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = Path(root) / name
            rel = str(entry.relative_to(path))
            if entry.is_symlink():
                found[rel] = "link:" + os.readlink(entry)
            elif entry.is_fifo():
                found[rel] = "fifo"
            elif entry.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = "file:" + entry.read_text()
    return found


@pytest.mark.parametrize("plant", PLANTED)
def test_planted_entries_are_refused_not_followed(
    plant: Callable[[Path, Path], None], tmp_path: Path
) -> None:
    directory, elsewhere = tmp_path / "device-infos", tmp_path / "elsewhere"
    directory.mkdir()
    elsewhere.mkdir()
    victim = elsewhere / "victim"
    victim.write_text("precious")
    plant(directory, victim)
    before_elsewhere, before_here = tree(elsewhere), tree(directory)
    args = ["--oneshot", "--snapshot-file", str(DGX1)]
    args += ["--koordlet-device-infos-dir", str(directory)]
    # the FIFO in a real process: one nobody writes must not block it (the timeout is a
    # hang guard); the rest in-process (tests/process.py run_gfd_here), the same command
    result = run_gfd(*args, timeout=60) if plant is fifo else run_gfd_here(*args)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("gfd: error: ") and str(directory) in last
    assert "Traceback" not in result.stderr
    assert tree(elsewhere) == before_elsewhere  # nothing written or created elsewhere
    assert tree(directory) == before_here  # nothing replaced, nothing left behind


@pytest.mark.parametrize("plant", PLANTED[:3])
def test_cleanup_never_removes_what_gfd_did_not_write(
    plant: Callable[[Path, Path], None], tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    directory = tmp_path / "device-infos"
    directory.mkdir()
    plant(directory, victim)
    before = tree(directory)
    output = KoordletDeviceInfos(str(directory))
    with pytest.raises(PublishError, match="not a regular file"):
        output.cleanup()
    assert tree(directory) == before
    assert victim.read_text() == "precious"


def test_the_operators_directory_may_itself_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    output = KoordletDeviceInfos(str(tmp_path / "link"))
    snap, table = snapshot_and_table()
    assert output.publish(snap, table) is True
    assert json.loads((real / FILE_NAME).read_text())[0]["vendor"] == "nvidia"
    output.cleanup()
    assert not (real / FILE_NAME).exists()


def test_a_file_edited_by_someone_else_is_written_again(tmp_path: Path) -> None:
    output = KoordletDeviceInfos(str(tmp_path))
    snap, table = snapshot_and_table()
    assert output.publish(snap, table) is True
    (tmp_path / FILE_NAME).write_text("[]")
    assert output.publish(snap, table) is True
    assert json.loads((tmp_path / FILE_NAME).read_text()) != []
    assert output.publish(snap, table) is False


def test_a_fifo_swapped_in_while_running_fails_the_pass_without_blocking(tmp_path: Path) -> None:
    output = KoordletDeviceInfos(str(tmp_path))
    snap, table = snapshot_and_table()
    output.publish(snap, table)
    (tmp_path / FILE_NAME).unlink()
    os.mkfifo(tmp_path / FILE_NAME)
    with pytest.raises(PublishError, match="not a regular file"):
        output.publish(snap, table)
    assert (tmp_path / FILE_NAME).is_fifo()


def test_its_own_temp_dir_left_writable_by_others_is_made_private(tmp_path: Path) -> None:
    (tmp_path / TEMP_DIR).mkdir()
    os.chmod(tmp_path / TEMP_DIR, 0o777)
    snap, table = snapshot_and_table()
    assert KoordletDeviceInfos(str(tmp_path)).publish(snap, table) is True
    assert (tmp_path / TEMP_DIR).stat().st_mode & 0o777 == 0o700


# ------------------------------------------------ --cleanup: everything gfd made


def test_cleanup_removes_the_working_directory_gfd_made(tmp_path: Path) -> None:
    """``--cleanup`` leaves nothing of gfd's behind: the device-info file, the working
    directory it is written through, and a temporary file a killed gfd left in it."""
    directory = tmp_path / "device-infos"
    directory.mkdir()
    args = ["--oneshot", "--snapshot-file", str(DGX1), "--koordlet-device-infos-dir"]
    assert run_gfd_here(*args, str(directory)).returncode == 0
    assert (directory / TEMP_DIR).is_dir()
    (directory / TEMP_DIR / "gfd-4242-0badcafe").write_text("[]")  # a killed run's
    (directory / "koordlets-own.json").write_text("[]")
    features = tmp_path / "features"
    result = run_gfd_here(
        "--cleanup", "-o", str(features), "--koordlet-device-infos-dir", str(directory)
    )
    assert result.returncode == 0, result.stderr
    assert tree(directory) == {"koordlets-own.json": "file:[]"}


def test_cleanup_leaves_a_working_directory_someone_else_filled(tmp_path: Path) -> None:
    (tmp_path / TEMP_DIR).mkdir()
    (tmp_path / TEMP_DIR / "not-gfds").write_text("precious")
    (tmp_path / TEMP_DIR / "gfd-link").symlink_to(tmp_path / TEMP_DIR / "not-gfds")
    KoordletDeviceInfos(str(tmp_path)).cleanup()
    assert tree(tmp_path / TEMP_DIR) == {
        "not-gfds": "file:precious", "gfd-link": "link:" + str(tmp_path / TEMP_DIR / "not-gfds"),
    }  # fmt: skip
