"""Open chat sockets answer to what happens after they connected: sign-out, a password change, a
deactivated account, a deleted conversation; and they are bounded per user.

Real WebSocket communicators on the real ASGI application (origin check, session auth, routing)
with the in-memory channel layer; the HTTP side is the Django test client on the same database
and sessions, as a second browser tab would be.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agents.chat import service as chat
from agents.chat.sockets import CLOSE_NOT_FOUND, CLOSE_TOO_MANY, CLOSE_UNAUTHENTICATED
from agents.personal.tokens import authenticate_token, create_token
from memory.messages import Message
from tests.agents.chat.conftest import IDLE, ORIGIN, receive_until, stored

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts")]

#: daphne refuses to send a WebSocket frame larger than this.
DAPHNE_FRAME_LIMIT = 1024 * 1024


def browser(user) -> Client:
    """A signed-in browser session of ``user``."""
    client = Client()
    client.force_login(user)
    return client


async def socket_of(client: Client, conversation_id: str) -> WebsocketCommunicator:
    from modex_web.asgi import application

    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    comm = WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/",
                                 headers=[(b"origin", ORIGIN), (b"host", b"testserver"), (b"cookie", cookie)])
    ok, _ = await comm.connect()
    assert ok
    return comm


async def close_code(comm: WebsocketCommunicator, *, timeout: float = 5.0) -> int:
    """The code the socket is closed with (frames sent before the close are passed over)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        output = await comm.receive_output(timeout=max(0.05, deadline - loop.time()))
        if output["type"] == "websocket.close":
            return output["code"]


async def still_open(comm: WebsocketCommunicator) -> bool:
    """The socket answers a sync (and so was not closed)."""
    await comm.send_to(text_data=json.dumps({"action": "sync"}))
    frame = await comm.receive_output(timeout=5)
    return frame["type"] == "websocket.send" and 'id="messages"' in frame.get("text", "")


async def say(comm, text: str) -> list[str]:
    await comm.send_to(text_data=json.dumps({"message": text}))
    return await receive_until(comm, IDLE)


async def http(client: Client, method: str, path: str, data: dict | None = None):
    return await sync_to_async(getattr(client, method))(path, data or {})


# -- sign-out, password, deactivation -----------------------------------------------------------


async def test_signing_out_closes_that_sessions_sockets_with_4401(conversation, owner, chat_runtime):
    tab, other_browser = await sync_to_async(browser)(owner), await sync_to_async(browser)(owner)
    comm = await socket_of(tab, conversation.pk)
    elsewhere = await socket_of(other_browser, conversation.pk)
    await say(comm, "my secret is pelican")
    await http(tab, "post", "/accounts/logout/")
    assert await close_code(comm) == CLOSE_UNAUTHENTICATED
    # A frame sent on anyway is not read: nothing is written, nothing comes back.
    await comm.send_to(text_data=json.dumps({"message": "still here?"}))
    await comm.send_to(text_data=json.dumps({"action": "sync"}))
    assert await comm.receive_nothing(timeout=0.3)
    assert [m.content for m in await stored(chat_runtime, conversation) if m.role == "user"] == ["my secret is pelican"]
    assert await still_open(elsewhere), "another browser's session is not signed out"
    await elsewhere.disconnect()


async def test_a_password_change_closes_every_other_socket_and_revokes_tokens(conversation, owner, chat_runtime):
    phone, laptop = await sync_to_async(browser)(owner), await sync_to_async(browser)(owner)
    _, raw = await sync_to_async(create_token)(user=owner, name="script")
    comm = await socket_of(laptop, conversation.pk)
    response = await http(phone, "post", "/settings/password/", {
        "old_password": "owner-pw-1", "new_password1": "a-new-pw-for-owner-7", "new_password2": "a-new-pw-for-owner-7"})
    assert response.status_code == 302
    assert await close_code(comm) == CLOSE_UNAUTHENTICATED
    assert await sync_to_async(authenticate_token)(raw) is None, "the API token is revoked"
    # The laptop's session is signed out; the phone, which changed it, stays signed in.
    assert (await http(laptop, "get", "/conversations/")).status_code == 302
    assert (await http(phone, "get", "/conversations/")).status_code == 200
    # And the laptop cannot reconnect.
    from modex_web.asgi import application

    cookie = f"{settings.SESSION_COOKIE_NAME}={laptop.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
    again = WebsocketCommunicator(application, f"/ws/chat/{conversation.pk}/",
                                  headers=[(b"origin", ORIGIN), (b"host", b"testserver"), (b"cookie", cookie)])
    await again.connect()
    assert await close_code(again) == CLOSE_UNAUTHENTICATED


