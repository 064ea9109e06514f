"""ChatConsumer through the real ASGI stack (origin check, session auth, routing) with the offline model."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgiref.sync import sync_to_async

from agents.chat import service as chat
from agents.chat.meter import load_history
from agents.chat.consumer import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED, MAX_FRAME_BYTES
from agents.chat.outbox import TEXT_FRAME_SECONDS
from agents.runtime.loop import MAX_USER_CHARS
from memory.transcript import validate_transcript
from tests.agents.chat.conftest import IDLE, RUNNING, connected, drain, open_socket, receive_until, stored

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts", "live_turns")]


async def send(comm, text):
    await comm.send_to(text_data=json.dumps({"message": text, "HEADERS": {"HX-Request": "true"}}))


async def closed_with(comm) -> int:
    ok, _ = await comm.connect()
    assert ok, "the consumer accepts, then closes with a code the browser can see"
    output = await comm.receive_output(timeout=3)
    assert output["type"] == "websocket.close"
    return output["code"]


# -- who may connect --------------------------------------------------------------------------


async def test_anonymous_is_closed_with_4401(conversation):
    comm = await open_socket(conversation.pk, None)
    assert await closed_with(comm) == CLOSE_UNAUTHENTICATED
    assert await comm.receive_nothing()


async def test_foreign_origin_is_rejected_by_the_real_application(conversation, owner):
    comm = await open_socket(conversation.pk, owner, origin=b"http://evil.example")
    ok, _ = await comm.connect()
    assert not ok
    await comm.disconnect()


async def test_another_users_conversation_is_closed_with_4404_and_shows_nothing(conversation, owner, outsider, chat_runtime):
    own = await connected(conversation, owner)
    await send(own, "my secret is pelican")
    await receive_until(own, IDLE)
    await own.disconnect()

    comm = await open_socket(conversation.pk, outsider)
    assert await closed_with(comm) == CLOSE_NOT_FOUND
    # The closed socket reads nothing: a message sent anyway is ignored, nothing comes back.
    await comm.send_to(text_data=json.dumps({"message": "and mine?"}))
    assert await comm.receive_nothing(timeout=0.3)
    unknown = await open_socket("f" * 32, outsider)
    assert await closed_with(unknown) == CLOSE_NOT_FOUND
    hostile = await open_socket("..", outsider)
    assert await closed_with(hostile) == CLOSE_NOT_FOUND
    messages = await stored(chat_runtime, conversation)
    assert [m.content for m in messages if m.role == "user"] == ["my secret is pelican"]


# -- frames -----------------------------------------------------------------------------------


async def test_garbage_frames_get_an_error_fragment_and_the_socket_keeps_working(conversation, owner):
    comm = await connected(conversation, owner)
    for garbage in ["not json", "[1, 2]", '"text"', "{}", '{"message": 42}', '{"action": "dance"}', '{"message": "x", "HEADERS": 3}']:
        await comm.send_to(text_data=garbage)
        frame = await comm.receive_from(timeout=3)
        assert 'class="notice error"' in frame and "hx-swap-oob" in frame, garbage
    await comm.send_to(bytes_data=b"\x00\x01")
    assert "text frames" in await comm.receive_from(timeout=3)
    await send(comm, "hello there")
    frames = await receive_until(comm, IDLE)
    assert any("hello there" in f and 'class="msg user"' in f for f in frames)
    assert any('class="msg assistant"' in f for f in frames)
    await comm.disconnect()


async def test_oversize_frame_is_refused_and_the_socket_survives(conversation, owner, chat_runtime):
    comm = await connected(conversation, owner)
    await comm.send_to(text_data=json.dumps({"message": "x" * (MAX_FRAME_BYTES + 10)}))
    frame = await comm.receive_from(timeout=3)
    assert "too long" in frame and "32,000 characters" in frame
    # Multi-byte text counts in bytes here: a frame no message within the limit can make.
    await comm.send_to(text_data=json.dumps({"message": "é" * (MAX_FRAME_BYTES // 2 + 10)}, ensure_ascii=False))
    assert "too long" in await comm.receive_from(timeout=3)
    assert await stored(chat_runtime, conversation) == []
    await send(comm, "small one")
    await receive_until(comm, IDLE)
    await comm.disconnect()


async def test_empty_and_too_long_messages_are_rejected_with_the_runtimes_reason(conversation, owner):
    comm = await connected(conversation, owner)
    await send(comm, "   ")
    frames = await receive_until(comm, IDLE)
    assert any("empty" in f for f in frames)
    assert not any("composer-draft" in f for f in frames), "nothing worth handing back"
    await send(comm, "y" * 40000)
    frames = await receive_until(comm, IDLE)
    refusal = next(f for f in frames if "too long (40,000 characters; at most 32,000)" in f)
    assert f'<div id="composer-draft" hidden data-text="{"y" * 40000}" hx-swap-oob="true"></div>' in refusal, (
        "the refused text is handed back to the composer whole")
    await comm.disconnect()


async def test_one_limit_in_characters_whatever_the_script(conversation, owner, chat_runtime):
    """The limit is MAX_USER_CHARS characters, for any text: 30,000 CJK characters (90 KB of
    UTF-8) are not refused as a frame too large; the only other bound is the model's window, and
    that refusal names its limit in tokens. One character more than the limit is refused with the
    runtime's reason and nothing is stored."""
    comm = await connected(conversation, owner)
    cjk = "漢字仮名交じり文" * 3750  # 30,000 characters
    await comm.send_to(text_data=json.dumps({"message": cjk, "HEADERS": {"HX-Request": "true"}}, ensure_ascii=False))
    frames = await receive_until(comm, IDLE, timeout=30)
    errors = [f for f in frames if "notice error" in f]
    assert not any("KiB" in f or "characters" in f for f in errors), errors
    assert all("context window" in f and "tokens" in f for f in errors), errors
    fits = "漢字" * 1000  # 2,000 characters: well inside the chat's window
    await comm.send_to(text_data=json.dumps({"message": fits, "HEADERS": {"HX-Request": "true"}}, ensure_ascii=False))
    frames = await receive_until(comm, IDLE, timeout=30)
    assert not any("notice error" in f for f in frames), [f for f in frames if "notice error" in f]
    assert any('class="msg user"' in f and fits in f for f in frames), "the whole message was taken"
    worst = "\x01" * MAX_USER_CHARS  # six bytes of JSON each: the largest frame within the limit
    await comm.send_to(text_data=json.dumps({"message": worst + "\x01"}))
    frames = await receive_until(comm, IDLE, timeout=30)
    assert any("at most 32,000" in f for f in frames)
    assert not any('class="msg user"' in f for f in frames), "a refused message starts no turn"
    emoji = "🙂" * MAX_USER_CHARS  # 128 KB of UTF-8: past any byte limit, within the characters one
    await comm.send_to(text_data=json.dumps({"message": emoji}, ensure_ascii=False))
    frames = await receive_until(comm, IDLE, timeout=30)
    errors = [f for f in frames if "notice error" in f]
    assert not any("KiB" in f or "characters" in f for f in errors), errors
    assert all("context window" in f and "tokens" in f for f in errors), errors
    await comm.disconnect()


