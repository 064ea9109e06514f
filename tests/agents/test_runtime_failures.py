"""A failed turn never breaks the conversation: against servers whose chat templates require
alternating roles, with windows smaller than bot.yml says, and replies the server cuts off.
Real stores, the real HTTP fake server, the real runtime."""

from __future__ import annotations

import asyncio

import pytest

from agents.llm.openai import OpenAIChatModel
from agents.runtime.events import ContentChunk, MessageStored, TurnFailed, TurnFinished
from agents.runtime.loop import TurnRejected
from agents.runtime.outcomes import KIND_TRUNCATED, KIND_TURN_FAILED, KIND_TURN_STOPPED
from agents.runtime.sizing import sized_config
from memory.config import MemoryConfig
from memory.messages import Message, messages_from_wire
from memory.scopes import SessionScope
from memory.tokens import count_text
from memory.transcript import validate_transcript
from tests.agents.test_runtime import agent_node, make_runtime, no_sleep, read, turn
from tests.fakes.openai_server import FAKE_API_KEY, HTTPError, Reply, error_body, server_error
from tests.fakes.recorded import llamacpp_context_overflow, roles_alternate, strict_template

BACKENDS = ["file", pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True))]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def model_for(server, **options):
    options.setdefault("max_retries", 1)
    return OpenAIChatModel(base_url=server.url, api_key=FAKE_API_KEY, model="fake-model", timeout=5, sleep=no_sleep, **options)


def sent_roles(server):
    return [[m["role"] for m in r.json["messages"]] for r in server.chat_requests]


# -- a failed turn leaves a marked reply -----------------------------------------------------------


async def test_a_failure_before_output_leaves_a_marked_reply_and_the_next_turn_works(tmp_path, backend, fake_openai):
    runtime, services = make_runtime(tmp_path, backend, model_for(fake_openai))
    session = SessionScope("blip")
    fake_openai.script(server_error(503), server_error(503))  # one network blip, retried once
    events = await turn(runtime, agent_node(), session, "hello?")
    failed = [e for e in events if isinstance(e, TurnFailed)]
    assert [f.kind for f in failed] == ["ModelUnavailable"] and failed[0].recorded
    stored = await read(services, session)
    assert [(m.role, m.kind) for m in stored] == [("user", "message"), ("assistant", KIND_TURN_FAILED)]
    assert "HTTP 503" in stored[1].content and stored[1].content == f"[no reply: {failed[0].error}]"
    assert any(isinstance(e, MessageStored) and e.message.kind == KIND_TURN_FAILED for e in events)

    # A strict server (Mistral-style template) accepts the next turn: roles still alternate.
    fake_openai.responder = strict_template(Reply(content="Back again."), style="vllm")
    events = await turn(runtime, agent_node(), session, "are you there?")
    assert [e.message.content for e in events if isinstance(e, TurnFinished)] == ["Back again."]
    assert all(roles_alternate(r.json["messages"]) for r in fake_openai.chat_requests)
    validate_transcript(await read(services, session))


async def test_a_template_error_fails_once_without_retries(tmp_path, backend, fake_openai):
    runtime, services = make_runtime(tmp_path, backend, model_for(fake_openai, max_retries=3))
    session = SessionScope("tmpl")
    from asgiref.sync import sync_to_async

    # A session written before failed turns were answered: two user messages in a row.
    await sync_to_async(services.bundle.messages.append, thread_sensitive=True)(session, [Message(role="user", content="lost turn")])
    fake_openai.responder = strict_template(Reply(content="Fine."), style="llama-cpp-python")
    events = await turn(runtime, agent_node(), session, "hello")
    assert [e.message.content for e in events if isinstance(e, TurnFinished)] == ["Fine."]
    assert len(fake_openai.chat_requests) == 1  # the copy alternated, so the template accepted it

    # Force a rejection: the template refuses whatever it gets; no retry, a clear error.
    fake_openai.responder = lambda request: HTTPError(500, error_body("Conversation roles must alternate user/assistant/user/assistant/...", type="internal_server_error"))
    events = await turn(runtime, agent_node(), session, "again")
    failed = [e for e in events if isinstance(e, TurnFailed)][0]
    assert failed.kind == "ChatTemplateRejected" and "chat template" in failed.error
    assert len(fake_openai.chat_requests) == 2


