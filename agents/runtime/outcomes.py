"""How a turn that did not end normally is recorded, so the next request is one a strict server accepts.

The choice (stated in the README): a turn whose model call fails before any output keeps the
user's message and gets a *marked assistant reply* (``kind="turn_failed"``) whose text is the
error, shown as the error on the page, kept after a reload, and sent to the model as that
assistant turn. A turn stopped before any output gets one too (``kind="turn_stopped"``). So a
user message is always answered by an assistant message before the next user message: chat
templates that require alternating roles (Mistral, Llama-2, Gemma on llama.cpp, vLLM, TGI)
keep accepting the conversation. (Context assembly also never sends two user messages in a row,
for sessions written before this rule.)

A reply the server cut off (``finish_reason`` ``length`` or ``content_filter``) is stored with
``kind="truncated"`` or ``kind="content_filtered"``.
"""

from __future__ import annotations

from agents.llm import Completion, ContextLengthExceeded
from memory.messages import KIND_MESSAGE, Message

KIND_TURN_FAILED = "turn_failed"
KIND_TURN_STOPPED = "turn_stopped"
KIND_TRUNCATED = "truncated"
KIND_CONTENT_FILTERED = "content_filtered"

#: Kinds of an assistant message that is not a whole answer.
CUT_OFF_KINDS = frozenset({KIND_TRUNCATED, KIND_CONTENT_FILTERED})
NO_REPLY_KINDS = frozenset({KIND_TURN_FAILED, KIND_TURN_STOPPED})

STOPPED_TEXT = "[no reply: the turn was stopped before the answer began]"


def reply_kind(completion: Completion) -> str:
    """The kind an assistant reply is stored with: cut off by the server, or a whole message."""
    if completion.finish_reason == "length":
        return KIND_TRUNCATED
    if completion.finish_reason == "content_filter":
        return KIND_CONTENT_FILTERED
    return KIND_MESSAGE


def failed_reply(error: str) -> Message:
    """The marked assistant reply of a turn whose model call failed before any output."""
    return Message(role="assistant", content=f"[no reply: {error}]", kind=KIND_TURN_FAILED)


def stopped_reply() -> Message:
    return Message(role="assistant", content=STOPPED_TEXT, kind=KIND_TURN_STOPPED)


def context_advice(exc: ContextLengthExceeded, *, window: int) -> str:
    """What to tell the user when the request still overflowed after a forced cleanup."""
    return (
        f"{exc.message}. The conversation still did not fit after a forced cleanup (Modex sized it for a "
        f"{window}-token window). Send a shorter message, or set OPENAI_CONTEXT_WINDOW to the server's "
        "real context window; the conversation itself is kept and stays usable"
    )
