"""Where archive recall is sent: in the system message (the default, the seed's order) or at the
head of the latest user message (``recall_placement="message"``), so that the system message, and
with it the prefix a local server caches, stays the same from one user message to the next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory.assembly.archive import RECALL_TAG
from memory.assembly.assembler import RECALL_BESIDE_MESSAGE, ContextAssembler, default_pipeline
from memory.config import MemoryConfig
from memory.messages import Message
from memory.retrieval.service import Retrieval
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import ArchiveDocument
from memory.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, count_text

from .helpers import assistant, chain, new_session, parse, user

ARCHIVE = CompositeScope(AgentScope("default"), UserScope("42"))
CONFIG = MemoryConfig(archive_enabled=True, core_enabled=True)
INSTRUCTIONS = "You are Modex, a careful assistant."
MAY = datetime(2023, 5, 8, 18, 0, tzinfo=UTC)


def archived(bundle, session: str, *turns: str, start: datetime = MAY) -> None:
    messages = tuple(
        Message(role="user" if i % 2 == 0 else "assistant", content=text, created_at=start + timedelta(minutes=i))
        .with_seq(i + 1)
        for i, text in enumerate(turns)
    )
    bundle.archive.put(ARCHIVE, ArchiveDocument(
        session=f"session:{session}", summary=f"About {turns[0][:20]}", title=f"Chat {session}", messages=messages,
        created_at=start,
    ))


@pytest.fixture
def history(bundle):
    archived(bundle, "a1", "My sister Maya moved to Porto for a bakery job.", "Porto is lovely.")
    archived(bundle, "a2", "I ran the Riverside 10k in 52 minutes.", "Great time!", start=MAY + timedelta(days=3))
    return bundle


def assembler(bundle, catalog, **kwargs) -> ContextAssembler:
    retrieval = Retrieval(archive=bundle.archive, embedder=None)
    return ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog, retrieval=retrieval), **kwargs)


def assemble(assembler, session):
    return assembler.assemble(session=session, config=CONFIG, agent="default", user="42", instructions=INSTRUCTIONS)


def test_recall_goes_with_the_latest_message_and_is_accounted_as_before(history, catalog):
    session = new_session()
    history.messages.append(session, [user("hello"), assistant("hi"), user("Where did my sister move?")])
    seed = assemble(assembler(history, catalog), session)
    beside = assemble(assembler(history, catalog, recall_placement=RECALL_BESIDE_MESSAGE), session)

    assert f"<{RECALL_TAG}>" in seed.messages[0]["content"]  # the default: the seed's order
    system = beside.messages[0]["content"]
    assert f"<{RECALL_TAG}>" not in system and "<archive_summaries" in system
    [archive] = [s for s in seed.sections if s.name == "archive"]
    assert archive.parts[0].key == RECALL_TAG
    assert system == seed.messages[0]["content"].replace(archive.parts[0].text + "\n", "")
    latest = beside.messages[-1]
    assert latest["role"] == "user" and latest["content"].endswith("\n\nWhere did my sister move?")
    recall = latest["content"].removesuffix("\n\nWhere did my sister move?")
    parse(recall)
    assert recall.startswith(f"<{RECALL_TAG}>") and "moved to Porto" in recall
    assert beside.messages[1:-1] == seed.messages[1:-1]  # earlier messages as stored
    # The meter's account is the same: recall is part of the archive section wherever it is sent.
    assert beside.account == seed.account
    # The total is exact for what is sent.
    wire = MESSAGE_OVERHEAD + count_text(system) + REPLY_PRIMING
    wire += beside.account[-1].tokens + count_text(latest["content"]) - count_text("Where did my sister move?")
    assert beside.total_tokens == wire
    assert beside.total_tokens <= CONFIG.context_window - beside.reply_reserve


def test_the_system_message_stays_the_same_when_the_next_message_recalls_something_else(history, catalog):
    session = new_session()
    place = assembler(history, catalog, recall_placement=RECALL_BESIDE_MESSAGE)
    seed = assembler(history, catalog)
    history.messages.append(session, [user("Where did my sister move?")])
    first, first_seed = assemble(place, session), assemble(seed, session)
    history.messages.append(session, [assistant("To Porto."), user("How long did my 10k take?")])
    second, second_seed = assemble(place, session), assemble(seed, session)

    assert first_seed.messages[0] != second_seed.messages[0]  # recall in the system message changes it
    assert first.messages[0] == second.messages[0]  # the prefix a server caches is kept...
    assert second.messages[1] == {"role": "user", "content": "Where did my sister move?"}  # ...recall went
    assert "52 minutes" in second.messages[-1]["content"] and "Porto for a bakery" not in second.messages[-1]["content"]


def test_the_system_message_stays_the_same_when_the_summaries_fill_their_room(bundle, catalog):
    # Forty conversations: more summaries than the section holds, and recalls of different sizes
    # (or none) from one message to the next. The summaries keep one room whatever recall takes.
    topics = ["sister Maya moved to Porto", "ran the Riverside 10k", "cat Pixel hates the vet",
              "allergic to peanuts", "learning the trumpet"]
    for i in range(40):
        archived(bundle, f"c{i}", f"Note {i}: my {topics[i % 5]} and more about week {i}.", f"Noted, week {i}.",
                 start=MAY + timedelta(days=i))
    session = new_session()
    place = assembler(bundle, catalog, recall_placement=RECALL_BESIDE_MESSAGE)
    systems, recalls = [], []
    for question in ("Where did my sister move?", "Tell me about the trumpet and the cat Pixel and the 10k?",
                     "Any plans for the weekend?", "What am I allergic to?"):
        bundle.messages.append(session, [user(question)])
        context = assemble(place, session)
        [archive] = [s for s in context.sections if s.name == "archive"]
        recalls.append(sum(p.tokens for p in archive.parts if p.key == RECALL_TAG))
        assert archive.tokens <= CONFIG.archive_budget_tokens
        systems.append(context.messages[0]["content"])
        bundle.messages.append(session, [assistant("ok")])
    assert len(set(recalls)) >= 3 and 0 in recalls  # recall of several sizes, and none once
    assert len(set(systems)) == 1 and 5 <= systems[0].count("<document") < 40  # the room is full


def test_recall_goes_to_the_user_message_not_to_the_tool_results_after_it(history, catalog):
    session = new_session()
    history.messages.append(session, [user("Where did my sister move?"), *chain(result="no match")])
    context = assemble(assembler(history, catalog, recall_placement=RECALL_BESIDE_MESSAGE), session)
    asked = [m for m in context.messages if m["role"] == "user"][-1]
    assert asked["content"].startswith(f"<{RECALL_TAG}>") and asked["content"].endswith("Where did my sister move?")
    assert context.messages[-1]["role"] == "tool" and context.messages[-1]["content"] == "no match"


def test_recall_stays_in_the_system_message_when_the_window_leaves_the_user_message_out(history, catalog):
    session = new_session()
    history.messages.append(session, [user("Where did my sister move?"), *chain(n_results=3, result="x " * 3000)])
    small = MemoryConfig(archive_enabled=True, core_enabled=True, context_window=4096, compression_threshold=3000)
    context = assembler(history, catalog, recall_placement=RECALL_BESIDE_MESSAGE).assemble(
        session=session, config=small, agent="default", user="42", instructions=INSTRUCTIONS
    )
    assert [m["role"] for m in context.messages] == ["system", "assistant", "tool", "tool", "tool"]
    assert f"<{RECALL_TAG}>" in context.messages[0]["content"] and "moved to Porto" in context.messages[0]["content"]
    parse(context.messages[0]["content"][len(INSTRUCTIONS):])
    assert context.total_tokens == (
        MESSAGE_OVERHEAD + count_text(context.messages[0]["content"]) + context.account[-1].tokens + REPLY_PRIMING
    )
    assert context.total_tokens <= small.context_window - context.reply_reserve


def test_without_recall_nothing_moves(history, catalog):
    session = new_session()
    history.messages.append(session, [user("Any plans for the weekend?")])
    context = assemble(assembler(history, catalog, recall_placement=RECALL_BESIDE_MESSAGE), session)
    assert not any(part.key == RECALL_TAG for s in context.sections for part in s.parts)  # nothing recalled
    assert context.messages[-1] == {"role": "user", "content": "Any plans for the weekend?"}
    assert f"<{RECALL_TAG}>" not in context.messages[0]["content"]


@pytest.mark.parametrize("sent", [True, False])
def test_without_instructions_or_summaries_recall_alone_moves_and_the_total_stays_exact(bundle, catalog, sent):
    # Only the recall in the section: no system message at all when it moves, and one of its own
    # when the window leaves the user message out.
    archived(bundle, "a1", "My sister Maya moved to Porto for a bakery job.", "Porto is lovely.")
    session = new_session()
    tail = [user("Where did my sister move?")] + ([] if sent else chain(n_results=3, result="x " * 3000))
    bundle.messages.append(session, tail)
    small = MemoryConfig(archive_enabled=True, context_window=4096, compression_threshold=3000,
                         archive_budget_tokens=300)
    place = assembler(bundle, catalog, recall_placement=RECALL_BESIDE_MESSAGE)
    context = place.assemble(session=session, config=small, agent="default", user="42")
    [archive] = [s for s in context.sections if s.name == "archive"]
    if archive.parts[-1].key != RECALL_TAG:  # the summary fits beside it: leave it out for this case
        pytest.skip("the archive section holds summaries too")
    roles = [m["role"] for m in context.messages]
    if sent:
        assert roles == ["user"] and context.messages[0]["content"].startswith(f"<{RECALL_TAG}>")
        wire = count_text(context.messages[0]["content"]) - count_text("Where did my sister move?")
    else:
        assert roles == ["system", "assistant", "tool", "tool", "tool"]
        assert context.messages[0]["content"] == archive.text
        wire = MESSAGE_OVERHEAD + count_text(archive.text)
    assert context.total_tokens == wire + context.account[-1].tokens + REPLY_PRIMING
    assert context.total_tokens <= small.context_window - context.reply_reserve


def test_an_unknown_placement_is_refused():
    with pytest.raises(ValueError, match="recall_placement must be one of system, message"):
        ContextAssembler(stores=None, pipeline=(), recall_placement="prefix")
