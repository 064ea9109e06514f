"""The chat page says when its user is typing: background memory work on a local model gives the
model up while the message is written, not when it arrives.

Through the real ASGI stack, against the fake OpenAI-compatible server on this machine (a local
endpoint: gated, one call at a time): a ``{"action": "typing"}`` frame takes the conversation's
typing mark at the model-call gate, at most once per TYPING_EVERY seconds per socket, and gets no
answer; the message sent next takes the turn's own mark in its place. Without a gate (the
offline model) the frame changes nothing and says nothing."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from agents.chat import consumer
from agents.chat import service as chat
from agents.llm.openai import OpenAIChatModel
from agents.runtime.gate import endpoint_id
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services
from memory.scopes import GlobalScope
from tests.agents.chat.conftest import IDLE, connected, receive_until
from tests.agents.chat.test_consumer import send
from tests.fakes.openai_server import FAKE_API_KEY, Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts", "live_turns")]

TYPING = json.dumps({"action": "typing", "HEADERS": {"HX-Request": "true"}})


@pytest.fixture
def gated_runtime(tmp_path, chat_bot, fake_openai):
    model = OpenAIChatModel(base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", max_retries=0, timeout=5)
    runtime = Runtime(services=build_services(backend="file", workspace=tmp_path / "ws", model=model, gated=True))
    chat.set_runtime_for_tests(runtime)
    yield runtime
    chat.set_runtime_for_tests(None)


def turn_marks(runtime) -> dict[str, int]:
    """The gate's turn marks for the runtime's endpoint: lease key -> version."""
    prefix = f"lease.gate.{endpoint_id(runtime.model)}.turn."
    return {item.key: item.version for item in runtime.services.bundle.kv.list(GlobalScope(), prefix=prefix)}


async def opened(django_user_model, username: str):
    """A new user's new conversation with the default agent, and a socket on it."""
    user = await sync_to_async(django_user_model.objects.create_user)(username=username, password=f"{username}-pw-12345")
    conversation = await sync_to_async(chat.create_conversation)(user=user, agent="default")
    return await connected(conversation, user)


async def test_typing_marks_the_gate_once_per_interval_and_the_turn_takes_its_place(
        gated_runtime, fake_openai, django_user_model):
    fake_openai.script(Reply(content="Porto is lovely in May."))
    comm = await opened(django_user_model, "typist")
    marks = sync_to_async(turn_marks)

    await comm.send_to(text_data=TYPING)
    assert await comm.receive_nothing(timeout=0.3)  # no answer to a typing frame
    first = await marks(gated_runtime)
    assert len(first) == 1 and next(iter(first)).split(".turn.")[1].startswith("typing-")
    assert (await sync_to_async(gated_runtime.services.gate.state)(gated_runtime.model)).turns == 1

    await comm.send_to(text_data=TYPING)  # within TYPING_EVERY of the first: not written again
    assert await comm.receive_nothing(timeout=0.2)
    assert await marks(gated_runtime) == first
    await asyncio.sleep(consumer.TYPING_EVERY)
    await comm.send_to(text_data=TYPING)  # later: the mark is extended
    assert await comm.receive_nothing(timeout=0.3)
    later = await marks(gated_runtime)
    assert later.keys() == first.keys() and later != first

    await send(comm, "Where should I go in May?")
    frames = await receive_until(comm, IDLE)
    assert any("Porto is lovely" in frame for frame in frames)
    after = await marks(gated_runtime)  # the turn's own mark, lingering after the turn
    assert after and not any(".turn.typing-" in key for key in after)
    await comm.disconnect()


async def test_typing_without_a_gate_changes_nothing_and_says_nothing(chat_runtime, django_user_model):
    comm = await opened(django_user_model, "offline")
    await comm.send_to(text_data=TYPING)
    assert await comm.receive_nothing(timeout=0.3)
    assert await sync_to_async(chat_runtime.services.bundle.kv.list)(GlobalScope(), prefix="lease.gate.") == []
    await send(comm, "hello")
    await receive_until(comm, IDLE)
    await comm.disconnect()


async def test_a_socket_passes_typing_on_for_a_bounded_time_between_messages(
        gated_runtime, fake_openai, django_user_model, monkeypatch):
    """A client that says it types for ever does not hold background work back for ever: after
    MAX_TYPING_SECONDS without a message the signals are dropped; a message sent starts anew."""
    monkeypatch.setattr(consumer, "TYPING_EVERY", 0.0)
    monkeypatch.setattr(consumer, "MAX_TYPING_SECONDS", 0.5)
    fake_openai.script(Reply(content="Noted."))
    comm = await opened(django_user_model, "endless")
    marks = sync_to_async(turn_marks)

    await comm.send_to(text_data=TYPING)
    assert await comm.receive_nothing(timeout=0.2)
    first = await marks(gated_runtime)
    assert len(first) == 1
    await asyncio.sleep(0.5)
    await comm.send_to(text_data=TYPING)  # past the limit: not extended
    assert await comm.receive_nothing(timeout=0.2)
    assert await marks(gated_runtime) == first

    await send(comm, "Remember that I like figs.")
    await receive_until(comm, IDLE)
    await comm.send_to(text_data=TYPING)  # a new message being typed: passed on again
    assert await comm.receive_nothing(timeout=0.2)
    assert any(".turn.typing-" in key for key in await marks(gated_runtime))
    await comm.disconnect()
