"""What every model call of a turn carries and leaves out: the completion-token cap per caller,
no error marker text, no tools for a server that cannot call them (and the reviewer's JSON path
then), and the gate keeping background work behind a running turn. Real stores, the real
runtime, the real HTTP fake server."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from agents.experience.review import ExperienceReviewAgent, ReviewStatus
from agents.experience.store import ExperienceStore
from agents.llm import complete
from agents.llm.openai import OpenAIChatModel
from agents.llm.settings import ModelCaps
from agents.runtime.events import TurnFailed, TurnFinished
from agents.runtime.loop import Runtime
from agents.runtime.outcomes import KIND_TURN_FAILED
from agents.runtime.services import build_services
from agents.runtime.sizing import sized_config
from agents.tasks import dream_engine
from memory.assembly.alternation import NO_REPLY
from memory.scopes import SessionScope
from memory.threads import run_blocking
from tests.agents.test_runtime import agent_node, no_sleep, read, turn
from tests.fakes.openai_server import FAKE_API_KEY, Reply, server_error

BACKENDS = ["file", pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True))]
NO_TOOLS = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1,
            "chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def model_for(server, **options):
    return OpenAIChatModel(base_url=server.url, api_key=FAKE_API_KEY, model="fake-model", timeout=5, max_retries=0,
                           sleep=no_sleep, **options)


def setup(tmp_path, backend, server, **options):
    services = build_services(backend=backend, workspace=tmp_path, model=model_for(server), **options)
    return Runtime(services=services), services


# -- caps --------------------------------------------------------------------------------------


async def test_every_chat_step_is_capped_at_the_reply_reserve_or_the_setting(tmp_path, backend, fake_openai):
    fake_openai.props = {"default_generation_settings": {"n_ctx": 4096}}
    fake_openai.script(Reply(content="One."), Reply(content="Two."))
    runtime, services = setup(tmp_path, backend, fake_openai)
    agent = agent_node()
    await turn(runtime, agent, SessionScope("cap1"), "hello")
    reserve = sized_config(agent.memory_config, 4096).reply_reserve
    assert fake_openai.chat_requests[-1].json["max_tokens"] == reserve == 512

    runtime, _ = setup(tmp_path / "b", backend, fake_openai, caps=ModelCaps(reply=77))
    await turn(runtime, agent, SessionScope("cap2"), "hello")
    assert fake_openai.chat_requests[-1].json["max_tokens"] == 77


async def test_the_summary_and_the_dream_calls_carry_their_caps(tmp_path, backend, fake_openai):
    fake_openai.responder = lambda request: Reply(content="Noted, and summarized.")
    runtime, services = setup(tmp_path, backend, fake_openai, caps=ModelCaps(summary=333, dream=222))
    agent = agent_node(context_window=4096, compression_threshold=700, keep_tokens=150, archive_enabled=True,
                       core_enabled=True)
    session = SessionScope("cap3")
    for n in range(6):
        await turn(runtime, agent, session, f"Message {n}: " + "words about the garden and the weather " * 20)
    assert 333 in [r.json.get("max_tokens") for r in fake_openai.chat_requests]  # the cleanup's compact summary
    # The answer was no template: each section is asked alone, capped at twice what it may take.
    questions = [r.json for r in fake_openai.chat_requests if 'Write the "' in r.json["messages"][-1]["content"]]
    assert questions
    for question in questions:
        asked = int(re.search(r"at most (\d+) tokens", question["messages"][-1]["content"]).group(1))
        assert question["max_tokens"] == min(333, 2 * asked) < 333
    before = len(fake_openai.chat_requests)
    await dream_engine(services=services).aconsolidate(agent=agent.name, user="7", config=agent.memory_config,
                                                       mode="incremental")
    dream_calls = fake_openai.chat_requests[before:]
    assert dream_calls and {r.json.get("max_tokens") for r in dream_calls} == {222}


# -- what is sent ------------------------------------------------------------------------------


async def test_an_error_marker_is_sent_as_a_neutral_placeholder(tmp_path, backend, fake_openai):
    fake_openai.script(server_error(503), Reply(content="Here now."))
    runtime, services = setup(tmp_path, backend, fake_openai)
    session = SessionScope("marker")
    events = await turn(runtime, agent_node(), session, "hello?")
    assert [e.kind for e in events if isinstance(e, TurnFailed)] == ["ModelUnavailable"]
    await turn(runtime, agent_node(), session, "again")
    sent = fake_openai.chat_requests[-1].json["messages"]
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert sent[2]["content"] == NO_REPLY
    assert not any("[no reply:" in (m.get("content") or "") or "503" in (m.get("content") or "") for m in sent)
    stored = await read(services, session)
    assert stored[1].kind == KIND_TURN_FAILED and "503" in stored[1].content  # the session keeps the error


async def test_without_tool_support_no_tools_are_sent_and_the_reviewer_writes_json(tmp_path, backend, fake_openai):
    fake_openai.props = NO_TOOLS
    lesson = {"lessons": [{"name": "Check the list first", "description": "before adding todo items",
                           "body": "List the todo items before adding one, to avoid duplicates."}]}
    fake_openai.script(Reply(content="I added it."), Reply(content=json.dumps(lesson)))
    runtime, services = setup(tmp_path, backend, fake_openai, caps=ModelCaps(review=99))
    agent = agent_node()
    session = SessionScope("notools")
    events = await turn(runtime, agent, session, "add milk to my list")
    final = [e for e in events if isinstance(e, TurnFinished)][0].message
    assert "tools" not in fake_openai.chat_requests[0].json
    assert runtime.model.capabilities.tools is False

    outcome = await ExperienceReviewAgent(services=services).areview(
        agent=agent, user="7", session=session, final_id=final.id, final_seq=final.seq
    )
    assert outcome.status is ReviewStatus.REVIEWED and outcome.created == ("check-the-list-first",)
    assert "without tools" in outcome.answer
    request = fake_openai.chat_requests[1].json
    assert "tools" not in request and request["max_tokens"] == 99
    assert request["response_format"]["type"] == "json_schema"
    store = ExperienceStore(kv=services.bundle.kv, agent=agent.name, user="7")
    written = await run_blocking(store.get, "check-the-list-first")
    assert "avoid duplicates" in written.body and written.description == "before adding todo items"


async def test_a_reviewer_reply_that_is_not_json_fails_the_review_for_a_later_retry(tmp_path, backend, fake_openai):
    fake_openai.props = NO_TOOLS
    fake_openai.script(Reply(content="Done."), Reply(content="I think the run went well."))
    runtime, services = setup(tmp_path, backend, fake_openai)
    session = SessionScope("notjson")
    final = [e for e in await turn(runtime, agent_node(), session, "hi") if isinstance(e, TurnFinished)][0].message
    outcome = await ExperienceReviewAgent(services=services).areview(
        agent=agent_node(), user="7", session=session, final_id=final.id, final_seq=final.seq
    )
    assert outcome.status is ReviewStatus.FAILED and "not a JSON lessons list" in outcome.error
    assert outcome.next_attempt_at is not None


# -- the gate ----------------------------------------------------------------------------------


async def test_background_work_waits_for_a_running_turn_and_the_turn_never_waits(tmp_path, backend, fake_openai):
    order: list[str] = []

    def answer(request):
        kind = "dream" if request.json["messages"][0]["content"] == "dream" else "chat"
        order.append(kind)
        return Reply(content=f"{kind} done", delay=0.05, chunk_chars=1)

    fake_openai.responder = answer
    runtime, services = setup(tmp_path, backend, fake_openai, gated=True)
    assert services.gate is not None and services.gate.limit(services.model) == 1
    agent = agent_node()

    async def chat():
        async for event in runtime.run_turn(agent=agent, user_id="7", session=SessionScope("gated"), text="hello"):
            if type(event).__name__ == "ContextReady":
                dreaming.set()

    async def dream():
        await dreaming.wait()
        background = services.calls(background=True, label="dream")
        return await complete(background, messages=[{"role": "system", "content": "dream"}, {"role": "user", "content": "x"}])

    dreaming = asyncio.Event()
    _, dreamt = await asyncio.gather(chat(), dream())
    assert order == ["chat", "dream"] and dreamt.content == "dream done"
    assert services.gate.stats.chat_calls == 1 and services.gate.stats.chat_max_wait < 0.5
