"""Secrets that TLS wants as files, kept off every filesystem.

Python's ``ssl`` loads a client certificate and key only from paths
(``SSLContext.load_cert_chain``), and the ``kubernetes`` client hands urllib3 the paths of
``Configuration.cert_file``/``key_file``, which urllib3 opens again for every new
connection.  A key written to a temporary directory outlives any process that is killed
before its clean-up runs (SIGKILL, the watchdog's ``os._exit``), so the key is put in an
anonymous in-memory file instead (``memfd_create``): it has no name in any directory, it
is reachable only through this process's own descriptor table (``/proc/self/fd/N``), it is
closed on exec (a credential plugin never inherits it), and it is gone with the process
however the process ends.

Where Python has no ``memfd_create`` (a C library older than 2.27) or the kernel refuses it,
the key goes to an unnamed file of the temporary directory (``O_TMPFILE``, which can never
be given a name): as nameless, reached the same way, and freed by the kernel with its last
descriptor.  Only where that fails too (no ``/proc``, a filesystem without unnamed files)
does the key get a name: a private directory (0700, the file 0600) removed at exit, held
under an exclusive ``flock`` for as long as it is in use.  A process killed before its exit
handlers run leaves it, and the lock goes with the process: the next gfd to start removes
every such directory of its user that nobody holds (:func:`reclaim_abandoned`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import re
import shutil
import tempfile

from gfd.files import abandoned_here

#: where a descriptor of this process can be opened again by path
_FD_DIRECTORIES = ("/proc/self/fd", "/dev/fd")

#: the named fallback's directories, as ``tempfile.mkdtemp`` names them
_PREFIX = "gfd-exec-credential-"
_NAMES = re.compile(re.escape(_PREFIX) + r"[A-Za-z0-9_]{8}")

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK | os.O_CLOEXEC

#: how many directories are made while other gfds reclaim each one before it is held
_TRIES = 3


class SecretFile:
    """One secret as a path TLS can open, until :meth:`close`."""

    def __init__(self, content: bytes, name: str) -> None:
        self._fd: int | None = None
        self._directory: str | None = None
        self._lock: int | None = None
        self.path = (
            self._in_memory(content, name) or self._unnamed(content) or self._on_disk(content, name)
        )

    def _in_memory(self, content: bytes, name: str) -> str | None:
        create = getattr(os, "memfd_create", None)
        if create is None:
            return None
        try:
            fd = create(f"gfd-{name}", os.MFD_CLOEXEC)
        except OSError:  # ENOSYS (old kernel, a seccomp profile), EMFILE
            return None
        return self._reopenable(fd, content)

    def _unnamed(self, content: bytes) -> str | None:
        flag = getattr(os, "O_TMPFILE", None)
        if flag is None:
            return None
        # O_EXCL: the file can never be linked into a directory, even by this process
        flags = flag | os.O_RDWR | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(tempfile.gettempdir(), flags, 0o600)
        except OSError:  # EOPNOTSUPP (a filesystem without it), EISDIR (a kernel before 3.11)
            return None
        return self._reopenable(fd, content)

    def _reopenable(self, fd: int, content: bytes) -> str | None:
        """The path under which TLS can open the nameless file ``fd`` once it holds
        ``content``; None (and ``fd`` closed) where there is none."""
        try:
            _write_all(fd, content)
            for directory in _FD_DIRECTORIES:
                path = f"{directory}/{fd}"
                with contextlib.suppress(OSError):
                    # the path must lead to this very file, as TLS will open it
                    if os.path.samestat(os.stat(path), os.fstat(fd)):
                        self._fd = fd
                        return path
        except OSError:
            pass
        os.close(fd)
        return None

    def _on_disk(self, content: bytes, name: str) -> str:
        self._directory, self._lock = _held_directory()
        atexit.register(self.close)
        path = os.path.join(self._directory, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
            try:
                _write_all(fd, content)
            finally:
                os.close(fd)
        except OSError:  # a full disk: no part of the secret is kept until exit
            self.close()
            raise
        return path

    @property
    def nameless(self) -> bool:
        """Whether the secret has no name in any directory (nothing can be left of it)."""
        return self._fd is not None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None
        if self._lock is not None:  # only once the directory is gone
            os.close(self._lock)
            self._lock = None
            atexit.unregister(self.close)


def _held_directory() -> tuple[str, int]:
    """A new private directory and a descriptor of it holding its lock: one that another
    gfd's :func:`reclaim_abandoned` took between its creation and the lock is left to it,
    and another made."""
    for _ in range(_TRIES):
        directory = tempfile.mkdtemp(prefix=_PREFIX)
        lock = os.open(directory, _DIRECTORY_FLAGS | os.O_NOFOLLOW)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # being reclaimed this very moment
            os.close(lock)
            continue
        except OSError:  # a filesystem without locks: unheld, and nobody can reclaim it
            return directory, lock
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(lock), os.stat(directory, follow_symlinks=False)):
                return directory, lock
        os.close(lock)  # reclaimed and removed before the lock was taken
    raise OSError(errno.EAGAIN, "each private directory made was taken by another gfd")


def reclaim_abandoned() -> int:
    """Remove the named fallback's directories that a killed gfd left in the temporary
    directory: only those named as gfd names them, directories (never followed) of this
    user that no live gfd holds, and in them only what ``unlink`` removes (nothing is
    opened, nothing followed); whatever cannot be judged stays.  Returns how many."""
    try:
        parent = os.open(tempfile.gettempdir(), _DIRECTORY_FLAGS)
    except OSError:
        return 0
    try:
        with os.scandir(parent) as entries:
            names = [entry.name for entry in entries if _NAMES.fullmatch(entry.name)]
        return sum(_reclaim(parent, name) for name in names)
    except OSError:
        return 0
    finally:
        os.close(parent)


def _reclaim(parent: int, name: str) -> bool:
    try:
        fd = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:  # a file, a symbolic link, gone: not one of these directories
        return False
    try:
        if not abandoned_here(fd, name, parent):
            return False
        with os.scandir(fd) as entries:
            for entry in [entry.name for entry in entries]:
                with contextlib.suppress(OSError):
                    os.unlink(entry, dir_fd=fd)
        os.rmdir(name, dir_fd=parent)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]
