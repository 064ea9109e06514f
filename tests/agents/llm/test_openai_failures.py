"""OpenAIChatModel over real HTTP against the fake server: retries and every failure mode."""

from __future__ import annotations

import time

import pytest

from agents.llm import (
    ContentDelta,
    ContextLengthExceeded,
    MalformedResponse,
    ModelRejected,
    ModelTimeout,
    ModelUnavailable,
    RateLimited,
    complete,
)
from tests.fakes.openai_server import (
    Drop,
    Hang,
    HTTPError,
    Pause,
    RawStream,
    Reply,
    chunk,
    context_length_exceeded,
    error_body,
    rate_limited,
    server_error,
)

USER = [{"role": "user", "content": "hi"}]


async def events_of(model, **kwargs):
    kwargs.setdefault("messages", USER)
    return [event async for event in model.stream(**kwargs)]


# -- retries -----------------------------------------------------------------------------------


async def test_rate_limit_is_retried_after_the_servers_hint(fake_openai, make_model, sleeps):
    fake_openai.script(rate_limited(retry_after=1.5), Reply(content="finally"))
    completion = await complete(make_model(), messages=USER)
    assert completion.content == "finally"
    assert sleeps == [1.5]
    assert len(fake_openai.chat_requests) == 2


async def test_rate_limit_that_persists_raises_rate_limited(fake_openai, make_model, sleeps):
    fake_openai.script(*[rate_limited(retry_after=0.5)] * 3)
    with pytest.raises(RateLimited) as caught:
        await complete(make_model(max_retries=2), messages=USER)
    assert caught.value.retry_after == 0.5 and caught.value.status_code == 429
    assert len(fake_openai.chat_requests) == 3 and sleeps == [0.5, 0.5]


async def test_rate_limit_asking_for_a_long_wait_fails_at_once(fake_openai, make_model, sleeps):
    fake_openai.script(rate_limited(retry_after=3600))
    with pytest.raises(RateLimited) as caught:
        await complete(make_model(), messages=USER)
    assert caught.value.retry_after == 3600
    assert sleeps == [] and len(fake_openai.chat_requests) == 1


async def test_server_errors_are_retried_with_bounded_jittered_backoff(fake_openai, make_model, sleeps):
    fake_openai.script(*[server_error(500)] * 5)
    with pytest.raises(ModelUnavailable) as caught:
        await complete(make_model(max_retries=3, backoff_base=0.5), messages=USER)
    assert caught.value.status_code == 500 and "HTTP 500" in str(caught.value)
    assert len(fake_openai.chat_requests) == 4 and fake_openai.pending == 1
    assert len(sleeps) == 3
    for attempt, delay in enumerate(sleeps):
        ceiling = 0.5 * 2**attempt
        assert ceiling / 2 <= delay <= ceiling


async def test_a_transient_5xx_then_success(fake_openai, make_model, sleeps):
    fake_openai.script(server_error(503), server_error(502), Reply(content="up again"))
    assert (await complete(make_model(), messages=USER)).content == "up again"
    assert len(sleeps) == 2


async def test_connection_refused_raises_unavailable_after_retries(make_model, sleeps):
    model = make_model(base_url="http://127.0.0.1:9/v1", max_retries=2)
    with pytest.raises(ModelUnavailable, match="cannot reach"):
        await complete(model, messages=USER)
    assert len(sleeps) == 2


async def test_connection_dropped_before_any_output_is_retried(fake_openai, make_model, sleeps):
    fake_openai.script(RawStream([Drop()]), Reply(content="second try"))
    assert (await complete(make_model(), messages=USER)).content == "second try"
    assert len(sleeps) == 1


async def test_connection_dropped_mid_stream_raises_without_repeating_output(fake_openai, make_model):
    fake_openai.script(RawStream([chunk({"content": "Hel"}), chunk({"content": "lo"}), Drop()]), Reply(content="again"))
    seen = []
    with pytest.raises(ModelUnavailable):
        async for event in make_model().stream(messages=USER):
            seen.append(event)
    assert seen == [ContentDelta("Hel"), ContentDelta("lo")]
    assert len(fake_openai.chat_requests) == 1


