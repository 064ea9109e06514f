"""The ChatModel contract helpers: events, CompletionBuilder, complete(), as_text_completion()."""

from __future__ import annotations

import dataclasses

import pytest

from agents.llm import (
    ChatModel,
    Completion,
    CompletionBuilder,
    ContentDelta,
    Finish,
    ModelError,
    ModelUnavailable,
    OpenAIChatModel,
    ReasoningDelta,
    ToolCallReady,
    Usage,
    as_text_completion,
    complete,
    errors,
)
from memory.messages import ToolCall


class ScriptedModel:
    """A minimal ChatModel: yields the given events, optionally raising afterwards."""

    name = "scripted"

    def __init__(self, events, error=None):
        self.events, self.error, self.closed, self.calls = events, error, False, []

    def describe(self) -> str:
        return "scripted test model"

    async def stream(self, *, messages, tools=None, **options):
        self.calls.append({"messages": messages, "tools": tools, **options})
        try:
            for event in self.events:
                yield event
            if self.error:
                raise self.error
        finally:
            self.closed = True


CALL = ToolCall("call_1", "todo", '{"action": "list"}')


def test_events_are_frozen_values():
    event = ContentDelta("x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.text = "y"
    assert Usage(3, 4, 7).total == 7
    assert ToolCallReady(CALL) == ToolCallReady(ToolCall("call_1", "todo", '{"action": "list"}'))


def test_both_models_satisfy_the_protocol():
    assert isinstance(ScriptedModel([]), ChatModel)
    assert isinstance(OpenAIChatModel(base_url="http://127.0.0.1:1/v1", api_key=None, model="m"), ChatModel)


def test_errors_form_one_family():
    for name in (
        "ModelUnavailable",
        "RateLimited",
        "ModelTimeout",
        "ContextLengthExceeded",
        "MalformedResponse",
        "ModelRejected",
    ):
        assert issubclass(getattr(errors, name), ModelError)
    assert errors.ContextLengthExceeded is not errors.ModelRejected
    assert ModelUnavailable("x").retryable and not errors.ContextLengthExceeded("x").retryable


async def test_complete_drains_the_stream_into_a_completion_and_closes_it():
    model = ScriptedModel(
        [
            ReasoningDelta("Think"),
            ReasoningDelta("ing."),
            ContentDelta("Hel"),
            ContentDelta("lo"),
            ToolCallReady(CALL),
            Usage(5, 2, 7),
            Finish("tool_calls"),
        ]
    )
    completion = await complete(
        model, messages=[{"role": "user", "content": "hi"}], tools=None, model="x", temperature=0
    )
    assert completion == Completion("Hello", "Thinking.", (CALL,), Usage(5, 2, 7), "tool_calls")
    assert model.closed and model.calls[0]["model"] == "x" and model.calls[0]["temperature"] == 0


async def test_complete_propagates_model_errors():
    model = ScriptedModel([ContentDelta("par")], error=ModelUnavailable("gone"))
    with pytest.raises(ModelUnavailable, match="gone"):
        await complete(model, messages=[])
    assert model.closed


def test_to_message_gives_a_valid_assistant_message():
    with_calls = Completion(None, "why", (CALL,), None, "tool_calls").to_message()
    assert (with_calls.role, with_calls.content, with_calls.reasoning_content, with_calls.tool_calls) == (
        "assistant",
        None,
        "why",
        (CALL,),
    )
    plain = Completion("Hi", None, (), None, "stop").to_message(kind="message", tokens=4)
    assert plain.to_wire() == {"role": "assistant", "content": "Hi"} and plain.tokens == 4


def test_builder_reports_partial_output_before_the_finish():
    builder = CompletionBuilder()
    assert builder.add(ContentDelta("so far")) == ContentDelta("so far")
    assert not builder.finished and builder.content == "so far"
    partial = builder.build()
    assert partial.finish_reason == "incomplete" and partial.content == "so far"
    builder.add(Finish("stop"))
    assert builder.finished and builder.build().finish_reason == "stop"
    empty = CompletionBuilder()
    empty.add(Finish("stop"))
    assert empty.build().content == "" and empty.build().reasoning_content is None
    with pytest.raises(TypeError):
        builder.add("not an event")


async def test_as_text_completion_returns_the_text_and_offers_no_tools():
    model = ScriptedModel([ReasoningDelta("hidden"), ContentDelta("## Goal\nx"), Finish("stop")])
    summarize = as_text_completion(model, temperature=0)
    assert await summarize([{"role": "user", "content": "sum up"}]) == "## Goal\nx"
    assert model.calls[0]["tools"] is None and model.calls[0]["temperature"] == 0
    assert await as_text_completion(ScriptedModel([Finish("stop")]))([]) == ""
