import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.messages import KIND_COMPACT_SUMMARY, MalformedMessage, Message, ToolCall, messages_from_wire

texts = st.text(max_size=200)
opt_texts = st.none() | texts
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=24)


@st.composite
def messages(draw):
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    calls = ()
    tool_call_id = None
    if role == "assistant":
        call_ids = draw(st.lists(ids, max_size=3, unique=True))
        calls = tuple(ToolCall(id=i, name=draw(ids), arguments_json=json.dumps({"q": draw(texts)})) for i in call_ids)
    if role == "tool":
        tool_call_id = draw(ids)
    return Message(
        role=role,
        content=draw(opt_texts),
        reasoning_content=draw(opt_texts) if role == "assistant" else None,
        tool_calls=calls,
        tool_call_id=tool_call_id,
        name=draw(st.none() | ids),
        kind=draw(st.sampled_from(["message", KIND_COMPACT_SUMMARY])),
        seq=draw(st.none() | st.integers(min_value=0, max_value=10**9)),
        tokens=draw(st.none() | st.integers(min_value=0, max_value=10**6)),
        created_at=draw(st.datetimes(timezones=st.just(UTC))),
    )


@settings(max_examples=200)
@given(messages())
def test_wire_round_trip_is_exact(message):
    wire = message.to_wire()
    # through real JSON, as it travels to an endpoint
    again = Message.from_wire(
        json.loads(json.dumps(wire)),
        id=message.id,
        seq=message.seq,
        kind=message.kind,
        created_at=message.created_at,
        tokens=message.tokens,
    )
    assert again == message
    assert again.to_wire() == wire


@settings(max_examples=200)
@given(messages())
def test_record_round_trip_is_exact(message):
    record = json.loads(json.dumps(message.to_record()))
    assert Message.from_record(record) == message


def test_wire_shape_matches_openai():
    message = Message(
        role="assistant",
        content=None,
        reasoning_content="First look it up.",
        tool_calls=(ToolCall("call_1", "search", '{"q": "modex"}'), ToolCall("call_2", "fetch", "{}")),
    )
    assert message.to_wire() == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "First look it up.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "modex"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "fetch", "arguments": "{}"}},
        ],
    }
    tool = Message(role="tool", content="result", tool_call_id="call_1")
    assert tool.to_wire() == {"role": "tool", "content": "result", "tool_call_id": "call_1"}


def test_text_parts_are_joined_and_other_parts_rejected():
    joined = Message.from_wire({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert joined.content == "ab"
    with pytest.raises(MalformedMessage, match="only text content parts"):
        Message.from_wire({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})


def test_decoded_arguments_from_lenient_servers_become_json_text():
    message = Message.from_wire(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}
    )
    assert message.tool_calls[0].arguments() == {"a": 1}


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        ({"role": "robot", "content": "x"}, "role must be one of"),
        ({"content": "x"}, "role must be a string"),
        ({"role": "user", "content": 5}, "content must be a string"),
        ({"role": "tool", "content": "x"}, "needs the tool_call_id"),
        ({"role": "user", "content": "x", "tool_call_id": "c"}, "only valid on tool messages"),
        ({"role": "user", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": ""}}]}, "only assistant"),
        ({"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "f", "arguments": ""}}]}, "id must not be empty"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "type": "code", "function": {}}]}, "not supported"),
        ({"role": "assistant", "tool_calls": [{"id": "c"}]}, "needs a 'function' object"),
        ({"role": "assistant", "tool_calls": "c"}, "tool_calls must be a list"),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}] * 2},
            "must be distinct",
        ),
        ({"role": "user", "content": "x", "colour": "red"}, "unknown message field"),
        ("not a dict", "must be an object"),
    ],
)
def test_malformed_wire_messages_are_clear_errors(wire, error):
    with pytest.raises(MalformedMessage, match=error):
        Message.from_wire(wire)


def test_messages_from_wire_names_the_bad_position():
    with pytest.raises(MalformedMessage, match="message 1:"):
        messages_from_wire([{"role": "user", "content": "ok"}, {"role": "nobody"}])


