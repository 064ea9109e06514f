"""Regenerate the last reply, edit the last message, retry a failed turn: each replaces the last
exchange in the session (the old one is soft-deleted, never sent to the model again), through
the real socket stack and the real HTTP fake OpenAI server."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import sync_to_async

from agents.chat import service as chat
from agents.runtime.loop import ARCHIVED, NOT_LAST
from memory.archiving import ARCHIVE_CURSOR
from memory.transcript import validate_transcript
from tests.agents.chat.conftest import IDLE, connected, drain, receive_until, stored
from tests.agents.chat.test_failed_turns import conversation, http_runtime  # noqa: F401 (fixtures)
from tests.fakes.openai_server import Reply, server_error

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts", "live_turns")]


async def send(comm, frame: dict) -> None:
    await comm.send_to(text_data=json.dumps({**frame, "HEADERS": {"HX-Request": "true"}}))


def sent_texts(request) -> list[str]:
    """The contents of the messages one model request carried."""
    return [m.get("content") or "" for m in request.json["messages"]]


async def asked(comm, text: str) -> list[str]:
    await send(comm, {"message": text, "replace": ""})  # as the composer sends it
    return await receive_until(comm, IDLE)


async def test_regenerate_replaces_the_reply_in_the_session_and_on_the_page(conversation, owner, http_runtime, fake_openai):
    fake_openai.script(Reply(content="First answer."), Reply(content="Second answer."))
    comm = await connected(conversation, owner)
    frames = await asked(comm, "which answer?")
    question, first = await stored(http_runtime, conversation)
    actions = next(f for f in reversed(frames) if 'id="exchange-actions"' in f)
    assert "Regenerate the reply" in actions and f'value="{question.id}"' in actions

    await send(comm, {"action": "regenerate", "id": question.id})
    frames = await receive_until(comm, IDLE)
    messages = await stored(http_runtime, conversation)
    assert [(m.role, m.content) for m in messages] == [("user", "which answer?"), ("assistant", "Second answer.")]
    assert messages[0].id != question.id, "the question is stored again, after what came before it"
    validate_transcript(messages)
    second_request = fake_openai.chat_requests[-1]
    assert "First answer." not in sent_texts(second_request), "the model never sees the replaced reply"
    assert sent_texts(second_request).count("which answer?") == 1
    relisted = [f for f in frames if 'id="messages"' in f]
    assert relisted and "First answer." not in relisted[0], "the page drops the old exchange"
    assert "Second answer." in "".join(frames)
    # The replaced messages are soft-deleted: gone from the session, kept for the record.
    everything = await sync_to_async(http_runtime.services.bundle.messages.read)(
        chat.session_of(conversation), include_deleted=True
    )
    assert {m.id for m in everything} >= {question.id, first.id}
    await comm.disconnect()


async def test_edit_the_last_message_and_send_it_again(conversation, owner, http_runtime, fake_openai):
    fake_openai.script(Reply(content="Hello."), Reply(content="It is 4."), Reply(content="It is 6."))
    comm = await connected(conversation, owner)
    await asked(comm, "hi")
    await asked(comm, "what is 2+2?")
    question = (await stored(http_runtime, conversation))[-2]
    await send(comm, {"message": "what is 3+3?", "replace": question.id})
    await receive_until(comm, IDLE)
    messages = await stored(http_runtime, conversation)
    assert [m.content for m in messages] == ["hi", "Hello.", "what is 3+3?", "It is 6."]
    last_request = sent_texts(fake_openai.chat_requests[-1])
    assert "what is 2+2?" not in last_request and "It is 4." not in last_request
    assert "hi" in last_request and "Hello." in last_request, "the exchanges before it stay"
    await comm.disconnect()


async def test_a_failed_turn_offers_retry_which_answers_the_same_text(conversation, owner, http_runtime, fake_openai):
    fake_openai.script(server_error(503), server_error(503), Reply(content="Now it works."))
    comm = await connected(conversation, owner)
    frames = await asked(comm, "hello?")
    question, failed = await stored(http_runtime, conversation)
    assert failed.kind == "turn_failed"
    actions = next(f for f in reversed(frames) if 'id="exchange-actions"' in f)
    assert re.search(r'<button type="submit" class="button-link" id="regenerate">Retry</button>', actions)
    assert 'data-text="hello?"' in actions, "the text is kept for an edit too"

    await send(comm, {"action": "regenerate", "id": question.id})
    await receive_until(comm, IDLE)
    messages = await stored(http_runtime, conversation)
    assert [(m.role, m.kind, m.content) for m in messages] == [
        ("user", "message", "hello?"),
        ("assistant", "message", "Now it works."),
    ]
    assert not any("[no reply" in text for text in sent_texts(fake_openai.chat_requests[-1]))
    await comm.disconnect()


async def test_only_the_last_exchange_can_be_replaced(conversation, owner, http_runtime, fake_openai):
    fake_openai.script(Reply(content="One."), Reply(content="Two."))
    comm = await connected(conversation, owner)
    await asked(comm, "first")
    await asked(comm, "second")
    before = await stored(http_runtime, conversation)
    earlier = before[0]
    await send(comm, {"action": "regenerate", "id": earlier.id})
    frame = await comm.receive_from(timeout=5)
    assert NOT_LAST[1:40] in frame and "notice error" in frame
    # An edit of an earlier message is refused by the runtime, its text handed back.
    await send(comm, {"message": "first, edited", "replace": earlier.id})
    frames = await receive_until(comm, "composer-draft")
    assert 'data-text="first, edited"' in frames[-1]
    await drain(comm)
    assert await stored(http_runtime, conversation) == before, "nothing changed"
    # Hostile ids are a malformed frame.
    await send(comm, {"action": "regenerate", "id": "../../etc"})
    assert "Expected a JSON object" in await comm.receive_from(timeout=5)
    await comm.disconnect()


async def test_an_archived_exchange_is_not_replaced(conversation, owner, http_runtime, fake_openai):
    fake_openai.script(Reply(content="Archived answer."))
    comm = await connected(conversation, owner)
    await asked(comm, "keep this")
    question, answer = await stored(http_runtime, conversation)
    # The conversation's archiving caught up with the exchange (the archive cursor is past it).
    await sync_to_async(http_runtime.services.bundle.cursors.set)(chat.session_of(conversation), ARCHIVE_CURSOR, answer.seq)
    await send(comm, {"action": "sync"})
    synced = (await receive_until(comm, 'id="exchange-actions"'))[-1]
    assert "archived" in synced and "Regenerate the reply" not in synced
    await send(comm, {"action": "regenerate", "id": question.id})
    assert "archived" in await comm.receive_from(timeout=5)
    # The runtime refuses it too (a page that still offers it).
    await send(comm, {"message": "edited", "replace": question.id})
    frames = await receive_until(comm, "composer-draft")
    assert ARCHIVED[1:30] in "".join(frames)
    assert [m.id for m in await stored(http_runtime, conversation)] == [question.id, answer.id]
    await comm.disconnect()
