"""Open chat sockets are closed from another worker: two daphne processes sharing one database
and (when MODEX_TEST_REDIS_URL is set) the Redis channel layer. A conversation deleted, or a
password changed, through worker B closes the socket held by worker A at once (4404, 4401);
without a shared layer the socket is refused at its next frame, and in both cases nothing is
written after the delete."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync

from memory.scopes import SessionScope
from tests.scaleout.clients import Browser, WebSocket, free_port
from tests.scaleout.test_servers import layer_env, make_user, redis_or_none, start_daphne  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


async def closed(ws: WebSocket, *, timeout: float = 15.0) -> int | None:
    """Read until the server closes the socket; its close code."""
    async def read() -> None:
        while await ws.receive() is not None:
            pass

    await asyncio.wait_for(read(), timeout)
    return ws.close_code


@pytest.mark.parametrize("shared", ["sqlite"], indirect=True)
def test_a_delete_on_one_worker_closes_the_socket_on_another(shared, redis_or_none):
    env = layer_env(redis_or_none)
    port_a, port_b = free_port(), free_port()
    start_daphne(shared, port_a, **env)
    start_daphne(shared, port_b, **env)
    username, password = make_user(shared)
    browser = Browser(port_a)
    browser.login(username, password)
    conversation = browser.new_conversation("default")

    async def scenario() -> int | None:
        ws = await WebSocket.connect(port_a, f"/ws/chat/{conversation}/", cookie=browser.cookie_header)
        assert "before the delete" in await ws.chat("before the delete")
        status, _, _ = await asyncio.to_thread(
            browser.request, "POST", f"/conversations/{conversation}/delete/", form={}, port=port_b)
        assert status == 302
        if redis_or_none:
            return await closed(ws)
        await ws.send_json({"message": "after the delete"})  # no shared layer: caught at this frame
        return await closed(ws)

    assert async_to_sync(scenario)() == 4404
    assert shared.bundle.messages.read(SessionScope(conversation), include_deleted=True) == []


@pytest.mark.parametrize("shared", ["sqlite"], indirect=True)
def test_a_password_change_on_one_worker_closes_the_socket_on_another(shared, redis_or_none):
    env = layer_env(redis_or_none)
    port_a, port_b = free_port(), free_port()
    start_daphne(shared, port_a, **env)
    start_daphne(shared, port_b, **env)
    username, password = make_user(shared)
    laptop, phone = Browser(port_a), Browser(port_b)
    laptop.login(username, password)
    phone.login(username, password)
    conversation = laptop.new_conversation("default")

    async def scenario() -> int | None:
        ws = await WebSocket.connect(port_a, f"/ws/chat/{conversation}/", cookie=laptop.cookie_header)
        await ws.chat("hello")
        phone.request("GET", "/settings/password/")
        status, _, body = await asyncio.to_thread(phone.request, "POST", "/settings/password/", form={
            "old_password": password, "new_password1": "a-fresh-pw-for-ada-9", "new_password2": "a-fresh-pw-for-ada-9"})
        assert status == 302, body[-2000:]
        if not redis_or_none:
            await ws.send_json({"action": "sync"})
        return await closed(ws)

    assert async_to_sync(scenario)() == 4401
