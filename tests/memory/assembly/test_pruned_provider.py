"""PrunedProvider: newest first, budget, the 'more' note, live entries skipped, hostile content."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from memory.assembly.pruned import PrunedProvider
from memory.compression.dates import day
from memory.config import SUBAGENT_PRESET, MemoryConfig
from memory.messages import Message, ToolCall

from .helpers import HOSTILE, assistant, ctx, new_session, parse, timed, user


def catalogued(catalog, session, messages):
    stored = [replace(m, seq=i) for i, m in enumerate(timed(messages), start=1)]
    catalog.write(session, stored)
    return stored


def conversation(n):
    out = []
    for i in range(n):
        out.append(user(f"question {i}: what about topic {i}?"))
        out.append(assistant(f"answer {i}: topic {i} is about this and that."))
    return out


def test_nothing_for_an_empty_catalog(bundle, catalog):
    assert PrunedProvider(catalog=catalog).provide(ctx(bundle)) is None


@pytest.mark.parametrize("config", [MemoryConfig(), MemoryConfig(preset=SUBAGENT_PRESET)], ids=["main", "subagent"])
def test_every_agent_gets_the_catalog(bundle, catalog, config):
    session = new_session()
    catalogued(catalog, session, conversation(2))
    section = PrunedProvider(catalog=catalog).provide(ctx(bundle, session, config=config))
    assert section is not None and section.items == 4 and section.name == "pruned catalog"


def test_entries_newest_first_with_number_role_time_tools(bundle, catalog):
    session = new_session()
    call = Message(role="assistant", content=None, tool_calls=(ToolCall("c1", "web_search", '{"q":"x"}'),))
    result = Message(role="tool", content="search result text", tool_call_id="c1", name="web_search")
    stored = catalogued(catalog, session, [user("hi"), call, result, assistant("done")])
    root = parse(PrunedProvider(catalog=catalog).provide(ctx(bundle, session)).text).find("pruned_messages")
    entries = root.findall("message")
    assert [e.get("seq") for e in entries] == ["4", "3", "2", "1"]
    assert [e.get("role") for e in entries] == ["assistant", "tool", "assistant", "user"]
    assert entries[2].get("tools") == "web_search" and "called web_search" in entries[2].text
    # The day on the first entry listed; the others, written the same day, leave it out.
    assert entries[0].get("date") == day(stored[3].created_at) and [e.get("date") for e in entries[1:]] == [None] * 3
    assert root.get("total") == "4" and root.get("shown") == "4" and root.find("more") is None
    assert "pruned_lookup" in root.find("note").text


def test_budget_and_the_more_note(bundle, catalog):
    session = new_session()
    catalogued(catalog, session, conversation(200))
    config = MemoryConfig(pruned_budget_tokens=500)
    section = PrunedProvider(catalog=catalog).provide(ctx(bundle, session, config=config))
    assert section.tokens <= 500
    root = parse(section.text).find("pruned_messages")
    shown = root.findall("message")
    assert len(shown) == section.items and 0 < len(shown) < 400
    assert shown[0].get("seq") == "400"
    more = root.find("more")
    assert int(more.get("count")) == 400 - len(shown)
    assert "pruned_lookup" in more.text


def test_excerpts_are_short(bundle, catalog):
    session = new_session()
    catalogued(catalog, session, [user("long " * 1000)])
    entry = parse(PrunedProvider(catalog=catalog, excerpt_chars=80).provide(ctx(bundle, session)).text).find(
        "pruned_messages/message"
    )
    assert len(entry.text) <= 80 and entry.text.endswith("…")


def test_a_tiny_budget_still_says_how_many_were_removed(bundle, catalog):
    session = new_session()
    catalogued(catalog, session, conversation(5))
    section = PrunedProvider(catalog=catalog).provide(
        ctx(bundle, session, config=MemoryConfig(pruned_budget_tokens=10))
    )
    root = parse(section.text).find("pruned_messages")
    assert root.get("total") == "10" and root.findall("message") == [] and root.find("more").get("count") == "10"


def test_entries_still_live_in_the_session_are_skipped(bundle, catalog):
    session = new_session()
    catalogued(catalog, session, conversation(3))  # seqs 1..6
    # A cleanup that wrote seqs 5-6 but never committed: they are still live.
    section = PrunedProvider(catalog=catalog).provide(
        ctx(bundle, session, live_seqs=frozenset({5, 6}), first_live_seq=5)
    )
    root = parse(section.text).find("pruned_messages")
    assert [e.get("seq") for e in root.findall("message")] == ["4", "3", "2", "1"]
    assert root.get("total") == "4"
    only_live = PrunedProvider(catalog=catalog).provide(ctx(bundle, session, live_seqs=frozenset(range(1, 7))))
    assert only_live is None


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_pruned_messages_stay_inside(bundle, catalog, hostile):
    session = new_session()
    catalogued(catalog, session, [user(hostile), assistant(hostile, reasoning_content=hostile)])
    root = parse(PrunedProvider(catalog=catalog).provide(ctx(bundle, session)).text)
    assert [c.tag for c in root] == ["pruned_messages"]
    entries = root.find("pruned_messages").findall("message")
    assert len(entries) == 2 and all(list(e) == [] for e in entries)
    assert all("\x00" not in (e.text or "") for e in entries)


def test_entries_show_the_day_their_messages_were_written_where_it_changes(bundle, catalog):
    session = new_session()
    may = datetime(2023, 5, 8, 14, 5, tzinfo=UTC)
    messages = [
        replace(user("I moved to Porto last week."), seq=1, created_at=may),
        replace(assistant("Noted: you live in Porto now."), seq=2, created_at=may + timedelta(minutes=1)),
        replace(user("My sister visits in June."), seq=3, created_at=may + timedelta(days=3, hours=2)),
    ]
    catalog.write(session, messages)
    section = PrunedProvider(catalog=catalog).provide(ctx(bundle, session))
    entries = parse(section.text).find("pruned_messages").findall("message")
    # The day wherever it changes from the entry above (newest first), else left out.
    assert [e.get("date") for e in entries] == ["11 May 2023", "8 May 2023", None]
    assert "same day (UTC)" in parse(section.text).find("pruned_messages").find("note").text
