"""The offline model's compact summary, asked through the summarizer the cleanup really uses
(``compose_summary`` and its prompt, ``as_text_completion``): dated, whole items, all sections."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from agents.llm import OfflineChatModel, as_text_completion
from memory.compression.answers import parse_sections
from memory.compression.summary import SECTIONS, SUMMARY_PREFIX, SummaryOptions, compose_summary
from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall

MAY_8 = datetime(2023, 5, 8, 9, 30, tzinfo=UTC)


def dated(messages: list[Message], *, start: int = 1) -> list[Message]:
    return [replace(m, seq=i) for i, m in enumerate(messages, start=start)]


def summarize(history: list[Message], previous: list[Message] = ()):  # type: ignore[no-untyped-def]
    return asyncio.run(
        compose_summary(
            history=history,
            previous=previous,
            summarizer=as_text_completion(OfflineChatModel()),
            options=SummaryOptions(max_tokens=800),
            cleanup_at=MAY_8 + timedelta(days=30),
        )
    )


HISTORY = dated([
    Message(role="user", content="Hi! My name is Sam.", created_at=MAY_8),
    Message(role="assistant", content="Nice to meet you, Sam.", created_at=MAY_8),
    Message(role="user", content="I live in Porto. We decided to use SQLite for the app.",
            created_at=MAY_8 + timedelta(days=2)),
    Message(role="assistant", content=None, tool_calls=(ToolCall("c1", "web_search", '{"q": "porto"}'),),
            reasoning_content="Search first.", created_at=MAY_8 + timedelta(days=2)),
    Message(role="tool", content="Porto: 231,800 people", tool_call_id="c1", name="web_search",
            created_at=MAY_8 + timedelta(days=2)),
    Message(role="assistant", content="Todo list (add): 1. [ ] buy milk 2. [ ] call Ana about the trip.",
            created_at=MAY_8 + timedelta(days=2)),
])


def test_the_offline_summary_groups_facts_and_decisions_under_their_day() -> None:
    outcome = summarize(HISTORY)
    assert not outcome.fallback and outcome.calls == 1  # every section written, nothing asked again
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert list(sections) == list(SECTIONS)
    assert "- On 8 May 2023:\n  - Name: Sam" in sections["Facts learned"]
    assert "- On 10 May 2023:\n  - Lives in Porto" in sections["Facts learned"]
    assert "- On 10 May 2023:\n  - We decided to use SQLite for the app." in sections["Decisions"]
    # A dated tool header still names its tool (the date is not taken for the result).
    assert "web_search: Porto: 231,800 people" in sections["Tool results that matter"]


def test_the_offline_summary_never_ends_an_item_on_a_list_number() -> None:
    outcome = summarize(HISTORY)
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert "Todo list (add): 1. [ ] buy milk 2. [ ] call Ana about the trip." in sections["Open tasks"]
    assert not any(re.search(r"(?:^|[\s:])\d{1,3}\.\s*$", line) for line in outcome.content.splitlines())


def test_the_days_survive_the_next_summary() -> None:
    first = summarize(HISTORY)
    previous = Message(role="user", content=first.content, kind=KIND_COMPACT_SUMMARY, seq=len(HISTORY),
                       created_at=MAY_8 + timedelta(days=30))
    later = dated([Message(role="user", content="I work at Acme.", created_at=MAY_8 + timedelta(days=31)),
                   Message(role="assistant", content="Noted.", created_at=MAY_8 + timedelta(days=31))],
                  start=len(HISTORY) + 1)
    second = summarize(later, [previous])
    facts = parse_sections(second.content.split("\n\n", 1)[1])["Facts learned"]
    assert second.content.startswith(SUMMARY_PREFIX)
    assert "- On 8 May 2023:\n  - Name: Sam" in facts and "- On 10 May 2023:\n  - Lives in Porto" in facts
    assert "- On 8 Jun 2023:\n  - Works at Acme" in facts
