"""A turn outlives its socket: it runs to its end when the page goes, and a page that comes back
mid-reply picks the stream up where it is (agents.chat.turns), through the real ASGI stack."""

from __future__ import annotations

import asyncio
import html
import json
import re

import pytest
from asgiref.sync import sync_to_async

from agents.chat import service as chat
from agents.chat import turns
from agents.chat.meter import load_history
from agents.runtime.loop import TURN_LEASE
from agents.runtime.writes import STOPPED_NOTE
from memory.locks import acquire_lease, release_lease
from memory.transcript import validate_transcript
from tests.agents.chat.conftest import IDLE, RUNNING, connected, receive_until, stored

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts", "live_turns")]

LONG = "a long answer please: " + "words " * 60
CHUNK = re.compile(r'<div hx-swap-oob="beforeend:#(live-[^"]+)-content">(.*?)</div>', re.S)


async def send(comm, text):
    await comm.send_to(text_data=json.dumps({"message": text, "HEADERS": {"HX-Request": "true"}}))


async def turn_over(runtime, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while turns.registry.running() or runtime._running:
        assert loop.time() < deadline, "the turn did not end"
        await asyncio.sleep(0.02)


def streamed(frames: list[str]) -> str:
    """The reply text the frames streamed into live bubbles, in order."""
    return "".join(html.unescape(text) for frame in frames for _live, text in CHUNK.findall(frame))


async def test_a_reply_is_stored_whole_when_its_socket_closes_mid_stream(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=0.02)
    comm = await connected(conversation, owner)
    await send(comm, LONG)
    await receive_until(comm, "beforeend:#live-")
    await comm.disconnect()
    assert turns.registry.running(), "the turn goes on without its socket"
    await turn_over(runtime)
    messages = await stored(runtime, conversation)
    validate_transcript(messages)
    assert [m.role for m in messages] == ["user", "assistant"]
    reply = messages[-1]
    assert reply.kind == "message" and STOPPED_NOTE not in reply.content and "words" in reply.content
    # The meter was recorded with no socket left to render it.
    history = await sync_to_async(load_history)(kv=runtime.services.bundle.kv, session=chat.session_of(conversation))
    assert len(history.points) == 1


async def test_a_tool_chain_runs_to_its_answer_when_the_socket_closes_inside_it(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=0.05)
    comm = await connected(conversation, owner)
    await send(comm, "todo: call the plumber")
    await receive_until(comm, "running…")  # inside the tool chain
    await comm.disconnect()
    await turn_over(runtime)
    messages = await stored(runtime, conversation)
    validate_transcript(messages)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert STOPPED_NOTE not in messages[-1].content and "interrupted" not in (messages[2].content or "")


async def test_a_page_reloaded_mid_reply_gets_the_text_so_far_then_the_rest(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=0.03)
    old = await connected(conversation, owner)
    await send(old, LONG)
    first = await receive_until(old, '-content">')  # the reasoning, then a little of the reply
    first += await receive_until(old, '-content">')  # then the page goes
    await old.disconnect()
    await asyncio.sleep(0.1)  # the reply goes on meanwhile

    new = await connected(conversation, owner)
    await new.send_to(text_data=json.dumps({"action": "sync"}))  # what every page sends on connect
    frames = await receive_until(new, 'id="messages"')
    synced = frames[-1]
    assert RUNNING in synced and "Writing…" in synced, "the page shows the reply as still being written"
    assert LONG.strip() in html.unescape(synced), "the question is there"
    resumed = CHUNK.findall(synced)
    assert resumed and resumed[0][1], "the reply so far comes in the sync, in a live bubble"
    so_far = streamed([synced])
    assert so_far.startswith(streamed(first)), "the text so far is what the old page had, and more"
    frames = await receive_until(new, IDLE, timeout=30)
    later = [f for f in frames if CHUNK.search(f)]
    assert later, "the rest streams live"
    assert {live for f in later for live, _ in CHUNK.findall(f)} == {resumed[0][0]}, "into the same bubble"
    messages = await stored(runtime, conversation)
    reply = messages[-1]
    assert reply.role == "assistant" and STOPPED_NOTE not in reply.content
    assert so_far + streamed(later) == reply.content, "nothing missing, nothing twice"
    assert any(f'outerHTML:#{resumed[0][0]}' in f for f in frames), "the whole reply replaces the live bubble"
    await new.disconnect()


async def test_a_second_tab_watches_the_reply_and_its_stop_stops_it(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=0.05)
    first, second = await connected(conversation, owner), await connected(conversation, owner)
    await send(first, LONG)
    await receive_until(first, "beforeend:#live-")
    await second.send_to(text_data=json.dumps({"action": "sync"}))
    await receive_until(second, 'id="messages"')
    await receive_until(second, "beforeend:#live-")  # the second tab receives the stream too
    await second.send_to(text_data=json.dumps({"action": "stop"}))
    for comm in (first, second):
        frames = await receive_until(comm, "Stopped.", timeout=10)
        assert IDLE in frames[-1]
    messages = await stored(runtime, conversation)
    validate_transcript(messages)
    assert STOPPED_NOTE in messages[-1].content
    await first.disconnect()
    await second.disconnect()


async def test_a_stop_from_a_page_reloaded_mid_reply_stops_the_turn(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=0.05)
    old = await connected(conversation, owner)
    await send(old, LONG)
    await receive_until(old, "beforeend:#live-")
    await old.disconnect()
    new = await connected(conversation, owner)
    await new.send_to(text_data=json.dumps({"action": "stop"}))
    await receive_until(new, "Stopped.", timeout=10)
    await turn_over(runtime)
    assert STOPPED_NOTE in (await stored(runtime, conversation))[-1].content
    await send(new, "and now?")
    await receive_until(new, IDLE, timeout=20)
    validate_transcript(await stored(runtime, conversation))
    await new.disconnect()


async def test_a_turn_another_worker_runs_is_followed_until_it_ends(conversation, owner, chat_runtime):
    """A turn this process does not run (another worker's: its lease is held): the page says a
    reply is being written, keeps the composer shut, and re-renders once the lease is given back."""
    kv, session = chat_runtime.services.bundle.kv, chat.session_of(conversation)
    lease = await sync_to_async(acquire_lease)(kv=kv, scope=session, name=TURN_LEASE, ttl=60.0)
    comm = await connected(conversation, owner)
    frames = await receive_until(comm, "still being written or tidied up", timeout=5)
    assert RUNNING in frames[-1]
    await sync_to_async(release_lease)(kv=kv, lease=lease)
    frames = await receive_until(comm, "has ended", timeout=5)
    assert IDLE in frames[-1]
    await comm.disconnect()


async def test_a_stop_sent_through_the_conversations_group_stops_the_turn(conversation, owner, make_runtime):
    """How a socket of another worker stops a turn it does not run: the conversation's group
    message reaches the sockets of the worker that runs it (here, the in-memory layer)."""
    from channels.layers import get_channel_layer

    from agents.chat import sockets
    from agents.chat.consumer import STOP

    runtime = make_runtime(chunk_delay=0.05)
    comm = await connected(conversation, owner)
    await send(comm, LONG)
    await receive_until(comm, "beforeend:#live-")
    await get_channel_layer().group_send(sockets.conversation_group(conversation.pk), {"type": STOP})
    frames = await receive_until(comm, "Stopped.", timeout=10)
    assert IDLE in frames[-1]
    assert STOPPED_NOTE in (await stored(runtime, conversation))[-1].content
    await comm.disconnect()


async def test_a_reply_too_long_to_resume_shows_once_it_is_complete(conversation, owner, make_runtime, monkeypatch):
    """Past MAX_LIVE_CHARS the turn keeps no more of the step's text for joining pages: such a
    page is told so, shows none of the step's deltas (only its tail would come), then the whole
    stored reply."""
    from agents.chat.consumer import LIVE_OVERFLOW

    monkeypatch.setattr(turns, "MAX_LIVE_CHARS", 40)
    runtime = make_runtime(chunk_delay=0.03)
    old = await connected(conversation, owner)
    await send(old, LONG)
    await receive_until(old, '-content">')
    await receive_until(old, '-content">')
    await old.disconnect()
    new = await connected(conversation, owner)
    await new.send_to(text_data=json.dumps({"action": "sync"}))
    frames = await receive_until(new, 'id="messages"')
    assert LIVE_OVERFLOW in html.unescape(frames[-1]) and not CHUNK.search(frames[-1])
    frames = await receive_until(new, IDLE, timeout=30)
    assert not any(CHUNK.search(f) for f in frames), "no tail of the reply streams in alone"
    reply = (await stored(runtime, conversation))[-1]
    assert STOPPED_NOTE not in reply.content
    assert any(f'id="msg-{reply.id}"' in f or reply.id in f for f in frames), "the whole reply is shown"
    await new.disconnect()