async def test_a_wrong_current_password_changes_nothing_and_is_throttled(owner, settings):
    settings.MODEX_LOGIN_MAX_FAILURES = 3
    tab = await sync_to_async(browser)(owner)
    for i in range(3):
        response = await http(tab, "post", "/settings/password/", {
            "old_password": f"guess-{i}", "new_password1": "a-new-pw-for-owner-7", "new_password2": "a-new-pw-for-owner-7"})
        assert response.status_code == 422
    response = await http(tab, "post", "/settings/password/", {
        "old_password": "owner-pw-1", "new_password1": "a-new-pw-for-owner-7", "new_password2": "a-new-pw-for-owner-7"})
    assert response.status_code == 422 and "Too many failed sign-ins" in response.content.decode()
    await sync_to_async(owner.refresh_from_db)()
    assert await sync_to_async(owner.check_password)("owner-pw-1")


async def test_deactivating_the_account_closes_its_sockets(conversation, owner):
    comm = await socket_of(await sync_to_async(browser)(owner), conversation.pk)
    owner.is_active = False
    await sync_to_async(owner.save)()
    assert await close_code(comm) == CLOSE_UNAUTHENTICATED


async def test_set_unusable_password_revokes_tokens_and_closes_sockets(conversation, owner):
    comm = await socket_of(await sync_to_async(browser)(owner), conversation.pk)
    _, raw = await sync_to_async(create_token)(user=owner, name="script")
    owner.set_unusable_password()
    await sync_to_async(owner.save)()
    assert await sync_to_async(authenticate_token)(raw) is None
    assert await close_code(comm) == CLOSE_UNAUTHENTICATED


async def test_a_signed_out_session_is_refused_at_the_next_frame_even_without_the_group_message(
        conversation, owner, chat_runtime):
    """Another worker without a shared channel layer signed the session out: the group message
    never came, but the next turn and the next sync read the session again."""
    from django.contrib.sessions.models import Session

    tab = await sync_to_async(browser)(owner)
    comm = await socket_of(tab, conversation.pk)
    await sync_to_async(Session.objects.all().delete)()  # what a sign-out elsewhere leaves
    await comm.send_to(text_data=json.dumps({"message": "written after sign-out?"}))
    assert await close_code(comm) == CLOSE_UNAUTHENTICATED
    assert await stored(chat_runtime, conversation) == []


# -- deleting a conversation --------------------------------------------------------------------


async def test_deleting_a_conversation_closes_its_sockets_with_4404_and_nothing_is_written_after(
        conversation, owner, chat_runtime):
    tab = await sync_to_async(browser)(owner)
    comm = await socket_of(tab, conversation.pk)
    await say(comm, "first words")
    response = await http(tab, "post", f"/conversations/{conversation.pk}/delete/")
    assert response.status_code == 302
    assert await close_code(comm) == CLOSE_NOT_FOUND
    for text in ("one", "two", "three", "four"):
        await comm.send_to(text_data=json.dumps({"message": text}))
    assert await comm.receive_nothing(timeout=0.3)
    assert await stored(chat_runtime, conversation) == []


async def test_a_turn_on_a_conversation_deleted_without_the_group_message_writes_nothing(
        conversation, owner, chat_runtime):
    from agents.models import Conversation

    comm = await socket_of(await sync_to_async(browser)(owner), conversation.pk)
    await sync_to_async(Conversation.objects.filter(pk=conversation.pk).delete)()
    await comm.send_to(text_data=json.dumps({"message": "into the void"}))
    assert await close_code(comm) == CLOSE_NOT_FOUND
    assert await stored(chat_runtime, conversation) == []


