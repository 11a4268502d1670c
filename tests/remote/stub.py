"""A small local HTTP server for what a real server cannot be made to do on purpose.

A stream cut in the middle of an event, a malformed event, a stream that never ends,
an error status with a hostile message: each test installs a route (a function that
writes the raw response) and the server records every request it gets. Standard
library only (``http.server`` in a thread).
"""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    """One request the stub got."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


Route = Callable[["StubHandler"], None]


def event(content: str | None = None, finish: str | None = None) -> bytes:
    """One ``chat.completion.chunk`` as an SSE event (JSON with ASCII escapes)."""
    delta = {} if content is None else {"content": content}
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def raw_event(content: bytes) -> bytes:
    """An event whose content is written as raw bytes (not JSON-escaped, maybe not UTF-8)."""
    return b'data: {"choices":[{"index":0,"delta":{"content":"' + content + b'"}}]}\n\n'


DONE = b"data: [DONE]\n\n"


class StubHandler(BaseHTTPRequestHandler):
    """Request handler; routes write the response through its helpers."""

    protocol_version = "HTTP/1.1"
    server: StubHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
        pass

    def setup(self) -> None:
        super().setup()
        self.server.stub.connections.append(self.connection)

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        self._handle("POST")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        stub = self.server.stub
        stub.requests.append(Recorded(method, self.path, dict(self.headers.items()), body))
        stub.request_seen.set()
        route = stub.route_for(method, self.path)
        try:
            route(self)
        except (BrokenPipeError, ConnectionResetError):
            stub.client_gone.set()

    # ------------------------------------------------------------ helpers
    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, chunked: bool = True) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")  # the body ends when the socket does
            self.close_connection = True
        self.end_headers()
        self.wfile.flush()
        self._chunked = chunked

    def write(self, data: bytes) -> None:
        if self._chunked:
            data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
        self.wfile.write(data)
        self.wfile.flush()

    def end_stream(self) -> None:
        if self._chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def cut(self) -> None:
        """Drop the connection now, mid-body."""
        self.close_connection = True
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)

    def wait_for_client_to_leave(self) -> None:
        """Send nothing more; return when the client closes (or the stub stops)."""
        stub = self.server.stub
        while not stub.stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable and not self.connection.recv(1024):
                stub.client_gone.set()
                break
        self.close_connection = True


class StubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    stub: StubServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client went away: what several tests make it do
        super().handle_error(request, client_address)


@dataclass
class StubServer:
    """The running stub. ``routes`` maps ``"POST /v1/chat/completions"`` to a route;
    a list of routes is used one per request, the last one repeating."""

    routes: dict[str, Route | list[Route]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    request_seen: threading.Event = field(default_factory=threading.Event)
    client_gone: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    _server: StubHTTPServer | None = None
    _thread: threading.Thread | None = None
    _served: dict[str, int] = field(default_factory=dict)
    connections: list[socket.socket] = field(default_factory=list)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The API root, as ``--api-base`` takes it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def route_for(self, method: str, path: str) -> Route:
        key = f"{method} {path}"
        route = self.routes.get(key)
        if route is None:
            if key == "GET /v1/models":
                return models_route(["stub-model"])
            return lambda h: h.send_json(404, {"error": {"message": f"no route {key}"}})
        if isinstance(route, list):
            n = self._served.get(key, 0)
            self._served[key] = n + 1
            return route[min(n, len(route) - 1)]
        return route

    def chat(self, *routes: Route) -> None:
        """Set the route(s) of ``POST /v1/chat/completions``."""
        self.routes["POST /v1/chat/completions"] = list(routes)

    def start(self) -> None:
        server = StubHTTPServer(("127.0.0.1", 0), StubHandler)
        server.stub = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="stub-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for conn in self.connections:  # keep-alive connections outlive serve_forever
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(5)


def models_route(ids: Iterable[str], **extra: Any) -> Route:
    """``GET /v1/models`` listing ``ids`` (``extra`` fields on every entry)."""
    data = [{"id": i, "object": "model", "owned_by": "stub", **extra} for i in ids]
    return lambda h: h.send_json(200, {"object": "list", "data": data})


def stream(*pieces: bytes, done: bool = True, chunked: bool = True) -> Route:
    """A 200 event stream that writes ``pieces`` (each its own write), then ``[DONE]``."""

    def route(h: StubHandler) -> None:
        h.start_stream(chunked)
        for piece in pieces:
            h.write(piece)
        if done:
            h.write(DONE)
        h.end_stream()

    return route


def reply(text: str) -> Route:
    """A normal streamed reply: one event per word, then stop and ``[DONE]``."""
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1][:-1]
    return stream(*(event(w) for w in words), event(finish="stop"))


def status(code: int, payload: Any, headers: dict[str, str] | None = None) -> Route:
    """An HTTP error status with a JSON (or raw bytes) body."""
    return lambda h: h.send_json(code, payload, headers)
