"""Special files put where gfd reads or writes a file: a FIFO, ``/dev/zero``, a directory,
a listening socket, each placed in one step so that a running daemon never finds the path
missing on the way."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def make_directory(path: Path) -> None:
    path.mkdir()


def make_socket(path: Path) -> None:
    """A listening socket nobody accepts on (bound at a short name, then moved: a socket
    path is limited to ~100 bytes)."""
    short = os.path.join(tempfile.gettempdir(), f"sock-{os.getpid()}-{len(_keep)}")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(short)
    listener.listen()
    _keep.append(listener)
    os.replace(short, path)


_keep: list[socket.socket] = []

SPECIAL = {
    "fifo": make_fifo, "dev-zero": make_dev_zero, "directory": make_directory,
    "socket": make_socket,
}  # fmt: skip


def replace_with_directory(path: Path) -> None:
    """A directory where a file is (a rename cannot put a directory over a file); if the
    daemon wrote the file again between the two steps, do it again."""
    while True:
        path.unlink(missing_ok=True)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return


def swap(path: Path, make: Callable[[Path], None]) -> None:
    """Put a special file at ``path`` in one rename: a pass never finds it missing."""
    staging = path.with_name(".staging-" + path.name)
    make(staging)
    os.replace(staging, path)


@contextlib.contextmanager
def fifo_held_open(path: Path) -> Iterator[None]:
    """A FIFO with a writer that never writes: "hung" (a reader would wait for ever)."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # a writer end, without blocking
    try:
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def fifo_trickled(path: Path, text: str) -> Iterator[None]:
    """A FIFO that a writer feeds slowly: "slow"."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    stop = threading.Event()

    def feed() -> None:
        for char in text:
            if stop.wait(0.05):
                return
            with contextlib.suppress(OSError):
                os.write(fd, char.encode())

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join()
        os.close(fd)
