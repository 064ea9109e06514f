import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.messages import Message, ToolCall
from memory.transcript import (
    INTERRUPTED_RESULT,
    IllegalTranscript,
    chain_spans,
    is_legal,
    may_leave_calls_open,
    missing_results,
    repair_transcript,
    validate_transcript,
)

_ids = itertools.count()


def user(text="hi"):
    return Message(role="user", content=text)


def assistant(text="ok", calls=()):
    return Message(role="assistant", content=text, tool_calls=tuple(ToolCall(c, "t", "{}") for c in calls))


def tool(call_id):
    return Message(role="tool", content=f"result {call_id}", tool_call_id=call_id)


@st.composite
def legal_transcripts(draw):
    """Sequences of units: plain messages, or a call message followed by a permutation of its results."""
    out = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            out.append(draw(st.sampled_from([user(), assistant(), Message(role="system", content="s")])))
        else:
            calls = [f"c{next(_ids)}" for _ in range(draw(st.integers(1, 3)))]
            out.append(assistant(calls=calls))
            out.extend(tool(c) for c in draw(st.permutations(calls)))
    return out


@st.composite
def mutated_transcripts(draw):
    """A legal transcript with one corruption that always makes it illegal."""
    base = draw(legal_transcripts().filter(lambda t: any(m.role == "tool" for m in t)))
    tool_positions = [i for i, m in enumerate(base) if m.role == "tool"]
    position = draw(st.sampled_from(tool_positions))
    mutation = draw(st.sampled_from(["drop", "orphan", "interleave", "duplicate"]))
    corrupted = list(base)
    if mutation == "drop":  # a call without its result
        del corrupted[position]
    elif mutation == "orphan":  # a result without its call
        corrupted.insert(draw(st.integers(0, len(corrupted))), tool("ghost"))
    elif mutation == "interleave":  # another message inside the chain
        corrupted.insert(position, user("in between"))
    else:  # the same result twice
        corrupted.insert(position + 1, corrupted[position])
    return corrupted


@settings(max_examples=300)
@given(legal_transcripts())
def test_accepts_every_legal_transcript(transcript):
    validate_transcript(transcript)
    spans = chain_spans(transcript)
    assert [i for s, e in spans for i in range(s, e)] == list(range(len(transcript)))
    assert all(transcript[s].role != "tool" for s, _ in spans)


@settings(max_examples=300)
@given(mutated_transcripts())
def test_rejects_every_illegal_transcript(transcript):
    with pytest.raises(IllegalTranscript) as info:
        validate_transcript(transcript)
    assert 0 <= info.value.position < len(transcript)


@settings(max_examples=300)
@given(st.one_of(legal_transcripts(), mutated_transcripts()))
def test_repair_always_yields_a_legal_transcript_and_keeps_legal_ones(transcript):
    repaired, repairs = repair_transcript(transcript)
    validate_transcript(repaired)
    if is_legal(transcript):
        assert repaired == transcript and repairs == []
    # Nothing but synthetic results and dropped orphans: every non-tool message survives in order.
    assert [m for m in repaired if m.role != "tool"] == [m for m in transcript if m.role != "tool"]


def test_missing_results_close_the_last_chain_only():
    """What a new turn appends after a crashed one: results for the open calls at the very end."""
    call = assistant(calls=["a", "b"])
    added = missing_results([user(), call, tool("a")])
    assert [(m.role, m.tool_call_id, m.content) for m in added] == [("tool", "b", INTERRUPTED_RESULT)]
    validate_transcript([user(), call, tool("a"), *added])
    assert missing_results([user(), call, tool("a"), tool("b")]) == []
    assert missing_results([call, tool("a"), user("still there?")]) == []  # mid-session: not at the end
    assert missing_results([]) == []


@settings(max_examples=500)
@given(st.one_of(legal_transcripts(), mutated_transcripts()), st.data())
def test_only_a_call_or_a_result_at_the_end_can_leave_calls_open(transcript, data):
    """A turn's first write reads past the session's last message only when this says so."""
    tail = transcript[: data.draw(st.integers(0, len(transcript)))]  # a session cut anywhere, as by a crash
    if tail and not may_leave_calls_open(tail[-1]):
        assert missing_results(tail) == []


def test_the_open_end_check_by_last_message():
    assert may_leave_calls_open(assistant(calls=["a"])) and may_leave_calls_open(tool("a"))
    assert not may_leave_calls_open(assistant()) and not may_leave_calls_open(user())
    assert not may_leave_calls_open(Message(role="system", content="s"))


def test_error_names_the_first_illegal_position():
    with pytest.raises(IllegalTranscript, match="at message 0: tool result 'x' has no matching call"):
        validate_transcript([tool("x")])
    with pytest.raises(IllegalTranscript, match="at message 2: user message arrives while call"):
        validate_transcript([assistant(calls=["a", "b"]), tool("a"), user()])
    with pytest.raises(IllegalTranscript, match="at message 0: call.*have no result at the end"):
        validate_transcript([assistant(calls=["a"])])
    with pytest.raises(IllegalTranscript, match="does not answer the open calls"):
        validate_transcript([assistant(calls=["a", "b"]), tool("z")])


def test_interrupted_chain_gets_a_synthetic_result_in_place():
    call = assistant(calls=["a", "b"])
    repaired, repairs = repair_transcript([call, tool("a"), user("are you there?")])
    assert [m.role for m in repaired] == ["assistant", "tool", "tool", "user"]
    assert repaired[2].tool_call_id == "b" and repaired[2].content == INTERRUPTED_RESULT
    assert [r.action for r in repairs] == ["added_result"]
