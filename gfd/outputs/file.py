"""The NFD features file (SPEC §6.1) and stdout.

The file is replaced atomically: a dot-file in the same directory (NFD ignores dot-files)
is written, fsynced and renamed over the target, so NFD never reads half a file.

No gap on restart: a daemon does not delete the file when it stops.  Instead the file
starts with NFD's expiry directive (``# +expiry-time=<RFC 3339>``, NFD source/local): NFD
keeps the labels while the time lies ahead, a running gfd renews it once less than half of
the horizon is left, and the labels of a gfd that never comes back age out.  Without an
expiry (``--expiry-horizon never``) a daemon removes the file on exit, but only while it
is still the very file this process wrote: a second gfd that replaced it in a rolling
update keeps its labels.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import select
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gfd import interrupt
from gfd.echo import clip_path
from gfd.errors import PublishError, UsageError
from gfd.files import (
    NoWorkingDirectoryError,
    UnreadableFileError,
    absolute_path,
    hold_while_written,
    open_regular,
    read_bounded,
    reclaim_abandoned,
)
from gfd.observability import get_logger
from gfd.outputs import Labels, Output

if TYPE_CHECKING:
    from gfd.settings import Settings

#: NFD skips feature files larger than this; fail loudly instead of being ignored quietly
MAX_FEATURES_FILE_BYTES = 64 * 1024
#: NFD's directive (source/local/local.go: DirectivePrefix "# +", DirectiveExpiryTime); it
#: applies to the lines after it, so it is the first line
EXPIRY_DIRECTIVE = "# +expiry-time="
#: the names ``tempfile.mkstemp`` gives the temporary files beside the features file (the
#: prefix, then eight of its letters, digits and underscores): those a killed gfd left are
#: reclaimed (gfd.files)
TEMPORARY_NAMES = re.compile(r"\.gfd-[a-z0-9_]{8}")


#: the latest expiry RFC 3339 (and Python) can write, 9999-12-31T23:59:59Z as Unix time: a
#: clock or horizon past it is held there
LATEST_EXPIRY = 253402300799.0


def format_expiry(seconds: float) -> str:
    """Unix time as the RFC 3339 UTC form NFD parses (Go ``time.RFC3339``), held within
    1970..9999 (a clock far off, or a huge horizon, never fails a write)."""
    clamped = min(max(int(seconds), 0), int(LATEST_EXPIRY))
    moment = datetime.datetime.fromtimestamp(clamped, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_regular(path: str) -> tuple[os.stat_result, bytes] | None:
    """The status and content of the regular file at ``path`` (followed through symlinks),
    at most :data:`MAX_FEATURES_FILE_BYTES` + 1 bytes of it; None when it is missing,
    unreadable or anything else (a FIFO or device is never waited on or read)."""
    try:
        fd = open_regular(path)
    except UnreadableFileError:
        return None
    try:
        return os.fstat(fd), read_bounded(fd, MAX_FEATURES_FILE_BYTES + 1, cut=True)
    except (OSError, UnreadableFileError):
        return None
    finally:
        os.close(fd)


def _refuse_special(path: str, action: str) -> None:
    """Never rename over or remove what is not a regular file (a FIFO, a device node, a
    directory, a socket): PublishError naming the path; missing is fine."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise PublishError(f"{clip_path(path)} is not a regular file; gfd does not {action} it")