async def test_busy_while_a_reply_is_written(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=0.03)
    comm = await connected(conversation, owner)
    await send(comm, "tell me something long")
    await receive_until(comm, RUNNING)
    await send(comm, "and <another> thing")
    frames = await receive_until(comm, "still being written")
    assert not any('class="msg user"' in f and "another" in f for f in frames), "a refused message is not shown as sent"
    assert 'id="composer-draft" hidden data-text="and &lt;another&gt; thing"' in frames[-1], "its text is handed back"
    await receive_until(comm, IDLE, timeout=20)
    messages = await stored(runtime, conversation)
    assert [m.content for m in messages if m.role == "user"] == ["tell me something long"]
    await comm.disconnect()


async def test_a_second_tab_on_the_same_conversation_is_busy_too(conversation, owner, make_runtime):
    make_runtime(chunk_delay=0.03)
    first, second = await connected(conversation, owner), await connected(conversation, owner)
    await send(first, "first tab")
    await receive_until(first, RUNNING)
    await send(second, "second tab")
    frames = await receive_until(second, "still being written")
    assert 'id="composer-draft" hidden data-text="second tab"' in frames[-1]
    await receive_until(first, IDLE, timeout=20)
    await first.disconnect()
    await second.disconnect()


async def test_an_agent_no_longer_declared_keeps_the_composer_shut_and_hands_a_message_back(owner, chat_runtime):
    """The page shows a conversation of an agent bot.yml no longer declares with its composer
    shut; the page's sync on connect keeps it shut, and a message sent anyway (an old page) is
    refused with its text handed back, nothing stored."""
    orphan = await sync_to_async(chat.create_conversation)(user=owner, agent="default")
    orphan.agent = "retired"
    await sync_to_async(orphan.save)()
    comm = await connected(orphan, owner)
    await comm.send_to(text_data=json.dumps({"action": "sync"}))
    frame = (await receive_until(comm, 'id="composer"'))[-1]
    assert re.search(r'id="composer"[^>]*data-state="idle"[^>]*>\s*<form[^>]*>\s*<fieldset disabled>', frame), frame
    await send(comm, "still there?")
    refusal = await comm.receive_from(timeout=3)
    assert "not declared any more" in refusal and 'data-text="still there?"' in refusal
    assert await stored(chat_runtime, orphan) == []
    await comm.disconnect()


