"""Experience: the supplement's tool, section and review hook, the store, the ExperienceReviewAgent."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync

from agents.declarations import load_declaration
from agents.runtime.events import ToolFinished, TurnFinished
from agents.experience.hook import REVIEW_HOOK
from agents.experience.supplement import ExperienceProvider
from agents.experience.review import ExperienceReviewAgent, ReviewStatus, ledger_key, render_run
from agents.experience.store import (
    ExperienceConflict,
    ExperienceExists,
    ExperienceStore,
    InvalidExperience,
    experience_scope,
    similar,
)
from agents.runtime.hooks import HookPoint
from agents.llm import OfflineChatModel
from agents.runtime.context import ToolContext
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services
from agents.tasks import arun_recorded_tasks, review_experience, task_environment
from agents.runtime.tools.scratchpad import RunScratchpad
from memory.assembly.base import AssemblyContext
from memory.config import MemoryConfig
from memory.messages import Message, ToolCall
from memory.scopes import AgentScope, SessionScope
from tests.agents.support import BACKENDS, RecordingModel, fresh_queue, off_loop, queued, runtime_setup, tool_names, turn  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
FAILING = "Look up pruned message 99"  # the offline model calls pruned_lookup; nothing was pruned: a tool error


def declared(name="default"):
    return load_declaration(REPO / "config" / "scopes" / "bot.yml").find(name)


def is_review(messages, tools):
    return "create_experience" in tool_names(tools)


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(autouse=True)
def _queue(fresh_queue):
    yield


def setup(tmp_path, backend, agent=None):
    agent = agent or declared()
    model = RecordingModel(failure="the reviewer's endpoint is down")
    runtime, services, env = runtime_setup(tmp_path, backend, agent, model)
    return runtime, services, env, model, agent


def reviews():
    return queued("review_experience")


async def test_a_tool_error_becomes_a_lesson_listed_from_the_next_conversation(tmp_path, backend):
    runtime, services, env, model, agent = setup(tmp_path, backend)
    session = SessionScope("exp1")
    events = await turn(runtime, agent, session, FAILING)
    [failed] = [e for e in events if isinstance(e, ToolFinished)]
    assert not failed.ok and "no pruned message number 99" in failed.content
    final = [e for e in events if isinstance(e, TurnFinished)][0].message
    [queued] = reviews()
    assert queued.kwargs == {
        "agent": "default",
        "user": "7",
        "session": "session:exp1",
        "final_id": final.id,
        "final_seq": final.seq,
    }

    [ran] = await arun_recorded_tasks(environment=env)
    assert ran.return_value == {
        "status": "reviewed",
        "created": ["calling-pruned-lookup"],
        "updated": [],
        "error": None,
    }
    store = ExperienceStore(kv=services.bundle.kv, agent="default", user="7")
    [lesson] = await off_loop(store.list)
    assert lesson.name == "Calling pruned_lookup" and "no pruned message number 99" in lesson.body
    raw = (await off_loop(services.bundle.kv.get, experience_scope("default", "7"), "experience.calling-pruned-lookup.md")).value
    assert raw.startswith("---\nname: Calling pruned_lookup\ndescription: What to check before calling pruned_lookup")
    assert "\nupdated: " in raw and "\n---\n## Lesson\n" in raw
    if backend == "file":  # a real markdown file a person can open
        files = list((tmp_path / "memory").rglob("experience.calling-pruned-lookup.md"))
        assert len(files) == 1 and files[0].read_text(encoding="utf-8") == raw
    # the reviewer's scratch session is gone
    assert not [k for k in await off_loop(services.bundle.kv.list, SessionScope(f"exp1.review-{final.id[:24]}"))]

    # The conversation it was learned from goes on as its context began (the failure is in it
    # already, and a list that changed ahead of it would make a prefix cache read it all again);
    # the next conversation lists the lesson.
    await turn(runtime, agent, session, "Hello again")
    system = model.requests_with_tool("experience")[-1]["messages"][0]["content"]
    assert "<available_experiences>" not in system
    await turn(runtime, agent, SessionScope("exp2"), "Hello again")
    system = model.requests_with_tool("experience")[-1]["messages"][0]["content"]
    section = system.split("<available_experiences>")[1].split("</available_experiences>")[0]
    assert 'name="calling-pruned-lookup"' in section and "What to check before calling pruned_lookup" in section
    assert "experience" in {t["function"]["name"] for t in model.requests_with_tool("experience")[-1]["tools"]}

    # the agent reads the full lesson with its experience tool
    ctx = ToolContext(
        services=services,
        runtime=runtime,
        agent=agent,
        user_id="7",
        session=session,
        scratchpad=RunScratchpad(),
        hooks=runtime.hooks_for(agent),
    )
    roster = runtime.roster(agent)
    listed = await roster.call(ctx, name="experience", arguments_json='{"action": "list"}')
    assert listed.ok and listed.content.startswith("- calling-pruned-lookup: Calling pruned_lookup — ")
    read = await roster.call(
        ctx, name="experience", arguments_json='{"action": "read", "name": "calling-pruned-lookup"}'
    )
    assert read.ok and read.content == raw
    missing = await roster.call(ctx, name="experience", arguments_json='{"action": "read", "name": "nope"}')
    assert not missing.ok and "no lesson called" in missing.content


async def test_a_second_failure_updates_the_lesson_instead_of_duplicating_it(tmp_path, backend):
    runtime, services, env, model, agent = setup(tmp_path, backend)
    await turn(runtime, agent, SessionScope("exp2"), FAILING)
    await arun_recorded_tasks(environment=env)
    await turn(runtime, agent, SessionScope("exp3"), "Look up pruned message 42")
    [ran] = await arun_recorded_tasks(environment=env)
    assert ran.return_value["status"] == "reviewed" and ran.return_value["updated"] == ["calling-pruned-lookup"]
    [lesson] = await off_loop(ExperienceStore(kv=services.bundle.kv, agent="default", user="7").list)
    assert lesson.version == 2 and "number 99" in lesson.body and "number 42" in lesson.body
    reviewer_tools = [
        [c["function"]["name"] for m in r["messages"] for c in m.get("tool_calls") or []]
        for r in model.requests
        if "create_experience" in {t["function"]["name"] for t in r["tools"] or []}
    ]
    assert reviewer_tools[-1] == ["list_experiences", "read_experience", "update_experience"]


async def test_reviewing_the_same_run_twice_writes_once(tmp_path, backend):
    runtime, services, env, model, agent = setup(tmp_path, backend)
    session = SessionScope("exp4")
    await turn(runtime, agent, session, FAILING)
    [queued] = reviews()
    with task_environment(env):
        first = await review_experience.acall(**queued.kwargs)
        kv_before = {i.key: i.version for i in await off_loop(services.bundle.kv.list, experience_scope("default", "7"))}
        second = await review_experience.acall(**queued.kwargs)
    assert first["status"] == "reviewed" and second["status"] == "already_reviewed"
    assert {i.key: i.version for i in await off_loop(services.bundle.kv.list, experience_scope("default", "7"))} == kv_before
    ledger = await off_loop(services.bundle.kv.get, session, ledger_key(queued.kwargs["final_id"]))
    assert '"status": "reviewed"' in ledger.value


async def test_a_run_without_tool_errors_records_nothing(tmp_path, backend):
    runtime, services, env, model, agent = setup(tmp_path, backend)
    await turn(runtime, agent, SessionScope("exp5"), "todo: water the plants")
    [ran] = await arun_recorded_tasks(environment=env)
    assert ran.return_value["status"] == "reviewed" and ran.return_value["created"] == []
    assert await off_loop(ExperienceStore(kv=services.bundle.kv, agent="default", user="7").list) == []
    system = model.requests_with_tool("experience")[-1]["messages"][0]["content"]
    assert "<available_experiences>" not in system  # nothing to list: no section


async def test_a_failing_reviewer_is_retried_later_then_gives_up(tmp_path, backend):
    runtime, services, env, model, agent = setup(tmp_path, backend)
    await turn(runtime, agent, SessionScope("exp6"), FAILING)
    model.fail_when = is_review
    [ran] = await arun_recorded_tasks(environment=env)
    assert ran.return_value["status"] == "failed" and "endpoint is down" in ran.return_value["error"]
    [retry] = [r for r in reviews() if r.status == "READY"]
    assert retry.task.run_after is not None and retry.kwargs == ran.kwargs
    with task_environment(env):
        for _ in range(2):
            outcome = await review_experience.acall(**ran.kwargs)
    assert outcome["status"] == "gave_up"
    assert await off_loop(ExperienceStore(kv=services.bundle.kv, agent="default", user="7").list) == []


def test_subagents_and_agents_without_the_supplement_get_no_experience(tmp_path):
    services = build_services(backend="file", workspace=tmp_path, model=OfflineChatModel())
    runtime = Runtime(services=services)
    assert REVIEW_HOOK not in runtime.hooks.names(HookPoint.AFTER_GRAPH)  # nothing runtime-wide

    main = declared()
    subagent = main.subagents[0]
    plain = replace(main, tool_supplements=(), memory_config=replace(main.memory_config, experience_enabled=False))
    assert runtime.hooks_for(main).names(HookPoint.AFTER_GRAPH).count(REVIEW_HOOK) == 1
    for node in (subagent, plain):
        assert REVIEW_HOOK not in runtime.hooks_for(node).names(HookPoint.AFTER_GRAPH)
        assert runtime.supplements_for(node) == ()
        assert "experience" not in runtime.roster(node)
    assert "experience" in runtime.roster(main)
    assert [type(p) for p in runtime.supplements_for(main)] == [ExperienceProvider]


def test_a_run_of_an_agent_without_the_supplement_queues_no_review(tmp_path):
    services = build_services(backend="file", workspace=tmp_path, model=OfflineChatModel())
    runtime = Runtime(services=services)
    main = declared()
    plain = replace(
        main, name="plain", tool_supplements=(), memory_config=replace(main.memory_config, experience_enabled=False)
    )

    async def one_turn(node):
        async for _ in runtime.run_turn(agent=node, user_id="7", session=SessionScope(f"s-{node.name}"), text="Hi"):
            pass

    async_to_sync(one_turn)(plain)
    assert reviews() == []
    async_to_sync(one_turn)(main)
    assert [r.kwargs["agent"] for r in reviews()] == [main.name]


async def test_a_subagent_run_queues_no_review(tmp_path, backend):
    runtime, services, env, model, agent = setup(tmp_path, backend)
    ctx = ToolContext(
        services=services,
        runtime=runtime,
        agent=agent,
        user_id="7",
        session=SessionScope("par"),
        scratchpad=RunScratchpad(),
        hooks=runtime.hooks_for(agent),
    )
    answer = await runtime.run_subagent(parent=ctx, node=agent.subagents[0], task="Look up pruned message 5")
    assert "pruned_lookup" in answer
    assert reviews() == []


# -- the store and the section ----------------------------------------------------------------


def test_the_store_refuses_near_duplicates_and_stale_writes(bundle):
    store = ExperienceStore(kv=bundle.kv, agent="default", user="7")
    created = store.create(name="Calling the todo tool", description="Before todo", body="Check the item.")
    assert created.slug == "calling-the-todo-tool" and created.version == 1
    with pytest.raises(ExperienceExists, match="calling-the-todo-tool") as exc:
        store.create(name="Calling todo tool", description="dup", body="x")
    assert exc.value.existing == "calling-the-todo-tool"
    assert similar("Calling todo", "todo calling") and not similar("Calling todo", "Calling pruned_lookup")
    with pytest.raises(ExperienceConflict):
        store.update(name="calling-the-todo-tool", body="new", expected_version=7)
    updated = store.update(name="Calling the todo tool", body="Check the item twice.")
    assert updated.version == 2 and store.get("experience.calling-the-todo-tool.md").body == "Check the item twice."
    assert store.update(name="calling-the-todo-tool", body="Check the item twice.").version == 2  # no change, no write
    with pytest.raises(InvalidExperience):
        store.create(name="  ", description="x", body="y")
    with pytest.raises(InvalidExperience):
        store.create(name="Other", description="x" * 300, body="y")


def test_the_section_fits_its_budget_and_escapes(bundle):
    store = ExperienceStore(kv=bundle.kv, agent="default", user="7")
    for i in range(30):
        store.create(
            name=f"Lesson number {i} about topic{i}", description=f"When <tag> & topic{i} come up " * 3, body="b"
        )
    config = MemoryConfig(experience_enabled=True)
    ctx = AssemblyContext(session=SessionScope("s"), config=config, stores=bundle, agent="default", user="7")
    section = ExperienceProvider(budget_tokens=300).provide(ctx)
    assert section.tokens <= 300 and 0 < section.items < 30
    assert "Older lessons are not shown" in section.text and "&lt;tag&gt; &amp;" in section.text
    assert section.text.startswith("<available_experiences>")
    assert ExperienceProvider().provide(replace(ctx, config=MemoryConfig())) is None
    other = replace(ctx, agent="someone-else")
    assert ExperienceProvider().provide(other) is None  # lessons are per agent
    assert ExperienceProvider().provide(replace(ctx, user="8")) is None  # and per user
    assert ExperienceProvider().provide(replace(ctx, user=None)) is None


def test_a_conversation_lists_the_lessons_of_when_its_context_began(bundle):
    """A lesson written during a conversation is listed once the conversation's context begins
    anew (its first live message changed: a cleanup, a window that slid) or in another
    conversation; until then the list it showed stays word for word, so a prefix-caching server
    reads only the new turns. A listed lesson that is deleted leaves the list at once."""
    store = ExperienceStore(kv=bundle.kv, agent="default", user="7")
    config = MemoryConfig(experience_enabled=True)
    ctx = AssemblyContext(session=SessionScope("c1"), config=config, stores=bundle, agent="default", user="7",
                          first_live_seq=1)
    provider = ExperienceProvider()
    assert provider.provide(ctx) is None  # nothing learned yet
    store.create(name="Calling the todo tool", description="Check the item first", body="b")
    assert provider.provide(ctx) is None  # this conversation goes on as it began
    assert ExperienceProvider().provide(ctx) is None  # whichever provider object assembles it
    other = ExperienceProvider().provide(replace(ctx, session=SessionScope("c2")))
    assert other is not None and 'name="calling-the-todo-tool"' in other.text
    began_anew = ExperienceProvider().provide(replace(ctx, first_live_seq=9))  # after a cleanup
    assert began_anew is not None and began_anew.text == other.text
    # From there, the list stays as it was while more is learned...
    store.create(name="Reading pruned messages", description="Look them up by number", body="b")
    later = provider.provide(replace(ctx, first_live_seq=9))
    assert later.text == began_anew.text and "reading-pruned-messages" not in later.text
    # ...and a lesson taken away leaves it on the next turn.
    bundle.kv.delete(store.scope, "experience.calling-the-todo-tool.md")  # an operator removes it
    after = provider.provide(replace(ctx, first_live_seq=9))
    assert after is not None and "calling-the-todo-tool" not in after.text and "reading-pruned-messages" in after.text


def test_what_a_conversation_listed_is_kept_per_user_and_agent(bundle):
    """Two users (or two agents) in conversations of the same name, each with a lesson of the
    same name: each context lists its own user's lesson, turn after turn."""
    config = MemoryConfig(experience_enabled=True)
    ctx = AssemblyContext(session=SessionScope("same"), config=config, stores=bundle, agent="default", user="7",
                          first_live_seq=1)
    for agent, user, words in (("default", "7", "Seven's private words"), ("default", "8", "Eight's own words"),
                               ("other", "7", "the other agent's words")):
        ExperienceStore(kv=bundle.kv, agent=agent, user=user).create(name="Calling todo", description=words, body="b")
    provider = ExperienceProvider()
    for _ in range(2):
        seven = provider.provide(ctx)
        eight = provider.provide(replace(ctx, user="8"))
        other = provider.provide(replace(ctx, agent="other"))
        assert "Seven's private words" in seven.text and "Eight" not in seven.text and "other agent" not in seven.text
        assert "Eight's own words" in eight.text and "Seven" not in eight.text
        assert "the other agent's words" in other.text and "Seven" not in other.text
    smaller = ExperienceProvider(budget_tokens=20).provide(ctx)  # a budget too small for any lesson
    assert smaller is None and provider.provide(ctx).text == seven.text


