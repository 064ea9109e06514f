"""Cleanup ahead of need (agents/runtime/cleanup.py): when a turn ends and the next one like it
would carry the session over its threshold, the task worker compacts it in the pause, so the
next turn does not wait for the summary. Through the real runtime, stores and recorded task
queue, on the file and SQLite backends; the summary's model is the offline model (or one that
fails, for what a failed summary leaves)."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.utils import timezone

from agents.runtime.cleanup import AHEAD_HOOK, ahead_keep, cleanup_ahead, compact, due_ahead, hard_limit
from agents.runtime.events import CleanupDone, CleanupStarted
from agents.runtime.hooks import HookPoint, installers
from agents.chat.meter import load_history
from agents.runtime import cleanup as cleanup_module
from agents.llm.openai import OpenAIChatModel
from agents.llm.settings import ModelCaps
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services
from agents.tasks import TaskEnvironment, arun_recorded_tasks, task_environment, waiting_tasks
from memory.compression.cleanup import INTENT_KEY, LEASE_NAME
from memory.locks import acquire_lease
from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall
from memory.scopes import SessionScope
from tests.agents.support import (  # noqa: F401
    BACKENDS,
    RecordingModel,
    fresh_queue,
    off_loop,
    queued,
    runtime_setup,
    turn,
)
from tests.agents.test_long_term import long_term_agent
from tests.fakes.openai_server import FAKE_API_KEY, Pause, RawStream, Reply, chunk

# The file backend too: conversations (the archive's catch-up reads them) are rows in the database.
pytestmark = [pytest.mark.usefixtures("fresh_queue"), pytest.mark.django_db(transaction=True)]

#: About 110 tokens of what a user tells an agent, different in each turn.
FACTS = [
    f"Note {n}: on day {n} of the trip we walked from the harbour to the old market, bought figs and "
    f"bread, met a fisherman called Rui number {n} who told us about the storm of {1950 + n}, "
    "then took the slow tram up the hill, watched the boats come in at dusk, and wrote everything "
    "down in the blue notebook before dinner at the small place by the church."
    for n in range(1, 16)
]


def agent(**memory):
    return long_term_agent(core_enabled=False, compression_threshold=900, keep_tokens=200, **memory)


def says(role: str, tokens: int) -> Message:
    return Message(role=role, content="x", tokens=tokens)


# -- when it is due ---------------------------------------------------------------------------


def test_due_when_a_turn_like_the_latest_would_cross_the_threshold():
    config = agent().memory_config  # threshold 900, keep 200
    live = [says("assistant", 500), says("user", 100), says("assistant", 150)]
    # 750 tokens now, the latest turn took 250: the next like it reaches 1,000 > 900.
    assert due_ahead(live, tokens=750, config=config)
    # The latest turns were short: 750 + 60 stays under.
    short = [says("assistant", 390), says("user", 30), says("assistant", 30), says("user", 30), says("assistant", 30),
             says("user", 30), says("assistant", 30)]
    assert not due_ahead(short, tokens=750, config=config)
    # A short "thanks" after a long turn does not hide the long one; four turns back it does.
    thanks = [says("user", 200), says("assistant", 200), says("user", 5), says("assistant", 5)]
    assert due_ahead([says("assistant", 340), *thanks], tokens=750, config=config)
    assert not due_ahead([says("assistant", 300), *thanks, says("user", 5), says("assistant", 5),
                          says("user", 5), says("assistant", 5)], tokens=750, config=config)
    # A tool chain belongs to the turn it was called in: its result makes the turn long.
    call = Message(role="assistant", content="", tool_calls=[ToolCall("c1", "web_search", "{}")], tokens=20)
    chained = [says("assistant", 500), says("user", 20), call, Message(role="tool", content="x", tool_call_id="c1",
                                                                       tokens=200), says("assistant", 10)]
    assert due_ahead(chained, tokens=750, config=config)
    unchained = [says("assistant", 700), says("user", 20), says("assistant", 30)]
    assert not due_ahead(unchained, tokens=750, config=config)
    # The compact summary is stored as a user message; it is not a turn.
    summary = Message(role="user", content="x", kind=KIND_COMPACT_SUMMARY, tokens=350)
    assert not due_ahead([says("assistant", 100), summary, says("assistant", 300)], tokens=750, config=config)


def test_not_due_without_more_than_the_kept_tail_or_without_a_user_turn():
    config = agent().memory_config
    assert not due_ahead([says("user", 150), says("assistant", 40)], tokens=190, config=config)
    # Right after a cleanup: a large summary and the kept tail, nothing more to evict.
    summary = Message(role="user", content="x", kind=KIND_COMPACT_SUMMARY, tokens=500)
    assert not due_ahead([summary, says("user", 100), says("assistant", 90)], tokens=690, config=config)
    assert not due_ahead([says("assistant", 800)], tokens=800, config=config)
    assert not due_ahead([], tokens=0, config=config)


def test_the_whole_latest_turn_is_kept_so_the_last_message_can_still_be_edited():
    config = agent().memory_config  # keep 200
    assert ahead_keep([says("user", 100), says("assistant", 50)], config=config) == 200
    latest = [says("user", 100), says("assistant", 100), says("user", 150), says("assistant", 250)]
    assert ahead_keep(latest, config=config) == 400
    # Nothing before a latest turn this long: not due (a cleanup would have nothing to evict).
    assert not due_ahead([says("user", 150), says("assistant", 650)], tokens=800, config=config)
    assert due_ahead([says("assistant", 100), says("user", 150), says("assistant", 550)], tokens=800, config=config)


# -- through the runtime ----------------------------------------------------------------------


async def chat_until_queued(runtime, node, session, limit: int = len(FACTS)) -> tuple[int, list]:
    """Turns until a cleanup ahead is queued: (how many turns, the events of all of them)."""
    events: list = []
    for n in range(limit):
        events += await turn(runtime, node, session, FACTS[n])
        if queued("cleanup_ahead"):
            return n + 1, events
    raise AssertionError(f"no cleanup ahead was queued in {limit} turns")


@pytest.mark.parametrize("backend_name", BACKENDS)
async def test_the_next_turn_finds_the_session_compacted_and_does_not_wait(tmp_path, backend_name):
    node = agent()
    runtime, services, env = runtime_setup(tmp_path, backend_name, node, RecordingModel())
    session = SessionScope("ahead")
    turns, events = await chat_until_queued(runtime, node, session)
    # Queued before any turn had to clean up inside itself.
    assert not [e for e in events if isinstance(e, CleanupStarted)]
    head = await off_loop(services.bundle.messages.head, session)
    assert head.tokens <= node.memory_config.threshold
    before_cleanup = await off_loop(services.bundle.messages.read, session)
    [job] = queued("cleanup_ahead")
    assert job.kwargs == {"agent": node.name, "user": "7", "session": session.key()}
    assert waiting_tasks()["cleanup_ahead"] == 1  # what the pages show as memory work queued

    ran = await arun_recorded_tasks(environment=env)
    [result] = [r for r in ran if r.task.name == "cleanup_ahead"]
    assert result.return_value["status"] == "committed", result.return_value
    after = await off_loop(services.bundle.messages.read, session)
    assert after[0].is_compact_summary
    assert sum(m.tokens or 0 for m in after) < head.tokens
    # Nothing was lost: what left the session is in the pruned catalog and the archive.
    evicted = result.return_value["evicted"]
    assert evicted > 0
    catalog = await off_loop(services.catalog.entries, session)
    assert len(catalog) == evicted and FACTS[0] in [entry.message.content for entry in catalog]

    # The chat's meter chart marks it, though no turn's events reported it.
    [mark] = (await off_loop(load_history, kv=services.bundle.kv, session=session)).cleanups
    assert mark.evicted == evicted and mark.tokens_before == head.tokens
    # The whole latest exchange is still live: the user can edit or regenerate it.
    assert [m.content for m in after[-2:]] == [FACTS[turns - 1], before_cleanup[-1].content]

    nxt = await turn(runtime, node, session, FACTS[turns])
    assert not [e for e in nxt if isinstance(e, CleanupStarted)]


@pytest.mark.django_db(transaction=True)
async def test_switched_off_the_turn_cleans_up_inside_itself(tmp_path):
    node = agent()
    services = build_services(backend="sqlite", workspace=tmp_path, model=RecordingModel())
    runtime = Runtime(services=services, installers=[
        (name, installer) for name, installer in installers() if name != "agents.runtime.cleanup.install_ahead"
    ])
    assert AHEAD_HOOK not in runtime.hooks_for(node).names(HookPoint.AFTER_GRAPH)
    session = SessionScope("inside")
    started = []
    for text in FACTS:
        started += [e for e in await turn(runtime, node, session, text) if isinstance(e, CleanupStarted)]
        if started:
            break
    assert started and not queued("cleanup_ahead")


@pytest.mark.django_db(transaction=True)
async def test_a_summary_the_model_did_not_write_leaves_the_session_as_it_was(tmp_path):
    node = agent()
    model = RecordingModel()
    runtime, services, env = runtime_setup(tmp_path, "sqlite", node, model)
    session = SessionScope("failing")
    await chat_until_queued(runtime, node, session)
    before = await off_loop(services.bundle.messages.read, session)
    model.fail_when = lambda messages, tools: True  # the endpoint is down for the summary

    ran = await arun_recorded_tasks(environment=env)
    [result] = [r for r in ran if r.task.name == "cleanup_ahead"]
    assert result.return_value["status"] == "aborted"
    assert "did not write the summary" in result.return_value["reason"]
    # No fallback summary, no intent, nothing in the catalog: the threshold's cleanup is untouched.
    assert await off_loop(services.bundle.messages.read, session) == before
    assert await off_loop(services.bundle.kv.get, session, INTENT_KEY) is None
    assert await off_loop(services.catalog.entries, session) == []


@pytest.mark.django_db(transaction=True)
async def test_a_cleanup_ahead_that_is_no_longer_due_does_nothing(tmp_path):
    node = agent()
    model = RecordingModel()
    runtime, services, env = runtime_setup(tmp_path, "sqlite", node, model)
    session = SessionScope("overtaken")
    await chat_until_queued(runtime, node, session)
    # A turn's own cleanup (forced here) ran before the worker came to the task.
    done = await compact(services=services, session=session, agent=node, user_id="7", model=model, force=True)
    assert done.committed
    asked = len(model.requests)
    before = await off_loop(services.bundle.messages.read, session)

    [job] = queued("cleanup_ahead")
    with task_environment(env):  # the queued task alone (the run's review is queued too)
        assert await cleanup_ahead.acall(**job.kwargs) == {"status": "not_due"}
    assert len(model.requests) == asked  # no summary asked for
    assert await off_loop(services.bundle.messages.read, session) == before


# -- with a local server's gate: chat first ----------------------------------------------------


def gated(tmp_path, fake_openai):
    model = OpenAIChatModel(base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", timeout=10,
                            max_retries=0)
    services = build_services(backend="sqlite", workspace=tmp_path, model=model, gated=True,
                              caps=ModelCaps(summary=333))
    assert services.gate is not None and services.gate.limit(model) == 1
    node = agent()
    env = TaskEnvironment(services=services, find_agent={node.name: node}.get)
    return model, services, node, Runtime(services=services), env


def dribble(first: str, *, seconds: float) -> RawStream:
    """A streamed answer that takes ``seconds``: long enough for a turn to arrive mid-way."""
    return RawStream([chunk({"content": first})] + [Pause(0.1), chunk({"content": " more"})] * int(seconds * 10))


def is_summary_call(request) -> bool:
    return request.json.get("max_tokens") == 333


async def queued_on_gate(tmp_path, fake_openai, name: str):
    """``gated`` services, and turns of conversation ``name`` until a cleanup ahead is queued:
    (model, services, node, runtime, env, session, turns, the queued task)."""
    model, services, node, runtime, env = gated(tmp_path, fake_openai)
    session = SessionScope(name)
    turns, _ = await chat_until_queued(runtime, node, session)
    [job] = queued("cleanup_ahead")
    return model, services, node, runtime, env, session, turns, job


async def summary_under_way(job, fake_openai) -> asyncio.Task:
    """Start the queued cleanup ahead (inside its task environment); return once its summary is asked."""
    ahead = asyncio.create_task(cleanup_ahead.acall(**job.kwargs))
    while not [r for r in fake_openai.chat_requests if is_summary_call(r)]:
        await asyncio.sleep(0.02)
    return ahead


async def test_a_turn_over_the_threshold_does_not_wait_for_the_cleanup_under_way(tmp_path, fake_openai, settings):
    """A one-slot local server (the real HTTP fake server, the model-call gate): the cleanup
    ahead's summary is being written when the user's next message arrives, and that message
    takes the conversation over its threshold. The turn gets the model at once and goes on
    without a cleanup of its own (the one under way holds the lease); the summary is asked again
    once the turn is over, and the cleanup ahead commits it, the turn's messages kept."""
    settings.MODEX_BACKGROUND_AFTER_TURN = 0.0
    slow = {"on": True}

    def answer(request):
        if is_summary_call(request) and slow["on"]:  # seconds of text, cut by the turn
            slow["on"] = False
            return dribble("## Goal\n", seconds=6)
        return Reply(content="## Goal\nA trip diary." if is_summary_call(request) else "Noted.")

    fake_openai.responder = answer
    model, services, node, runtime, env, session, turns, job = await queued_on_gate(tmp_path, fake_openai, "gated")

    with task_environment(env):
        ahead = await summary_under_way(job, fake_openai)
        started = time.monotonic()
        events = await turn(runtime, node, session, FACTS[turns])
        took = time.monotonic() - started
        outcome = await ahead
    # The turn crossed the threshold and did not wait: not for the 6 s summary, not for a cleanup.
    assert [type(e) for e in events if isinstance(e, CleanupStarted | CleanupDone)] == [CleanupStarted, CleanupDone]
    [done] = [e for e in events if isinstance(e, CleanupDone)]
    assert not done.committed and "another cleanup of this session is running" in done.reason
    assert took < 3 and services.gate.stats.chat_max_wait < 1
    assert services.gate.stats.preempted == 1  # the summary call gave the model up to the turn
    # Then the cleanup ahead committed the model's summary; the turn's messages are live after it.
    assert outcome["status"] == "committed", outcome
    after = await off_loop(services.bundle.messages.read, session)
    assert after[0].is_compact_summary and "A trip diary." in after[0].content
    assert [m.content for m in after[-2:]] == [FACTS[turns], "Noted."]
    assert await off_loop(services.bundle.kv.get, session, INTENT_KEY) is None
    await model.aclose()