# -- a turn ----------------------------------------------------------------------------------


async def test_a_turn_streams_tokens_meter_and_final_markdown(conversation, owner, make_runtime):
    # A model that takes a moment per delta, as a real one does (an instant one is relayed in
    # as few frames as the socket takes and the frame pace allows: see the coalescing test below).
    chat_runtime = make_runtime(chunk_delay=2 * TEXT_FRAME_SECONDS)
    comm = await connected(conversation, owner)
    await send(comm, "hello <script>alert(1)</script>")
    frames = await receive_until(comm, IDLE)
    joined = "\n".join(frames)
    assert "<script>alert(1)" not in joined and "&lt;script&gt;" in joined
    assert RUNNING in frames[0]
    chunks = [f for f in frames if re.search(r'hx-swap-oob="beforeend:#live-[^"]+-content"', f)]
    assert len(chunks) >= 3, "content streams in several chunks"
    completions = [int(n) for n in re.findall(r'id="meter-completion" hx-swap-oob="true">(\d+)<', joined)]
    streamed, after = completions[:-1], completions[-1]
    assert streamed == sorted(streamed) and streamed[-1] > 0, "completion tokens grow as they stream"
    assert after == 0, '"Reply so far" goes back to zero when the reply is whole'
    assert joined.rfind('id="meter-completion"') > joined.rfind("outerHTML:#live-"), "after the final message"
    meter = next(f for f in frames if 'id="meter"' in f)
    for section in ("seg-system", "seg-tools", "seg-messages", 'class="size-threshold"', "?section=messages"):
        assert section in meter
    assert 'id="meter-chart" class="meter-chart" hx-swap-oob="true"' in joined
    assert re.search(r'<article class="msg assistant" id="msg-[0-9a-f]+" hx-swap-oob="outerHTML:#live-', joined)
    history = await sync_to_async(load_history)(kv=chat_runtime.services.bundle.kv, session=chat.session_of(conversation))
    assert len(history.points) == 1 and history.sections
    # The conversation got its title from the first message, shown in the sidebar live.
    assert 'id="conversation-title"' in joined
    await comm.disconnect()


async def test_tool_calls_render_as_collapsible_cards(conversation, owner, chat_runtime):
    comm = await connected(conversation, owner)
    await send(comm, "todo: water the plants")
    frames = await receive_until(comm, IDLE)
    joined = "\n".join(frames)
    assert re.search(r'<details class="tool is-running" id="tool-[^"]+">', joined)
    assert re.search(r'<details class="tool" id="tool-[^"]+" hx-swap-oob="true">', joined)
    assert "water the plants" in joined and "chip-tool" in joined
    validate_transcript(await stored(chat_runtime, conversation))
    await comm.disconnect()


async def test_stop_cancels_mid_stream_and_leaves_a_legal_transcript(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=0.05)
    comm = await connected(conversation, owner)
    await send(comm, "todo: plan a very long trip")
    await receive_until(comm, "beforeend:#live-")
    await comm.send_to(text_data=json.dumps({"action": "stop", "HEADERS": {}}))
    frames = await receive_until(comm, IDLE)
    assert any("Stopped." in f for f in frames)
    messages = await stored(runtime, conversation)
    validate_transcript(messages)
    assert messages[0].role == "user"
    # The conversation goes on normally after a stop.
    await send(comm, "hello again")
    await receive_until(comm, IDLE, timeout=20)
    validate_transcript(await stored(runtime, conversation))
    await comm.disconnect()


