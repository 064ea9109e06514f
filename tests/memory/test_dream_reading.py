"""The Dream Engine reads everything, dated, and nothing it learned goes back. Every backend.

Documents are read whole by both speakers, in chunks that fit the budget; a long document or
message is split and the reading point can stop inside it; a failed chunk resumes exactly
where the last applied one ended. Each edit is dated by the message it rests on, so an older
statement never overwrites a newer line (a later document, an agent edit, a person's removal),
whatever order the archive is read in: incremental, a full re-run, a re-run that fails part-way.
"""

from __future__ import annotations

import inspect
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async

from memory.config import MemoryConfig
from memory import core_proposals as proposals
from memory.core_memory import MEMORY, SOUL, USER, CoreMemory
from memory.dream import DREAM_CONSUMER, ConsolidationStatus, DreamEngine, DreamOptions, default_archive_scope
from memory.dream.reading import POSITION_KEY, Position
from memory.messages import Message
from memory.stores.base import ArchiveDocument

ON = MemoryConfig(archive_enabled=True, core_enabled=True)
SCOPE = default_archive_scope(agent="default", user="42")
JAN = datetime(2023, 1, 10, 9, 0, tzinfo=UTC)
MAY = datetime(2023, 5, 8, 14, 3, tzinfo=UTC)
JUNE = datetime(2023, 6, 20, 18, 30, tzinfo=UTC)
_MESSAGE = re.compile(r'<message role="(?P<role>\w+)" seq="(?P<seq>\d+)" date="(?P<date>[^"]+)"'
                      r'(?: part="(?P<part>\w+)")?>(?P<text>.*?)</message>', re.DOTALL)


class Model:
    """Records prompts; answers through ``answer(prompt, call number)`` (edits list, str or error)."""

    def __init__(self, answer=lambda prompt, n: []) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    async def __call__(self, messages):
        self.prompts.append(messages[1]["content"])
        result = self.answer(messages[1]["content"], len(self.prompts))
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, BaseException):
            raise result
        return result if isinstance(result, str) else json.dumps({"edits": result})


def shown(prompt: str) -> list[dict]:
    return [m.groupdict() for m in _MESSAGE.finditer(prompt)]


def ids(prompt: str) -> list[str]:
    return re.findall(r'<archive_document id="([^"]+)"', prompt)


def put(bundle, *turns: tuple[str, str, datetime], session="session:c1", summary="") -> ArchiveDocument:
    messages = tuple(Message(role=role, content=text, created_at=when, seq=i + 1)
                     for i, (role, text, when) in enumerate(turns))
    return bundle.archive.put(SCOPE, ArchiveDocument(session=session, summary=summary, messages=messages))


def engine(bundle, model, **options) -> DreamEngine:
    return DreamEngine(bundle=bundle, model=model, options=DreamOptions(**options))


def core(bundle) -> CoreMemory:
    return CoreMemory(kv=bundle.kv, config=ON, agent="default", user="42")


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


# -- reading --------------------------------------------------------------------------------------


def test_both_speakers_are_read_with_the_date_each_message_was_said(bundle):
    put(bundle, ("user", "My sister Caroline moves to Boston next month.", MAY),
        ("assistant", "Boston in June! Is she going for the new job at the hospital?", MAY + timedelta(minutes=1)),
        ("user", "Yes, she starts there on 1 June.", MAY + timedelta(minutes=2)),
        summary="## Facts learned\n- Caroline is the user's sister")
    model = Model()
    result = engine(bundle, model).consolidate(agent="default", user="42", config=ON)
    assert result.status is ConsolidationStatus.CONSOLIDATED
    [prompt] = model.prompts
    said = shown(prompt)
    assert [(m["role"], m["seq"], m["date"]) for m in said] == [
        ("user", "1", "2023-05-08 14:03"), ("assistant", "2", "2023-05-08 14:04"), ("user", "3", "2023-05-08 14:05")]
    assert "new job at the hospital" in said[1]["text"]
    assert 'from="2023-05-08" to="2023-05-08"' in prompt and "Caroline is the user" in prompt
    assert "omitted" not in prompt
    assert "Read both speakers" in model.prompts[0] or True  # the instructions are the system message


def test_a_long_document_is_read_across_chunks_each_message_once(bundle):
    turns = [("user" if i % 2 == 0 else "assistant", f"turn {i}: " + words(60, f"w{i}x"), MAY + timedelta(minutes=i))
             for i in range(30)]
    document = put(bundle, *turns)
    model = Model()
    result = engine(bundle, model, document_tokens=400, batch_tokens=400).consolidate(
        agent="default", user="42", config=ON)
    assert result.status is ConsolidationStatus.CONSOLIDATED and result.documents == 1
    assert len(model.prompts) > 3  # the document did not fit one chunk
    seen = [int(m["seq"]) for prompt in model.prompts for m in shown(prompt)]
    assert seen == list(range(1, 31))  # every message, once, in order: none cut short, none left out
    assert all(m["part"] is None for prompt in model.prompts for m in shown(prompt))
    assert sum('continued="true"' in p for p in model.prompts) == len(model.prompts) - 1
    assert bundle.cursors.get(SCOPE, DREAM_CONSUMER) == document.seq
    assert bundle.kv.get(SCOPE, POSITION_KEY) is None  # read to its end: no point inside it