def test_invalid_json_arguments_raise_on_decode():
    call = ToolCall("c", "f", "{not json")
    with pytest.raises(MalformedMessage, match="invalid JSON arguments"):
        call.arguments()


def test_messages_are_immutable_and_need_aware_times():
    message = Message(role="user", content="hi")
    with pytest.raises(AttributeError):
        message.content = "changed"  # type: ignore[misc]
    with pytest.raises(MalformedMessage, match="timezone-aware"):
        Message(role="user", content="hi", created_at=datetime(2026, 1, 1))


@settings(max_examples=300)
@given(messages())
def test_from_stored_equals_from_record_for_what_stores_write(message):
    record = json.loads(json.dumps(message.to_record()))
    assert Message.from_stored(record) == Message.from_record(record) == message


def _stored(**changes):
    record = Message(role="assistant", content="hi", tool_calls=(ToolCall(id="c1", name="f", arguments_json="{}"),),
                     seq=3, tokens=9).to_record()
    record.update(changes)
    return record


@pytest.mark.parametrize(
    "record",
    [
        _stored(role="robot"),
        _stored(content=5),
        _stored(seq=-1),
        _stored(tokens=True),
        _stored(created_at="yesterday"),
        _stored(tool_calls=[{"id": "", "type": "function", "function": {"name": "f", "arguments": "{}"}}]),
        _stored(tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}] * 2),
        _stored(role="user"),  # a user message with tool calls
        _stored(role="tool"),  # a tool message without tool_call_id
    ],
)
def test_from_stored_validates_what_a_store_could_not_have_written(record):
    with pytest.raises(MalformedMessage):
        Message.from_stored(record)
    with pytest.raises(MalformedMessage):
        Message.from_record(record)


def test_from_stored_takes_records_in_the_older_or_wire_shape():
    # No tokens/kind keys (an older record): validated and defaulted the from_record way.
    record = {"role": "user", "content": "hi", "id": "m1", "seq": 1, "created_at": "2026-01-01T00:00:00+00:00"}
    assert Message.from_stored(record) == Message.from_record(record)
    assert Message.from_stored(record).kind == "message"
    # An empty id or kind: from_record's defaults (a fresh id, the plain kind), not a shortcut.
    for changes in ({"id": ""}, {"kind": ""}):
        stored = Message.from_stored(_stored(**changes))
        assert stored.id and stored.kind == "message"


def test_storable_message_replaces_lone_surrogates_in_every_text_field():
    from memory.messages import storable_message

    call = ToolCall(id="c\ud800", name="todo\udfff", arguments_json='{"item": "\\ud83d here", "raw": "\ud83d"}')
    message = Message(role="assistant", content="a\ud83d", reasoning_content="\ude00b", tool_calls=(call,), tokens=3)
    clean = storable_message(message)
    assert (clean.content, clean.reasoning_content) == ("a\ufffd", "\ufffdb")
    assert (clean.tool_calls[0].id, clean.tool_calls[0].name) == ("c\ufffd", "todo\ufffd")
    # the escaped surrogate inside valid JSON is replaced too, so the tool never decodes one
    assert clean.tool_calls[0].arguments() == {"item": "\ufffd here", "raw": "\ufffd"}
    assert clean.tokens is None and clean.id == message.id
    tool = storable_message(Message(role="tool", content="r\ud800", tool_call_id="c\ud800"))
    assert (tool.content, tool.tool_call_id) == ("r\ufffd", "c\ufffd")


def test_storable_message_keeps_valid_messages_as_they_are():
    from memory.messages import storable_arguments, storable_message

    message = Message(
        role="assistant", content="nul \x00 kept 😀", tool_calls=(ToolCall("c1", "todo", '{"a": "\\ud83d\\ude00"}'),)
    )
    assert storable_message(message) is message  # a joined pair is one valid character
    assert storable_arguments("{not json \\ud800") == "{not json \\ud800"  # the runtime answers it with an error
