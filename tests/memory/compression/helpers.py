"""Builders and fakes shared by the compression tests."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from memory.compression.summary import SECTIONS
from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall
from memory.tokens import with_tokens

_ids = itertools.count(1)
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def call_id() -> str:
    return f"call_{next(_ids)}"


def user(text: str = "hi", **kw: Any) -> Message:
    return Message(role="user", content=text, **kw)


def tool_name(cid: str) -> str:
    return f"tool_{cid.rsplit('_', 1)[-1]}"


def assistant(
    text: str | None = "ok", *, reasoning: str | None = None, calls: Sequence[str] = (), **kw: Any
) -> Message:
    tool_calls = tuple(ToolCall(c, tool_name(c), '{"q": "x"}') for c in calls)
    return Message(role="assistant", content=text, reasoning_content=reasoning, tool_calls=tool_calls, **kw)


def tool(cid: str, text: str = "result", **kw: Any) -> Message:
    return Message(role="tool", content=text, tool_call_id=cid, name=tool_name(cid), **kw)


def chain(*results: str, reasoning: str | None = None) -> list[Message]:
    """An assistant message calling len(results) tools (parallel when > 1), then the results."""
    ids = [call_id() for _ in results]
    return [assistant(None, reasoning=reasoning, calls=ids), *(tool(i, r) for i, r in zip(ids, results, strict=True))]


def summary_message(text: str = "old summary", seq: int = 1) -> Message:
    return with_tokens(Message(role="user", content=f"[compact_summary] {text}", kind=KIND_COMPACT_SUMMARY, seq=seq))


def stored(messages: Sequence[Message], *, start: int = 1) -> list[Message]:
    """Messages as a store returns them: seq 1.., token counts cached, times increasing."""
    return [
        with_tokens(replace(m, seq=start + i, created_at=T0 + timedelta(seconds=start + i)))
        for i, m in enumerate(messages)
    ]


def good_answer(extra: str = "") -> str:
    return "\n".join(f"## {name}\n- {name.lower()} noted {extra}".rstrip() for name in SECTIONS)


class RecordingSummarizer:
    """A fast fake model: records each prompt and answers with a valid structured summary."""

    def __init__(self, *, context_window: int | None = None) -> None:
        self.prompts: list[list[dict[str, str]]] = []
        if context_window is not None:
            self.context_window = context_window

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.prompts.append(messages)
        return good_answer(f"(call {len(self.prompts)})")

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def seen_text(self) -> str:
        return "\n".join(m["content"] for prompt in self.prompts for m in prompt)


async def no_sleep(seconds: float) -> None:
    return None
