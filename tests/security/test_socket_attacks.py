"""Attacks on the chat WebSocket, through the real ASGI application (origin check, session auth,
routing) with real sockets from channels.testing and the offline model.

Each case is one an attacker tried (issue 20): a frame that stores text no page can render,
a frame that exhausts the JSON parser's recursion, a handshake the router cannot match, a page
on another port or scheme of an allowed host.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from agents.chat import service as chat
from memory.text import REPLACEMENT, is_storable
from tests.agents.chat.conftest import open_socket, receive_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts")]

IDLE = 'data-state="idle"'


async def connected(conversation, user):
    comm = await open_socket(conversation.pk, user)
    ok, _ = await comm.connect()
    assert ok
    return comm


async def stored(runtime, conversation):
    return await sync_to_async(runtime.services.bundle.messages.read, thread_sensitive=True)(chat.session_of(conversation))


def get(user, url: str):
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client.get(url)


# -- A: a lone surrogate in a frame ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["file", "sqlite"])
async def test_a_lone_surrogate_frame_is_stored_as_replacement_and_every_page_still_renders(
    backend, make_runtime, owner, django_user_model
):
    runtime = make_runtime(backend=backend)
    conversation = await sync_to_async(chat.create_conversation)(user=owner, agent="default")
    comm = await connected(conversation, owner)
    # Raw JSON text: json.dumps would escape the backslash; a browser or a script sends this.
    await comm.send_to(text_data='{"message": "x\\ud800y"}')
    await receive_until(comm, IDLE)

    messages = await stored(runtime, conversation)
    assert [m.content for m in messages if m.role == "user"] == [f"x{REPLACEMENT}y"]

    # The socket still answers: a second turn runs and streams.
    await comm.send_to(text_data=json.dumps({"message": "still there?"}))
    frames = await receive_until(comm, IDLE)
    assert any("still there?" in frame for frame in frames)
    await comm.disconnect()

    staff = await sync_to_async(django_user_model.objects.create_user)(
        username="staff-a", password="staff-pw-1", is_staff=True, is_superuser=True
    )
    for user, url in [
        (owner, f"/conversations/{conversation.pk}/"),
        (owner, f"/conversations/{conversation.pk}/pruned/"),
        (staff, "/admin/"),
        (staff, "/admin/memory/storedmessage/"),
    ]:
        response = await sync_to_async(get)(user, url)
        assert response.status_code == 200, (url, response.status_code)


async def test_a_text_that_cannot_be_sent_does_not_silence_the_socket(conversation, owner, chat_runtime):
    # Text stored before this boundary existed (or by a path that skipped it) reaches a fragment.
    from memory.messages import Message

    session = chat.session_of(conversation)
    await sync_to_async(chat_runtime.services.bundle.messages.append, thread_sensitive=True)(
        session, [Message(role="user", content="old \udfff text")]
    )
    comm = await connected(conversation, owner)
    await comm.send_to(text_data=json.dumps({"action": "sync"}))
    synced = await comm.receive_from(timeout=5)
    assert is_storable(synced) and f"old {REPLACEMENT} text" in synced
    await comm.send_to(text_data=json.dumps({"message": "next"}))
    frames = await receive_until(comm, IDLE)
    assert all(is_storable(frame) for frame in frames)
    await comm.disconnect()


# -- C: a frame nested deeper than the parser can go --------------------------------------------


async def test_c_deeply_nested_frame_gets_an_error_and_the_socket_stays_open(conversation, owner, chat_runtime):
    comm = await connected(conversation, owner)
    await comm.send_to(text_data="[" * 30_000 + "]" * 30_000)
    assert "not JSON" in await comm.receive_from(timeout=5)
    await comm.send_to(text_data='{"message": ' + "[" * 30_000 + "]" * 30_000 + "}")
    assert "not JSON" in await comm.receive_from(timeout=5)
    await comm.send_to(text_data=json.dumps({"message": "after the attack"}))
    frames = await receive_until(comm, IDLE)
    assert any("after the attack" in f for f in frames)
    await comm.disconnect()


# -- E: handshakes the router does not match ---------------------------------------------------


@pytest.mark.parametrize("path", ["/ws/chat/a/b/", "/ws/chat/" + "a" * 129 + "/", "/ws/other/", "/ws/chat//"])
async def test_e_unmatched_handshake_is_refused_without_a_traceback(path, owner):
    from modex_web.asgi import application

    comm = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")])
    ok, code = await comm.connect(timeout=3)
    assert not ok
    await comm.disconnect()