async def test_a_turn_that_triggers_cleanup_shows_it_as_it_happens(conversation, owner, chat_runtime):
    comm = await connected(conversation, owner)
    filler = " ".join(["the quick brown fox jumps over the lazy dog"] * 14)
    sequence: list[str] = []
    for n in range(8):
        await send(comm, f"message {n}: {filler}")
        frames = await receive_until(comm, IDLE, timeout=20)
        if any("Cleanup finished" in f for f in frames):
            sequence = frames
            break
    assert sequence, "the tiny threshold triggers cleanup within a few turns"

    def first(needle):
        return next(i for i, f in enumerate(sequence) if needle in f)

    order = [
        first(RUNNING),
        first('class="msg user"'),
        first("Cleanup triggered"),
        first("Cleanup finished"),
        first("beforeend:#live-"),  # the reply's first text goes out before the step's meter
        first('id="meter"'),
        first("outerHTML:#live-"),
        first(IDLE),
    ]
    assert order == sorted(order), order
    done = sequence[first("Cleanup finished")]
    pruned_url = f"/conversations/{conversation.pk}/pruned/"
    assert pruned_url in done and re.search(r"\d+ messages? moved", done)
    assert 'class="cleanup-mark"' in done, "the chart marks the cleanup"
    history = await sync_to_async(load_history)(kv=chat_runtime.services.bundle.kv, session=chat.session_of(conversation))
    assert len(history.cleanups) == 1
    messages = await stored(chat_runtime, conversation)
    assert messages[0].is_compact_summary
    validate_transcript(messages)
    await comm.disconnect()


async def test_sync_re_renders_history_with_the_summary_card(conversation, owner, chat_runtime):
    comm = await connected(conversation, owner)
    filler = " ".join(["lorem ipsum dolor sit amet"] * 30)
    for n in range(6):
        await send(comm, f"turn {n} {filler}")
        await receive_until(comm, IDLE, timeout=20)
    await comm.send_to(text_data=json.dumps({"action": "sync"}))
    frame = (await receive_until(comm, 'id="messages"'))[-1]
    assert "Earlier messages were summarized" in frame
    assert 'id="meter" class="meter' in frame and 'id="composer"' in frame
    await comm.disconnect()


async def test_sqlite_backend_turn(conversation, owner, make_runtime):
    runtime = make_runtime(backend="sqlite")
    comm = await connected(conversation, owner)
    await send(comm, "remember nothing, just say hi")
    await receive_until(comm, IDLE)
    validate_transcript(await stored(runtime, conversation))
    # Nothing follows the turn's end but, at most, the conversation's new title: it is written
    # beside the turn, and may be done after a quick reply (ChatStream).
    late = await drain(comm)
    assert len(late) <= 1 and all(f.startswith('<h1 id="conversation-title"') for f in late), late
    await comm.disconnect()


async def test_stop_during_a_long_silence_falls_back_to_cancelling(conversation, owner, make_runtime):
    runtime = make_runtime(chunk_delay=6.0)  # the first chunk comes at once, the next after 6 s
    comm = await connected(conversation, owner)
    await send(comm, "hello slow model")
    await receive_until(comm, "beforeend:#live-")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await comm.send_to(text_data=json.dumps({"action": "stop"}))
    frames = await receive_until(comm, IDLE, timeout=5)
    assert any("Stopped." in f for f in frames)
    assert loop.time() - started < 4.5, "the stop does not wait for the slow model"
    messages = await stored(runtime, conversation)
    validate_transcript(messages)
    assert messages[-1].role == "assistant" and "stopped" in messages[-1].content
    await comm.disconnect()


def test_queued_deltas_coalesce_into_one_frame_in_order():
    import collections

    from agents.chat.outbox import coalesce
    from agents.runtime.events import ContentChunk, ReasoningChunk, TurnFinished

    finished = TurnFinished.__new__(TurnFinished)  # any non-chunk event stops a merge
    pending = collections.deque([
        ReasoningChunk("th"), ReasoningChunk("ink"),
        ContentChunk("Hel", 1), ContentChunk("lo ", 2), ContentChunk("<b>", 3),
        "<div>a fragment</div>",
        ContentChunk("again", 4),
        finished,
    ])
    out = []
    while pending:
        out.append(coalesce(pending))
    assert out == [ReasoningChunk("think"), ContentChunk("Hello <b>", 3), "<div>a fragment</div>",
                   ContentChunk("again", 4), finished]
    single = ContentChunk("x", 1)
    assert coalesce(collections.deque([single])) is single


