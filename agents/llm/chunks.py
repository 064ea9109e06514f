"""Turning streamed ``chat.completion.chunk`` objects into ``ModelEvent`` values.

OpenAI-compatible servers differ in small ways; this module accepts all of these:

* reasoning as ``delta.reasoning_content`` (DeepSeek, vLLM, llama.cpp) or ``delta.reasoning``
  (Ollama, newer vLLM). A server that sends both gets ``reasoning_content`` taken, once;
* tool calls assembled by ``tool_call.index``: id and name arrive first, arguments in pieces,
  several calls interleaved. Servers that repeat the id or the name on every piece, or omit the
  index, are handled; a call the server gave no id gets a generated one;
* usage on a last chunk with empty ``choices`` (``stream_options.include_usage``), or on every
  chunk (the last one wins);
* content in the same chunk as ``finish_reason``.

Chunks arrive as decoded JSON (``agents.llm.sse``), unvalidated, so every field is type-checked
here and anything impossible raises ``MalformedResponse``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from agents.llm.base import ContentDelta, Finish, ModelEvent, ReasoningDelta, ToolCallReady, Usage
from agents.llm.errors import MalformedResponse, ModelUnavailable
from memory.messages import MalformedMessage, ToolCall


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _field(obj: Any, name: str) -> Any:
    """The ``name`` key of a JSON object, None when absent."""
    if isinstance(obj, dict):
        return obj.get(name)
    raise MalformedResponse(f"the endpoint sent {_json_type(obj)} where an object with {name!r} belongs")


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "text"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return "a number" if isinstance(value, int | float) else type(value).__name__


def _optional_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedResponse(f"the endpoint sent {what} as {type(value).__name__}, expected text")


def _int(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedResponse(f"the endpoint sent {what}={value!r}, expected a non-negative integer")
    return value


class ChunkAssembler:
    """Feed it chunks in order; it returns the events each chunk produces, then the closing
    events (tool calls, usage, finish) from ``close()``."""

    def __init__(self, *, source: str = "the model") -> None:
        self._source = source  # named in errors: "the model gpt-4o at https://..."
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Usage | None = None
        self._finish: str | None = None

    def feed(self, chunk: Any) -> list[ModelEvent]:
        """Events for one chunk. Raises ``MalformedResponse`` on an impossible chunk."""
        if not isinstance(chunk, dict):
            raise MalformedResponse(f"the endpoint sent a stream chunk that is {_json_type(chunk)}, not an object")
        events: list[ModelEvent] = []
        usage = _field(chunk, "usage")
        if usage is not None:
            self._usage = self._read_usage(usage)
        choices = _field(chunk, "choices")
        if choices is None and usage is not None:
            return events
        if not isinstance(choices, list):
            raise MalformedResponse("the endpoint sent a stream chunk without a 'choices' list")
        for choice in choices:
            index = _field(choice, "index")
            if index not in (None, 0):
                continue  # n > 1 is never requested; ignore stray alternatives
            events.extend(self._read_choice(choice))
        return events

    def close(self) -> list[ModelEvent]:
        """Closing events once the stream ended. Raises ``ModelUnavailable`` if the stream
        stopped before the model finished (the connection closed early)."""
        if self._finish is None:
            raise ModelUnavailable(
                f"the stream of {self._source} ended before the answer finished (the connection closed early)"
            )
        events: list[ModelEvent] = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            if not partial.name:
                raise MalformedResponse(f"the endpoint sent tool call #{index} without a function name")
            try:
                call = ToolCall(
                    id=partial.id or f"call_{uuid.uuid4().hex[:24]}",
                    name=partial.name,
                    arguments_json="".join(partial.arguments),
                )
            except MalformedMessage as exc:
                raise MalformedResponse(f"the endpoint sent an invalid tool call: {exc}") from None
            events.append(ToolCallReady(call))
        ids = [e.call.id for e in events if isinstance(e, ToolCallReady)]
        if len(set(ids)) != len(ids):
            raise MalformedResponse("the endpoint sent two tool calls with the same id")
        if self._usage is not None:
            events.append(self._usage)
        events.append(Finish(self._finish))
        return events

    # -- pieces ------------------------------------------------------------------------------

    def _read_choice(self, choice: Any) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        delta = _field(choice, "delta")
        if delta is not None:
            reasoning = _optional_str(_field(delta, "reasoning_content"), "reasoning_content")
            if reasoning is None:
                reasoning = _optional_str(_field(delta, "reasoning"), "reasoning")
            if reasoning:
                events.append(ReasoningDelta(reasoning))
            content = _optional_str(_field(delta, "content"), "content")
            if content:
                events.append(ContentDelta(content))
            tool_calls = _field(delta, "tool_calls")
            if tool_calls is not None:
                if not isinstance(tool_calls, list):
                    raise MalformedResponse("the endpoint sent 'tool_calls' that is not a list")
                for piece in tool_calls:
                    self._read_tool_call(piece)
        reason = _optional_str(_field(choice, "finish_reason"), "finish_reason")
        if reason:
            self._finish = reason
        return events

    def _read_tool_call(self, piece: Any) -> None:
        call_id = _optional_str(_field(piece, "id"), "a tool call id")
        function = _field(piece, "function")
        name = _optional_str(_field(function, "name"), "a tool call name") if function is not None else None
        arguments = _field(function, "arguments") if function is not None else None
        if arguments is not None and not isinstance(arguments, str):
            raise MalformedResponse("the endpoint sent tool call arguments that are not a string")
        index = _field(piece, "index")
        if index is None:
            index = self._index_without_position(call_id)
        elif isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise MalformedResponse(f"the endpoint sent tool call index {index!r}")
        partial = self._calls.setdefault(index, _PartialCall())
        if call_id and not partial.id:
            partial.id = call_id
        if name and name != partial.name:
            # Usually the name arrives once; a few servers stream it in pieces.
            partial.name += name
        if arguments:
            partial.arguments.append(arguments)

    def _index_without_position(self, call_id: str | None) -> int:
        """Servers that omit ``index``: a new id starts a new call, anything else continues
        the latest one."""
        for index, partial in self._calls.items():
            if call_id and partial.id == call_id:
                return index
        if call_id or not self._calls:
            return len(self._calls)
        return max(self._calls)

    @staticmethod
    def _read_usage(usage: Any) -> Usage:
        prompt = _int(_field(usage, "prompt_tokens"), "usage.prompt_tokens")
        completion = _int(_field(usage, "completion_tokens"), "usage.completion_tokens")
        total = _field(usage, "total_tokens")
        return Usage(
            prompt, completion, _int(total, "usage.total_tokens") if total is not None else prompt + completion
        )