async def test_a_turn_that_raced_a_delete_leaves_nothing_behind(conversation, owner, make_runtime):
    """The turn had passed its check when the conversation was deleted (the row removed while
    the turn was already writing): once it ends, what it wrote is removed again."""
    from agents.models import Conversation

    runtime = make_runtime(chunk_delay=0.02)
    comm = await socket_of(await sync_to_async(browser)(owner), conversation.pk)
    await comm.send_to(text_data=json.dumps({"message": "tell me something long"}))
    await receive_until(comm, 'class="msg user"')
    await sync_to_async(Conversation.objects.filter(pk=conversation.pk).delete)()
    await comm.send_to(text_data=json.dumps({"action": "stop"}))
    await receive_until(comm, IDLE, timeout=15)
    assert await stored(runtime, conversation) == []
    await comm.disconnect()


# -- caps -------------------------------------------------------------------------------------------


async def test_a_user_has_at_most_the_cap_of_sockets(conversation, owner, settings):
    settings.MODEX_MAX_SOCKETS_PER_USER = 3
    tab = await sync_to_async(browser)(owner)
    opened = [await socket_of(tab, conversation.pk) for _ in range(3)]
    extra = await socket_of(tab, conversation.pk)
    assert await close_code(extra) == CLOSE_TOO_MANY
    await opened[0].disconnect()
    replacement = await socket_of(tab, conversation.pk)
    assert await still_open(replacement), "a closed socket frees its place"
    for comm in [*opened[1:], replacement]:
        await comm.disconnect()


async def test_a_user_has_at_most_the_cap_of_turns_at_once(owner, make_runtime, settings):
    settings.MODEX_MAX_TURNS_PER_USER = 1
    runtime = make_runtime(chunk_delay=0.03)
    first, second = [await sync_to_async(chat.create_conversation)(user=owner, agent="default") for _ in range(2)]
    tab = await sync_to_async(browser)(owner)
    a, b = await socket_of(tab, first.pk), await socket_of(tab, second.pk)
    await a.send_to(text_data=json.dumps({"message": "tell me something long"}))
    await receive_until(a, 'class="msg user"')
    await b.send_to(text_data=json.dumps({"message": "and me at the same time"}))
    refusal = (await receive_until(b, "replies being written at once"))[-1]
    assert 'data-text="and me at the same time"' in refusal, "the text goes back to the composer"
    assert await stored(runtime, second) == []
    await receive_until(a, IDLE, timeout=20)
    await say(b, "now me")  # the first turn ended: its place is free
    assert [m.content for m in await stored(runtime, second) if m.role == "user"] == ["now me"]
    await a.disconnect()
    await b.disconnect()


async def test_syncs_are_rate_limited_per_user(conversation, owner, settings):
    settings.MODEX_SYNCS_PER_MINUTE = 3
    tab = await sync_to_async(browser)(owner)
    comm, other = await socket_of(tab, conversation.pk), await socket_of(tab, conversation.pk)
    assert await still_open(comm) and await still_open(comm) and await still_open(other)
    await other.send_to(text_data=json.dumps({"action": "sync"}))
    refused = await other.receive_from(timeout=5)
    assert "refreshed too often" in refused and 'id="messages"' not in refused
    await comm.disconnect()
    await other.disconnect()


# -- a long conversation re-syncs ----------------------------------------------------------------


def long_conversation(runtime, conversation, *, turns: int = 60, chars: int = 8000) -> list[Message]:
    """``turns`` question-and-answer pairs of ``chars`` characters that HTML makes four times
    larger (``<`` is ``&lt;``): several MiB of rendered history."""
    session = chat.session_of(conversation)
    messages = []
    for n in range(turns):
        messages += [Message(role="user", content=f"question {n:03d} " + "<" * chars),
                     Message(role="assistant", content=f"answer {n:03d} " + "<" * chars)]
    return runtime.services.bundle.messages.append(session, messages)


