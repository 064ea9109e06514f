"""The meter's threshold and cleanup measure one quantity: the conversation's stored tokens.

Long instructions make the context pass the threshold while the conversation is far below it:
the meter must not call that "over the threshold" (no cleanup comes), and the conversation size
it draws is what cleanup compares.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from agents.chat.meter import load_history
from tests.agents.chat.conftest import open_socket, receive_until
from tests.agents.chat.test_consumer import IDLE, send

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts")]

LONG_INSTRUCTIONS = "You are a careful assistant. " + "Always answer in full sentences and check your facts. " * 60

BOT_YML = f"""\
persistence:
  backend: file
model:
  provider: offline
  name: modex-offline
  context_window: 4096
agents:
  default:
    description: Long instructions, a small threshold.
    instructions: {LONG_INSTRUCTIONS}
    tools: [todo]
    memory:
      compression_threshold: 700
      keep_tokens: 250
"""


@pytest.fixture
def chat_bot(tmp_path, settings):
    path = tmp_path / "bot.yml"
    path.write_text(BOT_YML)
    settings.MODEX_SCOPES_FILE = path
    return path


def _page(owner, conversation) -> str:
    client = Client()
    client.force_login(owner)
    return client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()


async def test_a_context_past_the_threshold_is_not_a_conversation_past_it(conversation, owner, chat_runtime):
    comm = await open_socket(conversation.pk, owner)
    assert (await comm.connect())[0]
    await send(comm, "hello there")
    joined = "\n".join(await receive_until(comm, IDLE))
    await comm.disconnect()
    session = chat.session_of(conversation)
    history = await sync_to_async(load_history)(kv=chat_runtime.services.bundle.kv, session=session)
    point = history.last
    assert point.total > point.threshold == 700, "the instructions alone take the context past the threshold"
    # The size drawn is what cleanup compares: the session's stored tokens when the request was
    # assembled (here: the user's message; the reply came after).
    stored = await sync_to_async(chat_runtime.services.bundle.messages.read)(session)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert point.session == stored[0].tokens < point.threshold
    meter = re.search(r'<section id="meter"[^>]*>', joined).group(0)
    assert "is-over" not in meter, "no cleanup is coming, so the meter must not say the threshold is passed"
    assert "CleanupStarted" not in joined and "Cleaning up" not in joined

    page = await asyncio.to_thread(_page, owner, conversation)
    assert f"<strong>{point.session}</strong> / 700 tokens" in page
    assert "The conversation's size is what cleanup measures" in page
    assert 'class="size-threshold"' in page and 'class="threshold"' not in page


async def test_the_meter_is_over_exactly_when_the_conversation_passes_the_threshold(conversation, owner, chat_runtime):
    """Turn after turn, the meter says "over" only while the conversation is past the threshold,
    and a cleanup follows at the next message whenever the size drawn plus that message passes it."""
    comm = await open_socket(conversation.pk, owner)
    assert (await comm.connect())[0]
    session = chat.session_of(conversation)
    kv = chat_runtime.services.bundle.kv
    cleanups = 0
    for turn in range(8):
        before = (await sync_to_async(chat_runtime.services.bundle.messages.head)(session)).tokens
        await send(comm, f"turn {turn}: " + "tell me about the tides and the moon " * 12)
        joined = "\n".join(await receive_until(comm, IDLE, timeout=20))
        cleaned = "Cleaning up" in joined
        cleanups += cleaned
        point = (await sync_to_async(load_history)(kv=kv, session=session)).last
        meter = [m for m in re.findall(r'<section id="meter"[^>]*>', joined)][-1]
        assert ("is-over" in meter) == (point.session > point.threshold)
        if not cleaned:
            # No cleanup: the size the cleanup hook saw was at or under the threshold, and the
            # size drawn is that plus nothing removed.
            assert point.session <= point.threshold and point.session >= before
    await comm.disconnect()
    assert cleanups >= 1, "the small threshold is passed within a few turns"
