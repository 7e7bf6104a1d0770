"""Reading a file whose path someone else controls: the one way gfd does it.

Every file gfd reads -- the config file, the snapshot, the kubeconfig, the machine-type
file, each sysfs attribute, the features file and the koordlet file it reads back -- may
have been swapped for something that is not a file: a FIFO nobody writes (an ``open`` or a
``read`` that never returns), ``/dev/zero`` (a read that never ends), a directory, a socket,
a terminal.  Reading through :func:`read_regular` bounds all of them (docs/SECURITY.md):

- the path is checked before it is opened, so a device node is never even opened (opening
  one can have effects of its own: a tape rewinds, a terminal becomes the controlling one);
- it is opened non-blocking (a FIFO swapped in between the check and the open does not
  block), without becoming a controlling terminal, closed on exec;
- the open descriptor is checked again: only a regular file is read;
- at most ``limit + 1`` bytes are read, one more than allowed telling "too large" apart
  without reading the rest (sysfs reports 4096 bytes for every attribute, so the size a
  ``stat`` gives is not trusted either way).

Whatever gfd hands to the dynamic loader (the driver libraries) is checked the same way
first, by :func:`load_regular`: the loader ``open``s and ``mmap``s what it is given, so a
FIFO there blocks it for good and ``/dev/zero`` maps without end.

Every failure is an :class:`UnreadableFileError` carrying a short reason without the path;
the caller says which file it was, clipped, in its own words.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from collections.abc import Callable
from typing import TypeVar

from gfd.echo import clip_path

_T = TypeVar("_T")

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnreadableFileError(Exception):
    """A file that cannot be read: missing, unreadable, not a regular file or too large.

    ``reason`` is short and never holds the path or any of the file's content."""

    def __init__(self, reason: str, *, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


#: what each kind of file that is not a regular file is called, in the order tested
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words ("a FIFO")."""
    return next((name for test, name in _FILE_KINDS if test(mode)), "a special file")


def _not_regular(mode: int) -> UnreadableFileError:
    return UnreadableFileError(f"is {file_kind(mode)}, not a regular file")


def _failed(exc: OSError | ValueError) -> UnreadableFileError:
    if isinstance(exc, ValueError):  # a NUL character in the path
        return UnreadableFileError("the path contains a NUL character")
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
        return UnreadableFileError("is a symbolic link, not a regular file")
    missing = exc.errno in (errno.ENOENT, errno.ENOTDIR)
    return UnreadableFileError(exc.strerror or type(exc).__name__, missing=missing)


def open_regular(path: str, *, dir_fd: int | None = None, follow: bool = True) -> int:
    """A descriptor of the regular file at ``path``, opened without blocking.

    ``dir_fd``: ``path`` is relative to that directory; ``follow=False``: a symbolic link
    at ``path`` is refused, not followed."""
    flags = _OPEN_FLAGS | (0 if follow else os.O_NOFOLLOW)
    try:
        mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(mode)
        fd = os.open(path, flags, dir_fd=dir_fd)
    except (OSError, ValueError) as exc:
        raise _failed(exc) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise _failed(exc) from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(mode)
    return fd


def read_bounded(fd: int, limit: int, *, cut: bool = False) -> bytes:
    """What ``fd`` holds, at most ``limit`` bytes: more is an error, or with ``cut`` the
    first ``limit`` bytes.  Never reads more than ``limit + 1`` bytes."""
    chunks: list[bytes] = []
    size = 0
    want = limit if cut else limit + 1
    try:
        while size < want:
            chunk = os.read(fd, want - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:  # EAGAIN: a file that is not one after all; EIO: a vanished device
        raise _failed(exc) from None
    if size > limit:
        raise UnreadableFileError(f"is larger than the limit of {limit} bytes")
    return b"".join(chunks)


def read_regular(
    path: str, limit: int, *, dir_fd: int | None = None, follow: bool = True, cut: bool = False
) -> bytes:
    """The bytes of the regular file at ``path``: at most ``limit`` of them (more is an
    :class:`UnreadableFileError`, or with ``cut`` the first ``limit``).  Never blocks."""
    fd = open_regular(path, dir_fd=dir_fd, follow=follow)
    try:
        return read_bounded(fd, limit, cut=cut)
    finally:
        os.close(fd)


#: the largest shared library gfd loads (the driver's libcuda.so.1 is well under 200 MiB)
LIBRARY_MAX_BYTES = 512 * 1024 * 1024


def load_regular(path: str, load: Callable[[str], _T], limit: int = LIBRARY_MAX_BYTES) -> _T:
    """``load(path)`` for the dynamic loader, once ``path`` is known to be a regular file
    of at most ``limit`` bytes (after every link is followed; a FIFO, device, directory or
    dangling link is an :class:`UnreadableFileError` and the loader never sees it).

    The loader is handed the path, not the checked descriptor (``/proc/self/fd/N``): the
    loader knows a library by the string it was opened by, so a later load of another
    file through the same descriptor number would get the first library back.  The window
    between check and load is open only to whoever can write the driver root, who could
    as well plant a library of their own; the watchdog bounds a load that blocks anyway."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size > limit:
        raise UnreadableFileError(f"is larger than the limit of {limit} bytes")
    return load(path)


class NoWorkingDirectoryError(Exception):
    """A relative path where the process's working directory was removed: there is
    nothing it is relative to (``os.getcwd`` fails with a bare ENOENT naming no path)."""


def absolute_path(path: str) -> str:
    """``path`` made absolute against the working directory as it is now, so that the
    directory being removed later changes nothing; NoWorkingDirectoryError where it is
    gone already and ``path`` is relative."""
    try:
        return os.path.abspath(path)
    except FileNotFoundError:
        raise NoWorkingDirectoryError(
            f"{clip_path(path)} is a relative path and the working directory no longer exists"
        ) from None


def real_path_or_same(path: str) -> str:
    """``os.path.realpath``, or ``path`` unchanged where it is relative to a working
    directory that no longer exists (two places are then compared as spelled)."""
    try:
        return os.path.realpath(path)
    except FileNotFoundError:
        return path


# ----------------------------------------------------------------- temporary files gfd writes
# A temporary file is written beside an output and renamed over it.  A gfd killed between the
# two (SIGKILL, the OOM killer, a node losing power) cannot remove it, and nothing else does:
# each such death would leave one more in a directory NFD or koordlet reads.  So each writer
# holds an exclusive lock on its temporary file from creation to rename, which the kernel
# drops with the process however it ends, and the files gfd names that nobody holds are
# reclaimed.


def hold_while_written(fd: int) -> None:
    """Mark the temporary file open as ``fd`` as being written (until ``fd`` is closed);
    BlockingIOError when someone holds it already (it is being reclaimed: this write
    fails).  A filesystem without locks writes unheld: nothing can be reclaimed there
    either, since reclaiming takes the same lock first."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError:
        return


def reclaim_abandoned(directory: int, names: re.Pattern[str]) -> int:
    """Remove from the directory open as ``directory`` the temporary files a gfd that died
    mid-write left: entries whose whole name ``names`` matches that are regular files of
    this user held by no writer.  Nothing else is opened (a device, FIFO or symlink there
    is left alone, unopened) and nothing is followed; whatever cannot be judged stays.
    Returns how many were removed."""
    removed = 0
    try:
        entries = os.scandir(directory)
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if names.fullmatch(entry.name) and _abandoned(directory, entry.name):
                removed += 1
    return removed


def _abandoned(directory: int, name: str) -> bool:
    """Remove ``name`` when it is an abandoned temporary file (see above); True if so."""
    try:
        fd = open_regular(name, dir_fd=directory, follow=False)
    except UnreadableFileError:
        return False
    try:
        if not abandoned_here(fd, name, directory):
            return False
        os.unlink(name, dir_fd=directory)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def abandoned_here(fd: int, name: str, directory: int) -> bool:
    """Whether the file open as ``fd`` is this user's, held by no live gfd (its lock is
    taken now; OSError when someone holds it) and still the one named ``name`` in the
    directory open as ``directory``: what may be removed as a dead gfd's leftover."""
    opened = os.fstat(fd)
    if opened.st_uid != os.geteuid():
        return False
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return os.path.samestat(opened, os.stat(name, dir_fd=directory, follow_symlinks=False))
