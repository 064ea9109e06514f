"""Opening a conversation prepares archive recall: the user's archive index is built while the
page is read, not in the first turn after a start.

Through the real ASGI stack: a user with archived conversations opens the chat socket and sends
nothing; the process's index of that user's archive (with this agent) is built, no other user's
is, and the first turn then recalls from it. An agent without the archive builds nothing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async

from agents.chat import service as chat
from agents.runtime.tools.history_tools import archive_scope_for
from memory.messages import Message
from memory.stores.base import ArchiveDocument
from tests.agents.chat.conftest import CHAT_BOT_YML, IDLE, connected, receive_until
from tests.agents.chat.test_consumer import send
from tests.agents.support import RecordingModel

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts", "live_turns")]

SAILING = "I bought a second-hand dinghy and I'm learning to sail on the reservoir."


@pytest.fixture
def archive_bot(chat_bot):
    chat_bot.write_text(CHAT_BOT_YML.replace(
        "      compression_threshold: 700", "      archive_enabled: true\n      compression_threshold: 700"))
    return chat_bot


def archived(*texts: str) -> ArchiveDocument:
    start = datetime(2024, 3, 2, 18, 0, tzinfo=UTC)
    messages = tuple(
        Message(role=("user", "assistant")[i % 2], content=text, created_at=start + timedelta(minutes=i)).with_seq(i + 1)
        for i, text in enumerate(texts)
    )
    return ArchiveDocument(session="session:earlier", summary="", messages=messages, title="Weekend plans")


async def until(check, *, timeout: float = 10.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_opening_a_conversation_builds_the_users_archive_index(archive_bot, make_runtime, django_user_model):
    model = RecordingModel()
    runtime = make_runtime(model=model)
    retrieval = runtime.services.retrieval
    create = sync_to_async(django_user_model.objects.create_user)
    owner = await create(username="sailor", password="sail-pw-12345")
    other = await create(username="other", password="other-pw-12345")
    mine, theirs = (archive_scope_for(agent="default", user_id=str(u.pk)) for u in (owner, other))
    put = sync_to_async(runtime.services.bundle.archive.put)
    await put(mine, archived(SAILING, "That sounds like a lovely way to spend weekends."))
    await put(theirs, archived("Someone else's words about sailing boats."))
    assert not retrieval.ready(mine) and not retrieval.ready(theirs)

    conversation = await sync_to_async(chat.create_conversation)(user=owner, agent="default")
    comm = await connected(conversation, owner)
    assert await until(lambda: retrieval.ready(mine)), "the index was not built as the conversation opened"
    assert not retrieval.ready(theirs)  # only the user who opened the page
    assert model.requests == []  # nothing was asked of the model

    await send(comm, "What boat did I buy?")
    await receive_until(comm, IDLE)
    await comm.disconnect()
    system = model.requests[-1]["messages"][0]["content"]
    assert "dinghy" in system.split("<archive_recall>")[1].split("</archive_recall>")[0]


async def test_an_agent_without_the_archive_builds_nothing(chat_bot, make_runtime, django_user_model):
    runtime = make_runtime()
    owner = await sync_to_async(django_user_model.objects.create_user)(username="plain", password="plain-pw-12345")
    scope = archive_scope_for(agent="default", user_id=str(owner.pk))
    await sync_to_async(runtime.services.bundle.archive.put)(scope, archived(SAILING))
    conversation = await sync_to_async(chat.create_conversation)(user=owner, agent="default")
    agent = await sync_to_async(chat.resolve_agent)(conversation.agent)
    assert await sync_to_async(chat.warm_recall)(conversation=conversation, agent=agent) is False
    comm = await connected(conversation, owner)
    await send(comm, "hello")
    await receive_until(comm, IDLE)
    await comm.disconnect()
    assert not runtime.services.retrieval.ready(scope)  # the archive is off: no index, no recall

