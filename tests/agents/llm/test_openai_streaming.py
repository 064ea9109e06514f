"""OpenAIChatModel over real HTTP against the fake server: streaming, requests, cancellation, secrets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import openai
import pytest

from agents.llm import (
    ContentDelta,
    Finish,
    ModelRejected,
    ModelUnavailable,
    ReasoningDelta,
    ToolCallReady,
    Usage,
    complete,
)
from memory.messages import Message, ToolCall
from tests.fakes.openai_server import (
    FAKE_API_KEY as API_KEY,
)
from tests.fakes.openai_server import (
    FakeToolCall,
    HTTPError,
    RawStream,
    Reply,
    error_body,
    rate_limited,
    render_chunks,
)

USER = [{"role": "user", "content": "hi"}]


async def events_of(model, **kwargs):
    kwargs.setdefault("messages", USER)
    return [event async for event in model.stream(**kwargs)]


# -- streaming ---------------------------------------------------------------------------------


async def test_streams_reasoning_then_content_in_pieces_and_finishes_last(fake_openai, make_model):
    fake_openai.script(Reply(content="Hello there, friend.", reasoning="The user greets me.", usage=(21, 9)))
    events = await events_of(make_model())

    reasoning = [e.text for e in events if isinstance(e, ReasoningDelta)]
    content = [e.text for e in events if isinstance(e, ContentDelta)]
    assert len(reasoning) > 1 and "".join(reasoning) == "The user greets me."
    assert len(content) > 1 and "".join(content) == "Hello there, friend."
    assert events.index(next(e for e in events if isinstance(e, ContentDelta))) > events.index(
        next(e for e in events if isinstance(e, ReasoningDelta))
    )
    assert events[-2:] == [Usage(21, 9, 30), Finish("stop")]


async def test_reasoning_sent_as_reasoning_field_is_read_too(fake_openai, make_model):
    fake_openai.script(Reply(content="ok", reasoning="Ollama style.", reasoning_field="reasoning"))
    completion = await complete(make_model(), messages=USER)
    assert completion.reasoning_content == "Ollama style."
    assert completion.content == "ok"


async def test_split_parallel_tool_calls_are_assembled_by_index(fake_openai, make_model):
    calls = [
        FakeToolCall("call_a", "archive_search", json.dumps({"query": "launch plans for the spring"})),
        FakeToolCall("call_b", "core_memory", json.dumps({"action": "append", "file": "USER.md", "text": "Name: Sam"})),
        FakeToolCall("call_c", "pruned_lookup", json.dumps({"seq": 12})),
    ]
    reply = Reply(content="Let me check.", tool_calls=calls, chunk_chars=3)
    # The script really interleaves argument pieces of different calls.
    indices = [
        c["choices"][0]["delta"]["tool_calls"][0]["index"]
        for c in render_chunks(reply)
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert indices[:6] == [0, 1, 2, 0, 1, 2]
    fake_openai.script(reply)

    events = await events_of(make_model())

    ready = [e.call for e in events if isinstance(e, ToolCallReady)]
    assert ready == [ToolCall(c.id, c.name, c.arguments) for c in calls]
    assert events[-1] == Finish("tool_calls")
    assert all(isinstance(e, (Usage, Finish)) for e in events[events.index(ToolCallReady(ready[-1])) + 1 :])


async def test_sequential_tool_call_pieces_are_assembled_too(fake_openai, make_model):
    calls = [
        FakeToolCall("c1", "todo", '{"action": "add", "item": "write the tests"}'),
        FakeToolCall("c2", "todo", '{"action": "list"}'),
    ]
    fake_openai.script(Reply(tool_calls=calls, interleave=False, chunk_chars=5))
    completion = await complete(make_model(), messages=USER)
    assert [c.arguments() for c in completion.tool_calls] == [
        {"action": "add", "item": "write the tests"},
        {"action": "list"},
    ]
    assert completion.content is None
    assert completion.to_message().tool_calls == completion.tool_calls


async def test_usage_is_requested_and_read_from_the_last_chunk(fake_openai, make_model):
    fake_openai.script(Reply(content="ok", usage=(100, 3)))
    completion = await complete(make_model(), messages=USER)
    sent = fake_openai.chat_requests[0].json
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert completion.usage == Usage(100, 3, 103)


async def test_usage_can_be_switched_off_for_servers_that_reject_stream_options(fake_openai, make_model):
    fake_openai.script(Reply(content="ok"))
    completion = await complete(make_model(include_usage=False), messages=USER)
    assert "stream_options" not in fake_openai.chat_requests[0].json
    assert completion.usage is None and completion.finish_reason == "stop"


async def test_request_carries_the_wire_messages_and_tools_exactly(fake_openai, make_model):
    call = ToolCall("call_1", "archive_search", '{"query": "paris"}')
    history = [
        Message(role="system", content="You are helpful.\n<user_profile>Name: Sam &amp; co</user_profile>"),
        Message(role="user", content="Where did I go last year?"),
        Message(role="assistant", content=None, reasoning_content="Search the archive first.", tool_calls=(call,)),
        Message(role="tool", tool_call_id="call_1", name="archive_search", content="Trip to Paris, May."),
        Message(role="assistant", content="You went to Paris.", reasoning_content="The archive says Paris."),
        Message(role="user", content="Thanks!"),
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "archive_search",
                "description": "Search the archive.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            },
        }
    ]
    fake_openai.script(Reply(content="ok"))
    await complete(
        make_model(),
        messages=[m.to_wire() for m in history],
        tools=tools,
        model="other-model",
        temperature=0.2,
        max_tokens=50,
    )

    sent = fake_openai.chat_requests[0].json
    assert sent["messages"] == [m.to_wire() for m in history]
    assert sent["messages"][2]["reasoning_content"] == "Search the archive first."
    assert sent["tools"] == tools
    assert (sent["model"], sent["temperature"], sent["max_tokens"]) == ("other-model", 0.2, 50)


async def test_optional_parameters_are_not_sent_when_not_given(fake_openai, make_model):
    fake_openai.script(Reply(content="ok"))
    await complete(make_model(), messages=USER, tools=[])
    sent = fake_openai.chat_requests[0].json
    assert sent["model"] == "fake-model"
    assert not {"tools", "temperature", "max_tokens"} & set(sent)


# -- cancellation ------------------------------------------------------------------------------


async def test_cancelling_the_consumer_closes_the_http_stream(fake_openai, make_model):
    fake_openai.script(Reply(content="word " * 200, chunk_chars=5, delay=0.02))
    first = asyncio.Event()

    async def consume():
        async for event in make_model().stream(messages=USER):
            if isinstance(event, ContentDelta):
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(fake_openai.wait_for_disconnect, 5)


async def test_closing_the_stream_early_releases_the_connection(fake_openai, make_model):
    fake_openai.script(Reply(content="word " * 200, chunk_chars=5, delay=0.02), Reply(content="next"))
    model = make_model()
    async with contextlib.aclosing(model.stream(messages=USER)) as events:
        async for event in events:
            if isinstance(event, ContentDelta):
                break
    assert await asyncio.to_thread(fake_openai.wait_for_disconnect, 5)
    assert (await complete(model, messages=USER)).content == "next"


# -- secrets -----------------------------------------------------------------------------------


async def test_the_api_key_is_sent_but_never_logged_or_shown(fake_openai, make_model, caplog):
    caplog.set_level(logging.DEBUG)
    model = make_model()
    fake_openai.script(
        rate_limited(retry_after=0),
        Reply(content="ok"),
        # A careless server that echoes the key back in its error message.
        HTTPError(401, error_body(f"Incorrect API key provided: {API_KEY}")),
        *[RawStream([{"error": {"message": f"key {API_KEY} is over quota", "type": "server_error"}}])] * 4,
    )
    await complete(model, messages=USER)
    with pytest.raises(ModelRejected) as caught:
        await complete(model, messages=USER)

    assert fake_openai.chat_requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert "retry 1 of 3" in caplog.text
    assert "Incorrect API key provided: [redacted]" in str(caught.value)
    assert caught.value.__cause__ is None  # a traceback of the SDK error would print the key
    with pytest.raises(ModelUnavailable) as streamed:
        await complete(model, messages=USER)
    assert "[redacted] is over quota" in str(streamed.value)
    shown = [caplog.text, repr(model), model.describe(), str(caught.value), str(streamed.value)]
    shown += [
        logging.Formatter().formatException((type(e), e, e.__traceback__)) for e in (caught.value, streamed.value)
    ]
    for text in shown:
        assert API_KEY not in text


def test_one_model_serves_several_event_loops(fake_openai, sleeps):
    from agents.llm.openai import OpenAIChatModel

    model = OpenAIChatModel(base_url=fake_openai.url, api_key=API_KEY, model="fake-model", timeout=5)
    fake_openai.script(Reply(content="one"), Reply(content="two"))

    async def once() -> str | None:
        try:
            return (await complete(model, messages=USER)).content
        finally:
            await model.aclose()  # a loop's connections must be closed before the loop ends

    assert asyncio.run(once()) == "one"
    assert asyncio.run(once()) == "two"


def test_the_fake_server_answers_non_streaming_requests_too(fake_openai):
    client = openai.OpenAI(base_url=fake_openai.url, api_key=API_KEY, max_retries=0)
    fake_openai.script(
        Reply(content="plain", reasoning="why", tool_calls=[FakeToolCall("c1", "todo", '{"action": "list"}')])
    )
    completion = client.chat.completions.create(model="fake-model", messages=USER)
    message = completion.choices[0].message
    assert message.content == "plain" and getattr(message, "reasoning_content", None) == "why"
    assert message.tool_calls[0].function.name == "todo"
    assert completion.usage.total_tokens == 18
    client.close()
