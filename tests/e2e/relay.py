"""A plain-HTTP relay to the API server (verified TLS onwards) whose hook can act between two of
gfd's requests, so the race "someone writes between gfd's read and write" happens on every run."""

from __future__ import annotations

import http.client
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: hook(method, path) -> None, run before the request is forwarded
Hook = Callable[[str, str], None]


@contextmanager
def relay(upstream: str, ca_file: str, hook: Hook) -> Iterator[str]:
    """Serve on a free port; yields the relay's URL."""
    target = urllib.parse.urlsplit(upstream)
    context = ssl.create_default_context(cafile=ca_file)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            hook(self.command, self.path)
            connection = http.client.HTTPSConnection(
                target.hostname or "127.0.0.1", target.port, context=context, timeout=30
            )
            try:
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "accept-encoding")
                }
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                data = answer.read()
            finally:
                connection.close()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