async def test_a_stop_before_any_output_leaves_a_marked_reply(tmp_path, backend, fake_openai):
    from tests.fakes.openai_server import Hang

    fake_openai.script(Hang(10))
    runtime, services = make_runtime(tmp_path, backend, model_for(fake_openai))
    session = SessionScope("stop-early")
    started = asyncio.Event()

    async def consume():
        async for event in runtime.run_turn(agent=agent_node(), user_id="7", session=session, text="think hard"):
            if type(event).__name__ == "ContextReady":
                started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await read(services, session)
    assert [(m.role, m.kind) for m in stored] == [("user", "message"), ("assistant", KIND_TURN_STOPPED)]


# -- windows smaller than bot.yml says -----------------------------------------------------------


def window_server(server, *, real_window, state_window, reply="It fits now."):
    """A server whose real window is ``real_window``: bigger requests get llama.cpp's in-stream
    overflow (stating n_ctx) or OpenAI's 400 without a number."""

    def answer(request):
        body = request.json
        size = sum(count_text(m.get("content") or "") + 3 for m in body["messages"])
        if body.get("tools"):
            size += count_text(str(body["tools"])) // 2
        if size > real_window:
            if state_window:
                return llamacpp_context_overflow(n_prompt_tokens=size, n_ctx=real_window)
            return HTTPError(400, error_body("Input is too long for this model.", code=None))
        if not body.get("tools"):
            return Reply(content="## Goal\n- talk\n## Decisions\n- none\n## Facts learned\n- none\n## Open tasks\n- none\n## Reasoning trail\n- none\n## Tool results that matter\n- none")
        return Reply(content=reply)

    server.responder = answer


async def test_a_stated_window_is_learned_and_the_same_turn_succeeds(tmp_path, backend, fake_openai):
    model = model_for(fake_openai)
    runtime, services = make_runtime(tmp_path, backend, model)
    window_server(fake_openai, real_window=1500, state_window=True)
    session = SessionScope("small-window")
    big = "tell me about this: " + "lorem ipsum dolor " * 500  # ~2000 tokens: fits bot.yml's 16k, not 1500
    events = await turn(runtime, agent_node(), session, big)
    assert [e.message.content for e in events if isinstance(e, TurnFinished)] == ["It fits now."]
    assert model.context_window == 1500
    cleanups = [e for e in events if type(e).__name__ == "CleanupDone"]
    assert cleanups and cleanups[0].committed and not cleanups[0].fallback_summary  # summarized within 1500
    ready = [e for e in events if type(e).__name__ == "ContextReady"]
    assert ready[0].window == 16384 and ready[-1].window == 1500  # the meter follows the real window
    # the forced cleanup moved the big message out, whole, into the pruned catalog
    catalogued = [e.message for e in services.catalog.entries(session)]
    assert any(m.role == "user" and m.content == big for m in catalogued)
    validate_transcript(await read(services, session))
    # and the next turn goes straight through
    before = len(fake_openai.chat_requests)
    events = await turn(runtime, agent_node(), session, "thanks")
    assert [e for e in events if isinstance(e, TurnFinished)] and len(fake_openai.chat_requests) == before + 1


async def test_an_unstated_window_is_estimated_and_the_same_turn_succeeds(tmp_path, backend, fake_openai):
    model = model_for(fake_openai)
    runtime, services = make_runtime(tmp_path, backend, model)
    window_server(fake_openai, real_window=1000, state_window=False)
    session = SessionScope("unknown-window")
    events = await turn(runtime, agent_node(), session, "lorem ipsum dolor " * 500)
    assert [e.message.content for e in events if isinstance(e, TurnFinished)] == ["It fits now."]
    assert model.context_window is not None and model.context_window < 2000  # 3/4 of the refused request
    assert all(roles_alternate(r.json["messages"]) for r in fake_openai.chat_requests)
    validate_transcript(await read(services, session))


async def test_an_overflow_that_cleanup_cannot_fix_tells_what_to_do_and_the_conversation_stays_usable(
    tmp_path, backend, fake_openai
):
    model = model_for(fake_openai, context_window=4096)
    runtime, services = make_runtime(tmp_path, backend, model)
    session = SessionScope("stuck")
    refusal = HTTPError(400, error_body("Input is too long for this model.", code=None))
    fake_openai.responder = lambda request: refusal if request.json.get("tools") else Reply(content="summary")
    events = await turn(runtime, agent_node(), session, "a short question")
    failed = [e for e in events if isinstance(e, TurnFailed)]
    assert [f.kind for f in failed] == ["ContextLengthExceeded"]
    assert "OPENAI_CONTEXT_WINDOW" in failed[0].error and "Send a shorter message" in failed[0].error
    stored = await read(services, session)
    assert stored[-1].kind == KIND_TURN_FAILED and "OPENAI_CONTEXT_WINDOW" in stored[-1].content
    # the server is fine again (or OPENAI_CONTEXT_WINDOW was set): the conversation goes on
    fake_openai.responder = strict_template(Reply(content="Here I am."), style="tgi")
    events = await turn(runtime, agent_node(), session, "hello again")
    assert [e.message.content for e in events if isinstance(e, TurnFinished)] == ["Here I am."]
    validate_transcript(await read(services, session))


