"""Script entries for the fake OpenAI-compatible server, and how they render on the wire.

``Reply`` renders like a real server streams: a role chunk, reasoning and content in pieces,
each tool call's id and name first and its arguments in pieces (parallel calls interleaved),
a finish chunk, then a usage chunk with empty ``choices`` when the client asked for one.
``render_completion`` gives the ``stream=false`` form of the same reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# -- script entries --------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """A successful answer. ``chunk_chars`` sets the size of content/reasoning/argument pieces;
    ``delay`` pauses between chunks (seconds); ``reasoning_field`` is ``reasoning_content`` or
    ``reasoning`` (Ollama style); ``interleave`` mixes the argument pieces of parallel calls."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: Sequence[FakeToolCall] = ()
    finish_reason: str | None = None
    usage: tuple[int, int] | None = (11, 7)
    chunk_chars: int = 4
    delay: float = 0.0
    reasoning_field: str = "reasoning_content"
    interleave: bool = True


@dataclass(frozen=True)
class Pause:
    """Inside a ``RawStream``: stop sending for ``seconds`` (a mid-stream hang)."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Inside a ``RawStream``: cut the connection here, without ending the chunked body."""


@dataclass(frozen=True)
class SSELine:
    """Inside a ``RawStream``: one line sent exactly as given (plus the blank line ending an
    event), e.g. llama.cpp's non-standard ``error: {...}`` field."""

    text: str


@dataclass(frozen=True)
class RawStream:
    """Exact SSE output: a dict is sent as ``data: <json>``, a str as ``data: <str>`` verbatim
    (e.g. invalid JSON), an ``SSELine`` as its own line. ``done`` appends ``data: [DONE]``."""

    events: Sequence[dict[str, Any] | str | SSELine | Pause | Drop]
    delay: float = 0.0
    done: bool = True


@dataclass(frozen=True)
class HTTPError:
    """An error answer; a str ``body`` is sent as is (with ``content_type``), a dict as JSON."""

    status: int
    body: dict[str, Any] | str
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass(frozen=True)
class Hang:
    """Read the request, then send nothing for ``seconds`` (or until ``stop()``), then close."""

    seconds: float = 30.0


def error_body(
    message: str, *, type: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error format: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def rate_limited(*, retry_after: float | None = 0) -> HTTPError:
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
    return HTTPError(
        429, error_body("Rate limit reached for requests", type="requests", code="rate_limit_exceeded"), headers
    )


def server_error(status: int = 500) -> HTTPError:
    return HTTPError(status, error_body("The server had an error while processing your request.", type="server_error"))


def context_length_exceeded(*, with_code: bool = True) -> HTTPError:
    message = (
        "This model's maximum context length is 4096 tokens. However, your messages resulted in 5123 tokens. "
        "Please reduce the length of the messages."
    )
    return HTTPError(400, error_body(message, code="context_length_exceeded" if with_code else None, param="messages"))


def chunk(
    delta: dict[str, Any] | None = None, *, finish_reason: str | None = None, model: str = "fake-model"
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(prompt_tokens: int, completion_tokens: int, *, model: str = "fake-model") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


# -- rendering -------------------------------------------------------------------------------


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def render_chunks(reply: Reply, *, model: str = "fake-model", include_usage: bool = True) -> list[dict[str, Any]]:
    """The chunks a real server would stream for ``reply``."""
    out = [chunk({"role": "assistant", "content": ""}, model=model)]
    if reply.reasoning:
        out += [chunk({reply.reasoning_field: p}, model=model) for p in _pieces(reply.reasoning, reply.chunk_chars)]
    if reply.content:
        out += [chunk({"content": p}, model=model) for p in _pieces(reply.content, reply.chunk_chars)]
    heads = [
        {"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}
        for i, c in enumerate(reply.tool_calls)
    ]
    tails = [
        [{"index": i, "function": {"arguments": p}} for p in _pieces(c.arguments, reply.chunk_chars)]
        for i, c in enumerate(reply.tool_calls)
    ]
    if reply.interleave:
        out += [chunk({"tool_calls": [h]}, model=model) for h in heads]
        for round_ in range(max((len(t) for t in tails), default=0)):
            out += [chunk({"tool_calls": [t[round_]]}, model=model) for t in tails if round_ < len(t)]
    else:
        for head, tail in zip(heads, tails, strict=True):
            out += [chunk({"tool_calls": [head]}, model=model)] + [
                chunk({"tool_calls": [t]}, model=model) for t in tail
            ]
    out.append(chunk({}, finish_reason=_finish(reply), model=model))
    if include_usage and reply.usage is not None:
        out.append(usage_chunk(*reply.usage, model=model))
    return out


def render_completion(reply: Reply, *, model: str = "fake-model") -> dict[str, Any]:
    """The ``chat.completion`` object for ``reply`` (``stream=false``)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message[reply.reasoning_field] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish(reply)}],
    }
    if reply.usage is not None:
        p, c = reply.usage
        body["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    return body


def _finish(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
