"""Archive retrieval on every backend: messages ranked by words and meaning, within the caller's
scope only, kept in step with the store, readable around a handle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory.messages import Message
from memory.retrieval import text as analysis
from memory.retrieval.embeddings import WordLlamaEmbedder, encode
from memory.retrieval.messages import InvalidHandle, parse_handle
from memory.retrieval.service import Retrieval
from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import ArchiveDocument

ALICE = CompositeScope(AgentScope("default"), UserScope("alice"))
BOB = CompositeScope(AgentScope("default"), UserScope("bob"))
DAY = datetime(2023, 5, 8, 9, 0, tzinfo=UTC)


def document(session: str, *texts: str, day: int = 0, roles=("user", "assistant")) -> ArchiveDocument:
    messages = tuple(
        Message(role=roles[i % len(roles)], content=text, created_at=DAY + timedelta(days=day, minutes=i)).with_seq(i + 1)
        for i, text in enumerate(texts)
    )
    return ArchiveDocument(session=f"session:{session}", summary="", messages=messages, title=f"About {session}")


def put(bundle, scope, *docs):
    return [bundle.archive.put(scope, d) for d in docs]


@pytest.fixture
def words_only(bundle):
    return Retrieval(archive=bundle.archive, embedder=None)


@pytest.fixture
def hybrid(bundle):
    return Retrieval(archive=bundle.archive, embedder=WordLlamaEmbedder())


def texts(hits):
    return [h.message.text for h in hits]


def test_analysis_stems_and_drops_stop_words():
    assert analysis.terms("What did I say about moving to Porto?") == ["move", "porto"]
    assert analysis.terms("She moved; they are moving; he moves") == ["move", "move", "move"]
    assert analysis.query_terms("what did you do") == []
    assert analysis.query_terms("Lisb") == [("lisb", "lisb")]


def test_names_come_out_of_a_query_as_whole_words_with_their_possessive():
    assert analysis.without_names("What kind of paintings does Nadia make?", ["Nadia", "Felix"]) == (
        "What kind of paintings does make?")
    assert analysis.without_names("Is NADIA's dog calm, Felix?", ["Nadia", "Felix"]) == "Is dog calm, ?"
    assert analysis.without_names("Where did Maya Lopez move?", ["Maya Lopez"]) == "Where did move?"
    assert analysis.without_names("Nadiana paints", ["Nadia"]) == "Nadiana paints"  # a word, not a prefix
    # A query that is nothing but names is searched as it is (someone asked for the name).
    assert analysis.without_names("Nadia?", ["Nadia"]) == "Nadia?"
    assert analysis.without_names("what about Nadia", ["Nadia"]) == "what about Nadia"
    assert analysis.without_names("Nadia paints", []) == "Nadia paints"
    assert analysis.without_names("Nadia paints", ["", "a"]) == "Nadia paints"  # nothing to take out


def test_the_participants_names_say_who_spoke_and_are_left_out_of_the_query(bundle, hybrid, words_only):
    greetings = {"Nadia! Good to hear from you.", "Nadia, that sounds lovely.", "Tell me, Nadia!"}
    put(bundle, ALICE,
        document("a", "Hi Felix! Long time, the hospital has me on nights.", "Nadia! Good to hear from you.",
                 "I took up painting to unwind, watercolour landscapes of the river mostly.",
                 "Nadia, that sounds lovely.", day=0),
        document("b", "Guess what, big news from the exhibition.", "Tell me, Nadia!", day=4))
    question = "What does Nadia paint?"
    # The name matches every time the other side addressed her, and those turns say nothing.
    assert greetings & set(texts(words_only.search(ALICE, question, limit=3)))
    for retrieval in (words_only, hybrid):
        found = texts(retrieval.search(ALICE, question, limit=3, names=("Nadia", "Felix")))
        assert found[0] == "I took up painting to unwind, watercolour landscapes of the river mostly."
    assert not greetings & set(texts(words_only.search(ALICE, question, limit=3, names=("Nadia", "Felix"))))
    # Asking for the name alone still finds it.
    assert greetings & set(texts(words_only.search(ALICE, "Nadia", names=("Nadia",))))


def test_words_rank_messages_and_stop_words_match_nothing(bundle, words_only):
    put(bundle, ALICE,
        document("a", "I moved to Porto last spring.", "How do you like Porto?", "The weather is nice."),
        document("b", "My sister Ana is a nurse in Braga.", "What does she enjoy?", day=3))
    hits = words_only.search(ALICE, "Where did I move?")
    assert texts(hits) == ["I moved to Porto last spring."]
    assert hits[0].message.role == "user" and hits[0].message.created_at == DAY and hits[0].matched == ("move",)
    assert texts(words_only.search(ALICE, "Ana's job, is she a nurse?"))[0] == "My sister Ana is a nurse in Braga."
    assert words_only.search(ALICE, "what did you say to me then") == []
    assert texts(words_only.search(ALICE, "lisb")) == []
    assert texts(words_only.search(ALICE, "brag")) == ["My sister Ana is a nurse in Braga."]  # a word begun


def test_another_users_archive_changes_neither_hits_nor_scores(bundle, words_only):
    put(bundle, ALICE, document("a", "We talked about kayaks.", "And about lanterns.", "Kayaks and lanterns again."))
    before = [(h.message.handle, h.score, h.words) for h in words_only.search(ALICE, "kayaks lanterns", limit=5)]
    put(bundle, BOB, *[document(f"b{i}", "kayaks kayaks kayaks", "lanterns?") for i in range(15)])
    after = [(h.message.handle, h.score, h.words) for h in words_only.search(ALICE, "kayaks lanterns", limit=5)]
    assert after == before and len(before) == 3
    assert {h.message.session for h in words_only.search(BOB, "kayaks", limit=20)} == {f"session:b{i}" for i in range(15)}


def test_meaning_finds_what_words_miss(bundle, hybrid, words_only):
    put(bundle, ALICE, document("a", "We relocated to the coast in March.", "The kids started a new school.",
                                "I bought a red bicycle yesterday."))
    assert words_only.search(ALICE, "moving house") == []
    found = hybrid.search(ALICE, "moving house")
    assert found and found[0].message.text == "We relocated to the coast in March." and found[0].words is None
    assert found[0].similarity >= hybrid.min_similarity
    assert "bicycle" not in " ".join(texts(found))


def test_stored_vectors_of_the_model_are_used_and_other_models_ignored(bundle):
    embedder = WordLlamaEmbedder()
    [doc] = put(bundle, ALICE, document("a", "alpha", "beta"))
    planted = np.zeros((2, embedder.dimensions), dtype=np.float32)
    planted[0, 1] = 1.0  # "alpha" points elsewhere,
    planted[1, 0] = 1.0  # "beta" exactly where the query vector will
    bundle.archive.put_vectors(ALICE, doc.id, model=embedder.model, vectors=encode(planted))

    class Fixed:
        model, dimensions = embedder.model, embedder.dimensions

        def embed(self, texts):
            out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
            out[:, 0] = 1.0
            return out

    hits = Retrieval(archive=bundle.archive, embedder=Fixed()).search(ALICE, "zzz")
    assert texts(hits) == ["beta"]  # the stored vector, not one made in memory
    bundle.archive.put_vectors(ALICE, doc.id, model="another-model", vectors=encode(planted))
    # Vectors of another model are ignored: both messages are embedded afresh, and alike.
    again = Retrieval(archive=bundle.archive, embedder=Fixed()).search(ALICE, "zzz")
    assert sorted(texts(again)) == ["alpha", "beta"]


def test_the_index_follows_documents_added_and_removed(bundle, words_only):
    [first] = put(bundle, ALICE, document("a", "The harbour festival is in June."))
    assert words_only.indexed(ALICE) == 1 and texts(words_only.search(ALICE, "harbour"))
    [second] = put(bundle, ALICE, document("b", "The harbour was closed for the storm.", day=2))
    assert len(words_only.search(ALICE, "harbour")) == 2
    bundle.archive.delete(ALICE, first.id)
    assert texts(words_only.search(ALICE, "harbour")) == ["The harbour was closed for the storm."]
    bundle.archive.delete(ALICE, second.id)
    put(bundle, ALICE, document("c", "Nothing about the sea.", day=3))
    assert words_only.search(ALICE, "harbour") == [] and words_only.indexed(ALICE) == 1


def test_reading_around_a_handle_crosses_documents_of_one_conversation(bundle, words_only):
    one = document("a", "first", "second", "third")
    two = ArchiveDocument(session="session:a", summary="", title="About a", messages=tuple(
        Message(role="user", content=text, created_at=DAY + timedelta(hours=1, minutes=i)).with_seq(4 + i)
        for i, text in enumerate(["fourth", "fifth"])))
    other = document("z", "elsewhere")
    first, second, _ = put(bundle, ALICE, one, two, other)
    around = words_only.around(ALICE, f"{second.seq}.4", before=2, after=1)
    assert [m.text for m in around] == ["second", "third", "fourth", "fifth"]
    assert [m.text for m in words_only.around(ALICE, f"{first.seq}.1", before=5, after=0)] == ["first"]
    assert words_only.around(ALICE, f"{first.seq}.9") == []
    assert words_only.around(BOB, f"{first.seq}.1") == []  # another user's scope holds no such handle
    with pytest.raises(InvalidHandle):
        words_only.around(ALICE, "../etc")
    assert parse_handle("#12.37") == (12, 37)


def test_excluded_messages_are_left_out_and_the_limit_holds(bundle, words_only):
    put(bundle, ALICE, document("a", *[f"garden note {i}" for i in range(30)]))
    hits = words_only.search(ALICE, "garden", limit=7, exclude=lambda m: m.seq % 2 == 0)
    assert len(hits) == 7 and all(h.message.seq % 2 == 1 for h in hits)


def test_a_hit_names_the_other_half_of_its_exchange(bundle, words_only):
    put(bundle, ALICE, document(
        "x", "Any idea for a gift for my dad?", "A good pair of gardening gloves.", "And for my aunt?",
        roles=("user", "assistant", "user"),
    ))
    by_text = {h.message.text: h for h in words_only.search(ALICE, "gift dad gardening gloves aunt", window=1)}
    assert by_text["Any idea for a gift for my dad?"].partner.text == "A good pair of gardening gloves."
    assert by_text["A good pair of gardening gloves."].partner.text == "Any idea for a gift for my dad?"
    assert by_text["And for my aunt?"].partner is None  # not answered (yet) in the archive
    assert all(h.partner is None for h in words_only.search(ALICE, "gift dad"))  # only when asked


def test_a_reply_is_read_with_the_turn_before_it_and_a_message_keeps_its_own_reading():
    """By meaning, a message counts as close as the nearer of its own vector and its vector with
    half the previous turn's: an elliptical reply is found by what it answers, and a fact said
    in the middle of talk about something else is still found by itself."""
    from memory.retrieval.index import PREVIOUS_TURN_WEIGHT, ScopeIndex

    painting, landscapes, stairs, bakery = np.eye(4, 64, dtype=np.float32)
    texts = ("Painting! What kind?", "Watercolour landscapes, mostly the river.",
             "Take the stairs twice a day.", "My boss runs a bakery.")
    messages = tuple(Message(role=("user", "assistant")[i % 2], content=t, created_at=DAY).with_seq(i + 1)
                     for i, t in enumerate(texts))
    index = ScopeIndex(dimensions=64)
    index.add_document(ArchiveDocument(session="session:p", summary="", messages=messages),
                       np.stack([painting, landscapes, stairs, bakery]))
    rows, similarities = index.nearest(painting, min_similarity=0.25)
    closeness = dict(zip((index.rows[r].text for r in rows.tolist()), similarities.tolist(), strict=True))
    reading = PREVIOUS_TURN_WEIGHT / np.sqrt(1 + PREVIOUS_TURN_WEIGHT**2)  # 0.447: by the question alone
    assert closeness == pytest.approx({texts[0]: 1.0, texts[1]: reading})
    rows, similarities = index.nearest(bakery, min_similarity=0.25)
    assert [index.rows[r].text for r in rows.tolist()] == [texts[3]] and similarities[0] == pytest.approx(1.0)
    # Vectors filled in later (a document archived without them) are read the same way.
    later = ScopeIndex(dimensions=64)
    later.add_document(ArchiveDocument(session="session:p", summary="", messages=messages), None)
    later.set_vectors(later.missing_vectors(), np.stack([painting, landscapes, stairs, bakery]))
    assert later.nearest(painting, min_similarity=0.25)[1].tolist() == pytest.approx([1.0, reading])


def test_vector_search_over_many_blocks_matches_the_plain_product():
    """Similarities are computed a block of rows at a time; across block edges they equal the
    whole matrix times the query, and the nearest rows come out in the same order."""
    from memory.retrieval.index import PREVIOUS_TURN_WEIGHT, SIMILARITY_BLOCK_VALUES, ScopeIndex

    dims = 64
    rows = 3 * (SIMILARITY_BLOCK_VALUES // dims) + 17  # three whole blocks and a part
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((rows, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    messages = tuple(Message(role="user", content=f"m{i}", created_at=DAY).with_seq(i + 1) for i in range(rows))
    index = ScopeIndex(dimensions=dims)
    index.add_document(ArchiveDocument(session="session:v", summary="", messages=messages), vectors)
    query = vectors[rows - 5] + 0.8 * vectors[SIMILARITY_BLOCK_VALUES // dims]  # near a row in the last and one at an edge
    query /= np.linalg.norm(query)
    found, similarities = index.nearest(query, min_similarity=-1.0)
    # Each row read alone and with the row before it (the first has no second reading: 0).
    mixed = vectors.copy()
    mixed[1:] += PREVIOUS_TURN_WEIGHT * vectors[:-1]
    with_previous = (mixed @ query) / np.linalg.norm(mixed, axis=1)
    with_previous[0] = 0.0
    expected = np.maximum(vectors @ query, with_previous)
    best = np.argsort(-expected, kind="stable")[: len(found)]
    assert found.tolist() == best.tolist() and found[0] == rows - 5
    assert SIMILARITY_BLOCK_VALUES // dims in found.tolist()
    assert np.allclose(similarities, expected[found], atol=1e-6)
    assert np.allclose(np.sort(similarities)[::-1], np.sort(expected)[::-1][: len(found)], atol=1e-6)


def test_the_best_rows_are_those_of_a_full_sort_whatever_the_share_above_the_floor():
    """``best_rows`` bounds the k-th best by the maxima of blocks of rows before it partially
    sorts; it returns what sorting every row over the floor returns: the k largest, largest first,
    equal values newest row first, with few rows, many, ties across the bound, and few or none
    over the floor."""
    from memory.retrieval.index import best_rows

    rng = np.random.default_rng(11)

    def expected(values: np.ndarray, k: int, floor: float) -> list[int]:
        over = [i for i in range(values.size) if values[i] >= floor]
        return sorted(over, key=lambda i: (-values[i], -i))[:k]

    cases = 0
    for size in (1, 7, 50, 51, 800, 12_800, 12_801, 100_000):
        for floor in (-np.inf, 0.0, 0.25, 0.9, 5.0):
            values = (rng.standard_normal(size) * 0.2 + 0.2).astype(np.float32)
            if size > 100:  # many rows share a value, and a run of equal best values
                values[rng.integers(0, size, size // 4)] = np.float32(0.3)
                values[rng.integers(0, size, 5)] = np.float32(0.95)
            if size >= 12_800:  # the bound itself: every block's maximum the same value
                values[:] = np.minimum(values, np.float32(0.7))
                values[:: size // 300] = np.float32(0.7)
            for k in (1, 12, 50):
                got = best_rows(values, k, floor=floor).tolist()
                want = expected(values, k, floor)
                # Among values equal at the k-th place either row may be kept; the values and the
                # order (largest first, newest first among the kept equal) are the same.
                assert values[got].tolist() == values[want].tolist(), (size, floor, k)
                assert all(a > b for a, b in zip(got, got[1:]) if values[a] == values[b])
                cases += 1
    assert cases == 8 * 5 * 3
    assert best_rows(np.zeros(0, np.float32), 50, floor=0.0).tolist() == []
    # A NaN (a broken vector's similarity) bounds nothing and is never among the best.
    values = (rng.random(25_600) * 0.1).astype(np.float32)
    values[50::100] = 0.5 + rng.random(256).astype(np.float32) * 0.5  # one high value per block
    values[::2560] = np.nan
    got = best_rows(values, 50, floor=0.0)
    assert values[got].tolist() == values[expected(np.nan_to_num(values, nan=-1.0), 50, 0.0)].tolist()


def test_vectors_added_document_by_document_read_as_one_matrix():
    """The vectors are kept column by column in an array that grows as documents arrive; after
    many growths (and a document whose vectors came later) every row still reads as its own."""
    from memory.retrieval.index import ScopeIndex

    dims, rng = 16, np.random.default_rng(9)
    index = ScopeIndex(dimensions=dims)
    expected = []
    for d in range(40):
        count = int(rng.integers(1, 60))
        vectors = rng.standard_normal((count, dims)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        messages = tuple(Message(role="user", content=f"d{d} m{i}", created_at=DAY).with_seq(i + 1) for i in range(count))
        late = d == 7  # archived before vectors existed: embedded afterwards
        index.add_document(ArchiveDocument(session=f"session:{d}", summary="", messages=messages), None if late else vectors)
        if late:
            missing = index.missing_vectors()
            assert len(missing) == count and index.missing_vectors(missing[0]) == missing
            assert index.missing_vectors(missing[-1] + 1) == [] and index.missing_vectors(len(index) + 5) == []
            index.set_vectors(missing, vectors)
        expected.append(vectors)
    matrix = np.concatenate(expected)
    assert index.missing_vectors() == []
    for row in rng.integers(0, len(matrix), 25).tolist():
        found, similarities = index.nearest(matrix[row], min_similarity=0.999)
        assert row in found.tolist() and similarities[0] >= 0.999


def test_bm25_says_which_query_words_each_candidate_matched():
    """The words each ranked message matched, found by binary search in the posting lists, are
    exactly the query words (or the words they begin) among the message's own terms."""
    from memory.retrieval.index import ScopeIndex

    rng = np.random.default_rng(11)
    pool = ["porto", "kayak", "lantern", "harbour", "sister", "nurse", "garden", "bread", "ferry", "cello"]
    messages = tuple(
        Message(role="user", content=" ".join(rng.choice(pool, size=int(rng.integers(1, 5)))), created_at=DAY)
        .with_seq(i + 1)
        for i in range(400)
    )
    index = ScopeIndex(dimensions=None)
    index.add_document(ArchiveDocument(session="session:w", summary="", messages=messages), None)
    for query in ("kayak lantern", "harb sister ferry", "cello nurse porto garden", "bread"):
        order, _, matched = index.bm25(query)
        assert len(order)
        for row in order.tolist():
            own = set(analysis.terms(index.rows[row].text))
            expected = {word for term, word in analysis.query_terms(query) if set(index._expand(term, word)) & own}
            assert matched[row] == expected, (query, index.rows[row].text)