async def test_a_fast_stream_arrives_whole_in_fewer_frames_with_a_live_meter(conversation, owner, chat_runtime):
    comm = await connected(conversation, owner)
    await send(comm, "tell me something long")
    frames = await receive_until(comm, IDLE)
    pattern = re.compile(r'<div hx-swap-oob="beforeend:#live-[^"]+-content">([^<]*)</div>')
    streamed = "".join(html_unescape(part) for frame in frames for part in pattern.findall(frame))
    reply = [m for m in await stored(chat_runtime, conversation) if m.role == "assistant"][-1]
    assert streamed == reply.content
    joined = "\n".join(frames)
    completions = [int(n) for n in re.findall(r'id="meter-completion" hx-swap-oob="true">(\d+)<', joined)]
    # "Reply so far" rises while the reply streams, then goes back to 0 once the reply is whole.
    assert len(completions) >= 2 and completions[-1] == 0
    live = completions[:-1]
    assert live == sorted(live) and live[-1] > 0
    await comm.disconnect()


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


# -- what goes out first ------------------------------------------------------------------------


class SlowStart:
    """The offline model, answering after ``delay`` seconds (a model slow to its first token);
    with a ``log``, writing "request" to it when a model request is made."""

    def __init__(self, inner, delay: float, log: list | None = None) -> None:
        self.inner, self.delay, self.log = inner, delay, log

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def stream(self, **request):
        if self.log is not None:
            self.log.append("request")
        await asyncio.sleep(self.delay)
        async for event in self.inner.stream(**request):
            yield event


def first_index(frames, needle: str) -> int:
    return next(i for i, f in enumerate(frames) if needle in f)


CONTENT = 'hx-swap-oob="beforeend:#live-'
METER = 'id="meter"'
TITLE = 'id="conversation-title"'


async def test_the_first_text_goes_out_before_the_meter_and_the_title(conversation, owner, chat_runtime, monkeypatch):
    # Generous waits, so that only the order is tested (an instant model answers well within them).
    monkeypatch.setattr("agents.chat.outbox.METER_HOLD_SECONDS", 5.0)
    monkeypatch.setattr("agents.chat.fragments.ACTIVITY_DELAY_SECONDS", 5.0)
    comm = await connected(conversation, owner)
    await send(comm, "a question that names the conversation")
    frames = await receive_until(comm, IDLE)
    content, meter, title = first_index(frames, CONTENT), first_index(frames, METER), first_index(frames, TITLE)
    assert content < meter and content < title, "the reply's first text is not held up by the meter or the title"
    assert "seg-messages" in frames[meter] and "a question that names" in frames[title]
    assert "Thinking…" not in frames[meter], 'a meter after the first text leaves the status at "Writing…"'
    await comm.disconnect()


async def test_a_model_slow_to_its_first_token_holds_back_neither_meter_nor_title(conversation, owner, make_runtime, monkeypatch):
    from agents.llm import OfflineChatModel

    monkeypatch.setattr("agents.chat.outbox.METER_HOLD_SECONDS", 0.05)
    monkeypatch.setattr("agents.chat.fragments.ACTIVITY_DELAY_SECONDS", 0.05)
    make_runtime(model=SlowStart(OfflineChatModel(), 1.0))
    comm = await connected(conversation, owner)
    await send(comm, "a question that names the conversation")
    frames = await receive_until(comm, IDLE)
    content, meter, title = first_index(frames, CONTENT), first_index(frames, METER), first_index(frames, TITLE)
    assert meter < content and title < content, "the meter and the title come while the model thinks"
    await comm.disconnect()


COMPOSER_SHUT = 'id="composer"'


async def test_the_opening_frames_are_rendered_after_the_model_request_is_made(conversation, owner, make_runtime, monkeypatch):
    from agents.chat.consumer import ChatConsumer
    from agents.llm import OfflineChatModel

    monkeypatch.setattr("agents.chat.outbox.OPENING_HOLD_SECONDS", 5.0)
    log: list = []
    send_frame = ChatConsumer.send

    async def logged_send(self, text_data=None, bytes_data=None, close=False):
        log.append(text_data)
        return await send_frame(self, text_data=text_data, bytes_data=bytes_data, close=close)

    monkeypatch.setattr(ChatConsumer, "send", logged_send)
    make_runtime(model=SlowStart(OfflineChatModel(), 0, log))
    comm = await connected(conversation, owner)
    await send(comm, "hello there")
    frames = await receive_until(comm, IDLE)
    assert log[0] == "request", "nothing was rendered between the turn's first write and the model request"
    shut, echoed, content = first_index(frames, COMPOSER_SHUT), first_index(frames, "hello there"), first_index(frames, CONTENT)
    assert shut < echoed < content, "the composer is shut and the message shown before the reply's first text"
    await comm.disconnect()


