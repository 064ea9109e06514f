"""The ``ChatModel`` protocol: one streaming call from OpenAI-wire messages to model events.

A model call is an async iterator of small frozen events::

    async with contextlib.aclosing(model.stream(messages=wire, tools=schemas)) as events:
        async for event in events:
            ...

Event order, for every implementation:

* ``ReasoningDelta`` and ``ContentDelta`` in the order the model produced them (they may
  interleave);
* then one ``ToolCallReady`` per requested call, in the model's order (calls are only complete
  once the stream has ended, because parallel calls arrive interleaved);
* then at most one ``Usage``;
* then exactly one ``Finish``, always last. A stream that raises has no ``Finish``.

Failures are raised as the ``agents.llm.errors`` family. Cancelling the consuming task (or
closing the iterator) propagates ``asyncio.CancelledError`` and releases the connection.

``complete()`` drains a stream into a ``Completion``; ``CompletionBuilder`` does the same
incrementally for a caller that forwards events (the runtime streams them to the browser) and
also needs the final assistant message. ``as_text_completion()`` adapts a model to the memory
system's summarizer seam (wire messages in, text out).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from memory.messages import Message, ToolCall

# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContentDelta:
    """A piece of the visible answer."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning (``reasoning_content``, or ``reasoning`` on some servers)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallReady:
    """One fully assembled tool call. ``call.arguments_json`` is passed through as the model
    wrote it (it may be invalid JSON: the runtime answers that with a tool error)."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class Usage:
    """Token accounting for the call, as the endpoint reported it (or counted, offline)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @property
    def total(self) -> int:
        return self.total_tokens


@dataclass(frozen=True, slots=True)
class Finish:
    """The stream ended normally. ``reason``: ``stop``, ``tool_calls``, ``length``,
    ``content_filter``, or whatever the endpoint said."""

    reason: str


ModelEvent = ContentDelta | ReasoningDelta | ToolCallReady | Usage | Finish

#: Finish reasons meaning the server cut the reply off: it is not the whole answer.
TRUNCATING_FINISH_REASONS = frozenset({"length", "content_filter"})


# -- the protocol ----------------------------------------------------------------------------