def parse_expiry(text: str) -> float | None:
    """The Unix time of an RFC 3339 UTC timestamp written by :func:`format_expiry`."""

    try:
        moment = datetime.datetime.strptime(text.strip(), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return None
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def features_file_text(labels: Labels, expires_at: float | None) -> str:
    """The file's content: the expiry directive (when there is one), then the labels."""
    body = format_labels(dict(labels))
    if expires_at is None:
        return body
    return f"{EXPIRY_DIRECTIVE}{format_expiry(expires_at)}\n{body}"


def split_features_file(text: str) -> tuple[float | None, str]:
    """(expiry time or None, the label lines) of a file this module wrote."""
    first, newline, rest = text.partition("\n")
    if newline and first.startswith(EXPIRY_DIRECTIVE):
        return parse_expiry(first[len(EXPIRY_DIRECTIVE) :]), rest
    return None, text


def format_labels(labels: Labels) -> str:
    """``key=value`` lines, sorted, each ending in a newline (the NFD features-file format)."""
    return "".join(f"{key}={labels[key]}\n" for key in sorted(labels))


#: how long a write to stdout may make no progress before the pass fails: a daemon whose
#: stdout is a pipe nobody reads must not block for good (nor hold a stop signal)
STDOUT_STALL_SECONDS = 10.0


def write_without_blocking(fd: int, data: bytes, name: str) -> None:
    """Write ``data`` to ``fd``; when ``fd`` is a pipe or socket that nobody reads, fail
    (PublishError) after :data:`STDOUT_STALL_SECONDS` without progress, or at once on a
    stop request, instead of blocking.

    A pipe is written through a descriptor of its own opened non-blocking
    (``/proc/self/fd``: a new open file description, so the flag is not forced on whoever
    shares the pipe); a socket is written when ``select`` finds room; anything else
    (a file, a terminal, a device) is written as it is."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode):
        try:
            own = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            own = -1  # no /proc, or nobody reads: the plain write says which
        if own >= 0:
            try:
                _write_with_stall_limit(own, data, name, wait_for_room=False)
            finally:
                os.close(own)
            return
    _write_with_stall_limit(fd, data, name, wait_for_room=stat.S_ISSOCK(mode))


def _write_with_stall_limit(fd: int, data: bytes, name: str, *, wait_for_room: bool) -> None:

    stalled_since = time.monotonic()
    while data:
        if interrupt.stop_requested():
            raise PublishError(f"cannot write labels to {name}: stopped while it was full")
        written = 0
        if not wait_for_room or select.select([], [fd], [], 0.05)[1]:
            try:
                written = os.write(fd, data[:65536])
            except BlockingIOError:
                time.sleep(0.05)
        if written:
            data = data[written:]
            stalled_since = time.monotonic()
        elif time.monotonic() - stalled_since > STDOUT_STALL_SECONDS:
            raise PublishError(
                f"cannot write labels to {name}: nothing read from it for "
                f"{STDOUT_STALL_SECONDS:.0f} s (a pipe nobody reads?)"
            )


class StdoutOutput(Output):
    kind = "stdout"

    def publish(self, labels: Labels) -> None:
        if sys.stdout is None:  # started with stdout closed
            raise PublishError("cannot write labels to stdout: stdout is closed")
        text = format_labels(labels)
        try:
            sys.stdout.flush()
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO)
            fd = None
        try:
            if fd is None:
                sys.stdout.write(text)
                sys.stdout.flush()
            else:
                write_without_blocking(fd, text.encode("utf-8"), "stdout")
        except OSError as exc:
            raise PublishError(f"cannot write labels to stdout: {exc.strerror or exc}") from None


class FileOutput(Output):
    kind = "file"
    #: checking the file is a local stat and read, so it is done every pass: a file removed
    #: or edited by someone else is put back, and a lapsing expiry renewed, at the next pass
    verify_interval: float | None = 0.0

    def __init__(
        self,
        path: str,
        *,
        remove_on_exit: bool,
        expiry_horizon: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``expiry_horizon``: seconds from a write to the file's expiry-time (None: no
        directive).  ``remove_on_exit`` only ever applies to a file without expiry."""
        #: the path as messages show it
        self.shown = clip_path(path)
        # resolved now: the working directory removed later leaves the place as it was
        try:
            self.path = absolute_path(path)
        except NoWorkingDirectoryError:
            raise UsageError(
                f"--output-file {self.shown}: a relative path, and the working directory no "
                "longer exists"
            ) from None
        self.expiry_horizon = expiry_horizon
        self.remove_on_exit = remove_on_exit and expiry_horizon is None
        self._clock = clock
        #: (device, inode, content) of the file this process last wrote
        self._written: tuple[int, int, bytes] | None = None
        self._reclaimed = False

    # ------------------------------------------------------------- the Output protocol

    def publish(self, labels: Labels) -> None:
        """Write ``labels`` unless the file already holds them with a fresh expiry (a
        restarted gfd finds its predecessor's file and leaves it be)."""
        self._reclaim_once()
        if self.expiry_horizon is not None and self._state(labels) == "current":
            return
        self._write(labels)

    def verify(self, labels: Labels) -> bool:
        """Put back a file removed or edited by someone else (True), renew a lapsing
        expiry (a write, but not a change: False)."""
        self._reclaim_once()
        state = self._state(labels)
        if state == "current":
            return False
        self._write(labels)
        if state == "lapsing":
            get_logger(output=self.kind).info(
                "features file expiry renewed",
                path=self.shown,
                expiry_time=self._expiry_text(),
            )
            return False
        return True

    def keep(self, labels: Labels) -> None:
        """A failed pass still renews the expiry: only a gfd that stopped running lets
        its labels age out."""
        self.verify(labels)

    def on_exit(self) -> None:
        if self.remove_on_exit and self._still_ours():
            self._remove()

    def cleanup(self) -> None:
        self._reclaim_once()
        self._remove()

    # ------------------------------------------------------------- internals

    def _reclaim_once(self) -> None:
        """Remove the temporary files a gfd killed mid-write left beside the file (once
        the directory can be opened; a live writer's are kept)."""
        if self._reclaimed:
            return
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            directory = os.open(os.path.dirname(self.path), flags)
        except OSError:
            return  # no directory yet: the write says so
        self._reclaimed = True
        try:
            removed = reclaim_abandoned(directory, TEMPORARY_NAMES)
        finally:
            os.close(directory)
        if removed:
            get_logger(output=self.kind).info(
                "removed temporary files a stopped gfd left", path=self.shown, removed=removed
            )

    def _expiry_text(self) -> str | None:
        if self.expiry_horizon is None:
            return None
        return format_expiry(self._clock() + self.expiry_horizon)

    def _state(self, labels: Labels) -> str:
        """``current``: the file holds ``labels`` (and an expiry at least half a horizon
        ahead); ``lapsing``: it holds them but the expiry must be renewed; ``differs``."""
        found = _read_regular(self.path)
        if found is None:
            return "differs"
        try:
            expires_at, body = split_features_file(found[1].decode("utf-8"))
        except UnicodeDecodeError:
            return "differs"
        if body != format_labels(dict(labels)):
            return "differs"
        if self.expiry_horizon is None:
            return "current" if expires_at is None else "differs"
        if expires_at is None:
            return "differs"
        now = self._clock()
        remaining = expires_at - now
        if remaining > self.expiry_horizon:
            return "differs"  # written with a longer horizon (or the clock went back)
        # the most a write can give now: the horizon, or what is left up to year 9999
        best = min(self.expiry_horizon, max(int(LATEST_EXPIRY) - now, 0))
        return "current" if remaining >= best / 2 else "lapsing"

    def _write(self, labels: Labels) -> None:
        expires_at = None if self.expiry_horizon is None else self._clock() + self.expiry_horizon
        data = features_file_text(labels, expires_at).encode("utf-8")
        if len(data) > MAX_FEATURES_FILE_BYTES:
            raise PublishError(
                f"labels take {len(data)} bytes, more than the {MAX_FEATURES_FILE_BYTES} bytes "
                f"NFD reads from {self.shown}; not written"
            )
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise PublishError(
                f"output directory {clip_path(directory)} does not exist (is the NFD features.d "
                "directory mounted?)"
            )

        _refuse_special(self.path, "replace")
        temporary = None
        try:
            fd, temporary = tempfile.mkstemp(prefix=".gfd-", dir=directory)
            with os.fdopen(fd, "wb") as handle:
                hold_while_written(fd)  # to its rename: the lock ends with the descriptor
                handle.write(data)
                handle.flush()
                os.fchmod(fd, 0o644)
                os.fsync(fd)
                written = os.fstat(fd)
                os.replace(temporary, self.path)
                temporary = None
            self._written = (written.st_dev, written.st_ino, data)
        except OSError as exc:
            raise PublishError(f"cannot write {self.shown}: {exc.strerror or exc}") from None
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)

    def _still_ours(self) -> bool:
        """True while the file at the path is the one this process last wrote, unchanged."""
        if self._written is None:
            return False
        device, inode, data = self._written
        found = _read_regular(self.path)
        if found is None:
            return False
        status, content = found
        return (status.st_dev, status.st_ino) == (device, inode) and content == data

    def _remove(self) -> None:
        _refuse_special(self.path, "remove")
        remove_file(self.path)


def remove_file(path: str) -> None:
    """Remove a file gfd wrote; one already gone is fine, any other failure a PublishError."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise PublishError(f"cannot remove {clip_path(path)}: {exc.strerror or exc}") from None


def file_output(settings: Settings) -> FileOutput:
    """The features file the settings name; it carries an expiry directive as the settings'
    horizon says, and without one a daemon with a finite interval removes it on exit
    (SPEC §6.1), a oneshot run or an infinite interval keeps it."""
    path = settings.effective_output_file
    assert path is not None  # the registry picks "stdout" otherwise
    return FileOutput(
        path,
        remove_on_exit=not settings.oneshot and settings.sleep_interval is not None,
        expiry_horizon=settings.effective_expiry_horizon,
    )


def stdout_output(settings: Settings) -> StdoutOutput:
    """Labels on stdout (``--output-file -``, or ``--oneshot`` without a file)."""
    del settings
    return StdoutOutput()
