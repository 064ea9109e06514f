"""The long-term loop end to end: conversation → cleanup → archive → Dream Engine → next turn.

Everything runs with the offline model over real stores of both backends; background tasks are
recorded by the test DummyBackend and run deterministically with ``arun_recorded_tasks`` (and
once through the real django-tasks-db worker).
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import TaskResultStatus, task_backends
from django.utils import timezone

from agents.declarations import load_declaration
from agents.runtime.events import CleanupDone, TurnFinished
from agents.llm import OFFLINE_CONSOLIDATION_MARKER, OfflineChatModel
from agents.runtime.services import build_services
from agents.tasks import (
    OWNER_KEY,
    PENDING_KEY,
    ConsolidationTrigger,
    LongTermSessionHook,
    TaskEnvironment,
    arun_recorded_tasks,
    consolidate_core_memory,
    enqueue_consolidation,
    run_recorded_tasks,
    task_environment,
)
from agents.runtime.tools.history_tools import archive_scope_for
from memory.core_memory import MEMORY, SOUL, USER, CoreMemory
from memory.dream.prompt import CONSOLIDATION_MARKER
from memory.hooks import CleanupFinished
from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import ArchiveDocument
from tests.agents.support import BACKENDS, RecordingModel, fresh_queue, off_loop, queued, runtime_setup, turn  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
FACTS = "Hi! My name is Sam and I live in Lisbon. We decided to use SQLite for the store."


def agent_node(name="default", **memory):
    node = load_declaration(REPO / "config" / "scopes" / "bot.yml").find(name)
    return replace(node, memory_config=replace(node.memory_config, **memory)) if memory else node


def long_term_agent(**memory):
    settings = dict(
        archive_enabled=True, core_enabled=True, context_window=8192, compression_threshold=600, keep_tokens=120
    )
    settings.update(memory)
    return agent_node(**settings)


def is_consolidation(messages, tools):
    return any(OFFLINE_CONSOLIDATION_MARKER in str(m.get("content")) for m in messages)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(autouse=True)
def _queue(fresh_queue):
    yield


def setup(tmp_path, backend, agent):
    model = RecordingModel()
    runtime, services, env = runtime_setup(tmp_path, backend, agent, model)
    return runtime, services, env, model


async def talk_until_cleanup(runtime, agent, session, first=FACTS, limit=8):
    cleanups = []
    texts = [first] + [
        f"Let us talk about topic number {i}, which is long enough to fill the window quickly." for i in range(limit)
    ]
    for text in texts:
        events = await turn(runtime, agent, session, text)
        cleanups += [e for e in events if isinstance(e, CleanupDone) and e.committed]
        if cleanups:
            break
    assert cleanups, "the session never crossed its threshold"


async def test_facts_told_in_conversation_reach_core_memory_and_the_next_turn(tmp_path, backend):
    agent = long_term_agent()
    runtime, services, env, model = setup(tmp_path, backend, agent)
    session = SessionScope("lt1")
    await talk_until_cleanup(runtime, agent, session)

    scope = archive_scope_for(agent="default", user_id="7")
    [document] = await off_loop(services.bundle.archive.list, scope)
    assert "Lisbon" in document.search_text()
    assert len(queued("consolidate_core_memory")) == 1  # queued by the cleanup, not run inline
    core = CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent="default", user="7")
    assert (await off_loop(core.read, file=USER)).text == ""

    ran = await arun_recorded_tasks(environment=env)
    assert all(r.status == TaskResultStatus.SUCCESSFUL for r in ran)
    user_md, memory_md = (await off_loop(core.read, file=USER)).text, (await off_loop(core.read, file=MEMORY)).text
    assert "Name: Sam" in user_md and "Lives in Lisbon" in user_md
    assert "Decided: use SQLite for the store" in memory_md
    assert (await off_loop(core.history, file=USER))[-1].source == "dream"
    assert await off_loop(services.bundle.cursors.get, scope, "dream") == document.seq
    consolidation = [r for r in model.requests if CONSOLIDATION_MARKER in r["messages"][0]["content"]]
    assert len(consolidation) == 1 and document.id in consolidation[0]["messages"][1]["content"]

    events = await turn(runtime, agent, session, "What do you know about me?")
    system = model.requests_with_tool("archive_search")[-1]["messages"][0]["content"]
    profile = system.split("<user_profile>")[1].split("</user_profile>")[0]
    known = system.split("<known_facts>")[1].split("</known_facts>")[0]
    assert "Name: Sam" in profile and "Lives in Lisbon" in profile
    assert "Decided: use SQLite for the store" in known
    assert "<archive_summaries>" in system  # the archive layer is in context too
    answer = [e for e in events if isinstance(e, TurnFinished)][0].message.content
    assert "Name: Sam" in answer


async def test_archive_search_returns_ranked_messages_with_their_origin(tmp_path, backend):
    agent = long_term_agent()
    runtime, services, env, model = setup(tmp_path, backend, agent)
    session = SessionScope("lt-search")
    await talk_until_cleanup(runtime, agent, session)
    scope = archive_scope_for(agent="default", user_id="7")
    when = timezone.now().replace(year=2023, month=5, day=8, hour=10, minute=0, second=0, microsecond=0)
    stored = []
    for i, text in enumerate(
        ["Lisbon trams, Lisbon food and Lisbon hills.", "Nothing about that city.", "A day trip to Lisbon."]
    ):
        said = Message(role="user", content=text, created_at=when + timedelta(days=i)).with_seq(1)
        document = ArchiveDocument(session=f"session:other{i}", summary=text, title=f"Trip talk {i}", messages=(said,))
        stored.append(await off_loop(services.bundle.archive.put, scope, document))
    asked = Message(role="user", content="Any tips for my Lisbon weekend?", created_at=when + timedelta(days=5)).with_seq(1)
    answered = Message(role="assistant", content="Take tram 28 early, before the crowds.",
                       created_at=when + timedelta(days=5, minutes=1)).with_seq(2)
    exchange = ArchiveDocument(session="session:tips", summary="", title="Tips", messages=(asked, answered))
    await off_loop(services.bundle.archive.put, scope, exchange)
    events = await turn(runtime, agent, session, "Search the archive for Lisbon")
    [result] = [e for e in events if type(e).__name__ == "ToolFinished"]
    assert result.ok
    heads = re.findall(r"^\[(\d+)\.(\d+)\] (\d{4}-\d{2}-\d{2}) \d\d:\d\d · (\w+)(?: · (.*))?$",
                       result.content, flags=re.MULTILINE)
    by_seq = {d.seq: d for d in stored}
    found = [(int(doc), int(seq)) for doc, seq, *_ in heads]
    # Both messages that name Lisbon, and only those: the one that says nothing of it is not shown.
    assert {doc for doc, _ in found} >= {stored[0].seq, stored[2].seq} and stored[1].seq not in {d for d, _ in found}
    for doc, seq, date, speaker, title in heads:
        if int(doc) in by_seq:  # where it came from: handle, date, speaker and conversation
            document = by_seq[int(doc)]
            assert (int(seq), speaker, title) == (1, "user", document.title)
            assert date == f"{document.messages[0].created_at:%Y-%m-%d}"
    assert "Lisbon trams, Lisbon food and Lisbon hills." in result.content  # the message shown whole
    # A matched request comes with the reply that answered it, in the order they were said.
    assert result.content.index("Any tips for my Lisbon weekend?") < result.content.index("Take tram 28 early")
    # archive_read opens the turns around a handle, in this user's archive only.
    reading = await off_loop(services.retrieval.around, scope, f"{stored[2].seq}.1")
    assert [m.text for m in reading] == ["A day trip to Lisbon."]
    assert await off_loop(services.retrieval.around, archive_scope_for(agent="default", user_id="8"),
                          f"{stored[2].seq}.1") == []


async def test_layers_off_mean_no_archive_and_no_dream(tmp_path, backend):
    agent = agent_node(context_window=8192, compression_threshold=600, keep_tokens=120, archive_enabled=False,
                       core_enabled=False)
    runtime, services, env, model = setup(tmp_path, backend, agent)
    session = SessionScope("lt-off")
    await talk_until_cleanup(runtime, agent, session)
    assert await off_loop(services.bundle.archive.list, archive_scope_for(agent="default", user_id="7")) == []
    assert queued("consolidate_core_memory") == []
    assert await off_loop(services.bundle.kv.get, session, OWNER_KEY) is None
    with task_environment(env):
        assert await consolidate_core_memory.acall(agent="default", user="7") == {"status": "disabled"}
    assert not [r for r in model.requests if CONSOLIDATION_MARKER in r["messages"][0]["content"]]


async def test_the_consolidation_task_is_idempotent(tmp_path, backend):
    agent = long_term_agent()
    runtime, services, env, model = setup(tmp_path, backend, agent)
    await talk_until_cleanup(runtime, agent, SessionScope("lt-idem"))
    kv = services.bundle.kv
    with task_environment(env):
        first = await consolidate_core_memory.acall(agent="default", user="7")
        snapshot = {
            item.key: item.version for item in await off_loop(kv.list, archive_scope_for(agent="default", user_id="7"))
        }
        second = await consolidate_core_memory.acall(agent="default", user="7")
    assert first["status"] == "consolidated" and first["edits"]
    assert second == {**second, "status": "up_to_date", "edits": [], "documents": 0}
    after = {
        item.key: item.version for item in await off_loop(kv.list, archive_scope_for(agent="default", user_id="7"))
    }
    assert after == snapshot


async def test_a_failing_model_schedules_one_retry_later_and_changes_nothing(tmp_path, backend):
    agent = long_term_agent()
    runtime, services, env, model = setup(tmp_path, backend, agent)
    await talk_until_cleanup(runtime, agent, SessionScope("lt-fail"))
    model.fail_when = is_consolidation
    ran = await arun_recorded_tasks(environment=env)
    [dream] = [r for r in ran if r.task.name == "consolidate_core_memory"]
    assert dream.return_value["status"] == "failed" and "endpoint is down" in dream.return_value["error"]
    scope = archive_scope_for(agent="default", user_id="7")
    assert await off_loop(services.bundle.cursors.get, scope, "dream") is None
    core = CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent="default", user="7")
    assert all(not s.exists for s in await off_loop(core.read_all))
    [retry] = [r for r in queued("consolidate_core_memory") if r.status == TaskResultStatus.READY]
    assert retry.task.run_after > timezone.now() + timedelta(seconds=30)  # later, not in a tight loop
    assert await arun_recorded_tasks(environment=env) == []  # not due yet
    model.fail_when = None
    moment = retry.task.run_after + timedelta(seconds=1)
    later = await arun_recorded_tasks(environment=replace(env, clock=lambda: moment), now=moment)
    assert [r.return_value["status"] for r in later] == ["consolidated"]
    assert "Name: Sam" in (await off_loop(core.read, file=USER)).text


def test_a_cleanup_before_the_owner_is_known_is_queued_when_the_run_ends(tmp_path):
    services = build_services(backend="file", workspace=tmp_path, model=OfflineChatModel())
    session = SessionScope("first-run")
    trigger = ConsolidationTrigger(kv=services.bundle.kv)
    event = CleanupFinished(session, 3, 2, 900, 300, None, "doc1", False, 3)
    trigger(event)
    assert queued("consolidate_core_memory") == [] and services.bundle.kv.get(session, PENDING_KEY) is not None
    hook = LongTermSessionHook(services=services)
    from asgiref.sync import async_to_sync

    async_to_sync(hook)(
        agent=long_term_agent(), user_id="7", session=session, final=Message(role="assistant", content="ok")
    )
    assert services.bundle.kv.get(session, PENDING_KEY) is None
    assert [r.kwargs for r in queued("consolidate_core_memory")] == [
        {"agent": "default", "user": "7", "mode": "incremental"}
    ]
    assert json.loads(services.bundle.kv.get_value(session, OWNER_KEY)) == {
        "agent": "default",
        "user": "7",
        "core": True,
    }
    trigger(event)  # now the owner is known: queued right away
    assert len(queued("consolidate_core_memory")) == 2
    trigger(CleanupFinished(session, 3, 2, 900, 300, None, None, False, 3))  # no archive document: nothing
    assert len(queued("consolidate_core_memory")) == 2


def put_docs(services, user, texts):
    scope = archive_scope_for(agent="default", user_id=user)
    for text in texts:
        services.bundle.archive.put(
            scope,
            ArchiveDocument(
                session="session:c1", summary=f"## Facts\n- {text}", messages=(Message(role="user", content=text),)
            ),
        )


@pytest.mark.parametrize("backend_name", ["file", pytest.param("sqlite", marks=pytest.mark.django_db)])
def test_the_dream_command_consolidates_with_progress(tmp_path, backend_name, owner, settings):
    agent = long_term_agent()
    services = build_services(backend=backend_name, workspace=tmp_path, model=OfflineChatModel())
    env = TaskEnvironment(services=services, find_agent={"default": agent, "reviewer": agent_node("reviewer")}.get)
    user = str(owner.pk)
    put_docs(services, user, [f"I like topic {i}." for i in range(9)] + ["My name is Sam."])
    out, err = io.StringIO(), io.StringIO()
    with task_environment(env):
        call_command("dream", stdout=out, stderr=err)
        text = out.getvalue()
        assert f"default / user {user}: consolidating (incremental)" in text
        assert "8 document(s) read, through seq 8 of 10" in text and "10 document(s) read, through seq 10 of 10" in text
        assert "10 document(s), 10 edit(s) applied (USER.md v2); cursor 10" in text
        assert "USER.md: + Name: Sam" in text
        core = CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent="default", user=user)
        assert "Likes topic 0" in core.read(file=USER).text and "Name: Sam" in core.read(file=USER).text

        out = io.StringIO()
        call_command("dream", "--user", user, stdout=out)
        assert "Nothing to consolidate" in out.getvalue()
        out = io.StringIO()
        call_command("dream", "--full", "--agent", "default", stdout=out)
        assert "consolidating (full)" in out.getvalue() and "0 edit(s) applied (no file changed)" in out.getvalue()
        with pytest.raises(CommandError, match="archive or core memory off"):
            call_command("dream", "--agent", "reviewer", stdout=io.StringIO())
    assert err.getvalue() == ""


@pytest.mark.django_db(transaction=True)
def test_the_dream_command_reports_a_failure(tmp_path, owner):
    broken = RecordingModel()
    broken.fail_when = is_consolidation
    agent = long_term_agent()
    services = build_services(backend="file", workspace=tmp_path, model=broken)
    put_docs(services, str(owner.pk), ["My name is Sam."])
    err = io.StringIO()
    with task_environment(TaskEnvironment(services=services, find_agent={"default": agent}.get)):
        with pytest.raises(CommandError, match="1 consolidation"):
            call_command("dream", stdout=io.StringIO(), stderr=err)
    assert "FAILED" in err.getvalue() and "next automatic attempt" in err.getvalue()


@pytest.mark.django_db(transaction=True)
def test_the_database_worker_runs_a_queued_consolidation(tmp_path):
    from django_tasks_db.backend import DatabaseBackend
    from django_tasks_db.models import DBTaskResult

    agent = long_term_agent()
    services = build_services(backend="sqlite", workspace=tmp_path, model=OfflineChatModel())
    put_docs(services, "7", ["My name is Sam."])
    original = task_backends["default"]
    task_backends["default"] = DatabaseBackend("default", {"BACKEND": "django_tasks_db.DatabaseBackend",
                                                           "QUEUES": settings.TASK_QUEUES})
    try:
        with task_environment(TaskEnvironment(services=services, find_agent={"default": agent}.get)):
            result = enqueue_consolidation(agent="default", user="7")
            assert DBTaskResult.objects.get(id=result.id).status == TaskResultStatus.READY
            call_command(
                "db_worker", "--batch", "--no-startup-delay", "--no-reload", stdout=io.StringIO(), stderr=io.StringIO()
            )
    finally:
        task_backends["default"] = original
    row = DBTaskResult.objects.get(id=result.id)
    assert row.status == TaskResultStatus.SUCCESSFUL and row.return_value["status"] == "consolidated"
    core = CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent="default", user="7")
    assert core.read(file=USER).text == "Name: Sam\n" and core.read(file=SOUL).text == ""


def test_recorded_tasks_run_in_order_for_sync_callers(tmp_path):
    agent = long_term_agent()
    services = build_services(backend="file", workspace=tmp_path, model=OfflineChatModel())
    put_docs(services, "7", ["My name is Sam."])
    enqueue_consolidation(agent="default", user="7")
    enqueue_consolidation(agent="default", user="7")  # a duplicate is harmless
    ran = run_recorded_tasks(environment=TaskEnvironment(services=services, find_agent={"default": agent}.get))
    assert [r.return_value["status"] for r in ran] == ["consolidated", "up_to_date"]


async def test_a_fact_told_while_the_archive_was_off_reaches_core_memory_once_it_is_on(tmp_path, backend):
    """Told with archive and core off, the fact lives on in the compact summary; the first
    archive document after switching them on carries that summary, and the Dream Engine reads
    it as evidence like what the user said."""
    off = long_term_agent(archive_enabled=False, core_enabled=False)
    runtime, services, env, model = setup(tmp_path, backend, off)
    session = SessionScope("lt-late")
    await talk_until_cleanup(runtime, off, session, first="My name is Dana and I live in Haifa.")
    scope = archive_scope_for(agent="default", user_id="7")
    assert await off_loop(services.bundle.archive.list, scope) == []

    on = long_term_agent()
    env = TaskEnvironment(services=services, find_agent={on.name: on}.get)
    await talk_until_cleanup(runtime, on, session, first="Now the archive is on: let us go on planning the trip.")
    documents = await off_loop(services.bundle.archive.list, scope)
    assert documents and "Dana" in documents[-1].search_text()
    ran = await arun_recorded_tasks(environment=env)
    assert ran and all(r.status == TaskResultStatus.SUCCESSFUL for r in ran)
    core = CoreMemory(kv=services.bundle.kv, config=on.memory_config, agent="default", user="7")
    user_md = (await off_loop(core.read, file=USER)).text
    assert "Name: Dana" in user_md and "Lives in Haifa" in user_md


async def test_remember_that_my_name_is_replaces_the_name_line(tmp_path, backend):
    agent = long_term_agent()
    runtime, services, env, model = setup(tmp_path, backend, agent)
    session = SessionScope("lt-rename")
    core = CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent="default", user="7")
    await turn(runtime, agent, session, "Please remember that my name is Dana.")
    assert (await off_loop(core.read, file=USER)).text.count("Name:") == 1
    await turn(runtime, agent, session, "Please remember that my name is Dora.")
    user_md = (await off_loop(core.read, file=USER)).text
    assert user_md.count("Name:") == 1 and "Name: Dora" in user_md and "Dana" not in user_md


async def test_offline_summaries_hold_no_markup_hints_or_broken_calls(tmp_path, backend):
    """Two cleanups in a row (the second merges the first summary), with a tool call between."""
    agent = long_term_agent()
    runtime, services, env, model = setup(tmp_path, backend, agent)
    session = SessionScope("lt-clean-summary")
    await talk_until_cleanup(runtime, agent, session, first="My name is Dana. Search the archive for the ferry times.")
    await talk_until_cleanup(runtime, agent, session, first="todo: book the ferry")
    [summary] = [m for m in await off_loop(services.bundle.messages.read, session) if m.is_compact_summary]
    body = summary.content
    assert "Name: Dana" in body  # carried over from the first summary
    assert "Called archive_search." in body  # the call's name, read from its "(tool calls: ...)" header
    for artifact in ("<transcript>", "</previous_summary>", "<previous_summary", "Try “remember that", "Called s."):
        assert artifact not in body, (artifact, body)
    events = await turn(runtime, agent, session, "What do you know about me?")
    answer = [e for e in events if isinstance(e, TurnFinished)][0].message.content
    assert "Try “remember that" not in answer.split("I'm the offline model")[0]
