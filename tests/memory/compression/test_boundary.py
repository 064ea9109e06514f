"""The prune boundary: largest tail within keep_tokens, never a split chain, never a tool first."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory.tokens
from memory.compression.boundary import choose_boundary
from memory.messages import Message
from memory.transcript import chain_spans, is_legal, repair_transcript

from .helpers import assistant, call_id, chain, stored, summary_message, tool, user


def sized(message: Message, tokens: int) -> Message:
    from dataclasses import replace

    return replace(message, tokens=tokens)


def session(*units: list[Message] | Message, tokens: int = 10) -> list[Message]:
    flat: list[Message] = []
    for unit in units:
        flat.extend(unit if isinstance(unit, list) else [unit])
    return [sized(m, tokens) for m in stored(flat)]


def test_keeps_the_largest_tail_that_fits() -> None:
    messages = session(user("a"), assistant("b"), user("c"), assistant("d"), user("e"))
    boundary = choose_boundary(messages=messages, keep_tokens=25)
    assert [m.content for m in boundary.kept] == ["d", "e"]
    assert [m.content for m in boundary.evicted] == ["a", "b", "c"]
    assert boundary.through_seq == 3 and boundary.cut == 3
    assert (boundary.evicted_tokens, boundary.kept_tokens, boundary.tokens) == (30, 20, 50)
    assert (boundary.evicted_count, boundary.kept_count) == (3, 2)


def test_parallel_calls_are_one_chain_evicted_whole() -> None:
    parallel = chain("r1", "r2", "r3")  # assistant + 3 results = 40 tokens
    messages = session(user("q"), parallel, assistant("done"))
    boundary = choose_boundary(messages=messages, keep_tokens=45)  # the chain alone would fit, not with "done"
    assert [m.content for m in boundary.kept] == ["done"]
    assert boundary.evicted == tuple(messages[:5])
    boundary = choose_boundary(messages=messages, keep_tokens=50)
    assert boundary.kept == tuple(messages[1:])


def test_first_kept_is_never_a_tool_result_and_a_straddling_chain_goes_whole() -> None:
    messages = session(user("q"), chain("r1"), chain("r2", "r3"), user("next"))
    for keep in range(0, 80):
        boundary = choose_boundary(messages=messages, keep_tokens=keep)
        if boundary.kept:
            assert boundary.kept[0].role != "tool"
        assert is_legal(boundary.kept) and is_legal(boundary.evicted)
        assert boundary.kept_tokens <= keep or boundary.is_empty
        # cuts only fall between chain spans
        assert boundary.cut in {start for start, _ in chain_spans(messages)} | {len(messages)}


def test_huge_last_message_leaves_an_empty_tail() -> None:
    messages = session(user("a"), assistant("b"))
    messages[-1] = sized(messages[-1], 10**6)
    boundary = choose_boundary(messages=messages, keep_tokens=100)
    assert boundary.kept == () and boundary.evicted == tuple(messages) and boundary.through_seq == 2


def test_head_compact_summary_is_always_evicted_but_never_alone() -> None:
    tail = session(user("a"), assistant("b"), user("c"))
    messages = [summary_message(seq=1)] + [sized(m, 10) for m in stored(tail, start=2)]
    boundary = choose_boundary(messages=messages, keep_tokens=25)
    assert boundary.evicted[0].is_compact_summary and boundary.previous_summaries == (messages[0],)
    assert [m.content for m in boundary.history] == ["a"]
    # Everything but the summary fits: evicting the summary alone is pointless, so nothing moves.
    fitting = choose_boundary(messages=messages, keep_tokens=30)
    assert fitting.is_empty and fitting.cut == 0 and fitting.kept == tuple(messages)


def test_nothing_to_evict_when_everything_fits() -> None:
    messages = session(user("a"), assistant("b"))
    boundary = choose_boundary(messages=messages, keep_tokens=1000)
    assert boundary.is_empty and boundary.through_seq is None and boundary.evicted == ()
    assert choose_boundary(messages=[], keep_tokens=10).is_empty


def test_interrupted_chain_is_its_own_unit_and_stray_results_stick_to_the_unit_before() -> None:
    # Decision: the boundary never repairs (it names the cut by stored seq); an unmatched call
    # is a unit of its own and a stray result sticks to what precedes it.
    interrupted = assistant(None, calls=[call_id()])
    stray = tool("call_ghost", "orphan")
    messages = session(user("q"), interrupted, user("again"), stray, assistant("ok"))
    boundary = choose_boundary(messages=messages, keep_tokens=20)
    assert [m.content for m in boundary.kept] == ["ok"]
    boundary = choose_boundary(messages=messages, keep_tokens=30)
    assert [m.content for m in boundary.kept] == ["again", "orphan", "ok"]
    assert all(choose_boundary(messages=messages, keep_tokens=k).kept[:1] != (stray,) for k in range(60))
    leading_stray = session(tool("call_x", "orphan"), user("a"))
    assert choose_boundary(messages=leading_stray, keep_tokens=10).evicted == (leading_stray[0],)


def test_no_tokenizer_calls_when_counts_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = session(*[[user(f"q{i}"), *chain(f"r{i}", f"s{i}"), assistant(f"a{i}")] for i in range(500)])

    def forbidden(text: object) -> int:
        raise AssertionError("the boundary re-tokenized a message")

    monkeypatch.setattr(memory.tokens, "count_text", forbidden)
    monkeypatch.setattr(memory.tokens, "compute_message_tokens", forbidden)
    boundary = choose_boundary(messages=messages, keep_tokens=1234)
    assert boundary.kept_tokens <= 1234 and boundary.kept[0].role != "tool"


def test_needs_stored_messages() -> None:
    with pytest.raises(ValueError, match="seq"):
        choose_boundary(messages=[user("a")], keep_tokens=10)


@st.composite
def transcripts(draw: st.DrawFn) -> list[Message]:
    units: list[list[Message] | Message] = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["user", "assistant", "chain", "interrupted", "summary"]))
        if kind == "user":
            units.append(user("u"))
        elif kind == "assistant":
            units.append(assistant("a", reasoning=draw(st.none() | st.just("why"))))
        elif kind == "chain":
            units.append(chain(*["r"] * draw(st.integers(1, 4))))
        elif kind == "interrupted":
            units.append([assistant(None, calls=[call_id(), call_id()])])
    flat: list[Message] = []
    for unit in units:
        flat.extend(unit if isinstance(unit, list) else [unit])
    legal, _ = repair_transcript(flat)
    sizes = draw(st.lists(st.integers(1, 400), min_size=len(legal), max_size=len(legal)))
    messages = [sized(m, t) for m, t in zip(stored(legal), sizes, strict=True)]
    if draw(st.booleans()):
        messages.insert(0, sized(summary_message(seq=0), draw(st.integers(1, 400))))
    return messages


@settings(max_examples=60, deadline=None)
@given(transcripts(), st.integers(0, 3000))
def test_boundary_properties(messages: list[Message], keep: int) -> None:
    boundary = choose_boundary(messages=messages, keep_tokens=keep)
    assert boundary.evicted + boundary.kept == tuple(messages)
    assert is_legal(boundary.kept) and is_legal(boundary.evicted)
    if boundary.is_empty:
        assert all(m.is_compact_summary for m in boundary.evicted) and boundary.cut == 0
        return
    assert boundary.kept_tokens <= keep
    assert boundary.through_seq == boundary.evicted[-1].seq
    assert not boundary.kept or boundary.kept[0].role != "tool"
    # Maximal: the unit just before the cut would not have fit.
    spans = chain_spans(messages)
    before = next(span for span in spans if span[1] == boundary.cut)
    unit_tokens = sum(m.tokens or 0 for m in messages[before[0] : before[1]])
    assert boundary.kept_tokens + unit_tokens > keep or messages[before[0]].is_compact_summary


def test_an_open_chain_at_the_end_is_kept_even_when_larger_than_keep_tokens() -> None:
    ids = [call_id(), call_id()]
    running = [assistant(None, calls=ids), tool(ids[0], "first result")]  # ids[1] is still running
    messages = session(user("a"), assistant("b"), user("c"), *running, tokens=50)
    boundary = choose_boundary(messages=messages, keep_tokens=20)
    assert [m.content for m in boundary.evicted] == ["a", "b", "c"]
    assert boundary.kept[0].tool_calls and len(boundary.kept) == 2 and boundary.kept_tokens == 100


def test_a_closed_chain_larger_than_keep_tokens_is_still_evicted() -> None:
    messages = session(user("a"), *chain("r1", "r2"), tokens=50)
    boundary = choose_boundary(messages=messages, keep_tokens=20)
    assert boundary.kept == () and len(boundary.evicted) == 4
