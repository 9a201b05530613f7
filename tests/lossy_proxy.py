"""An HTTP proxy on loopback that loses what a test tells it to (a fault seam for S3).

It forwards each request to an upstream server (a moto server) and its answer
back, except where a rule applies to the request: :meth:`LossyProxy.lose_answer`
forwards the request, so that the upstream does what it asks, then closes the
connection without answering, as a network cut or a client timeout after the
request landed does; :meth:`LossyProxy.answer` answers itself, without
forwarding (S3's ``409 ConditionalRequestConflict`` while an earlier write of
the key is still in flight). The SDK then retries, as it does in production.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

# What a rule sees of a request: its method, path and headers (lower-cased names).
Request = tuple[str, str, dict[str, str]]


@dataclass
class _Rule:
    matches: Callable[[Request], bool]
    times: int  # how many more matching requests it applies to
    status: int | None  # None: forward, then lose the answer
    body: bytes


class LossyProxy:
    """``with LossyProxy(upstream) as proxy:``; clients use ``proxy.endpoint``."""

    def __init__(self, upstream: str) -> None:
        self._upstream = urlsplit(upstream)
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self.applied: list[Request] = []  # the requests a rule applied to, in order
        self._connections: set[socket.socket] = set()  # clients' open (kept-alive) connections
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._connections.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._connections.discard(self.connection)
                super().finish()

            def _any(self) -> None:
                proxy._serve(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = False  # joined at the end: no thread outlives the block
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def lose_answer(self, matches: Callable[[Request], bool], times: int = 1) -> None:
        """The next ``times`` matching requests reach the upstream; their answers are lost."""
        with self._lock:
            self._rules.append(_Rule(matches, times, None, b""))

    def answer(
        self, matches: Callable[[Request], bool], status: int, body: bytes, times: int = 1
    ) -> None:
        """The next ``times`` matching requests are answered ``status`` and ``body`` here."""
        with self._lock:
            self._rules.append(_Rule(matches, times, status, body))

    def _rule_for(self, request: Request) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.times > 0 and rule.matches(request):
                    rule.times -= 1
                    self.applied.append(request)
                    return rule
        return None

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        body = _read_body(handler, headers)
        rule = self._rule_for((handler.command, handler.path, headers))
        if rule is not None and rule.status is not None:
            handler.send_response(rule.status)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(rule.body)))
            handler.end_headers()
            handler.wfile.write(rule.body)
            return
        upstream = http.client.HTTPConnection(
            self._upstream.hostname or "127.0.0.1", self._upstream.port, timeout=30
        )
        try:
            forwarded = {
                k: v for k, v in handler.headers.items() if k.lower() != "transfer-encoding"
            }
            forwarded["Content-Length"] = str(len(body))
            upstream.request(handler.command, handler.path, body=body, headers=forwarded)
            response = upstream.getresponse()
            answer = response.read()
        finally:
            upstream.close()
        if rule is not None:  # the upstream did it; the client never hears
            handler.close_connection = True
            handler.connection.close()
            return
        handler.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                handler.send_header(name, value)
        # A HEAD's answer has no body but the length of the GET's.
        length = response.getheader("Content-Length") if handler.command == "HEAD" else None
        handler.send_header("Content-Length", length or str(len(answer)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(answer)

    def __enter__(self) -> LossyProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        with self._lock:  # a kept-alive connection's thread waits for its next request
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        self._thread.join()


def _read_body(handler: BaseHTTPRequestHandler, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(headers.get("content-length", "0") or 0))
