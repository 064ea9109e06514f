"""What OpenAIChatModel learns about its endpoint: capabilities from the server's metadata, and
refusals (response_format, tools, strict roles) answered by asking again once and remembered,
over real HTTP to the fake server."""

from __future__ import annotations

import json

import pytest

from agents.llm import ModelRejected, complete
from agents.llm.capabilities import LLAMA_CPP, OLLAMA, OPENAI, VLLM
from agents.llm.shaping import fold_roles, needs_folding
from tests.fakes.openai_server import FakeToolCall, HTTPError, Reply, error_body

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "todo", "description": "d", "parameters": {"type": "object"}}}]
JSON = {"type": "json_object"}
TOOL_TURN = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is on my list?"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "todo", "arguments": '{"action": "list"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "1. buy milk"},
]


def sent(server, index=-1) -> dict:
    return server.chat_requests[index].json


# -- response_format ---------------------------------------------------------------------------


async def test_response_format_is_sent_to_a_server_that_takes_it(fake_openai, make_model):
    fake_openai.script(Reply(content="{}"))
    model = make_model()
    await complete(model, messages=USER, response_format=JSON)
    assert sent(fake_openai)["response_format"] == JSON and model.json_mode is None


@pytest.mark.parametrize("status", [400, 422])
async def test_a_refused_response_format_is_dropped_once_and_remembered(fake_openai, make_model, sleeps, status):
    refused = HTTPError(status, error_body("Invalid parameter: 'response_format' of type 'json_object' is not supported"))
    fake_openai.script(refused, Reply(content="plain"), Reply(content="plain again"))
    model = make_model()
    assert (await complete(model, messages=USER, response_format=JSON)).content == "plain"
    assert "response_format" in sent(fake_openai, 0) and "response_format" not in sent(fake_openai, 1)
    assert model.json_mode is False and model.capabilities.json_mode is False and sleeps == []
    await complete(model, messages=USER, response_format=JSON)
    assert "response_format" not in sent(fake_openai, 2) and len(fake_openai.chat_requests) == 3


async def test_an_unrelated_400_is_not_taken_for_a_response_format_refusal(fake_openai, make_model):
    fake_openai.script(HTTPError(400, error_body("temperature must be at most 2")))
    model = make_model()
    with pytest.raises(ModelRejected, match="temperature"):
        await complete(model, messages=USER, response_format=JSON)
    assert len(fake_openai.chat_requests) == 1 and model.json_mode is None


# -- tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "refusal",
    [
        "registry.ollama.ai/library/gemma2:2b does not support tools",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "tools param requires --jinja flag",
    ],
)
async def test_refused_tools_are_dropped_loudly_and_remembered(fake_openai, make_model, caplog, refusal):
    fake_openai.script(HTTPError(400, error_body(refusal)), Reply(content="no tools then"), Reply(content="still none"))
    model = make_model()
    assert (await complete(model, messages=USER, tools=TOOLS)).content == "no tools then"
    assert "tools" in sent(fake_openai, 0) and "tools" not in sent(fake_openai, 1)
    assert model.capabilities.tools is False and "refused by the server" in model.capabilities.tools_note
    assert "cannot call tools" in caplog.text  # said, not dropped silently
    await complete(model, messages=USER, tools=TOOLS)
    assert "tools" not in sent(fake_openai, 2)


# -- strict templates --------------------------------------------------------------------------


def gemma_like(then):
    """Gemma's official template on llama.cpp: HTTP 400 for a tool role or assistant tool_calls."""

    def answer(request):
        messages = request.json["messages"]
        if needs_folding(messages):
            return HTTPError(400, error_body("Conversation roles must alternate user/assistant/user/assistant/..."))
        return then

    return answer


async def test_a_tool_turn_refused_by_a_strict_template_is_folded_into_text(fake_openai, make_model):
    fake_openai.responder = gemma_like(Reply(content="Buy milk."))
    model = make_model()
    assert (await complete(model, messages=TOOL_TURN, tools=TOOLS)).content == "Buy milk."
    folded = sent(fake_openai)["messages"]
    assert [m["role"] for m in folded] == ["system", "user", "assistant", "user"]
    assert folded[2]["content"] == '[called todo with {"action": "list"}]'
    assert folded[3]["content"] == "[result of todo]\n1. buy milk"
    assert all(set(m) == {"role", "content"} for m in folded)
    assert len(fake_openai.chat_requests) == 2 and model.capabilities.folds_roles


