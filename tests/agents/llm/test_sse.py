"""The event-stream reader of agents.llm.sse: the HTML event-stream rules, whatever the pieces
the body arrives in, and the same deltas over real HTTP for the line-end and field variants
servers send."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.llm import ContentDelta, Finish, complete
from agents.llm import sse
from agents.llm.sse import EventReader
from tests.fakes.openai_server import Pause, RawStream, SSELine, chunk

USER = [{"role": "user", "content": "hi"}]


def read(*pieces: bytes) -> list[str]:
    reader = EventReader()
    return [data for piece in pieces for data in reader.feed(piece)] + reader.close()


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_each_line_end_dispatches_the_same_events(end):
    body = end.join([b"data: one", b"", b"data: two", b"", b""])
    assert read(body) == ["one", "two"]


def test_data_lines_of_one_event_are_joined_and_one_space_is_dropped():
    assert read(b"data: a\ndata:b\ndata:  c\n\n") == ["a\nb\n c"]


def test_comments_other_fields_and_empty_events_are_skipped():
    body = b": keep-alive\nevent: message\nid: 7\nretry: 100\ndatum: no\n\n\n\ndata: x\n\n"
    assert read(body) == ["x"]


def test_an_event_without_its_blank_line_at_the_end_is_discarded():
    assert read(b"data: done\n\ndata: cut") == ["done"]
    assert read(b"data: done\n\ndata: cut\n") == ["done"]


def test_crlf_split_between_two_pieces_is_one_line_end():
    # Were the CR and the LF two line ends, "a" and "b" would be two events, not one.
    assert read(b"data: a\r", b"\ndata: b\r\n\r\n") == ["a\nb"]


def test_an_error_field_is_read_as_an_error_event():
    [data] = read(b'error: {"code": 500, "message": "template failed"}\n\n')
    assert json.loads(data) == {"error": {"code": 500, "message": "template failed"}}


def test_a_data_line_that_is_not_utf8_raises():
    with pytest.raises(UnicodeDecodeError):
        read(b"data: \xff\xfe\n\n")


events = st.lists(st.lists(st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12), min_size=1, max_size=3), max_size=6)


@settings(max_examples=200, deadline=None)
@given(events=events, end=st.sampled_from([b"\n", b"\r\n", b"\r"]), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_the_events_do_not_depend_on_where_the_body_is_cut(events, end, cuts):
    body = b"".join(
        b"".join(b"data: " + line.encode() + end for line in lines) + end for lines in events
    )
    positions = sorted({min(c, len(body)) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *positions], [*positions, len(body)], strict=True)]
    assert read(*pieces) == ["\n".join(lines) for lines in events]


async def test_crlf_comments_and_fields_without_a_space_over_http(fake_openai, make_model):
    fake_openai.script(
        RawStream(
            [
                SSELine(": keep-alive"),
                SSELine("data:" + json.dumps(chunk({"content": "Hel"})) + "\r\n\r"),
                SSELine("event: message\r\ndata: " + json.dumps(chunk({"content": "lo"}))),
                chunk({}, finish_reason="stop"),
            ]
        )
    )
    completion = await complete(make_model(), messages=USER)
    assert completion.content == "Hello" and completion.finish_reason == "stop"


async def test_every_delta_arrives_as_one_event_each(fake_openai, make_model):
    fake_openai.script(RawStream([chunk({"content": c}) for c in "abcdef"] + [chunk({}, finish_reason="stop")]))
    events = [event async for event in make_model().stream(messages=USER)]
    assert events[:6] == [ContentDelta(c) for c in "abcdef"] and events[-1] == Finish("stop")


async def test_the_request_goes_on_the_wire_as_given(fake_openai, make_model):
    """The request is posted as plain JSON (not through the SDK's typed ``create``): every
    message field, tool schema and option arrives unchanged, and the key goes as a header."""
    messages = [
        {"role": "system", "content": "Be brief. ünïcode ✓"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "look it up",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "todo", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    tools = [{"type": "function", "function": {"name": "todo", "parameters": {"type": "object", "properties": {}}}}]
    fake_openai.script(RawStream([chunk({"content": "ok"}), chunk({}, finish_reason="stop")]))
    completion = await complete(make_model(), messages=messages, tools=tools, temperature=0.2, max_tokens=50, timeout=5)
    assert completion.content == "ok"
    [sent] = fake_openai.chat_requests
    assert sent.path.endswith("/chat/completions") and sent.headers.get("authorization", "").startswith("Bearer ")
    body = sent.json
    assert body["messages"] == messages and body["tools"] == tools
    assert (body["stream"], body["temperature"], body["max_tokens"]) == (True, 0.2, 50)
    assert "timeout" not in body


# -- the connection after [DONE] ---------------------------------------------------------------


def answer(text: str, *after) -> RawStream:
    """``text`` as one delta, ``[DONE]``, then ``after`` (before the body ends)."""
    return RawStream([chunk({"content": text}), chunk({}, finish_reason="stop"), "[DONE]", *after], done=False)


async def test_consecutive_calls_reuse_one_connection(fake_openai, make_model):
    """The body is read to its end after ``[DONE]``, so the connection goes back to the pool:
    the second call opens none (over HTTPS, no second handshake)."""
    model = make_model()
    fake_openai.script(answer("one"), answer("two"))
    assert (await complete(model, messages=USER)).content == "one"
    assert (await complete(model, messages=USER)).content == "two"
    assert fake_openai.connections == 1


async def test_a_server_that_stalls_after_done_does_not_hold_the_answer(fake_openai, make_model):
    """The answer is complete at ``[DONE]``: a body that does not end after it gets
    DRAIN_SECONDS, not the server's 30 s; its connection is then dropped, and the next call
    opens a new one and works."""
    model = make_model()
    fake_openai.script(answer("held", Pause(30)), answer("next"))
    completion = await asyncio.wait_for(complete(model, messages=USER), timeout=10)
    assert completion.content == "held" and completion.finish_reason == "stop"
    assert (await complete(model, messages=USER)).content == "next"
    assert fake_openai.connections == 2


async def test_a_server_that_keeps_sending_after_done_is_cut_off(fake_openai, make_model, monkeypatch):
    monkeypatch.setattr(sse, "DRAIN_BYTES", 1024)
    model = make_model()
    fake_openai.script(answer("done", *[SSELine(": " + "x" * 200)] * 50), answer("next"))
    assert (await complete(model, messages=USER)).content == "done"
    assert (await complete(model, messages=USER)).content == "next"
    assert fake_openai.connections == 2
