"""OpenAIChatModel against the recorded shapes of third-party servers (LiteLLM, Ollama,
llama.cpp, llama-cpp-python, vLLM, TGI, FastAPI proxies), over real HTTP to the fake server."""

from __future__ import annotations

import logging

import pytest

from agents.llm import (
    ChatTemplateRejected,
    ContentDelta,
    ContextLengthExceeded,
    Finish,
    ModelRejected,
    ModelTimeout,
    ModelUnavailable,
    Usage,
    complete,
)
from agents.llm.sse import rewrite_error_line
from tests.fakes.openai_server import HTTPError, Pause, RawStream, Reply, chunk, error_body
from tests.fakes.recorded import (
    fastapi_error,
    litellm_stream,
    llamacpp_context_overflow,
    llamacpp_stream,
    llamacpp_template_error,
    ollama_reasoning_with_tool_call,
    plain_text_error,
    rejects_stream_options,
    strict_template,
)

USER = [{"role": "user", "content": "hi"}]
TWO_USERS = [{"role": "user", "content": "hi"}, {"role": "user", "content": "are you there?"}]


async def events_of(model, messages=USER):
    return [event async for event in model.stream(messages=messages)]


# -- recorded stream shapes ----------------------------------------------------------------------


async def test_litellm_usage_chunk_with_an_empty_delta(fake_openai, make_model):
    fake_openai.script(litellm_stream("Hello from the proxy."))
    events = await events_of(make_model())
    text = "".join(e.text for e in events if isinstance(e, ContentDelta))
    assert text == "Hello from the proxy."
    assert events[-2:] == [Usage(12, 5, 17), Finish("stop")]


async def test_ollama_reasoning_and_a_tool_call_in_one_delta(fake_openai, make_model):
    fake_openai.script(ollama_reasoning_with_tool_call(reasoning="Need the weather.", name="weather", arguments={"city": "Paris"}))
    completion = await complete(make_model(), messages=USER)
    assert completion.reasoning_content == "Need the weather."
    assert [(c.id, c.name, c.arguments()) for c in completion.tool_calls] == [("call_ollama_1", "weather", {"city": "Paris"})]
    assert completion.finish_reason == "tool_calls"
    assert completion.usage == Usage(40, 12, 52)


async def test_llamacpp_usage_after_the_finish_chunk(fake_openai, make_model):
    fake_openai.script(llamacpp_stream("one two three"))
    events = await events_of(make_model())
    assert [e.text for e in events if isinstance(e, ContentDelta)] == ["one", "two", "three"]
    assert events[-2:] == [Usage(30, 9, 39), Finish("stop")]


@pytest.mark.parametrize("reason", ["length", "content_filter"])
async def test_a_cut_off_reply_reports_its_finish_reason(fake_openai, make_model, reason):
    fake_openai.script(Reply(content="It was the best of", finish_reason=reason))
    completion = await complete(make_model(), messages=USER)
    assert completion.finish_reason == reason
    assert completion.truncated


# -- errors inside a stream that began with 200 OK ---------------------------------------------


async def test_llamacpp_in_stream_overflow_is_a_context_length_error_not_retried(fake_openai, make_model, sleeps):
    fake_openai.script(llamacpp_context_overflow(n_ctx=4096))
    with pytest.raises(ContextLengthExceeded, match="exceeds the available context size") as info:
        await events_of(make_model())
    assert info.value.window == 4096
    assert len(fake_openai.chat_requests) == 1 and sleeps == []


async def test_llamacpp_in_stream_template_error_is_clear_and_not_retried(fake_openai, make_model, sleeps):
    fake_openai.script(llamacpp_template_error())
    with pytest.raises(ChatTemplateRejected, match="chat template.*roles must alternate"):
        await events_of(make_model())
    assert len(fake_openai.chat_requests) == 1 and sleeps == []