@runtime_checkable
class ChatModel(Protocol):
    """Anything that turns a chat request into a stream of ``ModelEvent``.

    ``name`` is a short identifier for logs and the UI (the model name); ``describe()`` is one
    human sentence saying which model this is and where it runs, never including secrets.
    """

    name: str

    def describe(self) -> str:
        """One line for the UI and logs, e.g. ``"gpt-4o-mini at https://api.openai.com/v1"``."""
        ...

    def stream(
        self,
        *,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> AsyncIterator[ModelEvent]:
        """Stream one reply to ``messages`` (OpenAI wire dicts, e.g. ``Message.to_wire()``).

        ``tools`` are OpenAI function-tool schemas (``{"type": "function", "function": {...}}``);
        None or empty offers no tools. ``model`` overrides the configured model name for this
        call; ``temperature``/``max_tokens`` are sent only when given; ``timeout`` (seconds)
        overrides the configured timeout. ``response_format`` (e.g. ``{"type": "json_object"}``)
        asks a server that supports it for structured output; it is a request, not a promise:
        callers still validate the text. Events follow the order in the module docstring.

        Raises ``ModelUnavailable``, ``RateLimited``, ``ModelTimeout``,
        ``ContextLengthExceeded``, ``MalformedResponse`` or ``ModelRejected`` (all
        ``ModelError``), possibly after some events were already yielded.
        """
        ...


# -- draining a stream -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished reply. ``content`` is None only when the reply is tool calls without text."""

    content: str | None
    reasoning_content: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    finish_reason: str

    @property
    def truncated(self) -> bool:
        """The server cut the reply off (``length``: max_tokens or the window; ``content_filter``)."""
        return self.finish_reason in TRUNCATING_FINISH_REASONS

    def to_message(self, **meta: Any) -> Message:
        """The reply as an assistant ``Message``; ``meta`` sets id/kind/created_at/tokens."""
        return Message(
            role="assistant",
            content=self.content,
            reasoning_content=self.reasoning_content,
            tool_calls=self.tool_calls,
            **meta,
        )


class CompletionBuilder:
    """Accumulates events into a ``Completion`` while the caller forwards them elsewhere."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ToolCall] = []
        self._usage: Usage | None = None
        self._finish: str | None = None

    def add(self, event: ModelEvent) -> ModelEvent:
        """Record ``event`` and return it unchanged (handy inside a generator)."""
        match event:
            case ContentDelta(text=text):
                self._content.append(text)
            case ReasoningDelta(text=text):
                self._reasoning.append(text)
            case ToolCallReady(call=call):
                self._calls.append(call)
            case Usage():
                self._usage = event
            case Finish(reason=reason):
                self._finish = reason
            case _:
                raise TypeError(f"not a model event: {event!r}")
        return event

    @property
    def finished(self) -> bool:
        return self._finish is not None

    @property
    def content(self) -> str:
        """The text streamed so far (partial until ``finished``)."""
        return "".join(self._content)

    @property
    def reasoning_content(self) -> str:
        return "".join(self._reasoning)

    def build(self) -> Completion:
        """The completion so far. Before a ``Finish`` arrived its reason is ``"incomplete"``."""
        content = "".join(self._content)
        reasoning = "".join(self._reasoning)
        return Completion(
            content=content if (content or not self._calls) else None,
            reasoning_content=reasoning or None,
            tool_calls=tuple(self._calls),
            usage=self._usage,
            finish_reason=self._finish or "incomplete",
        )


async def complete(
    chat_model: ChatModel,
    /,
    *,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    **options: Any,
) -> Completion:
    """Run ``chat_model.stream(...)`` to the end and return the whole reply.

    ``options`` are passed to ``stream`` (model, temperature, max_tokens, timeout). Raises what
    ``stream`` raises.
    """
    builder = CompletionBuilder()
    events = chat_model.stream(messages=messages, tools=tools, **options)
    try:
        async for event in events:
            builder.add(event)
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()
    return builder.build()


TextCompletion = Callable[[list[dict[str, Any]]], Awaitable[str]]


def as_text_completion(chat_model: ChatModel, /, **options: Any) -> TextCompletion:
    """Adapt ``chat_model`` to the memory system's summarizer seam.

    Returns ``async f(messages: list[dict], **overrides) -> str``: the reply's text (``""`` if
    the model said nothing), no tools offered. ``options`` (``max_tokens``, ``temperature``,
    ``timeout``, ``response_format``) go with every call; ``overrides`` replace them for one
    call (e.g. ``response_format={"type": "json_object"}`` where ``json_mode`` allows it).

    Attributes for callers that plan their requests: ``context_window`` (the model's, when
    known), ``max_tokens`` (the cap every call sends, None when uncapped) and ``json_mode``
    (True when the server is known to take ``response_format``, False when it refused it, None
    when unknown; see ``agents.llm.capabilities``). Model errors propagate; the memory system
    owns retries and its fallback summary.
    """

    async def text_completion(messages: list[dict[str, Any]], **overrides: Any) -> str:
        completion = await complete(chat_model, messages=messages, tools=None, **{**options, **overrides})
        return completion.content or ""

    text_completion.__qualname__ = f"as_text_completion({getattr(chat_model, 'name', 'model')})"
    # The summarizer plans its input chunks for this window (the server's real one, when known).
    text_completion.context_window = getattr(chat_model, "context_window", None)  # type: ignore[attr-defined]
    text_completion.max_tokens = options.get("max_tokens")  # type: ignore[attr-defined]
    capabilities = getattr(chat_model, "capabilities", None)
    text_completion.json_mode = getattr(capabilities, "json_mode", None)  # type: ignore[attr-defined]
    return text_completion
