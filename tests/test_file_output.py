"""The NFD features file: atomic replace, mode 0644, size limit, removal rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gfd.errors import PublishError
from gfd.outputs import make_output
from gfd.outputs.file import MAX_FEATURES_FILE_BYTES, FileOutput
from gfd.settings import resolve


def test_publish_writes_sorted_lines_atomically(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    output = FileOutput(str(path), remove_on_exit=True)
    output.publish({"nvidia.com/b": "2", "nvidia.com/a": "1"})
    assert path.read_text() == "nvidia.com/a=1\nnvidia.com/b=2\n"
    assert path.stat().st_mode & 0o777 == 0o644
    inode = path.stat().st_ino
    output.publish({"nvidia.com/a": "3"})
    assert path.read_text() == "nvidia.com/a=3\n"
    assert path.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert sorted(os.listdir(tmp_path)) == ["gfd"]  # no dot-file left behind


def test_oversized_label_set_fails_loudly_and_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    output = FileOutput(str(path), remove_on_exit=True)
    output.publish({"nvidia.com/a": "1"})
    huge = {f"nvidia.com/k{i:05d}": "v" * 60 for i in range(MAX_FEATURES_FILE_BYTES // 60)}
    with pytest.raises(PublishError, match="65536 bytes"):
        output.publish(huge)
    assert path.read_text() == "nvidia.com/a=1\n"


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    output = FileOutput(str(tmp_path / "features.d" / "gfd"), remove_on_exit=True)
    with pytest.raises(PublishError, match="does not exist"):
        output.publish({"nvidia.com/a": "1"})


def test_verify_restores_an_edited_file(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    output = FileOutput(str(path), remove_on_exit=True)
    labels = {"nvidia.com/a": "1"}
    output.publish(labels)
    assert output.verify(labels) is False
    path.write_text("nvidia.com/a=tampered\n")
    assert output.verify(labels) is True
    assert path.read_text() == "nvidia.com/a=1\n"


@pytest.mark.parametrize(
    ("cli", "removed"),
    [
        ({"output_file": "OUT"}, True),
        ({"output_file": "OUT", "oneshot": True}, False),
        ({"output_file": "OUT", "sleep_interval": "infinite"}, False),
    ],
)
def test_file_is_removed_on_exit_only_in_daemon_mode(
    tmp_path: Path, cli: dict[str, object], removed: bool
) -> None:
    path = tmp_path / "gfd"
    settings = resolve({k: (str(path) if v == "OUT" else v) for k, v in cli.items()}, {})
    output = make_output(settings)
    output.publish({"nvidia.com/a": "1"})
    output.on_exit()
    assert path.exists() is not removed


def test_cleanup_removes_the_file_and_tolerates_absence(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    output = FileOutput(str(path), remove_on_exit=False)
    output.publish({"nvidia.com/a": "1"})
    output.cleanup()
    assert not path.exists()
    output.cleanup()
