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
from tests.agents.chat.conftest import IDLE, connected, receive_until, session_cookie, stored

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts")]



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


# -- the Origin check: scheme and port count -----------------------------------------------------


async def handshake(conversation, user, *, origin: bytes | None, host: bytes = b"testserver", extra=()):
    from modex_web.asgi import application

    headers = [(b"host", host), (b"cookie", await sync_to_async(session_cookie)(user)), *extra]
    if origin is not None:
        headers.append((b"origin", origin))
    comm = WebsocketCommunicator(application, f"/ws/chat/{conversation.pk}/", headers=headers)
    ok, _ = await comm.connect(timeout=3)
    await comm.disconnect()
    return ok


@pytest.mark.parametrize("origin", [
    b"http://testserver:8001",  # another port of the allowed host (another app, a dev server)
    b"https://testserver",  # another scheme
    b"http://testserver:443",
    b"http://evil.example",
    b"http://testserver.evil.example",
    b"null",  # a sandboxed frame or a file: page
    b"http://user:pw@testserver",
    b"http://testserver/path",
])
async def test_origin_of_another_port_scheme_or_site_is_refused(conversation, owner, origin):
    assert not await handshake(conversation, owner, origin=origin)


async def test_origin_is_required_and_must_match_the_sites_own(conversation, owner):
    assert not await handshake(conversation, owner, origin=None)
    assert await handshake(conversation, owner, origin=b"http://testserver")
    assert await handshake(conversation, owner, origin=b"http://TestServer:80")  # default port, any case
    # The page's own port: a site served on :8000 accepts its own pages only.
    assert await handshake(conversation, owner, origin=b"http://testserver:8000", host=b"testserver:8000")
    assert not await handshake(conversation, owner, origin=b"http://testserver:8000", host=b"testserver:8001")
    # A Host outside ALLOWED_HOSTS is refused even when the Origin matches it.
    assert not await handshake(conversation, owner, origin=b"http://evil.example", host=b"evil.example")


async def test_origin_behind_a_tls_proxy_and_trusted_origins(conversation, owner, settings):
    proto = [(b"x-forwarded-proto", b"https")]
    assert not await handshake(conversation, owner, origin=b"https://testserver", extra=proto)  # header not trusted
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert await handshake(conversation, owner, origin=b"https://testserver", extra=proto)
    assert not await handshake(conversation, owner, origin=b"http://testserver", extra=proto)  # page over https only
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.com"]
    assert await handshake(conversation, owner, origin=b"https://chat.example.com", extra=proto)
    assert not await handshake(conversation, owner, origin=b"https://chat.example.com:8443", extra=proto)
