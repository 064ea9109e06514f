"""Reading the event stream of a streamed chat completion: its chunks, as decoded JSON.

``agents.llm.openai`` sends the request with the ``openai`` SDK and reads the streamed body
itself, through this module, instead of through the SDK's ``AsyncStream``. The SDK turns every
chunk into a tree of model objects; a chunk carrying four characters costs about 150 µs that
way, which caps a stream at ~6,000 deltas/s on this kind of machine, where ``json.loads`` of the
same chunk costs a few µs. The chunk dicts go to ``agents.llm.chunks``, which checks every field
it reads.

Parsing follows the HTML event-stream rules the SDK's decoder follows: lines end with CRLF, LF
or CR; a blank line dispatches the event; ``data`` lines of one event are joined by ``\\n``; a
line starting with ``:`` is a comment; one space after the colon is dropped; an event left
without its blank line when the body ends is discarded.

One extension: llama.cpp's server reports an error that happens after it answered 200 OK (the
prompt exceeds its context, its chat template raised) as an ``error: {...}`` line, then
``data: [DONE]``. ``error`` is not an SSE field, so a conforming parser skips the line and the
stream looks like a connection that closed early. Such a line is read as
``data: {"error": {...}}``, the form OpenAI itself uses, so it is classified like an HTTP error.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import openai

logger = logging.getLogger(__name__)

_ERROR_FIELD = b"error:"

#: What is read after ``[DONE]`` so the connection can serve the next request: normally only
#: the body's end, which follows at once. A server that sends more, or stalls, is cut off there
#: (the call's last events wait for this, so the bound is short).
DRAIN_SECONDS = 0.05
DRAIN_BYTES = 64 * 1024


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


class EventReader:
    """Feed it the body's bytes as they arrive; each ``feed`` returns the data of the events
    those bytes completed. Raises ``UnicodeDecodeError`` on a data line that is not UTF-8."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[str] = []

    def feed(self, piece: bytes) -> list[str]:
        buffer = self._pending + piece if self._pending else piece
        lines = buffer.splitlines(keepends=True)
        # An unterminated last line waits for the rest. So does one ending in CR: its LF may be
        # the first byte of the next piece, and CR LF is one line end, not two.
        if lines and not lines[-1].endswith(b"\n"):
            self._pending = lines.pop()
        else:
            self._pending = b""
        events: list[str] = []
        for line in lines:
            event = self._line(line.rstrip(b"\r\n"))
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[str]:
        """The events the body's last bytes completed (a last event without its blank line is
        discarded, as the SDK does)."""
        pending, self._pending = self._pending, b""
        if not pending:
            return []
        event = self._line(pending.rstrip(b"\r\n"))
        return [event] if event is not None else []

    def _line(self, line: bytes) -> str | None:
        if not line:
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return data
        if line.startswith(_ERROR_FIELD):
            line = rewrite_error_line(line)
        if not line.startswith(b"data"):
            return None  # comments, event, id, retry and unknown fields
        name, _, value = line.partition(b":")
        if name != b"data":
            return None
        if value.startswith(b" "):
            value = value[1:]
        self._data.append(value.decode("utf-8"))
        return None


async def event_data(body: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The data of each event of ``body``, as it completes."""
    reader = EventReader()
    async for piece in body:
        for data in reader.feed(piece):
            yield data
    for data in reader.close():
        yield data


async def stream_chunks(response: httpx2.Response) -> AsyncIterator[Any]:
    """The decoded chunks of a streamed chat completion, up to ``[DONE]``; what follows it is
    read to the body's end within ``DRAIN_SECONDS`` and ``DRAIN_BYTES`` (``_drain``) and
    dropped. Raises what the SDK's own stream raises: ``APIError`` for an ``{"error": ...}``
    event (the stream began with 200 OK), ``APITimeoutError`` / ``APIConnectionError`` when
    reading the body fails; and ``json.JSONDecodeError`` / ``UnicodeDecodeError`` for an event
    that is not JSON."""
    body = response.aiter_bytes()
    try:
        async for data in event_data(body):
            if data.startswith("[DONE]"):
                await _drain(body)
                return
            chunk = json.loads(data)
            if isinstance(chunk, dict) and chunk.get("error"):
                raise _stream_error(chunk["error"], response.request)
            yield chunk
    except httpx2.TimeoutException as exc:
        raise openai.APITimeoutError(request=response.request) from exc
    except (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream) as exc:
        raise openai.APIConnectionError(request=response.request) from exc


async def _drain(body: AsyncIterator[bytes]) -> None:
    """Read the body to its end after ``[DONE]``, within ``DRAIN_SECONDS`` and ``DRAIN_BYTES``.

    A streamed response closed before its end takes its connection with it, so every model
    call would open a new one (and, over HTTPS, shake hands again). Read to the end, the
    connection goes back to the client's pool. The answer is complete by now: a failure here
    only means the connection is closed instead of reused.
    """
    left = DRAIN_BYTES
    try:
        with anyio.move_on_after(DRAIN_SECONDS) as scope:
            async for piece in body:
                left -= len(piece)
                if left < 0:
                    logger.debug("more than %d bytes after [DONE]: the connection is not reused", DRAIN_BYTES)
                    return
        if scope.cancelled_caught:
            logger.debug("the body did not end within %gs of [DONE]: the connection is not reused", DRAIN_SECONDS)
    except (httpx2.HTTPError, anyio.EndOfStream, OSError) as exc:  # OSError covers SSL errors and timeouts
        logger.debug("reading the body after [DONE] failed (%s): the connection is not reused", type(exc).__name__)


def _stream_error(error: Any, request: httpx2.Request) -> openai.APIError:
    message = error.get("message") if isinstance(error, dict) else None
    if not message or not isinstance(message, str):
        message = "An error occurred during streaming"
    return openai.APIError(message=message, request=request, body=error)