def test_what_is_indexed_as_documents_arrive_scores_as_if_indexed_at_once():
    """Term lengths and the vocabulary grow with each document (kept, not rebuilt per arrival):
    scores and prefix matches after many arrivals equal those of an index built in one go."""
    from memory.retrieval.index import ScopeIndex

    words = ["kayak", "kayaking", "lantern", "harbour", "harbourmaster", "ferry", "cello", "porto", "garden"]
    rng = np.random.default_rng(3)
    docs = [
        document(f"session:{d}", *(" ".join(rng.choice(words, size=int(rng.integers(1, 6))).tolist()) + f" note{d}x{i}"
                                   for i in range(int(rng.integers(1, 9)))), day=d)
        for d in range(300)
    ]
    docs = [ArchiveDocument(id=f"d{n}", seq=n + 1, session=d.session, summary="", messages=d.messages) for n, d in enumerate(docs)]
    growing, whole = ScopeIndex(dimensions=None), ScopeIndex(dimensions=None)
    for n, doc in enumerate(docs):
        growing.add_document(doc, None)
        if n % 37 == 0:
            growing.bm25("kaya harbourm note1")  # search between arrivals: lengths and vocabulary in use
    for doc in docs:
        whole.add_document(doc, None)
    for query in ("kaya harbourm", "lantern ferry", "note29", "note29x", "cello porto garden"):
        a_rows, a_scores, a_matched = growing.bm25(query)
        b_rows, b_scores, b_matched = whole.bm25(query)
        assert a_rows.tolist() == b_rows.tolist() and np.allclose(a_scores, b_scores) and a_matched == b_matched
        assert len(a_rows), query
    assert growing._vocabulary == sorted(growing._postings)