async def test_turns_that_arrive_while_it_waits_for_chat_are_compacted_by_the_next_one_it_queues(
    tmp_path, fake_openai, settings
):
    """The user sends three long messages while the cleanup ahead's summary waits for chat (each
    turn takes the model from it); their ends queue no copy of it. Its commit leaves the session
    due again, so it queues itself once more, and that one compacts before the next turn, keeping
    the latest exchange. (A cleanup ahead that did not left a real model's conversation over its
    threshold, and the next turn cleaned up inside itself: 169 s to the first token.)"""
    settings.MODEX_BACKGROUND_AFTER_TURN = 0.0
    slow = {"on": True}

    def answer(request):
        if is_summary_call(request):
            return dribble("## Goal\n", seconds=3) if slow["on"] else Reply(content="## Goal\nA trip diary.")
        return Reply(content="Noted.")

    fake_openai.responder = answer
    model, services, node, runtime, env, session, turns, job = await queued_on_gate(tmp_path, fake_openai, "again")

    with task_environment(env):
        ahead = await summary_under_way(job, fake_openai)
        for n in range(turns, turns + 3):  # longer messages: two notes each
            events = await turn(runtime, node, session, f"{FACTS[n]} {FACTS[n + 3]}")
            [done] = [e for e in events if isinstance(e, CleanupDone)]
            assert not done.committed and "another cleanup of this session is running" in done.reason
        assert queued("cleanup_ahead") == [job]  # no turn's end queued a copy: it was under way
        slow["on"] = False
        first = await ahead
        assert first["status"] == "committed" and first["queued_again"], first
        [_, again] = queued("cleanup_ahead")
        assert again.task.queue_name == "ahead" and again.kwargs == job.kwargs
        second = await cleanup_ahead.acall(**again.kwargs)
    assert second["status"] == "committed" and "queued_again" not in second, second
    after = await off_loop(services.bundle.messages.read, session)
    latest, previous = (f"{FACTS[n]} {FACTS[n + 3]}" for n in (turns + 2, turns + 1))
    assert after[0].is_compact_summary and [m.content for m in after[-2:]] == [latest, "Noted."]
    assert previous not in [m.content for m in after]  # gone in the second cleanup
    catalog = await off_loop(services.catalog.entries, session)
    assert first["evicted"] + second["evicted"] == len(catalog) and previous in [e.message.content for e in catalog]
    assert not due_ahead(after, tokens=sum(m.tokens or 0 for m in after), config=node.memory_config)
    assert len((await off_loop(load_history, kv=services.bundle.kv, session=session)).cleanups) == 2
    await model.aclose()