SEQ = re.compile(r'<footer class="meta">#(\d+)')


async def test_a_long_conversation_resyncs_under_the_frame_limit_and_loads_earlier_in_order(
        conversation, owner, chat_runtime):
    written = await sync_to_async(long_conversation)(chat_runtime, conversation)
    tab = await sync_to_async(browser)(owner)
    comm = await socket_of(tab, conversation.pk)
    await comm.send_to(text_data=json.dumps({"action": "sync"}))
    frame = await comm.receive_from(timeout=20)
    assert len(frame.encode()) < DAPHNE_FRAME_LIMIT / 2, f"a sync frame of {len(frame.encode()):,} bytes"
    assert 'id="load-earlier"' in frame
    shown = [int(s) for s in SEQ.findall(frame)]
    assert shown == [m.seq for m in written][-len(shown):], "the latest messages, in order"
    # "Load earlier" brings the rest, page by page, in order, each page within the budget too.
    url = re.search(r'hx-get="([^"]+)"', frame).group(1).replace("&amp;", "&")
    earlier: list[int] = []
    pages = 0
    while url:
        response = await http(tab, "get", url)
        assert response.status_code == 200 and "no-store" in response["Cache-Control"]
        html = response.content.decode()
        assert len(html.encode()) < DAPHNE_FRAME_LIMIT / 2
        earlier = [int(s) for s in SEQ.findall(html)] + earlier
        found = re.search(r'hx-get="([^"]+)"', html)
        url = found.group(1).replace("&amp;", "&") if found else None
        pages += 1
        assert pages < 200
    assert earlier + shown == [m.seq for m in written], "every message once, in order"
    # The page itself is bounded the same way.
    page = (await http(tab, "get", f"/conversations/{conversation.pk}/")).content.decode()
    assert len(page.encode()) < DAPHNE_FRAME_LIMIT / 2 and 'id="load-earlier"' in page
    await comm.disconnect()


async def test_load_earlier_is_the_owners_only(conversation, owner, outsider, chat_runtime):
    written = await sync_to_async(long_conversation)(chat_runtime, conversation, turns=3, chars=10)
    url = f"/conversations/{conversation.pk}/earlier/?before={written[-1].id}"
    assert (await http(await sync_to_async(browser)(outsider), "get", url)).status_code == 404
    assert (await http(Client(), "get", url)).status_code == 302  # to the sign-in page
    mine = await http(await sync_to_async(browser)(owner), "get", url)
    assert mine.status_code == 200 and "question 000" in mine.content.decode()
    unknown = f"/conversations/{conversation.pk}/earlier/?before=nope"
    assert (await http(await sync_to_async(browser)(owner), "get", unknown)).status_code == 404


# -- the frame limit the README states ----------------------------------------------------------


async def test_the_readme_states_the_frame_limit_the_consumer_enforces(conversation, owner):
    """The README's number is the code's: a frame of exactly MAX_FRAME_BYTES is read (its JSON
    is judged, not its size), one byte more is refused as too long."""
    from pathlib import Path

    from agents.chat.consumer import MAX_FRAME_BYTES

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    stated = re.search(r"frames over ([\d,]+) bytes", readme)
    assert stated and int(stated.group(1).replace(",", "")) == MAX_FRAME_BYTES
    comm = await socket_of(await sync_to_async(browser)(owner), conversation.pk)
    exact = json.dumps({"action": "dance", "pad": "x" * (MAX_FRAME_BYTES - 32)})
    exact = exact[:-2] + "x" * (MAX_FRAME_BYTES - len(exact)) + exact[-2:]
    assert len(exact.encode()) == MAX_FRAME_BYTES
    await comm.send_to(text_data=exact)
    assert "Expected a JSON object" in await comm.receive_from(timeout=5)
    await comm.send_to(text_data=exact[:-2] + "x" + exact[-2:])
    assert "too long" in await comm.receive_from(timeout=5)
    await comm.disconnect()
