"""MessageStore conformance: append, read windows, head. Runs against every backend."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import DuplicateMessage, SessionHead
from memory.tokens import compute_message_tokens

from .helpers import (
    assistant,
    big_text,
    conversation,
    tool_chain,
    tricky_messages,
    user,
)

S = SessionScope("s1")


def test_unknown_session_is_empty(bundle):
    assert bundle.messages.read(S) == []
    assert bundle.messages.read(S, last=5) == []
    assert bundle.messages.head(S) == SessionHead(S, 0, 0, 0, 0)


def test_every_field_round_trips(bundle):
    originals = tricky_messages()
    stored = bundle.messages.append(S, originals)
    assert bundle.messages.read(S) == stored
    for original, back in zip(originals, bundle.messages.read(S), strict=True):
        assert back == replace(original, seq=back.seq, tokens=back.tokens)
        assert back.created_at == original.created_at
        assert back.created_at.utcoffset() == original.created_at.utcoffset()


def test_tool_chain_with_parallel_calls_round_trips(bundle):
    chain = tool_chain()
    bundle.messages.append(S, chain)
    back = bundle.messages.read(S)
    assert [m.tool_calls for m in back] == [m.tool_calls for m in chain]
    assert back[1].call_ids == ("call_a", "call_b")
    assert back[1].content is None and back[1].reasoning_content == "I should search, then read."
    assert [m.tool_call_id for m in back[2:4]] == ["call_b", "call_a"]
    assert back[4].reasoning_content == "Both tools answered."


def test_one_megabyte_message_round_trips(bundle):
    text = big_text()
    stored = bundle.messages.append(S, [user(text)])
    [back] = bundle.messages.read(S, last=1)
    assert back.content == text and back == stored[0]


def test_append_assigns_consecutive_seqs_and_ignores_given_ones(bundle):
    first = bundle.messages.append(S, [user("a", seq=99), assistant("b", seq=1)])
    second = bundle.messages.append(S, [user("c")])
    assert [m.seq for m in first + second] == [1, 2, 3]
    assert [m.content for m in bundle.messages.read(S)] == ["a", "b", "c"]


def test_append_keeps_ids_and_counts_tokens_once(bundle):
    given = user("counted already", tokens=42)
    fresh = user("count me")
    stored = bundle.messages.append(S, [given, fresh])
    assert [m.id for m in stored] == [given.id, fresh.id]
    assert stored[0].tokens == 42
    assert stored[1].tokens == compute_message_tokens(fresh)
    assert [m.tokens for m in bundle.messages.read(S)] == [42, compute_message_tokens(fresh)]


def test_head_tracks_version_count_tokens(bundle):
    stored = bundle.messages.append(S, conversation(3))
    head = bundle.messages.head(S)
    assert (head.last_seq, head.count, head.tokens) == (3, 3, sum(m.tokens for m in stored))
    bundle.messages.append(S, [user("more")])
    later = bundle.messages.head(S)
    assert later.version > head.version
    assert (later.last_seq, later.count) == (4, 4)


def test_empty_append_changes_nothing(bundle):
    assert bundle.messages.append(S, []) == []
    assert bundle.messages.head(S).version == 0
    bundle.messages.append(S, [user()])
    before = bundle.messages.head(S)
    assert bundle.messages.append(S, []) == []
    assert bundle.messages.head(S) == before


@pytest.mark.parametrize("bad", [user("x"), "text", [user(), {"role": "user"}]])
def test_append_rejects_non_messages_and_writes_nothing(bundle, bad):
    with pytest.raises(TypeError):
        bundle.messages.append(S, bad)
    assert bundle.messages.read(S) == []


def test_duplicate_ids_are_rejected_atomically(bundle):
    first = bundle.messages.append(S, [user("one")])[0]
    before = bundle.messages.head(S)
    with pytest.raises(DuplicateMessage):
        bundle.messages.append(S, [user("new"), replace(first, content="again")])
    twin = user("twin")
    with pytest.raises(DuplicateMessage):
        bundle.messages.append(S, [twin, twin])
    assert bundle.messages.head(S) == before
    assert bundle.messages.read(S) == [first]


def test_deleted_id_cannot_be_appended_again(bundle):
    message = bundle.messages.append(S, [user("bye")])[0]
    bundle.messages.soft_delete(S, [message.id])
    with pytest.raises(DuplicateMessage):
        bundle.messages.append(S, [replace(message, seq=None)])


# -- windows ----------------------------------------------------------------------------------


@pytest.fixture
def long_session(bundle):
    """700 messages over several batch sizes (crosses the file backend's segment size)."""
    stored = []
    for size in (1, 1, 300, 2, 255, 1, 140):
        stored += bundle.messages.append(S, conversation(size, prefix=f"b{len(stored)}"))
    assert [m.seq for m in stored] == list(range(1, 701))
    return stored


@pytest.mark.parametrize("last", [1, 5, 255, 256, 257, 300, 699, 700, 1000])
def test_last_n(bundle, long_session, last):
    assert bundle.messages.read(S, last=last) == long_session[-last:]
    assert bundle.messages.tail(S, last) == long_session[-last:]


@pytest.mark.parametrize("after", [-5, 0, 1, 255, 256, 300, 512, 699, 700, 800])
def test_after_seq(bundle, long_session, after):
    assert bundle.messages.read(S, after_seq=after) == [m for m in long_session if m.seq > after]


@pytest.mark.parametrize(("after", "last"), [(0, 10), (600, 10), (600, 200), (695, 10), (100, 0), (700, 3)])
def test_after_seq_and_last(bundle, long_session, after, last):
    expected = [m for m in long_session if m.seq > after]
    assert bundle.messages.read(S, after_seq=after, last=last) == (expected[-last:] if last else [])


def test_all_returns_everything(bundle, long_session):
    assert bundle.messages.all(S) == long_session


def test_last_zero_and_bad_windows(bundle):
    bundle.messages.append(S, conversation(3))
    assert bundle.messages.read(S, last=0) == []
    with pytest.raises(ValueError):
        bundle.messages.read(S, last=-1)
    with pytest.raises(TypeError):
        bundle.messages.read(S, after_seq="2")


def test_windows_skip_deleted_unless_asked(bundle, long_session):
    doomed = [long_session[-1].id, long_session[-3].id, long_session[10].id]
    assert bundle.messages.soft_delete(S, doomed) == 3
    live = [m for m in long_session if m.id not in doomed]
    assert bundle.messages.read(S, last=4) == live[-4:]
    assert bundle.messages.read(S, last=4, include_deleted=True) == long_session[-4:]
    assert bundle.messages.read(S, after_seq=5, last=10, include_deleted=True) == long_session[-10:]
    assert bundle.messages.read(S) == live
    assert bundle.messages.head(S).count == 697


def test_a_message_is_immutable_after_store(bundle):
    stored = bundle.messages.append(S, [user("frozen")])[0]
    with pytest.raises(AttributeError):
        stored.content = "changed"  # type: ignore[misc]
    assert isinstance(bundle.messages.read(S)[0], Message)


def test_last_n_reaches_past_many_deleted_messages(bundle, long_session):
    bundle.messages.soft_delete(S, [m.id for m in long_session[-100:]])
    live = long_session[:-100]
    for last in (1, 88, 89, 150, 257, 400, 600, 650):
        assert bundle.messages.read(S, last=last) == live[-last:], last
    assert bundle.messages.read(S, after_seq=550, last=20) == live[-20:]
    assert bundle.messages.read(S, last=120, include_deleted=True) == long_session[-120:]