async def test_an_openai_shaped_in_stream_error_after_output_is_classified_too(fake_openai, make_model):
    fake_openai.script(
        RawStream([chunk({"content": "Hel"}), {"error": error_body("maximum context length is 8192 tokens", code="context_length_exceeded")["error"]}])
    )
    with pytest.raises(ContextLengthExceeded) as info:
        await events_of(make_model())
    assert info.value.window == 8192


async def test_an_unclassified_in_stream_error_is_retried_as_unavailable(fake_openai, make_model, sleeps):
    overloaded = RawStream([{"error": {"message": "server overloaded", "type": "server_error"}}])
    fake_openai.script(overloaded, Reply(content="fine now"))
    completion = await complete(make_model(), messages=USER)
    assert completion.content == "fine now" and len(sleeps) == 1


def test_the_error_line_rewrite_leaves_other_lines_alone():
    assert rewrite_error_line(b'data: {"a": 1}') == b'data: {"a": 1}'
    assert rewrite_error_line(b"error: not json") == b'data: {"error": {"message": "not json"}}'
    assert rewrite_error_line(b'error: {"error": {"message": "x", "code": 500}}') == (
        b'data: {"error": {"message": "x", "code": 500}}'
    )


# -- chat templates that reject non-alternating roles -------------------------------------------


@pytest.mark.parametrize("style", ["vllm", "tgi", "llama-cpp-python", "llamacpp"])
async def test_a_strict_template_rejection_is_asked_again_folded_once(fake_openai, make_model, sleeps, style):
    fake_openai.responder = strict_template(Reply(content="ok"), style=style)
    model = make_model()
    assert (await complete(model, messages=TWO_USERS)).content == "ok"
    first, second = fake_openai.chat_requests
    assert [m["role"] for m in first.json["messages"]] == ["user", "user"]
    assert second.json["messages"] == [{"role": "user", "content": "hi\n\nare you there?"}]
    assert sleeps == [] and model.fold_roles and model.capabilities.folds_roles
    # Remembered for the endpoint: the next request is folded from the start.
    assert (await complete(model, messages=TWO_USERS)).content == "ok"
    assert len(fake_openai.chat_requests) == 3


@pytest.mark.parametrize("style", ["vllm", "llamacpp"])
async def test_a_template_that_refuses_even_the_folded_request_is_a_template_error(fake_openai, make_model, sleeps, style):
    refuse = strict_template(Reply(content="never"), style=style)
    fake_openai.responder = lambda request: refuse(type(request)(request.method, request.path, request.headers, b'{"messages": [{"role": "assistant"}]}'))
    with pytest.raises(ChatTemplateRejected, match="Conversation roles must alternate"):
        await events_of(make_model(), TWO_USERS)
    assert len(fake_openai.chat_requests) == 2 and sleeps == []  # once as it was, once folded, no more


# -- error bodies that are not OpenAI-shaped -----------------------------------------------------


async def test_fastapi_detail_text_is_kept(fake_openai, make_model):
    fake_openai.script(fastapi_error(404, "Model mistral-7b not found"))
    with pytest.raises(ModelRejected, match="HTTP 404.*: Model mistral-7b not found$"):
        await events_of(make_model())


async def test_fastapi_validation_detail_names_the_field(fake_openai, make_model):
    detail = [{"loc": ["body", "temperature"], "msg": "Input should be less than 2", "type": "less_than"}]
    fake_openai.script(HTTPError(422, {"detail": detail}))
    with pytest.raises(ModelRejected, match=r"body\.temperature: Input should be less than 2"):
        await events_of(make_model())


async def test_a_plain_text_body_is_kept(fake_openai, make_model):
    fake_openai.script(plain_text_error(400, "Bad Request: unsupported parameter 'tools'"))
    with pytest.raises(ModelRejected, match=r"HTTP 400: Bad Request: unsupported parameter 'tools'$"):
        await events_of(make_model())


