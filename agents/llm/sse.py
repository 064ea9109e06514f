"""An HTTP transport that makes non-standard SSE error lines visible to the ``openai`` SDK.

llama.cpp's server reports an error that happens after it answered 200 OK (the prompt exceeds
its context, its chat template raised) as an ``error: {...}`` line of the event stream, then
``data: [DONE]``. ``error`` is not an SSE field, so a conforming parser (the SDK's) skips the
line and the stream looks like a connection that closed early. This transport rewrites such a
line into ``data: {"error": {...}}``, the form OpenAI itself uses, which the SDK raises as an
``APIError`` carrying the body; ``agents.llm.openai`` then classifies it like an HTTP error.

Only ``text/event-stream`` responses are touched, line by line, without holding back any
complete line (streaming latency is unchanged).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx2

_ERROR_FIELD = b"error:"


def rewrite_error_line(line: bytes) -> bytes:
    """``line`` (without its line break) as a ``data:`` event when it is an ``error:`` field."""
    if not line.startswith(_ERROR_FIELD):
        return line
    raw = line[len(_ERROR_FIELD) :].strip()
    try:
        payload = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        payload = {"message": raw.decode("utf-8", "replace")}
    if not isinstance(payload, dict):
        payload = {"message": str(payload)}
    if isinstance(payload.get("error"), dict):
        payload = payload["error"]
    if not isinstance(payload.get("message"), str) or not payload["message"]:
        payload = {**payload, "message": json.dumps(payload, ensure_ascii=False)[:500]}
    return b"data: " + json.dumps({"error": payload}, ensure_ascii=False).encode()


class _RewrittenStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        async for piece in self._inner:
            pending += piece
            cut = pending.rfind(b"\n")
            if cut < 0:
                continue
            complete, pending = pending[: cut + 1], pending[cut + 1 :]
            if _ERROR_FIELD in complete:
                complete = b"\n".join(rewrite_error_line(line) for line in complete.split(b"\n"))
            yield complete
        if pending:
            yield rewrite_error_line(pending)

    async def aclose(self) -> None:
        await self._inner.aclose()


class SSEErrorTransport(httpx2.AsyncBaseTransport):
    """Wraps ``inner`` (default: a plain ``AsyncHTTPTransport``); see the module docstring."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if "text/event-stream" not in response.headers.get("content-type", ""):
            return response
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_RewrittenStream(response.stream),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
