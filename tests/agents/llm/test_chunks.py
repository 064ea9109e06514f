"""ChunkAssembler: the variations OpenAI-compatible servers send in streamed chunks."""

from __future__ import annotations

import pytest

from agents.llm import ContentDelta, Finish, MalformedResponse, ModelUnavailable, ReasoningDelta, ToolCallReady, Usage
from agents.llm.chunks import ChunkAssembler


def chunk(delta=None, finish=None, **extra):
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}


def assemble(*chunks):
    assembler = ChunkAssembler()
    events = [e for c in chunks for e in assembler.feed(c)]
    return events + assembler.close()


def test_content_in_the_finish_chunk_and_usage_on_every_chunk():
    events = assemble(
        chunk({"content": "a"}, usage={"prompt_tokens": 1, "completion_tokens": 1}),
        chunk({"content": "b"}, finish="stop", usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
    )
    assert events == [ContentDelta("a"), ContentDelta("b"), Usage(1, 2, 3), Finish("stop")]


def test_reasoning_content_is_preferred_when_a_server_sends_both_fields():
    events = assemble(chunk({"reasoning_content": "x", "reasoning": "x"}), chunk(finish="stop"))
    assert events == [ReasoningDelta("x"), Finish("stop")]


def test_repeated_ids_and_names_and_missing_indices():
    events = assemble(
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "todo", "arguments": '{"action"'}}]}),
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "todo", "arguments": ': "list"}'}}]}),
        chunk({"tool_calls": [{"id": "c2", "function": {"name": "archive_search", "arguments": '{"query": "x"}'}}]}),
        chunk(finish="tool_calls"),
    )
    calls = [e.call for e in events if isinstance(e, ToolCallReady)]
    assert [(c.id, c.name, c.arguments()) for c in calls] == [
        ("c1", "todo", {"action": "list"}),
        ("c2", "archive_search", {"query": "x"}),
    ]


def test_a_call_without_an_id_gets_one():
    events = assemble(
        chunk({"tool_calls": [{"index": 0, "function": {"name": "todo", "arguments": "{}"}}]}),
        chunk(finish="tool_calls"),
    )
    assert events[0].call.id.startswith("call_")


def test_invalid_arguments_are_passed_through_for_the_runtime_to_answer():
    events = assemble(
        chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "todo", "arguments": "{oops"}}]}),
        chunk(finish="stop"),
    )
    assert events[0].call.arguments_json == "{oops"


def test_other_choices_are_ignored():
    events = assemble(
        {
            "choices": [
                {"index": 1, "delta": {"content": "alt"}},
                {"index": 0, "delta": {"content": "main"}, "finish_reason": "stop"},
            ]
        }
    )
    assert events == [ContentDelta("main"), Finish("stop")]


@pytest.mark.parametrize(
    "bad",
    [
        {"choices": None},
        chunk({"tool_calls": {"index": 0}}),
        chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}),
        chunk(usage={"prompt_tokens": -1, "completion_tokens": 0}),
        chunk({"reasoning_content": ["x"]}),
    ],
)
def test_impossible_chunks(bad):
    with pytest.raises(MalformedResponse):
        assemble(bad, chunk(finish="stop"))


def test_duplicate_call_ids_are_malformed():
    with pytest.raises(MalformedResponse, match="same id"):
        assemble(
            chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "c", "function": {"name": "g", "arguments": "{}"}}]}),
            chunk(finish="tool_calls"),
        )


def test_a_stream_without_a_finish_is_an_interruption():
    with pytest.raises(ModelUnavailable):
        assemble(chunk({"content": "half"}))
