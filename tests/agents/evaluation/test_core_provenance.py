"""Evidence by provenance: a core memory line counts for the turn its ledger says it rests on,
exactly (the line sent in the core memory section, the message the Dream Engine recorded), and
for nothing else. Real stores on disk; end to end through ingest, the Dream Engine and a turn."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.evaluation import evidence as ev
from agents.evaluation.configs import CONFIGS
from agents.evaluation.data import Dataset, History, Question, Session, Turn
from agents.evaluation.pipeline import RunSetup, ask, ingest
from agents.llm import OfflineChatModel
from agents.runtime.tools.history_tools import archive_scope_for
from memory.assembly.base import AssemblyContext
from memory.assembly.core import CoreMemoryProvider
from memory.config import MemoryConfig
from memory.core_memory import MEMORY, USER, CoreMemory, Origin
from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import ArchiveDocument
from memory.stores.registry import open_bundle

ON = MemoryConfig(archive_enabled=True, core_enabled=True)
USER_ID = "u1"
SESSION = "session:u1.s1"
MAY = datetime(2023, 5, 1, 18, 0, tzinfo=UTC)

GREETING = Turn("s1.t0", "user", "Sam", "Hi there, how are you doing this evening?")
ASKED = Turn("s1.t1", "assistant", "Ada", "Doing well, thanks! What keeps you busy these days?")
JOB = Turn("s1.t2", "user", "Sam", "I work as a paramedic at Greenfield Hospital, so my weekdays are pretty packed.")
REPLY = Turn("s1.t3", "assistant", "Ada", "That sounds demanding, but rewarding.")
DOG = Turn("s1.t4", "user", "Sam", "On weekends I walk my dog along the river.")
TURNS = (GREETING, ASKED, JOB, REPLY, DOG)


def context(sections):
    return type("Context", (), {"sections": tuple(sections), "session_messages": ()})()


@pytest.fixture
def stores(tmp_path):
    """An archive holding the conversation (each turn a message with its seq) and core memory."""
    bundle = open_bundle("file", root=tmp_path / "memory")
    scope = archive_scope_for(agent="default", user_id=USER_ID)
    document = bundle.archive.put(scope, ArchiveDocument(session=SESSION, summary="", messages=tuple(
        Message(role=t.role, content=t.text, id=t.message_id, seq=n + 1, created_at=MAY) for n, t in enumerate(TURNS))))
    memory = CoreMemory(kv=bundle.kv, config=ON, agent="default", user=USER_ID)
    return bundle, scope, document, memory


def dream_line(memory, file, text, *, document, seq, session=SESSION):
    memory.append(file=file, text=text, source="dream",
                  origin=Origin(session=session, document=document.id, said_at=MAY, seq=seq))


def sent(bundle, **caps):
    """The core memory section as the provider renders it for a turn now."""
    ctx = AssemblyContext(session=SessionScope("ask"), config=ON, stores=bundle, agent="default", user=USER_ID)
    return CoreMemoryProvider(caps=caps or None).provide(ctx)


def provenance(bundle, scope):
    return ev.core_provenance(bundle=bundle, agent="default", user=USER_ID, config=ON, archive_scope=scope)


def test_a_core_line_counts_for_the_turn_it_rests_on_and_no_other(stores):
    bundle, scope, document, memory = stores
    dream_line(memory, USER, "Works as a paramedic at Greenfield Hospital", document=document, seq=3)
    dream_line(memory, MEMORY, "Walks a dog on weekends", document=document, seq=2)  # recorded: another message
    memory.append(file=MEMORY, text="Keeps busy on weekdays", source="agent")  # an edit resting on no message
    sight = ev.sight_of_context(context([sent(bundle)]), provenance(bundle, scope))
    job, dog, asked, greeting = ev.locate([JOB, DOG, ASKED, GREETING], first=sight)
    assert job.in_context and job.tiers == ("core memory",)
    # the dog line's ledger names the assistant's question, so the question counts, the dog turn does not
    assert not dog.in_context and asked.tiers == ("core memory",)
    assert not greeting.reachable
    # without the ledgers the rewritten lines are found by nothing: the text rule never matches them
    assert not any(f.in_context for f in ev.locate([JOB, DOG, ASKED], first=ev.sight_of_context(context([sent(bundle)]))))


def test_only_lines_as_sent_count(stores):
    bundle, scope, document, memory = stores
    dream_line(memory, USER, "Name: Sam", document=document, seq=1)
    section = sent(bundle)  # the context is assembled ...
    dream_line(memory, MEMORY, "Works as a paramedic at Greenfield Hospital", document=document, seq=3)  # ... then
    [job, greeting] = ev.locate([JOB, GREETING], first=ev.sight_of_context(context([section]), provenance(bundle, scope)))
    assert greeting.in_context and not job.reachable
    # a line cut at the file's cap is not the line
    dream_line(memory, MEMORY, "Walks a dog along the river every single weekend morning, rain or shine, with two "
               "friends from the station and their dogs", document=document, seq=5)
    cut = sent(bundle, **{MEMORY: 35})
    assert "cut at the file's cap" in cut.text and "Works as a paramedic at Greenfield Hospital" in cut.text
    [job, dog] = ev.locate([JOB, DOG], first=ev.sight_of_context(context([cut]), provenance(bundle, scope)))
    assert job.in_context and not dog.reachable
    # lines in another section are not core memory lines, whatever their words
    other = type(section)(name="archive", tag="x", text=cut.text, tokens=1, items=1)
    [job] = ev.locate([JOB], first=ev.sight_of_context(context([other]), provenance(bundle, scope)))
    assert not job.reachable


def test_only_the_recorded_message_of_the_recorded_conversation_counts(stores):
    bundle, scope, document, memory = stores
    dream_line(memory, USER, "Works as a paramedic at Greenfield Hospital", document=document, seq=3,
               session="session:u1.s9")  # the ledger names another conversation than the document's
    dream_line(memory, MEMORY, "Walks a dog on weekends", document=document, seq=99)  # no such message
    memory.append(file=MEMORY, text="Likes rivers", source="dream",
                  origin=Origin(session=SESSION, document="no-such-document", said_at=MAY, seq=5))
    found = ev.locate(list(TURNS), first=ev.sight_of_context(context([sent(bundle)]), provenance(bundle, scope)))
    assert not any(f.reachable for f in found)


# -- end to end: read in, dream, ask ---------------------------------------------------------------


def dataset() -> Dataset:
    later = Session("s2", datetime(2023, 5, 9, 19, 0, tzinfo=UTC), (
        Turn("s2.t0", "user", "Sam", "Any idea what to cook tonight?"),
        Turn("s2.t1", "assistant", "Ada", "How about a simple risotto?"),
    ))
    asked = datetime(2023, 6, 1, 12, 0, tzinfo=UTC)
    questions = (
        Question("q-job", USER_ID, "user_fact", "What do I do for a living?", "paramedic", (JOB.id,), asked),
        Question("q-hello", USER_ID, "user_fact", "How was I doing that evening?", "well", (GREETING.id,), asked),
    )
    history = History(USER_ID, "Sam", "Ada", (Session("s1", MAY, TURNS), later), questions)
    return Dataset("generated", "provenance", "test", ("user_fact",), ("user_fact",), (history,))


async def test_the_evaluation_credits_core_memory_with_the_turns_its_lines_rest_on(tmp_path):
    data = dataset()
    [history] = data.histories
    configs = tuple(c for c in CONFIGS if c.name in ("archive", "archive_core"))
    setup = RunSetup(dataset=data, model=OfflineChatModel(), configs=configs)
    rows = {}
    for config in configs:
        snapshot = tmp_path / config.name
        stats = await ingest(history=history, config=config, setup=setup, workspace=snapshot)
        for question in history.questions:
            rows[config.name, question.id] = await ask(question=question, history=history, config=config, setup=setup,
                                                       snapshot=snapshot, scratch=tmp_path / "scratch")
    assert stats["core_edits"] >= 1
    [job] = rows["archive_core", "q-job"]["evidence"]
    assert job["in_context"] and "core memory" in job["tiers"]
    assert rows["archive_core", "q-job"]["tiers"]["core memory"] == 1
    # the archive alone has no core memory, and no core line rests on the greeting
    assert all("core memory" not in e["tiers"] for e in rows["archive", "q-job"]["evidence"])
    assert all("core memory" not in e["tiers"] for e in rows["archive_core", "q-hello"]["evidence"])