async def test_stream_that_ends_without_a_finish_reason_is_an_interruption(fake_openai, make_model):
    fake_openai.script(RawStream([chunk({"content": "partial"})]))
    with pytest.raises(ModelUnavailable, match=r"stream of the model fake-model at http://127\.0\.0\.1:\d+/v1 ended before the answer finished"):
        await complete(make_model(), messages=USER)


# -- failures that are not retried -------------------------------------------------------------


async def test_no_answer_before_the_timeout_raises_model_timeout(fake_openai, make_model, sleeps):
    fake_openai.script(Hang(10))
    started = time.monotonic()
    with pytest.raises(ModelTimeout, match=r"0\.3s"):
        await complete(make_model(timeout=0.3), messages=USER)
    assert time.monotonic() - started < 3
    assert sleeps == [] and len(fake_openai.chat_requests) == 1


async def test_a_stall_mid_stream_raises_model_timeout(fake_openai, make_model):
    fake_openai.script(RawStream([chunk({"content": "thinking"}), Pause(10), chunk({}, finish_reason="stop")]))
    seen = []
    with pytest.raises(ModelTimeout):
        async for event in make_model().stream(messages=USER, timeout=0.3):
            seen.append(event)
    assert seen == [ContentDelta("thinking")]


async def test_invalid_json_chunk_raises_malformed_response(fake_openai, make_model, sleeps):
    fake_openai.script(RawStream([chunk({"content": "ok"}), '{"choices": [ broken']))
    with pytest.raises(MalformedResponse, match="not valid JSON"):
        await complete(make_model(), messages=USER)
    assert sleeps == []


@pytest.mark.parametrize(
    "bad_chunk",
    [
        {"id": "x", "object": "chat.completion.chunk", "choices": "nope"},
        chunk({"content": 42}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": "{}"}}]}, finish_reason="tool_calls"),
        chunk({"tool_calls": [{"index": "zero", "id": "c1", "function": {"name": "f"}}]}),
        "[1, 2]",
        {"choices": ["a choice"]},
        {"choices": [{"index": 0, "delta": 7}]},
        chunk({"tool_calls": ["a call"]}),
    ],
    ids=[
        "choices-not-a-list", "content-not-text", "tool-call-without-name", "index-not-int",
        "chunk-not-an-object", "choice-not-an-object", "delta-not-an-object", "tool-call-not-an-object",
    ],
)
async def test_impossible_chunk_shapes_raise_malformed_response(fake_openai, make_model, bad_chunk):
    fake_openai.script(RawStream([bad_chunk]))
    with pytest.raises(MalformedResponse):
        await complete(make_model(), messages=USER)


@pytest.mark.parametrize(
    "error",
    [
        context_length_exceeded(),
        context_length_exceeded(with_code=False),
        HTTPError(
            400,
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                }
            },
        ),
    ],
    ids=["openai-code", "message-only", "llama.cpp"],
)
async def test_context_length_errors_get_their_own_type(fake_openai, make_model, sleeps, error):
    fake_openai.script(error)
    with pytest.raises(ContextLengthExceeded) as caught:
        await complete(make_model(), messages=USER)
    assert caught.value.status_code == 400
    assert sleeps == [] and len(fake_openai.chat_requests) == 1


async def test_error_events_inside_the_stream_are_mapped(fake_openai, make_model):
    fake_openai.script(
        RawStream(
            [{"error": {"message": "This model's maximum context length is 2048 tokens", "type": "BadRequestError"}}]
        ),
        RawStream([chunk({"content": "a"}), {"error": {"message": "engine crashed", "type": "server_error"}}]),
    )
    with pytest.raises(ContextLengthExceeded):
        await complete(make_model(), messages=USER)
    with pytest.raises(ModelUnavailable, match="engine crashed"):
        await complete(make_model(), messages=USER)


@pytest.mark.parametrize(("status", "hint"), [(401, "OPENAI_API_KEY"), (404, "OPENAI_MODEL"), (400, "")])
async def test_other_client_errors_are_rejections_with_a_hint(fake_openai, make_model, sleeps, status, hint):
    fake_openai.script(HTTPError(status, error_body("nope")))
    with pytest.raises(ModelRejected) as caught:
        await complete(make_model(), messages=USER)
    assert caught.value.status_code == status and hint in str(caught.value) and "nope" in str(caught.value)
    assert sleeps == []
