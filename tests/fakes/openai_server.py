"""A scripted OpenAI-compatible HTTP server for tests and benchmarks (stdlib only).

It listens on 127.0.0.1 on an ephemeral port and speaks ``POST /v1/chat/completions`` with
``stream=true`` (chunked SSE: ``data: {chat.completion.chunk}`` lines, then ``data: [DONE]``) and
``stream=false`` (one ``chat.completion``), plus ``GET /v1/models``. Each request takes the next
scripted response; every request is recorded::

    server = start_fake_server()
    server.script(Reply(content="Hello there", reasoning="Greet back."), rate_limited(), Reply(...))
    model = OpenAIChatModel(base_url=server.url, api_key="sk-test", model="fake-model")
    ...
    assert server.requests[0].json["messages"] == [...]
    server.stop()

Script entries: ``Reply`` (a normal answer, rendered as realistic split chunks: role first,
reasoning and content in pieces, each tool call's id and name first and its arguments in pieces,
parallel calls interleaved, finish chunk, usage chunk when the client asked for it),
``RawStream`` (exact SSE lines, with ``Pause`` and ``Drop`` markers for mid-stream faults),
``HTTPError`` (any status and body; see ``rate_limited``, ``server_error``,
``context_length_exceeded``), ``Hang`` (accept the request and never answer), or a callable
``(RecordedRequest) -> entry`` for answers that depend on the request. When the script is empty,
``responder`` (if set) answers, else the server returns HTTP 400 saying the script ran out.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.openai_script import (
    Drop,
    FakeToolCall,
    Hang,
    HTTPError,
    Pause,
    RawStream,
    Reply,
    SSELine,
    chunk,
    context_length_exceeded,
    error_body,
    rate_limited,
    render_chunks,
    render_completion,
    server_error,
    usage_chunk,
)

#: A key for tests: long and distinctive, so a leak into logs or messages is easy to spot.
FAKE_API_KEY = "sk-test-SECRET-0123456789abcdef"

__all__ = [
    "FAKE_API_KEY",
    "Drop",
    "FakeOpenAIServer",
    "FakeToolCall",
    "HTTPError",
    "Hang",
    "Pause",
    "RawStream",
    "RecordedRequest",
    "Reply",
    "SSELine",
    "chunk",
    "context_length_exceeded",
    "error_body",
    "rate_limited",
    "render_chunks",
    "render_completion",
    "server_error",
    "start_fake_server",
    "usage_chunk",
]

# -- the server ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


Entry = Reply | RawStream | HTTPError | Hang | Callable[[RecordedRequest], Any]


class FakeOpenAIServer:
    """The running server. ``url`` ends in ``/v1`` (what ``OPENAI_BASE_URL`` looks like)."""

    def __init__(self) -> None:
        self._queue: deque[Entry] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._disconnected = threading.Event()
        self.requests: list[RecordedRequest] = []  # POSTs, in order
        self.get_requests: list[RecordedRequest] = []  # metadata reads (GET /v1/models, /props, POST /api/show)
        self.disconnects = 0
        self.connections = 0  # TCP connections accepted (a client reusing one opens no other)
        self.responder: Callable[[RecordedRequest], Any] | None = None
        #: ``GET /v1/models`` entries (add e.g. ``max_model_len`` as vLLM does); ``props`` is
        #: llama.cpp's ``GET /props`` body (None: 404).
        self.models: list[dict[str, Any]] = [{"id": "fake-model", "object": "model", "owned_by": "fake"}]
        self.props: dict[str, Any] | None = None
        #: Ollama's ``POST /api/show`` body (None: 404); such requests are not in ``requests``.
        self.ollama_show: dict[str, Any] | None = None
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.fake = self  # type: ignore[attr-defined]
        host, port = self._httpd.server_address[:2]
        self.url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()

    def script(self, *entries: Entry) -> FakeOpenAIServer:
        """Queue responses, answered in order, one per request."""
        with self._lock:
            self._queue.extend(entries)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def wait_for_disconnect(self, timeout: float = 5.0) -> bool:
        """True once a client went away while the server was still streaming to it."""
        return self._disconnected.wait(timeout)

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler ---------------------------------------------------------------

    def _next(self, request: RecordedRequest) -> Any:
        with self._lock:
            self.requests.append(request)
            entry = self._queue.popleft() if self._queue else None
        if entry is None and self.responder is not None:
            entry = self.responder
        if entry is None:
            return HTTPError(400, error_body("fake OpenAI server: no scripted response left for this request"))
        while callable(entry) and not isinstance(entry, (Reply, RawStream, HTTPError, Hang)):
            entry = entry(request)
        return entry

    def _client_gone(self) -> None:
        with self._lock:
            self.disconnects += 1
        self._disconnected.set()


def start_fake_server() -> FakeOpenAIServer:
    """Start a server on 127.0.0.1 (ephemeral port); call ``stop()`` when done."""
    return FakeOpenAIServer()


class _ClientGone(Exception):
    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections end on their own

    @property
    def fake(self) -> FakeOpenAIServer:
        return self.server.fake  # type: ignore[attr-defined]

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake.connections += 1

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.fake._lock:
            self.fake.get_requests.append(
                RecordedRequest("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, b"")
            )
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": self.fake.models})
        elif self.path.rstrip("/") == "/props" and self.fake.props is not None:
            self._send_json(200, self.fake.props)
        else:
            self._send_json(404, error_body(f"no route {self.path}"))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        if self.path.rstrip("/") == "/api/show":
            with self.fake._lock:
                self.fake.get_requests.append(request)
            if self.fake.ollama_show is not None:
                self._send_json(200, self.fake.ollama_show)
            else:
                self._send_json(404, error_body(f"no route {self.path}"))
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, error_body(f"no route {self.path}"))
            return
        entry = self.fake._next(request)
        payload = request.json or {}
        model = payload.get("model", "fake-model")
        try:
            if isinstance(entry, HTTPError):
                self._send_error(entry)
            elif isinstance(entry, Hang):
                self.fake._stopping.wait(entry.seconds)
                self.close_connection = True
            elif isinstance(entry, Reply) and not payload.get("stream"):
                self._send_json(200, render_completion(entry, model=model))
            elif isinstance(entry, Reply):
                include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
                chunks = render_chunks(entry, model=model, include_usage=include_usage)
                self._stream(RawStream(chunks, delay=entry.delay))
            elif isinstance(entry, RawStream):
                self._stream(entry)
            else:
                raise TypeError(f"not a script entry: {entry!r}")
        except _ClientGone:
            self.fake._client_gone()
            self.close_connection = True

    # -- output ------------------------------------------------------------------------------

    def _send_json(
        self, status: int, body: Any, headers: dict[str, str] | None = None, content_type: str = "application/json"
    ) -> None:
        data = (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: HTTPError) -> None:
        self._send_json(error.status, error.body, error.headers, error.content_type)

    def _stream(self, stream: RawStream) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._write_chunk(b"")  # flush headers before the first (possibly delayed) event
        for index, event in enumerate(stream.events):
            if isinstance(event, Drop):
                self._drop()
                return
            if isinstance(event, Pause):
                self.fake._stopping.wait(event.seconds)
                continue
            if index and stream.delay:
                time.sleep(stream.delay)
            if isinstance(event, SSELine):
                self._write_chunk(f"{event.text}\n\n".encode())
                continue
            line = event if isinstance(event, str) else json.dumps(event)
            self._write_chunk(f"data: {line}\n\n".encode())
        if stream.done:
            self._write_chunk(b"data: [DONE]\n\n")
        self._write_raw(b"0\r\n\r\n")

    def _write_chunk(self, data: bytes) -> None:
        if data:
            self._write_raw(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        else:
            self._write_raw(b"")

    def _write_raw(self, data: bytes) -> None:
        try:
            if data:
                self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError) as exc:
            raise _ClientGone from exc

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
