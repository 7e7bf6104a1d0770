"""The NFD features file: atomic replace, mode 0644, size limit, removal rules."""

from __future__ import annotations

import datetime
import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from gfd.errors import PublishError
from gfd.outputs import make_output
from gfd.outputs.file import MAX_FEATURES_FILE_BYTES, FileOutput, format_expiry
from gfd.settings import resolve
from tests.helpers import Clock
from tests.process import run_gfd

DGX1 = "examples/snapshots/dgx1-v100-cube-mesh.yaml"


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
        # no gap on restart: a daemon's file carries an NFD expiry and is kept
        ({"output_file": "OUT"}, False),
        ({"output_file": "OUT", "expiry_horizon": "never"}, True),
        ({"output_file": "OUT", "oneshot": True}, False),
        ({"output_file": "OUT", "sleep_interval": "infinite"}, False),
    ],
)
def test_file_is_removed_on_exit_only_by_a_daemon_without_expiry(
    tmp_path: Path, cli: dict[str, object], removed: bool
) -> None:
    path = tmp_path / "gfd"
    settings = resolve({k: (str(path) if v == "OUT" else v) for k, v in cli.items()}, {})
    output = make_output(settings)
    output.publish({"nvidia.com/a": "1"})
    output.on_exit()
    assert path.exists() is not removed


@pytest.mark.parametrize("expiry_horizon", [None, 3600], ids=["no-expiry", "with-expiry"])
def test_cleanup_removes_the_file_and_tolerates_absence(
    tmp_path: Path, expiry_horizon: float | None
) -> None:
    path = tmp_path / "gfd"
    output = FileOutput(str(path), remove_on_exit=False, expiry_horizon=expiry_horizon)
    output.publish({"nvidia.com/a": "1"})
    output.cleanup()
    assert not path.exists()
    output.cleanup()


# ----------------------------------------------------------------- expiry


def nfd_labels(text: str, now: datetime.datetime) -> dict[str, str]:
    """NFD's reading of a features file (source/local/local.go, parseFeatureFile): an
    ``# +expiry-time=`` directive (RFC 3339) applies to the lines after it; lines whose
    expiry lies before now are skipped; other comments are ignored."""
    expiry = now
    labels: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +expiry-time="):
                expiry = datetime.datetime.fromisoformat(
                    line.split("=", 1)[1].strip().replace("Z", "+00:00")
                )
            continue
        if expiry < now:
            continue
        key, _, value = line.partition("=")
        labels[key] = value
    return labels


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)


def test_the_file_starts_with_nfds_expiry_directive(tmp_path: Path) -> None:
    path, clock = tmp_path / "gfd", Clock(1_800_000_000.0)
    output = FileOutput(str(path), remove_on_exit=True, expiry_horizon=3600, clock=clock)
    output.publish({"nvidia.com/b": "2", "nvidia.com/a": "1"})
    assert path.read_text() == (
        "# +expiry-time=2027-01-15T09:00:00Z\nnvidia.com/a=1\nnvidia.com/b=2\n"
    )
    assert format_expiry(1_800_003_600.0) == "2027-01-15T09:00:00Z"
    labels = {"nvidia.com/a": "1", "nvidia.com/b": "2"}
    # NFD keeps the labels until the expiry time, and drops them after it
    assert nfd_labels(path.read_text(), at(clock.now + 3599)) == labels
    assert nfd_labels(path.read_text(), at(clock.now + 3601)) == {}


