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

Only where the kernel or the platform has no ``memfd_create`` (or no ``/proc``) are the
files written to a private temporary directory, removed at exit -- the one fallback.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile

#: where a descriptor of this process can be opened again by path
_FD_DIRECTORIES = ("/proc/self/fd", "/dev/fd")


class SecretFile:
    """One secret as a path TLS can open, until :meth:`close`."""

    def __init__(self, content: bytes, name: str) -> None:
        self._fd: int | None = None
        self._directory: str | None = None
        self.path = self._in_memory(content, name) or self._on_disk(content, name)

    def _in_memory(self, content: bytes, name: str) -> str | None:
        create = getattr(os, "memfd_create", None)
        if create is None:
            return None
        try:
            fd = create(f"gfd-{name}", os.MFD_CLOEXEC)
        except OSError:  # ENOSYS (old kernel, a seccomp profile), EMFILE
            return None
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
        directory = tempfile.mkdtemp(prefix="gfd-exec-credential-")
        self._directory = directory
        atexit.register(shutil.rmtree, directory, True)
        path = os.path.join(directory, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        try:
            _write_all(fd, content)
        finally:
            os.close(fd)
        return path

    @property
    def in_memory(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]