async def test_queued_for_when_the_turns_hold_runs_out_and_asked_again_after_the_user_types(
    tmp_path, fake_openai, settings
):
    """The task is queued for when the turn's hold on the model runs out. The model answers the
    summary without its sections, so each is asked alone; the user starts typing during the first
    of those questions: it gives the model up, is asked again when the typing has stopped, and the
    summary the model wrote is committed (no section filled in from the messages)."""
    settings.MODEX_BACKGROUND_AFTER_TURN = 5.0
    cut = {"done": False}

    def answer(request):
        asked = request.json["messages"][-1]["content"]
        if is_summary_call(request):
            return Reply(content="We talked about a trip.")  # no sections: each is asked alone
        if 'Write the "' in asked:
            if not cut["done"]:
                cut["done"] = True
                return dribble("The", seconds=6)
            return Reply(content="A walk to the old market, figs, the storm story, the tram up the hill.")
        return Reply(content="Noted.")

    fake_openai.responder = answer
    model, services, node, runtime, env, session, turns, job = await queued_on_gate(tmp_path, fake_openai, "sections")
    wait = (job.task.run_after - timezone.now()).total_seconds()
    assert 3 < wait <= 5  # after the turn's hold, not into it

    await asyncio.sleep(wait)  # the worker takes it up when it is due
    with task_environment(env):
        ahead = asyncio.create_task(cleanup_ahead.acall(**job.kwargs))
        while not cut["done"]:
            await asyncio.sleep(0.02)
        assert await off_loop(services.gate.mark_typing, model, session=session, hold=0.5)
        outcome = await ahead
    assert outcome["status"] == "committed", outcome
    assert services.gate.stats.preempted >= 1
    summary = (await off_loop(services.bundle.messages.read, session))[0]
    assert summary.is_compact_summary and "figs, the storm story" in summary.content
    await model.aclose()