async def test_an_oversized_message_is_refused_before_it_is_stored(tmp_path, backend, fake_openai):
    model = model_for(fake_openai, context_window=1024)
    runtime, services = make_runtime(tmp_path, backend, model)
    session = SessionScope("too-big")
    with pytest.raises(TurnRejected, match=r"too long for the model's context window: \d+ tokens, at most \d+ fit \(a 1024-token window"):
        await turn(runtime, agent_node(), session, "word " * 1500)
    assert await read(services, session) == [] and fake_openai.chat_requests == []


async def test_the_window_setting_sizes_meter_and_threshold(tmp_path, backend, fake_openai):
    fake_openai.script(Reply(content="ok"))
    runtime, _ = make_runtime(tmp_path, backend, model_for(fake_openai, context_window=4096))
    events = await turn(runtime, agent_node(), SessionScope("sized"), "hi")
    ready = [e for e in events if type(e).__name__ == "ContextReady"][0]
    declared = agent_node().memory_config  # bot.yml: a 16384 window, compression_threshold 12000
    assert (declared.context_window, declared.threshold) == (16384, 12000)
    assert (ready.window, ready.threshold) == (4096, 3000)  # scaled with the window


def test_explicit_thresholds_scale_down_with_a_smaller_window_and_stay_on_a_larger_one():
    declared = MemoryConfig(context_window=16384, compression_threshold=12000, keep_tokens=4000)
    small = sized_config(declared, 4096)
    assert (small.context_window, small.threshold, small.keep) == (4096, 3000, 1000)
    assert small.pruned_budget_tokens == 300 and small.archive_budget_tokens == 375
    large = sized_config(declared, 131072)
    assert (large.context_window, large.threshold, large.keep) == (131072, 12000, 4000)
    assert sized_config(declared, None) is declared


def test_a_scaled_threshold_stays_below_the_usable_window():
    """15000 of 16384 is below the usable 15360; scaled to 4096 it would be 3750, past the 3584
    a request may fill there (an eighth of a small window is the reply's): the session would
    outgrow what is sent before a cleanup. It is brought just under the usable window."""
    declared = MemoryConfig(context_window=16384, compression_threshold=15000)
    assert not any("usable window" in p.message for p in declared.budget_problems())
    small = sized_config(declared, 4096)
    assert small.threshold == small.usable_window - 1 == 3583
    assert not any("usable window" in p.message for p in small.budget_problems())


# -- replies the server cut off --------------------------------------------------------------------


@pytest.mark.parametrize("reason,kind", [("length", KIND_TRUNCATED), ("content_filter", "content_filtered")])
async def test_a_cut_off_reply_is_stored_marked(tmp_path, backend, fake_openai, reason, kind):
    fake_openai.script(Reply(content="The three reasons are: first,", finish_reason=reason))
    runtime, services = make_runtime(tmp_path, backend, model_for(fake_openai))
    events = await turn(runtime, agent_node(), SessionScope("cut"), "three reasons?")
    final = [e for e in events if isinstance(e, TurnFinished)][0].message
    assert final.kind == kind and final.content == "The three reasons are: first,"
    assert (await read(services, SessionScope("cut")))[-1].kind == kind
    assert any(isinstance(e, ContentChunk) for e in events)


async def test_the_servers_metadata_window_sizes_the_turn(tmp_path, backend, fake_openai):
    fake_openai.models = [{"id": "fake-model", "object": "model", "max_model_len": 8192}]
    fake_openai.script(Reply(content="ok"))
    model = model_for(fake_openai)
    runtime, _ = make_runtime(tmp_path, backend, model)
    events = await turn(runtime, agent_node(), SessionScope("meta"), "hi")
    ready = [e for e in events if type(e).__name__ == "ContextReady"][0]
    assert ready.window == 8192 and model.context_window == 8192