def test_folding_ascii_text_takes_the_short_way_to_the_same_words():
    """ASCII text is only lower-cased (no character of it decomposes or combines); any other
    text is decomposed and stripped of its marks, as before."""
    import unicodedata

    from memory.stores import textsearch

    def slow(text):
        return "".join(ch for ch in unicodedata.normalize("NFD", text) if not unicodedata.combining(ch)).lower()

    every_ascii = "".join(chr(i) for i in range(128))
    for text in (every_ascii, "Moved to PORTO in May, 2023!", "", "tab\tand\nnewline"):
        assert textsearch.fold(text) == slow(text)
    assert textsearch.fold("Café Crème in São Paulo") == slow("Café Crème in São Paulo") == "cafe creme in sao paulo"
    assert textsearch.words("Ünïcode and ASCII") == ["unicode", "and", "ascii"]


def test_scores_follow_the_statistics_as_documents_are_added(bundle, words_only):
    put(bundle, ALICE, document("a", "The harbour festival is in June.", "Lanterns on the harbour wall."))
    words_only.search(ALICE, "harbour festival")  # weights computed for two messages
    # Messages without either word: the terms' postings are unchanged, their weights are not
    # (more messages, another average length).
    put(bundle, ALICE, document("b", "We walked the long coastal path all afternoon.", "Lovely.", day=2))
    grown = {h.message.text: h.words for h in words_only.search(ALICE, "harbour festival")}
    fresh = Retrieval(archive=bundle.archive, embedder=None)  # the same archive indexed at once
    expected = {h.message.text: h.words for h in fresh.search(ALICE, "harbour festival")}
    assert grown == pytest.approx(expected) and len(grown) == 2


def test_on_the_locomo_format_sample_the_names_left_out_rank_the_evidence_higher():
    """benchmarks/retrieval_rank.py over the sample in tests/: the evidence turns' ranks, with and
    without the two speakers' names in the question (the measured figures are in its output)."""
    from agents.evaluation.datasets import load_dataset
    from benchmarks.retrieval_rank import ranks, table

    sample = load_dataset("locomo:tests/agents/evaluation/fixtures/locomo_sample.json", size="full")
    embedder = WordLlamaEmbedder()
    asked = ranks(sample, embedder=embedder, names=False, min_similarity=0.25)["all"]
    named = ranks(sample, embedder=embedder, names=True, min_similarity=0.25)["all"]

    def within(found, k):
        return sum(1 for rank in found if rank is not None and rank <= k)

    assert len(asked) == len(named) == 64  # every evidence turn of the sample's questions
    def reciprocal(found):
        return sum(1 / rank for rank in found if rank is not None)

    assert within(named, 5) > within(asked, 5) and reciprocal(named) > reciprocal(asked)
    assert table({"all": named})[-1].startswith("| all | 64 | ")
