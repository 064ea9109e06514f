"""Streams and errors in the exact shapes third-party OpenAI-compatible servers send.

Each function returns a script entry for the fake server (``tests.fakes.openai_server``). The
shapes are those of the servers named, field for field where it matters to a client: which
fields are null rather than absent, where usage travels, how an error is framed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.fakes.openai_script import HTTPError, RawStream, Reply, SSELine, chunk, error_body

Request = Any  # tests.fakes.openai_server.RecordedRequest (not imported: no cycle)


def _litellm_chunk(delta: dict[str, Any], *, finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    full = {"content": None, "role": None, "function_call": None, "tool_calls": None, "audio": None}
    full.update(delta)
    return {
        "id": "chatcmpl-litellm",
        "created": 1733200000,
        "model": "fake-model",
        "object": "chat.completion.chunk",
        "system_fingerprint": None,
        "choices": [{"finish_reason": finish_reason, "index": 0, "delta": full, "logprobs": None}],
        "provider_specific_fields": None,
        **extra,
    }


def litellm_stream(text: str = "Hello from the proxy.") -> RawStream:
    """LiteLLM proxy 1.x: every delta field present (mostly null), the finish chunk, then the
    usage on a chunk whose one choice has an empty delta (not OpenAI's empty ``choices``)."""
    pieces = [text[i : i + 6] for i in range(0, len(text), 6)]
    events: list[Any] = [_litellm_chunk({"role": "assistant", "content": ""})]
    events += [_litellm_chunk({"content": p}) for p in pieces]
    events.append(_litellm_chunk({}, finish_reason="stop"))
    usage = {"completion_tokens": 5, "prompt_tokens": 12, "total_tokens": 17, "completion_tokens_details": None}
    events.append(
        {
            "id": "chatcmpl-litellm",
            "created": 1733200000,
            "model": "fake-model",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}}],
            "usage": usage,
        }
    )
    return RawStream(events)


def ollama_reasoning_with_tool_call(*, reasoning: str, name: str, arguments: dict[str, Any]) -> RawStream:
    """Ollama's /v1: reasoning as ``delta.reasoning`` (not ``reasoning_content``), in the same
    delta as a whole tool call (id, name and arguments at once), then ``tool_calls`` finish."""
    call = {
        "id": "call_ollama_1",
        "index": 0,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return RawStream(
        [
            chunk({"role": "assistant", "content": "", "reasoning": reasoning, "tool_calls": [call]}),
            chunk({"role": "assistant", "content": ""}, finish_reason="tool_calls"),
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "fake-model",
                "choices": [],
                "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
            },
        ]
    )


def llamacpp_stream(text: str, *, finish_reason: str = "stop") -> RawStream:
    """llama.cpp's server: usage (and its ``timings``) arrive after the finish chunk."""
    events: list[Any] = [chunk({"role": "assistant", "content": None})]
    events += [chunk({"content": word}) for word in text.split(" ") if word]
    events.append(chunk({}, finish_reason=finish_reason))
    events.append(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "fake-model",
            "choices": [],
            "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
            "timings": {"prompt_n": 30, "predicted_n": 9, "predicted_ms": 120.5},
        }
    )
    return RawStream(events)


def llamacpp_context_overflow(*, n_prompt_tokens: int = 5000, n_ctx: int = 4096) -> RawStream:
    """llama.cpp answers 200 OK, then reports the overflow as a non-standard ``error:`` line."""
    error = {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": n_prompt_tokens,
        "n_ctx": n_ctx,
    }
    return RawStream([SSELine("error: " + json.dumps(error))])


def llamacpp_template_error() -> RawStream:
    """llama.cpp: the chat template raised after the stream began (200 OK)."""
    error = {
        "code": 500,
        "message": "Conversation roles must alternate user/assistant/user/assistant/...",
        "type": "server_error",
    }
    return RawStream([SSELine("error: " + json.dumps(error))])


def roles_alternate(messages: list[dict[str, Any]]) -> bool:
    """What a strict chat template (Mistral, Llama-2, Gemma) requires of the roles: after the
    system message, the first message is the user's and no two user messages are adjacent."""
    roles = [m.get("role") for m in messages if m.get("role") != "system"]
    if roles and roles[0] != "user":
        return False
    return all(not (a == b == "user") for a, b in zip(roles, roles[1:], strict=False))


_ALTERNATE = "Conversation roles must alternate user/assistant/user/assistant/..."


def strict_template(then: Any, *, style: str = "vllm") -> Callable[[Request], Any]:
    """A server whose chat template rejects non-alternating roles, answering ``then`` otherwise.
    ``style``: ``vllm`` (HTTP 400, its own error object), ``tgi`` (HTTP 422 ``{"error": str}``),
    ``llama-cpp-python`` (HTTP 500, OpenAI shape), ``llamacpp`` (200 OK, then an ``error:`` line)."""

    def answer(request: Request) -> Any:
        if roles_alternate((request.json or {}).get("messages", [])):
            return then
        if style == "vllm":
            return HTTPError(400, {"object": "error", "message": _ALTERNATE, "type": "BadRequestError", "param": None, "code": 400})
        if style == "tgi":
            return HTTPError(422, {"error": f"Template error: {_ALTERNATE}", "error_type": "template_error"})
        if style == "llama-cpp-python":
            return HTTPError(500, error_body(_ALTERNATE, type="internal_server_error"))
        return llamacpp_template_error()

    return answer


def rejects_stream_options(then: Any) -> Callable[[Request], Any]:
    """A server (pydantic with extra fields forbidden) that answers 422 to ``stream_options``."""

    def answer(request: Request) -> Any:
        if "stream_options" in (request.json or {}):
            detail = [
                {
                    "type": "extra_forbidden",
                    "loc": ["body", "stream_options"],
                    "msg": "Extra inputs are not permitted",
                    "input": {"include_usage": True},
                }
            ]
            return HTTPError(422, {"detail": detail})
        return then

    return answer


def fastapi_error(status: int, detail: str) -> HTTPError:
    """FastAPI's default error body (llama-cpp-python, many proxies)."""
    return HTTPError(status, {"detail": detail})


def plain_text_error(status: int, text: str) -> HTTPError:
    """A proxy or a crashed server answering plain text."""
    return HTTPError(status, text, content_type="text/plain; charset=utf-8")


def truncated_reply(content: str, *, finish_reason: str = "length") -> Reply:
    """A reply the server cut off: ``length`` (max_tokens or the window) or ``content_filter``."""
    return Reply(content=content, finish_reason=finish_reason)