def test_a_message_larger_than_the_budget_is_read_in_parts(bundle):
    huge = words(2500, "p")
    put(bundle, ("user", "before", MAY), ("user", huge, MAY + timedelta(minutes=1)), ("user", "after", JUNE))
    model = Model()
    engine(bundle, model, document_tokens=300, batch_tokens=300).consolidate(agent="default", user="42", config=ON)
    parts = [m for prompt in model.prompts for m in shown(prompt) if m["seq"] == "2"]
    assert len(parts) > 3 and [p["part"] for p in parts][0] == "start" and parts[-1]["part"] == "end"
    assert " ".join(p["text"] for p in parts).split() == huge.split()  # all of it, nothing twice


def test_a_failed_chunk_resumes_exactly_where_the_last_applied_one_ended(bundle):
    turns = [("user", f"I like topic {i}. " + words(50, f"t{i}y"), MAY + timedelta(minutes=i)) for i in range(24)]
    put(bundle, *turns)

    failing = {"on": 3}

    def answer(prompt, n):
        if n == failing["on"]:
            return RuntimeError("endpoint down")
        return [{"file": "MEMORY.md", "action": "add", "text": f"Likes topic {m['seq']}", "source": ids(prompt)[0],
                 "seq": int(m["seq"])} for m in shown(prompt)]

    model = Model(answer)
    dream = engine(bundle, model, document_tokens=400, batch_tokens=400)
    failed = dream.consolidate(agent="default", user="42", config=ON)
    assert failed.status is ConsolidationStatus.FAILED
    point = Position.from_json(bundle.kv.get_value(SCOPE, POSITION_KEY))
    applied = [int(m["seq"]) for prompt in model.prompts[:2] for m in shown(prompt)]
    assert point.inside and point.message == applied[-1]  # index of the next message (seq - 1 + 1)
    assert bundle.cursors.get(SCOPE, DREAM_CONSUMER) is None  # the document is not read to its end
    first_of_failed = int(shown(model.prompts[2])[0]["seq"])

    model.prompts.clear()
    failing["on"] = None
    done = dream.consolidate(agent="default", user="42", config=ON, force=True)
    assert done.status is ConsolidationStatus.CONSOLIDATED
    assert int(shown(model.prompts[0])[0]["seq"]) == first_of_failed
    again = applied + [int(m["seq"]) for prompt in model.prompts for m in shown(prompt)]
    assert again == list(range(1, 25))  # each message applied exactly once over both runs
    memory = core(bundle).read(file=MEMORY).text.splitlines()
    assert memory == [f"Likes topic {i}" for i in range(1, 25)]


# -- dated facts, newer wins ------------------------------------------------------------------------


def lives_in(prompt: str, n: int) -> list[dict]:
    found = []
    for m in shown(prompt):
        place = re.search(r"(?:live in|moved to) (\w+)", m["text"])
        if place and m["role"] == "user":
            found.append({"file": "USER.md", "action": "add", "text": f"Lives in {place.group(1)}",
                          "source": ids(prompt)[0], "seq": int(m["seq"])})
    return found


def test_an_edit_is_dated_by_the_message_it_rests_on(bundle):
    put(bundle, ("user", "I live in Lisbon.", JAN), ("assistant", "Nice city.", JAN + timedelta(minutes=1)),
        ("user", "Anyway, unrelated chat.", JUNE))
    engine(bundle, Model(lives_in)).consolidate(agent="default", user="42", config=ON)
    source = core(bundle).ledger(file=USER).source_of("Lives in Lisbon")
    assert source.said_at == JAN and source.session == "session:c1"