def test_the_run_is_rendered_with_errors_marked_and_escaped():
    calls = (ToolCall("c1", "todo", '{"action": "add"}'),)
    run = [
        Message(role="user", content="add </run> please", seq=1),
        Message(role="assistant", content=None, tool_calls=calls, seq=2),
        Message(role="tool", content="Error: invalid arguments", tool_call_id="c1", name="todo", seq=3),
        Message(role="assistant", content="Sorry.", seq=4),
    ]
    text = render_run(run, agent="default", session=SessionScope("s1"))
    assert "1 failed" in text and text.count("</run>") == 1 and "&lt;/run&gt;" in text
    assert '<message role="tool" name="todo" status="error">Error: invalid arguments</message>' in text
    assert 'calls="todo({&quot;action&quot;: &quot;add&quot;})"' in text


async def test_a_run_pruned_before_its_review_is_read_from_the_catalog(tmp_path):
    runtime, services, env, model, agent = setup(tmp_path, "file")
    session = SessionScope("exp7")
    events = await turn(runtime, agent, session, FAILING)
    final = [e for e in events if isinstance(e, TurnFinished)][0].message
    live = await off_loop(services.bundle.messages.read, session)
    await off_loop(services.catalog.write, session, live)
    head = await off_loop(services.bundle.messages.head, session)
    await off_loop(
        services.bundle.messages.prune, session, through_seq=final.seq, summary=None, expected_version=head.version
    )
    outcome = await ExperienceReviewAgent(services=services).areview(
        agent=agent, user="7", session=session, final_id=final.id, final_seq=final.seq
    )
    assert outcome.status is ReviewStatus.REVIEWED and outcome.created == ("calling-pruned-lookup",)
    gone = await ExperienceReviewAgent(services=services).areview(
        agent=agent, user="7", session=SessionScope("never"), final_id="x" * 32, final_seq=4
    )
    assert gone.status is ReviewStatus.NOT_FOUND
