"""The total deadline of one API request, enforced on every read and write of its socket
(urllib3 bounds each read alone, so a server trickling its answer would never trip it)."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Callable
from typing import Any


class DeadlineSocket:
    """A connected socket whose every read and write ends by the request's deadline.

    urllib3 gives each *read* a timeout; a server that trickles its headers a line at a
    time never trips it.  Before each call this lowers the socket's timeout to what is left
    of the request's total deadline, so the request as a whole ends on time."""

    def __init__(self, sock: Any, deadline: Callable[[], float | None]) -> None:
        self._sock = sock
        self._deadline = deadline
        self._timeout: float | None = sock.gettimeout()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    # the files made by makefile() are counted on the socket, so that close() waits for the
    # answer to be read: count them on the real socket
    @property
    def _io_refs(self) -> int:
        return int(self._sock._io_refs)

    @_io_refs.setter
    def _io_refs(self, value: int) -> None:
        self._sock._io_refs = value

    def _arm(self) -> None:
        deadline = self._deadline()
        if deadline is None:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        self._sock.settimeout(left if self._timeout is None else min(self._timeout, left))

    def settimeout(self, value: float | None) -> None:
        self._timeout = value
        self._sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return int(self._sock.recv_into(buffer, nbytes, flags))

    def recv(self, size: int, flags: int = 0) -> bytes:
        self._arm()
        return bytes(self._sock.recv(size, flags))

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._arm()
        self._sock.sendall(data, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._arm()
        return int(self._sock.send(data, flags))

    def makefile(self, mode: str = "r", buffering: int | None = None, **_: Any) -> Any:
        # http.client reads the answer through makefile("rb"): through this object's reads
        del buffering
        raw = socket.SocketIO(self, "rb" if "b" in mode else "r")  # type: ignore[arg-type]
        self._io_refs += 1  # as socket.makefile does; SocketIO.close() gives it back
        return io.BufferedReader(raw)


def guard_connections(pool_manager: Any, deadline: Callable[[], float | None]) -> None:
    """Make every connection ``pool_manager`` opens a :class:`DeadlineSocket` one."""
    import urllib3.connectionpool

    stock = {
        "http": urllib3.connectionpool.HTTPConnectionPool,
        "https": urllib3.connectionpool.HTTPSConnectionPool,
    }
    classes = getattr(pool_manager, "pool_classes_by_scheme", None)
    if classes != stock:  # e.g. a SOCKS proxy: keep its own classes
        return
    guarded = {}
    pool: Any
    for scheme, pool in stock.items():
        connection: Any = pool.ConnectionCls

        def connect(self: Any, _base: Any = connection) -> None:
            _base.connect(self)
            if self.sock is not None and not isinstance(self.sock, DeadlineSocket):
                self.sock = DeadlineSocket(self.sock, deadline)

        guarded_connection = type(
            f"Deadline{connection.__name__}", (connection,), {"connect": connect}
        )
        guarded[scheme] = type(
            f"Deadline{pool.__name__}", (pool,), {"ConnectionCls": guarded_connection}
        )
    pool_manager.pool_classes_by_scheme = guarded
