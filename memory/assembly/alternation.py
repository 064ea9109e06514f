"""Role alternation in the request copy: two user messages are never sent in a row.

Chat templates of many open models (Mistral, Llama-2, Gemma; served by llama.cpp, vLLM, TGI)
refuse a conversation whose roles do not alternate. A session can hold two adjacent user
messages: the ``[compact_summary]`` (a user turn) followed by a kept user message, or a turn
that ended without any reply (a crash, a session written before failed turns were answered).
Like governance, this changes only the copy sent to the model: a short assistant placeholder
goes between the two, nothing is persisted, and tool chains are untouched (a placeholder only
ever follows a user message).
"""

from __future__ import annotations

from collections.abc import Sequence

from memory.messages import Message
from memory.tokens import with_tokens

KIND_PLACEHOLDER = "placeholder"
NO_REPLY = "[no reply to the message above: that turn ended without an answer]"
SUMMARY_NOTED = "[noted: the conversation continues from this summary]"


def alternate_roles(messages: Sequence[Message]) -> tuple[list[Message], int]:
    """``messages`` with a placeholder assistant reply between any two adjacent user messages,
    and the number inserted. Placeholders have ``kind="placeholder"`` and no ``seq``."""
    out: list[Message] = []
    inserted = 0
    for message in messages:
        previous = out[-1] if out else None
        if previous is not None and previous.role == "user" and message.role == "user":
            out.append(
                with_tokens(
                    Message(
                        role="assistant",
                        content=SUMMARY_NOTED if previous.is_compact_summary else NO_REPLY,
                        kind=KIND_PLACEHOLDER,
                        id=f"placeholder-{previous.id}"[:128],
                        created_at=previous.created_at,
                    )
                )
            )
            inserted += 1
        out.append(message)
    return out, inserted