def test_renewal_is_rare_and_not_a_change(tmp_path: Path) -> None:
    path, clock = tmp_path / "gfd", Clock()
    output = FileOutput(str(path), remove_on_exit=True, expiry_horizon=3600, clock=clock)
    labels = {"nvidia.com/a": "1"}
    output.publish(labels)
    first = os.stat(path)
    for _ in range(30):  # half an hour of 60s passes: not a single write
        clock.now += 60
        assert output.verify(labels) is False
    assert (os.stat(path).st_ino, os.stat(path).st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    clock.now += 1  # less than half the horizon left: renewed, reported as no change
    assert output.verify(labels) is False
    assert os.stat(path).st_ino != first.st_ino
    assert path.read_text().startswith(f"# +expiry-time={format_expiry(clock.now + 3600)}\n")
    assert nfd_labels(path.read_text(), at(clock.now + 3000)) == labels


def test_an_edited_file_is_put_back_with_expiry(tmp_path: Path) -> None:
    path, clock = tmp_path / "gfd", Clock()
    output = FileOutput(str(path), remove_on_exit=True, expiry_horizon=3600, clock=clock)
    labels = {"nvidia.com/a": "1"}
    output.publish(labels)
    path.write_text("nvidia.com/a=1\n")  # the labels, but without the expiry
    assert output.verify(labels) is True
    assert path.read_text().startswith("# +expiry-time=")
    path.unlink()
    assert output.verify(labels) is True
    assert path.exists()


def test_a_restarted_daemon_keeps_the_file_it_finds(tmp_path: Path) -> None:
    path, clock = tmp_path / "gfd", Clock()
    labels = {"nvidia.com/a": "1"}
    old = FileOutput(str(path), remove_on_exit=True, expiry_horizon=3600, clock=clock)
    old.publish(labels)
    old.on_exit()  # SIGTERM: the file stays, the labels with it
    assert nfd_labels(path.read_text(), at(clock.now + 10)) == labels
    inode = os.stat(path).st_ino
    clock.now += 10
    new = FileOutput(str(path), remove_on_exit=True, expiry_horizon=3600, clock=clock)
    new.publish(labels)  # same labels, fresh expiry: not even rewritten
    assert os.stat(path).st_ino == inode
    new.publish({"nvidia.com/a": "2"})
    assert nfd_labels(path.read_text(), at(clock.now)) == {"nvidia.com/a": "2"}


def test_two_daemons_without_expiry_never_remove_each_others_file(tmp_path: Path) -> None:
    """A rolling update overlaps an old and a new daemon on one file."""
    path = tmp_path / "gfd"
    labels = {"nvidia.com/a": "1"}
    old = FileOutput(str(path), remove_on_exit=True)
    new = FileOutput(str(path), remove_on_exit=True)
    old.publish(labels)
    new.publish(labels)  # the new pod writes the same labels: a new file
    old.on_exit()
    assert path.read_text() == "nvidia.com/a=1\n"
    new.on_exit()  # still the one the new pod wrote: removed
    assert not path.exists()


def test_a_file_edited_after_the_write_is_not_removed_on_exit(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    output = FileOutput(str(path), remove_on_exit=True)
    output.publish({"nvidia.com/a": "1"})
    path.write_text("nvidia.com/a=2\n")
    output.on_exit()
    assert path.read_text() == "nvidia.com/a=2\n"


#: (the directory gfd writes its temporary files in, as the output's place; the flags that
#: write there; the name of a temporary file gfd gives there, from a number)
TEMPORARY_PLACES = [
    pytest.param("features.d", lambda place: ["-o", f"{place}/gfd"], ".gfd-{:08d}",
                 id="features file"),
    pytest.param("koordlet/.gfd-tmp",
                 lambda place: ["-o", "-", "--koordlet-device-infos-dir", os.path.dirname(place)],
                 "gfd-1-{:08x}", id="koordlet device-info file"),
]  # fmt: skip


@pytest.mark.parametrize(("where", "flags", "named"), TEMPORARY_PLACES)
def test_the_temporary_files_a_killed_gfd_left_are_reclaimed_and_nothing_else(
    tmp_path: Path, where: str, flags: Any, named: str
) -> None:
    place = tmp_path / where
    place.mkdir(parents=True, mode=0o700)
    outside = tmp_path / "outside"
    outside.write_text("kept")
    abandoned, held, fifo, link = (place / named.format(n) for n in range(4))
    abandoned.write_text("nvidia.com/gpu.cou")  # a gfd killed mid-write: its lock went with it
    held.write_text("nvidia.com/")  # another gfd writing it now (a roll-out overlap)
    os.mkfifo(fifo)
    link.symlink_to(outside)
    (place / ".gfd-notes").write_text("a name gfd never gives")
    kept = {held.name, fifo.name, link.name, ".gfd-notes"}
    with held.open("rb") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX)
        result = run_gfd("--oneshot", "--snapshot-file", DGX1, *flags(str(place)))
    assert result.returncode == 0, result.stderr
    assert kept <= set(os.listdir(place))
    assert abandoned.name not in os.listdir(place)
    assert outside.read_text() == "kept"
