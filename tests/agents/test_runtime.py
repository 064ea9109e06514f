"""The ReAct loop over real stores, with the offline model and with a real HTTP endpoint (fake server)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from agents.declarations import load_declaration
from agents.runtime.events import CleanupDone, CleanupStarted, ContentChunk, ContextReady, ToolFinished, TurnFailed, TurnFinished
from agents.llm import ContentDelta, Finish, OfflineChatModel
from agents.llm.openai import OpenAIChatModel
from agents.runtime.loop import Runtime, TurnBusy, TurnRejected
from agents.runtime.services import build_services
from agents.runtime.tools.base import Tool
from memory.messages import Message, ToolCall, messages_from_wire
from memory.scopes import SessionScope
from memory.tokens import count_text
from memory.transcript import INTERRUPTED_RESULT, validate_transcript
from tests.fakes.openai_server import FAKE_API_KEY, FakeToolCall, Reply, context_length_exceeded

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ["file", pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True))]


def agent_node(name="default", **memory):
    """The shipped agent with its long-term layers as the preset keeps them (off), unless asked:
    these tests are about the loop itself (the shipped file switches them on for ``default``)."""
    node = load_declaration(REPO / "config" / "scopes" / "bot.yml").find(name)
    memory = {"archive_enabled": False, "core_enabled": False, **memory}
    return replace(node, memory_config=replace(node.memory_config, **memory))


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


async def no_sleep(_seconds):
    return None


def openai_model(server):
    return OpenAIChatModel(base_url=server.url, api_key=FAKE_API_KEY, model="fake-model", timeout=5, max_retries=1, sleep=no_sleep)


def make_runtime(tmp_path, backend, model, **kwargs):
    services = build_services(backend=backend, workspace=tmp_path, model=model)
    return Runtime(services=services, **kwargs), services


async def turn(runtime, agent, session, text, user="7"):
    return [event async for event in runtime.run_turn(agent=agent, user_id=user, session=session, text=text)]


def session_of(services, session):
    return services.bundle.messages.read(session)


async def test_offline_multi_turn_persists_legal_chains_and_reasoning(tmp_path, backend):
    agent = agent_node(archive_enabled=True, core_enabled=True)
    runtime, services = make_runtime(tmp_path, backend, OfflineChatModel())
    session = SessionScope("conv1")
    await turn(runtime, agent, session, "remember that I live in Lisbon")
    events = await turn(runtime, agent, session, "where do I live?")
    stored = await read(services, session)
    validate_transcript(stored)
    assert [m.role for m in stored][:4] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls[0].name == "core_memory"
    assert any(m.reasoning_content for m in stored if m.role == "assistant")
    final = [e for e in events if isinstance(e, TurnFinished)][0]
    assert "Lisbon" in final.message.content
    assert any(isinstance(e, ContentChunk) for e in events)


def session_of_sync(services, session):
    # The sqlite backend's connection is per thread; read from a worker like the runtime does.
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(services.bundle.messages.read, session).result()


async def read(services, session):
    from asgiref.sync import sync_to_async

    return await sync_to_async(services.bundle.messages.read, thread_sensitive=True)(session)


async def test_parallel_tool_calls_over_http_are_answered_in_order(tmp_path, backend, fake_openai):
    fake_openai.script(
        Reply(
            reasoning="Two lookups at once.",
            tool_calls=[
                FakeToolCall("call_a", "todo", '{"action": "add", "item": "draft"}'),
                FakeToolCall("call_b", "todo", '{"action": "list"}'),
            ],
        ),
        Reply(content="Both done.", reasoning="Summarise results."),
    )
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    session = SessionScope("par")
    await turn(runtime, agent_node(), session, "plan my day")
    stored = await read(services, session)
    validate_transcript(stored)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.tool_call_id for m in stored[2:4]] == ["call_a", "call_b"]
    assert stored[1].reasoning_content == "Two lookups at once."
    assert stored[4].reasoning_content == "Summarise results."
    second = fake_openai.chat_requests[1].json
    sent = messages_from_wire(second["messages"][1:])
    validate_transcript(sent)
    assert sent[1].reasoning_content == "Two lookups at once."
    assert {t["function"]["name"] for t in second["tools"]} >= {"todo", "pruned_lookup", "spawn_subagent"}
    # archive and core are off for this agent: their tools are not offered
    assert not {t["function"]["name"] for t in second["tools"]} & {"core_memory", "archive_search"}


async def test_compaction_mid_conversation_keeps_the_next_call_legal_and_in_the_window(tmp_path, backend, fake_openai):
    agent = agent_node(context_window=2048, compression_threshold=900, keep_tokens=300)
    long = "details " * 120

    def answer(request):
        body = request.json
        if not body.get("tools"):
            return Reply(content="\n".join(f"## {h}\n- noted" for h in ("Goal", "Decisions", "Facts learned", "Open tasks", "Reasoning trail", "Tool results that matter")))
        last = body["messages"][-1]
        if last["role"] == "user":
            return Reply(reasoning="Check the list.", tool_calls=[FakeToolCall(f"c{len(fake_openai.requests)}", "todo", '{"action": "list"}')])
        return Reply(content=f"Answer: {long}", reasoning="Done thinking.")

    fake_openai.responder = answer
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    session = SessionScope("compact")
    cleanups = []
    for i in range(12):
        events = await turn(runtime, agent, session, f"question {i}")
        cleanups += [e for e in events if isinstance(e, CleanupDone) and e.committed]
        assert not [e for e in events if isinstance(e, TurnFailed)]
    assert cleanups, "the session never crossed its threshold"
    for request in fake_openai.chat_requests:
        body = request.json
        if not body.get("tools"):
            continue  # a summarizer call
        sent = messages_from_wire(body["messages"][1:])
        validate_transcript(sent)
        assert sent[0].role != "tool"
        total = sum(count_text(json.dumps(m)) for m in body["messages"])
        assert total < agent.memory_config.context_window
    validate_transcript(await read(services, session))
    assert services.catalog.count(session) > 0


class SlowTool(Tool):
    name = "slow"
    description = "sleeps"
    parameters = {"type": "object", "properties": {}}

    def __init__(self):
        self.started = asyncio.Event()

    async def run(self, ctx, args):
        self.started.set()
        await asyncio.sleep(30)
        return "never"


class BrokenTool(Tool):
    name = "broken"
    description = "raises"
    parameters = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}

    async def run(self, ctx, args):
        raise RuntimeError("disk on fire")


class ExtraToolsRuntime(Runtime):
    def __init__(self, *args, extra=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.extra = list(extra)

    def roster(self, agent):
        roster = super().roster(agent)
        for tool in self.extra:
            roster.tools[tool.name] = tool
        return roster


async def test_tool_errors_go_back_to_the_model(tmp_path, backend, fake_openai):
    fake_openai.script(
        Reply(
            tool_calls=[
                FakeToolCall("c1", "broken", '{"x": 1}'),
                FakeToolCall("c2", "broken", '{"x": "one"}'),
                FakeToolCall("c3", "todo", "{not json"),
                FakeToolCall("c4", "teleport", "{}"),
            ]
        ),
        Reply(content="Recovered."),
    )
    services = build_services(backend=backend, workspace=tmp_path, model=openai_model(fake_openai))
    runtime = ExtraToolsRuntime(services=services, extra=[BrokenTool()])
    session = SessionScope("errs")
    events = await turn(runtime, agent_node(), session, "go")
    results = {e.call.id: e for e in events if isinstance(e, ToolFinished)}
    assert not any(r.ok for r in results.values())
    assert "disk on fire" in results["c1"].content
    assert "arguments.x must be integer" in results["c2"].content
    assert "not valid JSON" in results["c3"].content
    assert "unknown tool 'teleport'" in results["c4"].content
    assert [e for e in events if isinstance(e, TurnFinished)][0].message.content == "Recovered."
    validate_transcript(await read(services, session))


async def test_cancel_mid_tool_leaves_a_legal_transcript(tmp_path, backend, fake_openai):
    fake_openai.script(Reply(tool_calls=[FakeToolCall("s1", "slow", "{}"), FakeToolCall("s2", "todo", '{"action":"list"}')]))
    services = build_services(backend=backend, workspace=tmp_path, model=openai_model(fake_openai))
    slow = SlowTool()
    runtime = ExtraToolsRuntime(services=services, extra=[slow])
    session = SessionScope("cancel")

    async def consume():
        async for _ in runtime.run_turn(agent=agent_node(), user_id="7", session=session, text="go"):
            pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(slow.started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await read(services, session)
    validate_transcript(stored)
    assert [m.content for m in stored if m.role == "tool"] == [INTERRUPTED_RESULT, INTERRUPTED_RESULT]
    # the conversation is free again
    fake_openai.script(Reply(content="Back."))
    events = await turn(runtime, agent_node(), session, "again")
    assert [e for e in events if isinstance(e, TurnFinished)]


async def test_cancel_mid_stream_keeps_what_was_shown(tmp_path, backend, fake_openai):
    fake_openai.script(Reply(content="word " * 200, chunk_chars=5, delay=0.02))
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    session = SessionScope("stop")
    seen = asyncio.Event()

    async def consume():
        async for event in runtime.run_turn(agent=agent_node(), user_id="7", session=session, text="talk"):
            if isinstance(event, ContentChunk) and event.completion_tokens > 5:
                seen.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await read(services, session)
    validate_transcript(stored)
    assert stored[-1].role == "assistant" and stored[-1].content.startswith("word")
    assert "[stopped" in stored[-1].content


class BufferedModel:
    """A model whose whole reply is already there (a fast server, its body read in one piece):
    its stream never waits, so only the runtime lets the event loop run while it is read."""

    name = "buffered"

    def describe(self) -> str:
        return "a buffered reply"

    async def stream(self, *, messages, tools=None, **options):
        for piece in ["Hello", " there", ", how", " are", " you", " doing", " today", "?"] * 2:
            yield ContentDelta(piece)
        yield Finish("stop")


async def test_the_first_chunks_of_a_reply_each_let_the_event_loop_run(tmp_path, backend):
    """The first frame of a reply takes several passes of the event loop (the send loop renders
    and sends it, then the socket is polled and written); a turn reading a buffered reply would
    hold each up for a slice of reading. It yields after each of its first text chunks
    (agents.runtime.relay.EAGER_YIELDS of them)."""
    from agents.runtime.relay import EAGER_YIELDS

    runtime, _ = make_runtime(tmp_path, backend, BufferedModel())
    passes = 0

    async def count_passes():
        nonlocal passes
        while True:
            await asyncio.sleep(0)
            passes += 1

    counter = asyncio.create_task(count_passes())
    seen = []
    try:
        async for event in runtime.run_turn(agent=agent_node(), user_id="7", session=SessionScope("eager"), text="hi"):
            if isinstance(event, ContentChunk):
                seen.append(passes)
    finally:
        counter.cancel()
    first = seen[:EAGER_YIELDS]
    assert len(first) == EAGER_YIELDS >= 8
    assert all(later > earlier for earlier, later in zip(first, first[1:], strict=False))


@pytest.mark.parametrize("results_kept", [0, 1], ids=["ends-with-the-call", "ends-with-one-of-two-results"])
async def test_a_crash_mid_chain_is_repaired_before_the_next_call(tmp_path, backend, fake_openai, results_kept):
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    session = SessionScope("crashed")
    from asgiref.sync import sync_to_async

    calls = (ToolCall("kept", "todo", "{}"), ToolCall("lost", "todo", "{}"))[1 - results_kept :]
    dangling = [Message(role="assistant", content=None, tool_calls=calls)]
    if results_kept:
        dangling.append(Message(role="tool", content="done", tool_call_id="kept", name="todo"))
    await sync_to_async(services.bundle.messages.append, thread_sensitive=True)(
        session, [Message(role="user", content="before the crash"), *dangling]
    )
    fake_openai.script(Reply(content="Fine."))
    await turn(runtime, agent_node(), session, "hello?")
    stored = await read(services, session)
    validate_transcript(stored)
    assert [m.tool_call_id for m in stored if m.role == "tool"] == [c.id for c in calls]
    assert stored[2 + results_kept].content == INTERRUPTED_RESULT and stored[3 + results_kept].content == "hello?"
    validate_transcript(messages_from_wire(fake_openai.chat_requests[0].json["messages"][1:]))


async def test_a_second_turn_meanwhile_is_busy(tmp_path, backend, fake_openai):
    fake_openai.script(Reply(content="slow " * 50, chunk_chars=5, delay=0.02), Reply(content="ok"))
    runtime, _ = make_runtime(tmp_path, backend, openai_model(fake_openai))
    session = SessionScope("busy")
    first = runtime.run_turn(agent=agent_node(), user_id="7", session=session, text="one")
    await first.__anext__()
    with pytest.raises(TurnBusy):
        await turn(runtime, agent_node(), session, "two")
    async for _ in first:
        pass
    assert [e for e in await turn(runtime, agent_node(), session, "three") if isinstance(e, TurnFinished)]


async def test_empty_or_huge_input_is_rejected(tmp_path, backend):
    runtime, services = make_runtime(tmp_path, backend, OfflineChatModel())
    with pytest.raises(TurnRejected):
        await turn(runtime, agent_node(), SessionScope("x"), "   ")
    with pytest.raises(TurnRejected):
        await turn(runtime, agent_node(), SessionScope("x"), "a" * 40000)
    assert await read(services, SessionScope("x")) == []


async def test_subagent_runs_in_its_own_session_and_is_cleared(tmp_path, backend, fake_openai):
    def answer(request):
        body = request.json
        names = {t["function"]["name"] for t in body.get("tools") or []}
        last = body["messages"][-1]
        if "spawn_subagent" in names and last["role"] == "user":
            return Reply(tool_calls=[FakeToolCall("sp", "spawn_subagent", '{"agent": "researcher", "task": "dig up X"}')])
        if "spawn_subagent" not in names and body.get("tools"):
            return Reply(content="X was decided on Monday.")
        return Reply(content="The researcher says: X was decided on Monday.")

    fake_openai.responder = answer
    agent = agent_node(archive_enabled=True, core_enabled=True)
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    session = SessionScope("parent")
    events = await turn(runtime, agent, session, "ask the researcher about X")
    result = [e for e in events if isinstance(e, ToolFinished)][0]
    assert result.ok and "Monday" in result.content
    sub_request = [r.json for r in fake_openai.chat_requests if r.json.get("tools") and "spawn_subagent" not in {t["function"]["name"] for t in r.json["tools"]}][0]
    sub_tools = {t["function"]["name"] for t in sub_request["tools"]}
    assert "core_memory" not in sub_tools and "knowledge_base" in sub_tools
    assert sub_request["messages"][-1]["content"] == "dig up X"
    # nothing of the subagent's session survives it
    if backend == "file":
        # clear() keeps an empty head (seqs keep counting); nothing else of the subagent remains
        others = [p.name for p in (tmp_path / "memory" / "session").iterdir() if p.name != "parent"]
        assert len(others) == 1 and others[0].startswith("parent.sub-researcher-")
        sub = SessionScope(others[0])
        assert services.bundle.messages.read(sub) == [] and services.bundle.kv.list(sub) == []
        assert services.catalog.count(sub) == 0
    validate_transcript(await read(services, session))


async def test_context_length_error_forces_a_cleanup_and_retries_once(tmp_path, backend, fake_openai):
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    agent = agent_node(compression_threshold=2000, keep_tokens=100)
    session = SessionScope("ctx")
    summary = "\n".join(f"## {h}\n- ok" for h in ("Goal", "Decisions", "Facts learned", "Open tasks", "Reasoning trail", "Tool results that matter"))
    plan = {"reject": 0}

    def answer(request):
        if not request.json.get("tools"):
            return Reply(content=summary)
        if plan["reject"]:
            plan["reject"] -= 1
            return context_length_exceeded()
        return Reply(content="answer " * 60)

    fake_openai.responder = answer
    for i in range(3):
        await turn(runtime, agent, session, f"fill {i} " * 40)
    plan["reject"] = 1
    events = await turn(runtime, agent, session, "next")
    kinds = [type(e) for e in events]
    assert CleanupStarted in kinds and kinds.count(ContextReady) == 2
    assert [e for e in events if isinstance(e, CleanupDone)][0].committed
    assert [e for e in events if isinstance(e, TurnFinished)][0].message.content.startswith("answer")
    plan["reject"] = 5
    events = await turn(runtime, agent, session, "again")
    assert [e.kind for e in events if isinstance(e, TurnFailed)] == ["ContextLengthExceeded"]
    assert plan["reject"] == 3  # one try, one retry after the forced cleanup, no more
    validate_transcript(await read(services, session))


async def test_step_limit_ends_the_turn_with_a_note(tmp_path, backend, fake_openai):
    fake_openai.responder = lambda request: Reply(tool_calls=[FakeToolCall(f"l{len(fake_openai.requests)}", "todo", '{"action":"list"}')])
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai), max_steps=3)
    events = await turn(runtime, agent_node(), SessionScope("loop"), "loop forever")
    finished = [e for e in events if isinstance(e, TurnFinished)][0]
    assert finished.stopped_at_step_limit and "3 steps" in finished.message.content
    validate_transcript(await read(services, SessionScope("loop")))


async def test_a_context_that_cannot_fit_fails_the_turn_clearly(tmp_path, backend, fake_openai):
    agent = agent_node(context_window=300, compression_threshold=200, keep_tokens=50)
    agent = replace(agent, instructions="You are thorough. " * 200)
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    events = await turn(runtime, agent, SessionScope("tiny"), "hello")
    failed = [e for e in events if isinstance(e, TurnFailed)]
    assert failed and failed[0].kind == "ContextOverflow"
    assert fake_openai.chat_requests == []  # nothing was sent
    validate_transcript(await read(services, SessionScope("tiny")))


async def test_the_run_scratchpad_is_shared_with_subagents_and_gone_after_the_run(tmp_path, backend, fake_openai):
    def answer(request):
        body = request.json
        names = {t["function"]["name"] for t in body.get("tools") or []}
        last = body["messages"][-1]
        n = len(fake_openai.requests)
        if "spawn_subagent" in names:  # the main agent
            if last["role"] == "user":
                return Reply(tool_calls=[FakeToolCall(f"w{n}", "knowledge_base", '{"action": "write", "key": "plan", "text": "check the logs"}')])
            if last.get("tool_call_id", "").startswith("w"):
                return Reply(tool_calls=[FakeToolCall(f"s{n}", "spawn_subagent", '{"agent": "researcher", "task": "follow the plan"}')])
            return Reply(content=f"Done: {last['content']}")
        if last["role"] == "user":  # the subagent reads the shared note
            return Reply(tool_calls=[FakeToolCall(f"r{n}", "knowledge_base", '{"action": "read", "key": "plan"}')])
        return Reply(content=f"I read: {last['content']}")

    fake_openai.responder = answer
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    events = await turn(runtime, agent_node(), SessionScope("pad"), "work together")
    finished = [e for e in events if isinstance(e, TurnFinished)][0]
    assert finished.message.content == "Done: I read: check the logs"
    # a new run starts with an empty scratchpad: it is not memory
    fake_openai.responder = lambda request: (
        Reply(tool_calls=[FakeToolCall("again", "knowledge_base", '{"action": "read", "key": "plan"}')])
        if request.json["messages"][-1]["role"] == "user"
        else Reply(content=request.json["messages"][-1]["content"])
    )
    events = await turn(runtime, agent_node(), SessionScope("pad"), "what was the plan?")
    assert [e for e in events if isinstance(e, TurnFinished)][0].message.content == "No note named 'plan'."
    system = fake_openai.chat_requests[-1].json["messages"][0]["content"]
    assert "check the logs" not in system


async def test_after_a_cleanup_the_todo_list_is_put_back_in_front_of_the_agent(tmp_path, backend, fake_openai):
    agent = agent_node(context_window=4096, compression_threshold=700, keep_tokens=150)
    summary = "\n".join(f"## {h}\n- ok" for h in ("Goal", "Decisions", "Facts learned", "Open tasks", "Reasoning trail", "Tool results that matter"))

    def answer(request):
        body = request.json
        if not body.get("tools"):
            return Reply(content=summary)
        last = body["messages"][-1]
        if last["role"] == "user" and "todo" in last["content"]:
            return Reply(tool_calls=[FakeToolCall(f"t{len(fake_openai.requests)}", "todo", '{"action": "add", "item": "ship the release notes"}')])
        return Reply(content="noted " * 40)

    fake_openai.responder = answer
    runtime, services = make_runtime(tmp_path, backend, openai_model(fake_openai))
    session = SessionScope("todo")
    await turn(runtime, agent, session, "todo: ship the release notes")
    cleaned = False
    for i in range(8):
        events = await turn(runtime, agent, session, f"more work {i} " * 10)
        if any(isinstance(e, CleanupDone) and e.committed for e in events):
            cleaned = True
            break
    assert cleaned
    systems = [r.json["messages"][0]["content"] for r in fake_openai.chat_requests if r.json.get("tools")]
    assert "ship the release notes" in systems[-1] and "Context was compacted" in systems[-1]
    # the note is taken once: the following turn no longer carries it
    await turn(runtime, agent, session, "and now?")
    last_system = [r.json["messages"][0]["content"] for r in fake_openai.chat_requests if r.json.get("tools")][-1]
    assert "Context was compacted" not in last_system


class CountedTrips:
    """Counts the calls handed to the store threads (memory.threads); ``at_request`` holds the
    count each time the model is asked."""

    def __init__(self, executor) -> None:
        self.executor, self.count = executor, 0

    def submit(self, fn, /, *args, **kwargs):
        self.count += 1
        return self.executor.submit(fn, *args, **kwargs)


SUMMARY_HEADINGS = ("Goal", "Decisions", "Facts learned", "Open tasks", "Reasoning trail", "Tool results that matter")


class ToolThenAnswer:
    """Step 1: ``bulk`` characters of text and one ``todo`` call; step 2: a short answer.
    Records the store trips made by the time of each request."""

    name = "tool-then-answer"

    def __init__(self, trips: CountedTrips, bulk: int) -> None:
        self.trips, self.bulk, self.at_request = trips, bulk, []

    def describe(self) -> str:
        return "a scripted model"

    async def stream(self, *, messages, tools=None, **options):
        from agents.llm import ToolCallReady

        if not tools:  # the cleanup's summarizer
            yield ContentDelta("\n".join(f"## {h}\n- ok" for h in SUMMARY_HEADINGS))
            yield Finish("stop")
            return
        self.at_request.append(self.trips.count)
        if messages[-1]["role"] == "user":
            yield ContentDelta("word " * (self.bulk // 5))
            yield ToolCallReady(ToolCall(id="t1", name="todo", arguments_json='{"action": "list"}'))
            yield Finish("tool_calls")
        else:
            yield ContentDelta("done")
            yield Finish("stop")


async def test_a_turn_makes_two_store_trips_before_its_model_request(tmp_path, backend, monkeypatch):
    """The lease, the tail repair and the user's message go in one trip (Runtime._begin), the
    reorientation note and the assembly's reads in another; the cleanup check before step 1
    uses the head the first trip read, and the check before step 2 the head the step's last
    write read, so a reply that crossed the threshold is still compacted before the next call."""
    from memory import threads

    trips = CountedTrips(threads._executor)
    monkeypatch.setattr(threads, "_executor", trips)
    model = ToolThenAnswer(trips, bulk=4000)
    runtime, services = make_runtime(tmp_path, backend, model)
    agent = agent_node(context_window=4096, compression_threshold=700, keep_tokens=150)
    session = SessionScope("trips")
    events = await turn(runtime, agent, session, "hello")
    assert model.at_request[0] == 2, f"{model.at_request[0]} store trips before the model request"
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolFinished") < kinds.index("CleanupStarted") < kinds.index("ContextReady", kinds.index("ToolFinished"))
    started = next(e for e in events if isinstance(e, CleanupStarted))
    assert started.tokens > agent.memory_config.compression_threshold
    assert [e for e in events if isinstance(e, CleanupDone)][0].committed
    assert kinds[-1] == "TurnFinished"
    validate_transcript(await read(services, session))


async def test_an_after_tool_handler_that_writes_the_session_is_seen_by_the_next_cleanup_check(tmp_path, backend):
    """The cleanup check uses the head the step's last write read, unless an AFTER_TOOL handler
    ran since: it may have written the session, so the check reads the head again."""
    from agents.runtime.hooks import HookPoint, RuntimeHooks
    from memory import threads

    model = ToolThenAnswer(CountedTrips(threads._executor), bulk=50)  # the reply alone stays under the threshold
    hooks = RuntimeHooks()
    runtime, services = make_runtime(tmp_path, backend, model, hooks=hooks)

    def note_after_tool(*, session, call, **_):
        note = Message(role="assistant", content="log " * 1200)  # crosses the threshold
        services.bundle.messages.append(session, [Message(role="user", content="(tool log follows)"), note])

    async def after_tool(**payload):
        await asyncio.to_thread(note_after_tool, **payload)

    hooks.register(HookPoint.AFTER_TOOL, after_tool)
    agent = agent_node(context_window=4096, compression_threshold=700, keep_tokens=150)
    events = await turn(runtime, agent, SessionScope("hooked"), "hello")
    kinds = [type(e).__name__ for e in events]
    assert "CleanupStarted" in kinds and kinds.index("ToolFinished") < kinds.index("CleanupStarted"), kinds
    assert kinds[-1] == "TurnFinished"