async def test_far_over_the_threshold_the_cleanup_ahead_gives_way_to_the_turns_own(tmp_path, fake_openai, settings):
    """The model cannot keep up: while the cleanup ahead's summary is written, the user's next
    message takes the conversation past halfway from its threshold to the window. The cleanup
    ahead stops (nothing written, the lease released) and the turn cleans up itself, as without
    a cleanup ahead: the conversation never runs away from its threshold."""
    settings.MODEX_BACKGROUND_AFTER_TURN = 0.0
    slow = {"on": True}

    def answer(request):
        if is_summary_call(request) and slow["on"]:
            slow["on"] = False
            return dribble("## Goal\n", seconds=10)
        return Reply(content="## Goal\nA trip diary, summarized in the turn." if is_summary_call(request) else "Noted.")

    fake_openai.responder = answer
    model, services, _, _, _ = gated(tmp_path, fake_openai)
    node = agent(context_window=2048)  # reply room 256: usable 1,792, the hard limit 1,346
    assert hard_limit(node.memory_config) == 1346
    runtime = Runtime(services=services)
    env = TaskEnvironment(services=services, find_agent={node.name: node}.get)
    session = SessionScope("runaway")
    await chat_until_queued(runtime, node, session)
    [job] = queued("cleanup_ahead")

    with task_environment(env):
        ahead = await summary_under_way(job, fake_openai)
        events = await turn(runtime, node, session, " ".join(FACTS[7:14]))  # some 770 tokens
        outcome = await ahead
    assert outcome["status"] == "aborted" and "stopped" in outcome["reason"]
    [done] = [e for e in events if isinstance(e, CleanupDone)]
    assert done.committed and done.tokens_before > 1346  # the turn's own cleanup
    live = await off_loop(services.bundle.messages.read, session)
    assert [m for m in live if m.is_compact_summary] == [live[0]]
    assert "summarized in the turn" in live[0].content
    assert await off_loop(services.bundle.kv.get, session, INTENT_KEY) is None
    await model.aclose()


