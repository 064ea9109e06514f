"""A failed or cut-off turn on the chat page and in the API: shown as what it is, live and after a reload.
The real socket stack and the real HTTP fake OpenAI server."""

from __future__ import annotations

import asyncio

import pytest
from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from agents.llm.openai import OpenAIChatModel
from agents.runtime.loop import Runtime
from agents.runtime import services as services_module
from agents.runtime.services import build_services
from tests.agents.chat.conftest import open_socket, receive_until
from tests.agents.chat.test_consumer import IDLE, send
from tests.fakes.openai_server import FAKE_API_KEY, Reply, server_error

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts", "live_turns")]


async def _no_sleep(_seconds):
    return None


@pytest.fixture
def http_runtime(tmp_path, chat_bot, fake_openai, monkeypatch):
    model = OpenAIChatModel(
        base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", timeout=5, max_retries=1, sleep=_no_sleep
    )
    runtime = Runtime(services=build_services(backend="file", workspace=tmp_path / "ws", model=model))
    chat.set_runtime_for_tests(runtime)
    monkeypatch.setattr(services_module, "_services", runtime.services)  # what the API reads
    yield runtime
    chat.set_runtime_for_tests(None)


@pytest.fixture
def conversation(owner, http_runtime):
    return chat.create_conversation(user=owner, agent="default")


def page(owner, conversation) -> str:
    client = Client()
    client.force_login(owner)
    response = client.get(reverse("chat:conversation", args=[conversation.pk]))
    assert response.status_code == 200
    return response.content.decode()


def api_messages(owner, conversation) -> list[dict]:
    client = Client()
    client.force_login(owner)
    response = client.get(f"/api/conversations/{conversation.pk}/messages")
    assert response.status_code == 200
    return response.json()["messages"]


async def test_a_failed_turn_is_shown_as_its_marked_reply_live_and_after_a_reload(conversation, owner, fake_openai):
    fake_openai.script(server_error(503), server_error(503))
    comm = await open_socket(conversation.pk, owner)
    assert (await comm.connect())[0]
    await send(comm, "hello?")
    joined = "\n".join(await receive_until(comm, IDLE))
    assert 'class="msg assistant failed"' in joined and "HTTP 503" in joined
    assert 'class="notice error"' not in joined, "the marked reply shows the error; no second notice repeats it"
    await comm.disconnect()

    html = await asyncio.to_thread(page, owner, conversation)
    assert 'class="msg assistant failed"' in html and "No reply: the model call failed." in html and "HTTP 503" in html
    messages = await asyncio.to_thread(api_messages, owner, conversation)
    assert [(m["role"], m["kind"], m["failed"]) for m in messages] == [
        ("user", "message", False),
        ("assistant", "turn_failed", True),
    ]


async def test_a_cut_off_reply_is_marked_incomplete_on_the_page_and_in_the_api(conversation, owner, fake_openai):
    fake_openai.script(Reply(content="The three reasons are: first,", finish_reason="length"))
    comm = await open_socket(conversation.pk, owner)
    assert (await comm.connect())[0]
    await send(comm, "three reasons?")
    joined = "\n".join(await receive_until(comm, IDLE))
    assert "Cut off by the server at its length limit" in joined
    await comm.disconnect()
    html = await asyncio.to_thread(page, owner, conversation)
    assert 'class="msg assistant cut-off"' in html and "this reply is incomplete" in html
    messages = await asyncio.to_thread(api_messages, owner, conversation)
    assert [(m["kind"], m["truncated"]) for m in messages] == [("message", False), ("truncated", True)]


async def test_a_whole_reply_carries_no_mark(conversation, owner, fake_openai):
    fake_openai.script(Reply(content="All of it."))
    comm = await open_socket(conversation.pk, owner)
    assert (await comm.connect())[0]
    await send(comm, "hi")
    joined = "\n".join(await receive_until(comm, IDLE))
    assert "All of it." in joined and "cut-off" not in joined and "failed" not in joined.replace("The reply failed", "")
    await comm.disconnect()
