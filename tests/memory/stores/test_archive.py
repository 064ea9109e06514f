"""ArchiveStore conformance: put/get/list/delete and search. Runs against every backend."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from memory.scopes import UserScope
from memory.stores.base import ArchiveDocument, ArchiveHit, InvalidKey

from .helpers import tool_chain, tricky_messages

U = UserScope("42")
FILLER = "the meeting covered budgets travel plans office chairs and the quarterly report"


def doc(summary: str = FILLER, **kw) -> ArchiveDocument:
    return ArchiveDocument(session="session:abc", summary=summary, **kw)


def test_put_assigns_seqs_and_get_round_trips(bundle):
    original = doc(title="Week 1 ✓", messages=tuple(tricky_messages()), metadata={"through_seq": 12, "tags": ["a"]},
                   created_at=datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC))
    first = bundle.archive.put(U, original)
    second = bundle.archive.put(U, doc())
    assert (first.seq, second.seq) == (1, 2)
    assert first == replace(original, seq=1)
    assert bundle.archive.get(U, original.id) == first
    assert bundle.archive.get(U, original.id).messages == original.messages


def test_put_is_idempotent_by_id(bundle):
    stored = bundle.archive.put(U, doc("first version"))
    again = bundle.archive.put(U, replace(stored, summary="a retried cleanup wrote this", seq=None))
    assert again == stored
    assert bundle.archive.list(U) == [stored]
    assert bundle.archive.put(U, doc()).seq == 2


def test_get_missing(bundle):
    assert bundle.archive.get(U, "nope") is None


def test_delete_and_seqs_are_never_reused(bundle):
    a, b = bundle.archive.put(U, doc()), bundle.archive.put(U, doc())
    assert bundle.archive.delete(U, b.id) is True
    assert bundle.archive.delete(U, b.id) is False
    assert bundle.archive.get(U, b.id) is None
    assert bundle.archive.put(U, doc()).seq == 3
    assert [d.seq for d in bundle.archive.list(U)] == [a.seq, 3]


def test_list_orders_and_windows(bundle):
    docs = [bundle.archive.put(U, doc(title=f"t{i}")) for i in range(6)]
    assert bundle.archive.list(U) == docs
    assert bundle.archive.list(U, after_seq=4) == docs[4:]
    assert bundle.archive.list(U, limit=2) == docs[:2]
    assert bundle.archive.list(U, newest_first=True) == docs[::-1]
    assert bundle.archive.list(U, newest_first=True, limit=2) == [docs[5], docs[4]]
    assert bundle.archive.list(U, after_seq=2, limit=2) == docs[2:4]
    assert bundle.archive.list(U, after_seq=2, newest_first=True, limit=2) == [docs[5], docs[4]]
    assert bundle.archive.list(U, limit=0) == []
    assert bundle.archive.list(U, after_seq=6) == []
    assert bundle.archive.list(UserScope("other")) == []


@pytest.mark.parametrize("bad_id", ["../x", "a/b", "", ".x", "x" * 129])
def test_invalid_document_ids(bundle, bad_id):
    with pytest.raises(InvalidKey):
        bundle.archive.put(U, doc(id=bad_id))
    with pytest.raises(InvalidKey):
        bundle.archive.get(U, bad_id)
    with pytest.raises(InvalidKey):
        bundle.archive.delete(U, bad_id)
    assert bundle.archive.list(U) == []


def test_metadata_must_be_json(bundle):
    with pytest.raises(ValueError):
        bundle.archive.put(U, doc(metadata={"when": datetime.now(UTC)}))
    assert bundle.archive.list(U) == []


# -- search -----------------------------------------------------------------------------------


def test_search_ranks_by_relevance(bundle):
    once = bundle.archive.put(U, doc(f"kubernetes upgrade. {FILLER}"))
    bundle.archive.put(U, doc(FILLER))
    often = bundle.archive.put(U, doc(f"kubernetes kubernetes kubernetes upgrade. {FILLER}"))
    hits = bundle.archive.search(U, "kubernetes")
    assert [h.document.id for h in hits] == [often.id, once.id]
    assert all(isinstance(h, ArchiveHit) for h in hits)
    assert hits[0].score > hits[1].score > 0
    assert "kubernetes" in hits[0].snippet.lower()


def test_more_query_words_matched_ranks_higher(bundle):
    one = bundle.archive.put(U, doc(f"postgres. {FILLER}"))
    both = bundle.archive.put(U, doc(f"postgres replication. {FILLER}"))
    assert [h.document.id for h in bundle.archive.search(U, "postgres replication")] == [both.id, one.id]


def test_search_matches_words_in_title_and_messages(bundle):
    titled = bundle.archive.put(U, doc(title="Zanzibar trip"))
    in_messages = bundle.archive.put(U, doc(messages=tuple(tool_chain())))
    assert [h.document.id for h in bundle.archive.search(U, "zanzibar")] == [titled.id]
    assert [h.document.id for h in bundle.archive.search(U, "found")] == [in_messages.id]


def test_search_folds_case_and_accents(bundle):
    stored = bundle.archive.put(U, doc(f"Le Café de Flore. {FILLER}"))
    for query in ("café", "CAFÉ", "cafe", "Cafe!"):
        assert [h.document.id for h in bundle.archive.search(U, query)] == [stored.id], query


def test_search_matches_whole_words_only(bundle):
    bundle.archive.put(U, doc(f"categories and concatenation. {FILLER}"))
    assert bundle.archive.search(U, "cat") == []


def test_search_respects_limit_and_scope(bundle):
    for i in range(5):
        bundle.archive.put(U, doc(f"rust {'rust ' * i} {FILLER}"))
    bundle.archive.put(UserScope("other"), doc(f"rust rust rust rust rust rust rust {FILLER}"))
    hits = bundle.archive.search(U, "rust", limit=3)
    assert len(hits) == 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.document.session == "session:abc" for h in hits)
    assert len(bundle.archive.search(U, "rust")) == 5
    assert bundle.archive.search(U, "rust", limit=0) == []


def test_deleted_documents_are_not_found(bundle):
    stored = bundle.archive.put(U, doc(f"ephemeral. {FILLER}"))
    bundle.archive.delete(U, stored.id)
    assert bundle.archive.search(U, "ephemeral") == []


HOSTILE_QUERIES = [
    '"', '""', "*", "**", "AND OR NOT", "NEAR(", "NEAR(a b", "kubernetes\"", '"unterminated', "-", "^", "+",
    "body:kubernetes", "col : x", "{a b}", "(", ")", "'", "';DROP TABLE memory_archiveentry;--", "%", "_", "\\",
    "\x00", "東京タワー", "🚀🚀", "مرحبا", "a" * 5000, " ".join(["or"] * 500), "kubernetes OR", "NOT kubernetes",
    "kubernetes*", "k*", "\u200b", "\n\t",
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_hostile_queries_never_raise(bundle, query):
    bundle.archive.put(U, doc(f"kubernetes or not, to be. 東京タワー {FILLER}"))
    hits = bundle.archive.search(U, query)
    assert isinstance(hits, list)


def test_operators_are_plain_words(bundle):
    hamlet = bundle.archive.put(U, doc(f"to be or not to be. {FILLER}"))
    kube = bundle.archive.put(U, doc(f"kubernetes. {FILLER}"))
    assert [h.document.id for h in bundle.archive.search(U, "NOT")] == [hamlet.id]
    # "and" is in both documents (FILLER): matched as a word, not obeyed as an operator.
    assert [h.document.id for h in bundle.archive.search(U, "kubernetes AND")] == [kube.id, hamlet.id]
    assert [h.document.id for h in bundle.archive.search(U, '"kubernetes*')] == [kube.id]
    assert [h.document.id for h in bundle.archive.search(U, "NEAR(kubernetes)")] == [kube.id]


@pytest.mark.parametrize("query", ["", "   ", "!!!", '"*"', "--"])
def test_queries_without_words_return_nothing(bundle, query):
    bundle.archive.put(U, doc())
    assert bundle.archive.search(U, query) == []


def test_unicode_words_are_searchable(bundle):
    tokyo = bundle.archive.put(U, doc(f"会議は 東京 で. {FILLER}"))
    arabic = bundle.archive.put(U, doc(f"مرحبا بالعالم. {FILLER}"))
    assert [h.document.id for h in bundle.archive.search(U, "東京")] == [tokyo.id]
    assert [h.document.id for h in bundle.archive.search(U, "مرحبا")] == [arabic.id]


def test_list_summaries_is_list_without_the_messages(bundle):
    tricky = {"note": ',"messages":[ inside a string', "messages": [1, 2], "nested": {"messages": []}}
    docs = [
        bundle.archive.put(U, doc(title="with history", messages=tuple(tool_chain()), metadata={"through_seq": 9})),
        bundle.archive.put(U, doc('summary quoting ,"messages":[ and "quotes"', messages=tuple(tricky_messages()))),
        bundle.archive.put(U, doc(title="metadata that looks like the cut", metadata=tricky, messages=tuple(tool_chain()))),
        bundle.archive.put(U, doc(title="no history")),
    ]
    for kwargs in ({}, {"newest_first": True}, {"limit": 2}, {"limit": 2, "newest_first": True}, {"after_seq": 2},
                   {"limit": 0}):
        expected = [replace(d, messages=()) for d in bundle.archive.list(U, **kwargs)]
        assert bundle.archive.list_summaries(U, **kwargs) == expected, kwargs
    assert [d.metadata for d in bundle.archive.list_summaries(U)] == [d.metadata for d in docs]
    assert bundle.archive.list_summaries(UserScope("nobody")) == []


def test_list_summaries_of_one_session(bundle):
    """``session`` keeps the documents archived from that session, in the same order and form;
    a key longer than the SQL column (which keeps a cut) still matches only itself."""
    long_a, long_b = "session:" + "x" * 600 + "a", "session:" + "x" * 600 + "b"
    put = [bundle.archive.put(U, replace(doc(title=f"d{i}"), session=s))
           for i, s in enumerate(["session:one", "session:two", "session:one", long_a, long_b, "session:one"])]
    mine = [replace(d, messages=()) for d in put if d.session == "session:one"]
    assert bundle.archive.list_summaries(U, session="session:one") == mine
    assert bundle.archive.list_summaries(U, session="session:one", newest_first=True, limit=2) == mine[::-1][:2]
    assert bundle.archive.list_summaries(U, session="session:one", after_seq=mine[0].seq) == mine[1:]
    assert [d.title for d in bundle.archive.list_summaries(U, session=long_a)] == ["d3"]
    assert bundle.archive.list_summaries(U, session="session:none") == []
    assert bundle.archive.list_summaries(UserScope("nobody"), session="session:one") == []


def test_list_summaries_follows_deletes_and_new_documents(bundle):
    """Summaries are decoded once per stored head (SQL) and listed fresh on every call: a
    deleted document leaves the list and a new one with the same words shows as itself."""
    first = bundle.archive.put(U, doc("the same words", title="same"))
    assert bundle.archive.list_summaries(U) == [replace(first, messages=())]
    bundle.archive.delete(U, first.id)
    assert bundle.archive.list_summaries(U) == []
    second = bundle.archive.put(U, doc("the same words", title="same"))
    assert bundle.archive.list_summaries(U) == bundle.archive.list_summaries(U) == [replace(second, messages=())]
    assert second.id != first.id and second.seq == first.seq + 1


def test_search_scores_are_computed_within_the_callers_scope(bundle):
    """Another user's archive changes neither which of a user's documents are found nor their scores."""
    alice, bob = UserScope("alice"), UserScope("bob")
    bundle.archive.put(alice, doc("we spoke about kayaks and the harbour"))
    bundle.archive.put(alice, doc("a note on lanterns and the harbour"))
    before = [(h.document.id, h.score) for h in bundle.archive.search(alice, "kayaks lanterns harbour")]
    assert len(before) == 2 and before[0][1] == pytest.approx(before[1][1])  # equal before Bob
    # Bob archives plenty of one of the words (and of others): under a global statistic "kayaks"
    # would become common and score lower than "lanterns" for Alice.
    for i in range(12):
        bundle.archive.put(bob, doc(f"kayaks kayaks harbour number {i}"))
    after = [(h.document.id, h.score) for h in bundle.archive.search(alice, "kayaks lanterns harbour")]
    assert after == before
    assert {h.document.id for h in bundle.archive.search(bob, "lanterns")} == set()


def test_archive_state_follows_puts_and_deletes(bundle):
    assert bundle.archive.archive_state(U).count == 0
    first = bundle.archive.put(U, doc())
    second = bundle.archive.put(U, doc())
    state = bundle.archive.archive_state(U)
    assert (state.last_seq, state.count) == (second.seq, 2)
    bundle.archive.put(U, replace(first, seq=None))  # idempotent: no new document
    assert bundle.archive.archive_state(U) == state
    bundle.archive.delete(U, first.id)
    after = bundle.archive.archive_state(U)
    assert after.count == 1 and after.last_seq >= second.seq
    assert bundle.archive.archive_state(UserScope("nobody")).count == 0


def test_vectors_are_stored_beside_their_document_and_replaced(bundle):
    first = bundle.archive.put(U, doc(messages=tuple(tool_chain())))
    second = bundle.archive.put(U, doc())
    assert bundle.archive.vectors(U) == {}
    assert bundle.archive.put_vectors(U, first.id, model="m-2", vectors=b"\x00\x01" * 4)
    assert bundle.archive.put_vectors(U, second.id, model="m-2", vectors=b"\x02\x03")
    assert bundle.archive.vectors(U) == {first.id: ("m-2", b"\x00\x01" * 4), second.id: ("m-2", b"\x02\x03")}
    assert bundle.archive.vectors(U, after_seq=first.seq) == {second.id: ("m-2", b"\x02\x03")}
    assert bundle.archive.put_vectors(U, first.id, model="m-3", vectors=b"\x09")  # a new model replaces
    assert bundle.archive.vectors(U)[first.id] == ("m-3", b"\x09")
    assert not bundle.archive.put_vectors(U, "no-such-document", model="m-3", vectors=b"")
    assert bundle.archive.vectors(UserScope("other")) == {}
    bundle.archive.delete(U, first.id)
    assert set(bundle.archive.vectors(U)) == {second.id}
    with pytest.raises(InvalidKey):
        bundle.archive.put_vectors(U, "../x", model="m", vectors=b"")
