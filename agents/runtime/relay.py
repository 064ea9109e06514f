"""One model call of a step, relayed as runtime events while it streams.

``relay_reply`` turns the model's deltas into ``ContentChunk`` / ``ReasoningChunk`` events
(text made storable first, ``memory.text.StorableDeltas``, with the reply's completion count
so far) and feeds every model event to the step's ``CompletionBuilder``, from which the loop
builds the reply it stores.

While it reads, it yields to the event loop (STACK.md): a model whose deltas are already
buffered would otherwise be read to the end before the socket sends anything. Every
``STREAM_YIELD_SECONDS``, not per delta, since the relay sends text at most about that often
anyway; and after every event until ``EAGER_YIELDS`` have followed the call's first text,
because that text's frame takes several passes of the loop (the send loop renders and sends it,
then the socket is polled and written), and each would otherwise wait behind a slice of reading.

The request copy sent leaves out the text of error markers: the marked reply of a turn that
failed or was stopped before any output (``[no reply: ...]``, ``agents.runtime.outcomes``) is
sent as a neutral placeholder in the same assistant place, so roles still alternate and the
model never reads an error message as something it said. ``max_tokens`` is the step's cap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agents.llm import ChatModel, CompletionBuilder, ContentDelta, ReasoningDelta
from agents.runtime.events import ContentChunk, ReasoningChunk, RuntimeEvent
from agents.runtime.outcomes import NO_REPLY_KINDS
from memory.assembly.alternation import NO_REPLY
from memory.text import StorableDeltas
from memory.tokens import count_text

STREAM_YIELD_SECONDS = 0.002  # while streaming, the turn yields to the event loop at least this often
EAGER_YIELDS = 8  # ... and after each event until this many have followed the call's first text


def wire_messages(request: Any) -> list[dict[str, Any]]:
    """``request.messages`` with every error marker's text replaced by ``NO_REPLY`` (a copy,
    only when there is one). The wire list ends with the session messages, in order."""
    messages = request.messages
    session = getattr(request, "session_messages", ())
    offset = len(messages) - len(session)
    marked = [i for i, m in enumerate(session) if m.role == "assistant" and m.kind in NO_REPLY_KINDS]
    if not marked or offset < 0:
        return messages
    messages = list(messages)
    for i in marked:
        messages[offset + i] = {**messages[offset + i], "content": NO_REPLY}
    return messages


async def relay_reply(
    model: ChatModel, request: Any, schemas: list[dict[str, Any]], builder: CompletionBuilder,
    *, max_tokens: int | None = None,
) -> AsyncIterator[RuntimeEvent]:
    """Stream ``request`` (an AssembledContext) to ``model`` with ``schemas`` as its tools."""
    options = {"max_tokens": max_tokens} if max_tokens else {}
    events = model.stream(messages=wire_messages(request), tools=schemas or None, **options)
    completion_tokens = 0
    deltas = StorableDeltas()
    clock = asyncio.get_running_loop().time
    pause_at = 0.0  # the first event yields at once
    eager = EAGER_YIELDS
    texted = False
    try:
        async for event in events:
            if isinstance(event, ContentDelta | ReasoningDelta):
                event = type(event)(text=deltas.text(type(event), event.text))
                if not event.text:
                    continue
            builder.add(event)
            if isinstance(event, ContentDelta):
                completion_tokens += count_text(event.text)
                texted = True
                yield ContentChunk(text=event.text, completion_tokens=completion_tokens)
            elif isinstance(event, ReasoningDelta):
                texted = True
                yield ReasoningChunk(text=event.text)
            if not texted or eager or clock() >= pause_at:
                eager = max(0, eager - texted)
                await asyncio.sleep(0)
                pause_at = clock() + STREAM_YIELD_SECONDS
        for channel, chunk in ((ContentDelta, ContentChunk), (ReasoningDelta, ReasoningChunk)):
            if rest := deltas.flush(channel):
                builder.add(channel(text=rest))
                if chunk is ContentChunk:
                    completion_tokens += count_text(rest)
                    yield ContentChunk(text=rest, completion_tokens=completion_tokens)
                else:
                    yield ReasoningChunk(text=rest)
    finally:
        with contextlib.suppress(Exception):
            await events.aclose()