async def test_a_holder_that_does_not_give_way_costs_a_turn_one_bounded_wait(tmp_path, monkeypatch):
    """Another cleanup holds the session (archiving, or a worker that died holding the lease): a
    turn far over the threshold waits for it at most ``LEASE_WAIT``, then goes on; and while the
    lease is held, the turn's end queues no cleanup ahead (the one under way is not copied)."""
    monkeypatch.setattr(cleanup_module, "LEASE_WAIT", 0.6)
    node = agent(context_window=2048)  # the hard limit 1,346
    runtime, services, _ = runtime_setup(tmp_path, "sqlite", node, RecordingModel())
    session = SessionScope("held")
    await off_loop(acquire_lease, kv=services.bundle.kv, scope=session, name=LEASE_NAME, ttl=300, holder="elsewhere")
    for text in FACTS[:7]:
        await turn(runtime, node, session, text)
    assert (await off_loop(services.bundle.messages.head, session)).tokens > 1346
    started = time.monotonic()
    events = await turn(runtime, node, session, FACTS[7])
    took = time.monotonic() - started
    [done] = [e for e in events if isinstance(e, CleanupDone)]
    assert not done.committed and "another cleanup of this session is running" in done.reason
    assert 0.6 <= took < 5  # waited once, bounded, and went on
    assert queued("cleanup_ahead") == []


