"""MessageStore conformance: prune, soft delete, clear. Runs against every backend."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memory.scopes import SessionScope
from memory.stores.base import ConcurrentChange, DuplicateMessage, InvalidPrune
from memory.tokens import compute_message_tokens

from .helpers import conversation, summary, user

S = SessionScope("s1")


def _fill(bundle, n: int = 10):
    return bundle.messages.append(S, conversation(n))


def _version(bundle) -> int:
    return bundle.messages.head(S).version


def test_prune_leaves_summary_then_tail(bundle):
    stored = _fill(bundle)
    head = bundle.messages.head(S)
    result = bundle.messages.prune(S, through_seq=6, summary=summary(), expected_version=head.version)
    session = bundle.messages.read(S)
    assert session == [result.summary, *stored[6:]]
    assert result.summary.seq == 6 and result.summary.is_compact_summary
    assert result.summary.tokens == compute_message_tokens(result.summary)
    assert result.evicted == tuple(stored[:6])
    assert result.head == bundle.messages.head(S)
    assert result.head.version > head.version
    assert result.head.count == 5
    assert result.head.tokens == sum(m.tokens for m in session)
    assert result.head.last_seq == 10


def test_prune_without_summary(bundle):
    stored = _fill(bundle, 4)
    result = bundle.messages.prune(S, through_seq=2, summary=None, expected_version=_version(bundle))
    assert result.summary is None
    assert bundle.messages.read(S) == stored[2:]
    assert bundle.messages.head(S).count == 2


def test_prune_everything_keeps_only_the_summary(bundle):
    _fill(bundle, 5)
    result = bundle.messages.prune(S, through_seq=5, summary=summary(), expected_version=_version(bundle))
    assert bundle.messages.read(S) == [result.summary]
    assert bundle.messages.read(S, last=3) == [result.summary]
    assert bundle.messages.head(S).count == 1


def test_append_after_prune_continues_the_seq(bundle):
    _fill(bundle, 5)
    bundle.messages.prune(S, through_seq=5, summary=summary(), expected_version=_version(bundle))
    [new] = bundle.messages.append(S, [user("after")])
    assert new.seq == 6
    assert [m.seq for m in bundle.messages.read(S)] == [5, 6]


def test_second_prune_evicts_the_first_summary(bundle):
    stored = _fill(bundle, 8)
    first = bundle.messages.prune(S, through_seq=3, summary=summary("first"), expected_version=_version(bundle))
    second = bundle.messages.prune(S, through_seq=5, summary=summary("merged"), expected_version=first.head.version)
    assert second.evicted == (first.summary, stored[3], stored[4])
    assert bundle.messages.read(S) == [second.summary, *stored[5:]]


def test_pruned_ids_cannot_come_back(bundle):
    stored = _fill(bundle, 4)
    bundle.messages.prune(S, through_seq=2, summary=summary(), expected_version=_version(bundle))
    with pytest.raises(DuplicateMessage):
        bundle.messages.append(S, [replace(stored[0], seq=None)])


def test_version_guard_changes_nothing(bundle):
    _fill(bundle, 6)
    stale = bundle.messages.head(S).version
    bundle.messages.append(S, [user("meanwhile")])
    before, head = bundle.messages.read(S), bundle.messages.head(S)
    with pytest.raises(ConcurrentChange):
        bundle.messages.prune(S, through_seq=3, summary=summary(), expected_version=stale)
    assert bundle.messages.read(S) == before
    assert bundle.messages.head(S) == head


def test_prune_of_unknown_session(bundle):
    with pytest.raises(ConcurrentChange):
        bundle.messages.prune(S, through_seq=1, summary=None, expected_version=3)
    with pytest.raises(InvalidPrune):
        bundle.messages.prune(S, through_seq=1, summary=None, expected_version=0)


@pytest.mark.parametrize("through", [0, -1, 11, 10**12, "3", None, True, 2.0])
def test_invalid_through_seq(bundle, through):
    _fill(bundle)
    before, head = bundle.messages.read(S), bundle.messages.head(S)
    with pytest.raises(InvalidPrune):
        bundle.messages.prune(S, through_seq=through, summary=summary(), expected_version=head.version)
    assert bundle.messages.read(S) == before and bundle.messages.head(S) == head


def test_through_seq_must_be_live(bundle):
    stored = _fill(bundle)
    bundle.messages.soft_delete(S, [stored[4].id])
    head = bundle.messages.head(S)
    with pytest.raises(InvalidPrune):
        bundle.messages.prune(S, through_seq=5, summary=summary(), expected_version=head.version)
    result = bundle.messages.prune(S, through_seq=3, summary=None, expected_version=head.version)
    with pytest.raises(InvalidPrune):  # seq 2 is gone now
        bundle.messages.prune(S, through_seq=2, summary=None, expected_version=result.head.version)


@pytest.mark.parametrize("which", ["live", "evicted", "pruned_before", "deleted"])
def test_summary_id_must_be_new(bundle, which):
    stored = _fill(bundle)
    version = bundle.messages.head(S).version
    if which == "pruned_before":
        version = bundle.messages.prune(S, through_seq=1, summary=None, expected_version=version).head.version
    if which == "deleted":
        bundle.messages.soft_delete(S, [stored[8].id])
        version = bundle.messages.head(S).version
    taken = {"live": stored[7], "evicted": stored[2], "pruned_before": stored[0], "deleted": stored[8]}[which]
    before = bundle.messages.read(S, include_deleted=True)
    with pytest.raises(InvalidPrune):
        bundle.messages.prune(S, through_seq=4, summary=summary(id=taken.id), expected_version=version)
    assert bundle.messages.read(S, include_deleted=True) == before


def test_deleted_messages_in_range_are_dropped_not_evicted(bundle):
    stored = _fill(bundle, 6)
    bundle.messages.soft_delete(S, [stored[1].id, stored[4].id])
    result = bundle.messages.prune(S, through_seq=3, summary=summary(), expected_version=_version(bundle))
    assert result.evicted == (stored[0], stored[2])
    assert bundle.messages.read(S, include_deleted=True) == [result.summary, stored[3], stored[4], stored[5]]
    assert result.head.count == 3  # summary + seq 4 + seq 6


def test_prune_across_a_long_session(bundle):
    stored = []
    for size in (300, 300, 100):
        stored += bundle.messages.append(S, conversation(size, prefix=str(len(stored))))
    result = bundle.messages.prune(S, through_seq=450, summary=summary(), expected_version=_version(bundle))
    assert result.evicted == tuple(stored[:450])
    assert bundle.messages.read(S) == [result.summary, *stored[450:]]
    assert bundle.messages.read(S, last=260) == [result.summary, *stored[450:]][-260:]
    assert bundle.messages.head(S).count == 251
    more = bundle.messages.append(S, conversation(300, prefix="more"))
    assert bundle.messages.read(S, after_seq=690) == stored[690:] + more


# -- soft delete ------------------------------------------------------------------------------


def test_soft_delete(bundle):
    stored = _fill(bundle, 5)
    before = bundle.messages.head(S)
    assert bundle.messages.soft_delete(S, [stored[1].id, stored[3].id, "no-such-id"]) == 2
    after = bundle.messages.head(S)
    assert bundle.messages.read(S) == [stored[0], stored[2], stored[4]]
    assert bundle.messages.read(S, include_deleted=True) == stored
    assert after.version > before.version
    assert (after.count, after.tokens) == (3, before.tokens - stored[1].tokens - stored[3].tokens)


def test_soft_delete_of_nothing_changes_nothing(bundle):
    stored = _fill(bundle, 3)
    bundle.messages.soft_delete(S, [stored[0].id])
    head = bundle.messages.head(S)
    assert bundle.messages.soft_delete(S, [stored[0].id]) == 0
    assert bundle.messages.soft_delete(S, []) == 0
    assert bundle.messages.soft_delete(S, ["unknown"]) == 0
    assert bundle.messages.soft_delete(SessionScope("elsewhere"), [stored[1].id]) == 0
    assert bundle.messages.head(S) == head


def test_soft_delete_wants_a_list_of_ids(bundle):
    stored = _fill(bundle, 2)
    with pytest.raises(TypeError):
        bundle.messages.soft_delete(S, stored[0].id)
    assert bundle.messages.read(S) == stored


# -- clear ------------------------------------------------------------------------------------


def test_clear_removes_the_session(bundle):
    stored = _fill(bundle, 5)
    bundle.messages.soft_delete(S, [stored[4].id])
    bundle.messages.prune(S, through_seq=2, summary=summary(), expected_version=_version(bundle))
    before = bundle.messages.head(S)
    bundle.messages.clear(S)
    head = bundle.messages.head(S)
    assert bundle.messages.read(S, include_deleted=True) == []
    assert (head.count, head.tokens) == (0, 0)
    assert head.version > before.version, "a version from before the clear must never match again"
    # Ids may be used again; seqs keep counting.
    [again] = bundle.messages.append(S, [replace(stored[0], seq=None)])
    assert again.seq > before.last_seq


def test_clear_is_idempotent(bundle):
    bundle.messages.clear(S)
    assert bundle.messages.head(S).version == 0
    _fill(bundle, 2)
    bundle.messages.clear(S)
    head = bundle.messages.head(S)
    bundle.messages.clear(S)
    assert bundle.messages.head(S) == head


def test_stale_version_after_clear_cannot_prune(bundle):
    _fill(bundle, 3)
    stale = _version(bundle)
    bundle.messages.clear(S)
    _fill(bundle, 3)
    assert _version(bundle) > stale, "versions keep counting through a clear"
    with pytest.raises(ConcurrentChange):
        bundle.messages.prune(S, through_seq=4, summary=None, expected_version=stale)