async def test_a_plain_text_5xx_is_retried_and_keeps_its_text(fake_openai, make_model):
    fake_openai.script(*[plain_text_error(502, "upstream connect error")] * 2)
    with pytest.raises(ModelUnavailable, match="HTTP 502: upstream connect error"):
        await events_of(make_model(max_retries=1))


# -- stream_options, Retry-After, timeouts --------------------------------------------------------


async def test_a_server_rejecting_stream_options_is_asked_again_without_it(fake_openai, make_model, sleeps):
    fake_openai.responder = rejects_stream_options(Reply(content="no usage here"))
    model = make_model()
    assert (await complete(model, messages=USER)).content == "no usage here"
    bodies = [r.json for r in fake_openai.chat_requests]
    assert "stream_options" in bodies[0] and "stream_options" not in bodies[1]
    assert model.include_usage is False and sleeps == []
    await complete(model, messages=USER)  # remembered: the next call sends it no more
    assert len(fake_openai.chat_requests) == 3 and "stream_options" not in fake_openai.chat_requests[2].json


async def test_include_usage_false_never_sends_stream_options(fake_openai, make_model):
    fake_openai.script(Reply(content="x"))
    await complete(make_model(include_usage=False), messages=USER)
    assert "stream_options" not in fake_openai.chat_requests[0].json


async def test_retry_after_on_a_503_is_honoured(fake_openai, make_model, sleeps):
    busy = HTTPError(503, error_body("loading model", type="server_error"), {"retry-after": "2"})
    fake_openai.script(busy, Reply(content="loaded"))
    assert (await complete(make_model(), messages=USER)).content == "loaded"
    assert sleeps == [2.0]


async def test_a_timeout_after_output_started_says_so(fake_openai, make_model):
    fake_openai.script(RawStream([chunk({"content": "Hel"}), Pause(3)]))
    with pytest.raises(ModelTimeout, match="stopped sending for 0.5s after its answer had started"):
        await events_of(make_model(timeout=0.5))


# -- the window from the server's own metadata ----------------------------------------------------


async def test_vllm_max_model_len_is_the_window(fake_openai, make_model):
    fake_openai.models = [{"id": "other", "max_model_len": 999}, {"id": "fake-model", "object": "model", "max_model_len": 8192}]
    model = make_model()
    assert await model.discover_context_window() == 8192 and model.context_window == 8192
    assert await model.discover_context_window() == 8192
    assert len(fake_openai.get_requests) == 1  # asked once
    assert fake_openai.get_requests[0].headers["authorization"] == f"Bearer {model._api_key}"


async def test_llamacpp_props_n_ctx_is_the_window(fake_openai, make_model):
    fake_openai.props = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}
    model = make_model()
    assert await model.discover_context_window() == 4096
    assert [r.path for r in fake_openai.get_requests] == ["/v1/models", "/props"]


async def test_the_setting_wins_and_no_metadata_means_unknown(fake_openai, make_model):
    fake_openai.models = [{"id": "fake-model", "max_model_len": 8192}]
    assert await make_model(context_window=2048).discover_context_window() == 2048
    assert fake_openai.get_requests == []
    fake_openai.models = [{"id": "fake-model"}]
    model = make_model()
    assert await model.discover_context_window() is None and model.context_window is None


async def test_the_metadata_probe_keeps_the_base_urls_credentials_out_of_logged_urls(fake_openai, make_model, caplog):
    caplog.set_level(logging.DEBUG)
    fake_openai.props = {"default_generation_settings": {"n_ctx": 4096}}
    model = make_model(base_url=fake_openai.url.replace("http://", "http://probe-user:probe-s3cret@"))
    assert await model.discover_context_window() == 4096
    assert [r.path for r in fake_openai.get_requests] == ["/v1/models", "/props"]
    assert "/props" in caplog.text  # the requests were logged...
    assert "probe-s3cret" not in caplog.text  # ...without the password in their URL