async def test_the_opening_frames_wait_at_most_the_hold_for_a_slow_context(conversation, owner, chat_runtime, monkeypatch):
    from agents.runtime.loop import Runtime

    monkeypatch.setattr("agents.chat.outbox.OPENING_HOLD_SECONDS", 0.05)
    assemble = Runtime._assemble

    async def slow_assemble(self, ctx, schemas):
        await asyncio.sleep(2.0)
        return await assemble(self, ctx, schemas)

    monkeypatch.setattr(Runtime, "_assemble", slow_assemble)
    comm = await connected(conversation, owner)
    await send(comm, "hello there")
    early = [await comm.receive_from(timeout=1.0), await comm.receive_from(timeout=1.0)]
    assert COMPOSER_SHUT in early[0] and RUNNING in early[0], "the composer is shut at once, not after the context"
    assert "hello there" in early[1], "the message is shown while the context is still being assembled"
    await receive_until(comm, IDLE)
    await comm.disconnect()


async def test_a_turn_starts_before_the_old_database_connections_are_closed(conversation, owner, chat_runtime, monkeypatch):
    """Channels closes its synchronous thread's old database connections before each handler, a
    trip to that thread in front of every turn. For a client's frame they are closed after the
    handler (ChatConsumer.dispatch): the turn has started by then. Still once per frame."""
    import channels.consumer

    from agents.chat import consumer
    from agents.runtime.loop import Runtime

    log: list[str] = []
    close = channels.consumer.aclose_old_connections

    async def counted():
        log.append("close")
        await asyncio.sleep(0.3)  # a slow trip to the synchronous thread
        await close()
        log.append("closed")

    run_turn = Runtime.run_turn

    def logged_run_turn(self, **kwargs):
        log.append("turn")
        return run_turn(self, **kwargs)

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    monkeypatch.setattr(consumer, "aclose_old_connections", counted)
    monkeypatch.setattr(Runtime, "run_turn", logged_run_turn)
    comm = await connected(conversation, owner)
    assert log == ["close", "closed"], "the connect went through channels' own dispatch"
    await send(comm, "hello there")
    await receive_until(comm, IDLE)
    await asyncio.sleep(0.5)
    assert log[2:] == ["close", "turn", "closed"], "the turn did not wait for the connections to be closed"
    await comm.send_json_to({"action": "sync"})
    await comm.receive_from(timeout=5)
    await asyncio.sleep(0.5)
    assert log[5:] == ["close", "closed", "close", "closed"], "a sync re-render closes them before it reads, then after"
    await comm.disconnect()


async def test_the_meter_that_waited_for_the_first_text_lets_it_reach_the_socket_first(conversation, owner, chat_runtime, monkeypatch):
    """Daphne writes a frame to the socket a few passes of the event loop after it is sent;
    rendering the meter takes a millisecond or two of the loop. So the meter that waited for the
    step's first text (agents.chat.outbox) starts rendering FLUSH_SECONDS after it."""
    from agents.chat.consumer import ChatConsumer
    from agents.chat.fragments import ChatStream
    from agents.runtime.events import ContextReady

    monkeypatch.setattr("agents.chat.outbox.FLUSH_SECONDS", 0.3)
    log: list[tuple[str, float]] = []
    clock = asyncio.get_running_loop().time
    send_frame, render = ChatConsumer.send, ChatStream.render

    async def logged_send(self, text_data=None, bytes_data=None, close=False):
        if text_data and CONTENT in text_data:
            log.append(("text sent", clock()))
        return await send_frame(self, text_data=text_data, bytes_data=bytes_data, close=close)

    async def logged_render(self, event):
        if isinstance(event, ContextReady):
            log.append(("meter rendered", clock()))
        return await render(self, event)

    monkeypatch.setattr(ChatConsumer, "send", logged_send)
    monkeypatch.setattr(ChatStream, "render", logged_render)
    comm = await connected(conversation, owner)
    await send(comm, "hello there")
    await receive_until(comm, IDLE)
    (first, sent), (second, rendered) = log[0], log[1]
    assert (first, second) == ("text sent", "meter rendered"), log[:3]
    assert rendered - sent >= 0.25
    await comm.disconnect()