def test_folding_joins_roles_and_starts_with_the_user():
    messages = [
        {"role": "system", "content": "A"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "B"},
        {"role": "user", "content": "x"},
        {"role": "user", "content": "y"},
        {"role": "assistant", "content": "ok", "reasoning_content": "hidden",
         "tool_calls": [{"id": "1", "function": {"name": "a", "arguments": "not json"}},
                        {"id": "2", "function": {"name": "b", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "r1"},
        {"role": "tool", "tool_call_id": "2", "name": "b", "content": "r2"},
    ]
    folded = fold_roles(messages)
    assert folded == [
        {"role": "system", "content": "A\n\nB"},
        {"role": "user", "content": "(the conversation continues)"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "x\n\ny"},
        {"role": "assistant", "content": "ok\n[called a with not json]\n[called b with {}]"},
        {"role": "user", "content": "[result of a]\nr1\n\n[result of b]\nr2"},
    ]
    assert needs_folding(messages) and not needs_folding(folded)


# -- capabilities from the server's metadata ---------------------------------------------------


async def test_llamacpp_props_give_tools_json_window_and_slots(fake_openai, make_model):
    fake_openai.models = [{"id": "fake-model", "object": "model", "owned_by": "llamacpp"}]
    fake_openai.props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1,
                         "chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}
    model = make_model()
    caps = await model.discover()
    assert (caps.server, caps.window, caps.tools, caps.json_mode, caps.slots) == (LLAMA_CPP, 8192, False, True, 1)
    assert "cannot format tool calls" in caps.tools_label and model.context_window == 8192
    await model.discover()
    assert [r.path for r in fake_openai.get_requests] == ["/v1/models", "/props"]  # asked once


async def test_the_window_setting_wins_but_capabilities_are_still_read(fake_openai, make_model):
    fake_openai.props = {"default_generation_settings": {"n_ctx": 8192}, "chat_template_caps": {"supports_tool_calls": True}}
    model = make_model(context_window=4096)
    caps = await model.discover()
    assert (caps.window, caps.tools) == (4096, True) and model.context_window == 4096


async def test_vllm_and_ollama_and_openai(fake_openai, make_model):
    fake_openai.models = [{"id": "fake-model", "owned_by": "vllm", "max_model_len": 32768}]
    caps = await make_model().discover()
    assert (caps.server, caps.window, caps.tools, caps.json_mode) == (VLLM, 32768, None, True)
    assert "unknown" in caps.tools_label

    fake_openai.models = [{"id": "fake-model", "owned_by": "library"}]
    fake_openai.ollama_show = {"capabilities": ["completion", "tools"], "model_info": {"llama.context_length": 131072}}
    caps = await make_model().discover()
    assert (caps.server, caps.window, caps.tools) == (OLLAMA, None, True)  # its real window is not reported
    shown = [r for r in fake_openai.get_requests if r.path == "/api/show"]
    assert json.loads(shown[0].body) == {"model": "fake-model"}

    caps = await make_model(base_url="https://api.openai.com/v1").discover()
    assert (caps.server, caps.tools, caps.json_mode) == (OPENAI, True, True)


async def test_a_server_without_metadata_is_unknown_not_an_error(fake_openai, make_model):
    fake_openai.models = []
    caps = await make_model().discover()
    assert (caps.tools, caps.json_mode, caps.window, caps.detected) == (None, None, None, False)
    dead = make_model(base_url="http://127.0.0.1:9/v1", timeout=0.5)
    assert (await dead.discover()).detected is False


async def test_a_tool_call_still_works_after_capabilities_said_yes(fake_openai, make_model):
    fake_openai.props = {"default_generation_settings": {"n_ctx": 4096}, "chat_template_caps": {"supports_tool_calls": True}}
    fake_openai.script(Reply(tool_calls=[FakeToolCall("c1", "todo", '{"action": "list"}')]))
    model = make_model()
    await model.discover()
    completion = await complete(model, messages=USER, tools=TOOLS)
    assert [c.name for c in completion.tool_calls] == ["todo"] and "tools" in sent(fake_openai)