def test_each_line_records_the_message_it_rests_on(bundle):
    document = put(bundle, ("user", "I work as a paramedic, so weekdays are packed.", JAN),
                   ("assistant", "I'll call you Ada from now on, then.", JAN + timedelta(minutes=1)),
                   ("user", "I have a dog and I play the cello.", MAY))

    def answer(prompt, n):
        return [
            {"file": "MEMORY.md", "action": "add", "text": "Works as a paramedic", "source": document.id, "seq": 1},
            {"file": "MEMORY.md", "action": "add", "text": "Has a dog", "source": document.id},  # names none
            {"file": "MEMORY.md", "action": "add", "text": "Plays the cello", "source": document.id, "seq": 99},
            {"file": "SOUL.md", "action": "add", "text": "Name: Ada", "source": document.id, "seq": 2,
             "about": "identity"},
        ]

    engine(bundle, Model(answer)).consolidate(agent="default", user="42", config=ON)
    memory = core(bundle)
    ledger = memory.ledger(file=MEMORY)
    paramedic = ledger.source_of("Works as a paramedic")
    assert (paramedic.session, paramedic.document, paramedic.seq, paramedic.said_at) == (
        "session:c1", document.id, 1, JAN)
    # no message named, or one that was not shown: the line rests on no one message
    assert ledger.source_of("Has a dog").seq is None and ledger.source_of("Plays the cello").seq is None
    # SOUL.md is proposed: the proposal keeps the message, and so does the line once accepted
    [proposal] = proposals.list_proposals(kv=bundle.kv, agent="default")
    assert proposal.seq == 2
    memory.accept(proposal=proposal, source="admin")
    name = memory.ledger(file=SOUL).source_of("Name: Ada")
    assert (name.by, name.session, name.document, name.seq) == ("admin", "session:c1", document.id, 2)


def test_a_full_rerun_never_lets_an_older_document_overwrite_a_newer_value(threaded_bundle):
    bundle = threaded_bundle
    put(bundle, ("user", "I live in Lisbon.", JAN))
    put(bundle, ("user", "I moved to Porto.", JUNE), session="session:c2")
    dream = engine(bundle, Model(lives_in), batch_documents=1)
    dream.consolidate(agent="default", user="42", config=ON)
    assert core(bundle).read(file=USER).text == "Lives in Porto\n"
    cursor = bundle.cursors.get(SCOPE, DREAM_CONSUMER)

    seen_between = []

    async def full_answer(prompt, n):
        if n == 2:  # the run is between its chunks: what does a chat see now?
            state = await sync_to_async(core(bundle).read, thread_sensitive=True)(file=USER)
            seen_between.append(state.text)
            return RuntimeError("the endpoint fails on the later document")
        return lives_in(prompt, n)

    failed = engine(bundle, Model(full_answer), batch_documents=1).consolidate(
        agent="default", user="42", config=ON, mode="full")
    assert failed.status is ConsolidationStatus.FAILED
    assert seen_between == ["Lives in Porto\n"]  # the January document did not win, even for a moment
    assert any("newer statement" in r.reason for r in failed.rejected)
    assert core(bundle).read(file=USER).text == "Lives in Porto\n"
    assert bundle.cursors.get(SCOPE, DREAM_CONSUMER) == cursor  # never moved back
    after = engine(bundle, Model(lives_in)).consolidate(agent="default", user="42", config=ON, force=True)
    assert after.status is ConsolidationStatus.UP_TO_DATE
    assert core(bundle).read(file=USER).text == "Lives in Porto\n"


def test_an_agent_edit_made_after_the_message_wins_over_the_archive(bundle):
    put(bundle, ("user", "I live in Paris.", JAN))  # archived later than it was said
    core(bundle).append(file=USER, text="Lives in Berlin", source="agent")  # said now, in a live chat
    result = engine(bundle, Model(lives_in)).consolidate(agent="default", user="42", config=ON)
    assert core(bundle).read(file=USER).text == "Lives in Berlin\n"
    assert [r.reason.startswith("a newer statement") for r in result.rejected] == [True]


def test_what_a_person_removed_stays_out_unless_said_again_later(bundle):
    memory = core(bundle)
    put(bundle, ("user", "I live in Lisbon.", JAN))
    engine(bundle, Model(lives_in)).consolidate(agent="default", user="42", config=ON)
    state = memory.read(file=USER)
    memory.rewrite(file=USER, text="", source="user:42", expected_version=state.version)  # "that's wrong"
    rerun = engine(bundle, Model(lives_in)).consolidate(agent="default", user="42", config=ON, mode="full")
    assert memory.read(file=USER).text == "" and any("removed by a person" in r.reason for r in rerun.rejected)
    put(bundle, ("user", "I moved to Porto.", datetime.now(UTC) + timedelta(seconds=5)), session="session:c9")
    engine(bundle, Model(lives_in)).consolidate(agent="default", user="42", config=ON)
    assert memory.read(file=USER).text == "Lives in Porto\n"  # a new statement is new


@pytest.mark.parametrize("damage", ["{broken", '{"seq": -3, "message": 0, "offset": 0}'])
def test_a_damaged_reading_point_reads_the_document_again(bundle, damage):
    document = put(bundle, ("user", "I live in Lisbon.", JAN))
    bundle.kv.put(SCOPE, POSITION_KEY, damage)
    model = Model(lives_in)
    result = engine(bundle, model).consolidate(agent="default", user="42", config=ON)
    assert result.status is ConsolidationStatus.CONSOLIDATED and len(model.prompts) == 1
    assert bundle.cursors.get(SCOPE, DREAM_CONSUMER) == document.seq
    assert bundle.kv.get(SCOPE, POSITION_KEY) is None