@pytest.mark.django_db(transaction=True)
def test_the_task_workers_take_a_cleanup_ahead_before_memory_work_queued_earlier(tmp_path, settings):
    """The next turn waits on a cleanup ahead; a consolidation or a review waits on nothing: the
    real database worker takes the cleanup ahead first, and ``make run`` gives it a worker of its
    own (the "ahead" queue) that never takes the other work."""
    import io

    from django.core.management import call_command
    from django.tasks import TaskResultStatus, task_backends
    from django_tasks_db.backend import DatabaseBackend
    from django_tasks_db.models import DBTaskResult

    from agents.runtime.cleanup import enqueue_cleanup_ahead
    from agents.tasks import enqueue_consolidation

    node = agent()
    services = build_services(backend="sqlite", workspace=tmp_path, model=RecordingModel())
    original = task_backends["default"]
    task_backends["default"] = DatabaseBackend("default", {"BACKEND": "django_tasks_db.DatabaseBackend",
                                                           "QUEUES": settings.TASK_QUEUES})

    def work(queue: str) -> None:
        call_command("db_worker", "--batch", "--no-startup-delay", "--no-reload", "--max-tasks", "1",
                     "--queue-name", queue, stdout=io.StringIO(), stderr=io.StringIO())

    try:
        with task_environment(TaskEnvironment(services=services, find_agent={node.name: node}.get)):
            # A worker of every queue takes it first, though it was queued last.
            dream = enqueue_consolidation(agent=node.name, user="7")
            ahead = enqueue_cleanup_ahead(agent=node.name, user="7", session=SessionScope("quiet").key())
            work("*")
            first = DBTaskResult.objects.get(id=ahead.id)
            assert first.status == TaskResultStatus.SUCCESSFUL and first.return_value == {"status": "not_due"}
            assert DBTaskResult.objects.get(id=dream.id).status == TaskResultStatus.READY
            # make run's worker of the "ahead" queue runs nothing else.
            again = enqueue_cleanup_ahead(agent=node.name, user="7", session=SessionScope("quiet").key())
            work("ahead")
            work("ahead")
            assert DBTaskResult.objects.get(id=again.id).status == TaskResultStatus.SUCCESSFUL
            assert DBTaskResult.objects.get(id=dream.id).status == TaskResultStatus.READY
    finally:
        task_backends["default"] = original
