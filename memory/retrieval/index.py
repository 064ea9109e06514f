"""One scope's archived messages, searchable by words (BM25) and by meaning (vectors), fused.

A ``ScopeIndex`` holds every archived message of one archive scope (an agent and a user), built
from the archive's documents and kept up to date as documents are added. It answers:

* ``search(query)``: the messages most relevant to a query. Two rankings are fused by reciprocal
  rank (RRF, k = 60): Okapi BM25 over the messages' terms (``memory.retrieval.text``), and the
  cosine similarity of the messages' vectors to the query's. A message that ranks on both sides
  comes first; a message found by meaning alone must be at least ``min_similarity`` close.
  By meaning, a message is also read with the turn before it (its vector plus half the previous
  message's, within its document), and the closer of the two readings counts: a reply like
  "Watercolour landscapes, mostly the river" means little alone, and "Painting! What kind?"
  before it says what it is about; a fact dropped into talk of something else keeps its own.
  Both readings come from one product over the messages' own vectors.
* ``around(handle)``: the turns before and after one message, across document boundaries (a
  conversation archived in several documents reads as one).

Every statistic BM25 uses (the number of messages, their average length, each term's document
frequency) is computed over this scope's messages only: what another user archived changes
neither which messages a user's search finds nor their scores.

Handles are ``"<document seq>.<message seq>"``: short enough for a model to copy, and resolved
only within the caller's own scope.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from memory.retrieval import text as analysis
from memory.retrieval.messages import ArchivedMessage, MessageHit, message_text, parse_handle, searchable
from memory.stores.base import ArchiveDocument
from memory.tokens import content_tokens

# BM25 parameters: the usual defaults.
K1 = 1.2
B = 0.75
#: Reciprocal rank fusion's constant (Cormack et al.): damps the weight of the very first ranks.
RRF_K = 60
#: How many of each ranking take part in the fusion.
CANDIDATES = 50
#: The weight of the previous turn's vector in a message's second reading (see the module
#: docstring). Measured with benchmarks/retrieval_rank.py on the LoCoMo-format and generated
#: samples; 0.4 to 0.7 did alike.
PREVIOUS_TURN_WEIGHT = 0.5
#: A query word that is no term of the scope matches the terms it begins, at most this many.
MAX_PREFIX_EXPANSION = 16
#: Values (rows x dimensions) per matrix-vector product of the vector search: below OpenBLAS's
#: threshold for splitting one product across threads (460,800 in its gemv).
SIMILARITY_BLOCK_VALUES = 262_144
MIN_PREFIX = 3

@dataclass
class _Postings:
    rows: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    arrays: tuple[np.ndarray, np.ndarray] | None = None
    #: The term's BM25 weight in each of its rows, and the (messages, total length) it was
    #: computed for: valid until the scope's statistics change (a document is added).
    weights: np.ndarray | None = None
    weighed_for: tuple[int, int] = (0, 0)

    def add(self, row: int, count: int) -> None:
        self.rows.append(row)
        self.counts.append(count)
        self.arrays = None
        self.weights = None

    def as_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self.arrays is None:
            self.arrays = (np.asarray(self.rows, dtype=np.int64), np.asarray(self.counts, dtype=np.float32))
        return self.arrays


#: The least positive float32: ``values >= _ABOVE_ZERO`` is ``values > 0``.
_ABOVE_ZERO = float(np.nextafter(np.float32(0), np.float32(1)))
#: ``best_rows`` reads the maxima of this many blocks of the values to bound the k-th best.
_BOUND_BLOCKS = 256


def best_rows(values: np.ndarray, k: int, *, floor: float) -> np.ndarray:
    """The rows of the ``k`` largest ``values`` that are at least ``floor``, largest first (equal
    values: the higher row, the newer message, first; which of the rows equal to the k-th value
    are kept is not defined, as with any partial sort). Exact, and cheap however many rows pass
    ``floor``: the maxima of ``_BOUND_BLOCKS`` blocks come from as many distinct rows, so when
    there are k blocks or more the k-th largest maximum is a value that at least k rows reach; no
    row below it can be among the k best, and usually only a few hundred rows are above it.
    (Partially sorting every row over a similarity floor took 0.4 ms at 100,000 messages, where
    a third of them passed it.)"""
    n = values.size
    size = max(1, -(-n // _BOUND_BLOCKS))
    blocks = n // size
    if blocks >= k and n > 16 * k:
        maxima = values[: blocks * size].reshape(blocks, size).max(axis=1)
        if not np.isnan(maxima).any():  # a NaN (a broken vector) is no bound; it passes no floor
            floor = max(floor, float(np.partition(maxima, blocks - k)[blocks - k]))
    top = np.flatnonzero(values >= floor)
    if top.size > k:
        top = top[np.argpartition(-values[top], k - 1)[:k]]
    return top[np.lexsort((-top, -values[top]))]


def _room_for(array: np.ndarray, needed: int, *, kept: int, order: str = "C") -> np.ndarray:
    """``array`` (rows first) if it has ``needed`` rows, else a copy of its first ``kept`` rows in
    one twice as large (or ``needed``, at least 256), zeros after them, laid out in ``order``:
    appending a document's rows costs what they take, however many came before."""
    if needed <= array.shape[0]:
        return array
    capacity = max(needed, 2 * array.shape[0], 256)
    grown = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype, order=order)
    grown[:kept] = array[:kept]
    return grown


class ScopeIndex:
    """The archived messages of one scope. Not thread-safe: the owner (``Retrieval``) locks."""

    def __init__(self, *, dimensions: int | None) -> None:
        self.dimensions = dimensions
        self.rows: list[ArchivedMessage] = []
        self.document_count = 0
        self.last_document_seq = 0
        # Each row's length in terms, in an array grown by doubling (rows [0, len(rows)) are
        # meaningful): BM25 reads it on every search, and making it anew from a list after each
        # document arrival took 4 ms at 100,000 messages.
        self._lengths = np.zeros(0, dtype=np.float32)
        self._total_length = 0
        self._postings: dict[str, _Postings] = {}
        self._vocabulary: list[str] | None = None
        # Column-major: a dimension's values for consecutive rows lie together, so the product
        # with a query runs down long columns (OpenBLAS's faster gemv kernel) instead of taking a
        # 64-value dot product per row. At 100,000 rows: 0.9 ms against 1.8-2.2 with the rows in
        # the CPU's cache, 1.4 against 1.8 read cold from memory (benchmarks/results/recall.md).
        self._vectors = np.zeros((0, dimensions or 0), dtype=np.float32, order="F")
        # Per row: the previous row of its document (-1: none), and 1 / |v + w * v_previous|
        # (0: no second reading), for the reading with the previous turn.
        self._previous = np.zeros(0, dtype=np.int64)
        self._context_scale = np.zeros(0, dtype=np.float32)
        self._with_vector = 0  # rows with a real vector
        self._sessions: dict[str, list[tuple[int, int]]] = {}  # session -> sorted (seq, row)
        self._documents: dict[int, str] = {}  # document seq -> session

    # -- building -----------------------------------------------------------------------------

    def add_document(self, document: ArchiveDocument, vectors: np.ndarray | None) -> None:
        """Index ``document``'s searchable messages; ``vectors`` holds one row per message of the
        document (in order), or is None when it has none for this index's model."""
        seq = document.seq or 0
        self.document_count += 1
        self.last_document_seq = max(self.last_document_seq, seq)
        self._documents[seq] = document.session
        if vectors is not None and (vectors.ndim != 2 or vectors.shape[0] != len(document.messages)):
            vectors = None  # stored for another version of the document: treat as missing
        added: list[int] = []
        lengths: list[int] = []
        for position, message in enumerate(document.messages):
            if not searchable(message) or message.seq is None:
                continue
            row = len(self.rows)
            archived = ArchivedMessage(
                document_id=document.id,
                document_seq=seq,
                session=document.session,
                seq=message.seq,
                role=message.role,
                name=message.name,
                created_at=message.created_at,
                text=message_text(message),
                message_id=message.id,
                document_title=document.title,
                text_tokens=content_tokens(message),
            )
            self.rows.append(archived)
            counts, length = analysis.term_counts(archived.text)
            lengths.append(length)
            self._total_length += length
            for term, count in counts.items():
                postings = self._postings.get(term)
                if postings is None:
                    postings = self._postings[term] = _Postings()
                    if self._vocabulary is not None:  # kept sorted: sorting it all again took ms
                        bisect.insort(self._vocabulary, term)
                postings.add(row, count)
            bisect.insort(self._sessions.setdefault(document.session, []), (message.seq, row))
            added.append(position)
        if lengths:
            self._lengths = _room_for(self._lengths, len(self.rows), kept=len(self.rows) - len(lengths))
            self._lengths[len(self.rows) - len(lengths) : len(self.rows)] = lengths
        if self.dimensions and added:
            block = np.zeros((len(added), self.dimensions), dtype=np.float32)
            if vectors is not None and vectors.shape[1] == self.dimensions:
                block[:] = vectors[added]
            self._append_vectors(block)
            start = len(self.rows) - len(added)
            self._previous[start] = -1
            self._previous[start + 1 : len(self.rows)] = np.arange(start, len(self.rows) - 1)
            self._rescale(np.arange(start, len(self.rows)))

    def missing_vectors(self, start: int = 0) -> list[int]:
        """Rows from ``start`` on whose vector is all zeros (not embedded yet for this model).
        Syncing after new documents asks from the first new row: scanning every vector again
        read 25 MB per document arrival at 100,000 messages."""
        if not self.dimensions or start >= len(self.rows):
            return []
        norms = np.abs(self._vectors[start : len(self.rows)]).sum(axis=1)
        return [start + int(i) for i in np.flatnonzero(norms == 0)]

    def set_vectors(self, rows: Sequence[int], vectors: np.ndarray) -> None:
        if self.dimensions and len(rows):
            at = np.asarray(rows, dtype=np.int64)
            self._vectors[at] = vectors
            # Their second readings, and those of the rows read with them.
            following = at + 1
            self._rescale(np.union1d(at, following[following < len(self.rows)]))

    def _rescale(self, rows: np.ndarray) -> None:
        """The second readings' scale of ``rows`` (see ``_context_scale``)."""
        previous = self._previous[rows]
        has = previous >= 0
        own = self._vectors[rows]
        norms = np.linalg.norm(own + PREVIOUS_TURN_WEIGHT * self._vectors[np.where(has, previous, 0)], axis=1)
        scale = np.zeros(len(rows), dtype=np.float32)
        np.divide(1.0, norms, out=scale, where=has & own.any(axis=1) & (norms > 0))
        self._context_scale[rows] = scale

    def _append_vectors(self, block: np.ndarray) -> None:
        start = len(self.rows) - len(block)
        needed = start + len(block)
        self._vectors = _room_for(self._vectors, needed, kept=start, order="F")
        self._previous = _room_for(self._previous, needed, kept=start)
        self._context_scale = _room_for(self._context_scale, needed, kept=start)
        self._vectors[start:needed] = block

    # -- reading ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.rows)

    def _lengths_np(self) -> np.ndarray:
        return self._lengths[: len(self.rows)]

    def _expand(self, term: str, word: str) -> list[str]:
        """``term`` itself when the scope holds it, else the scope's terms the typed word begins."""
        if term in self._postings:
            return [term]
        if len(word) < MIN_PREFIX:
            return []
        if self._vocabulary is None:
            self._vocabulary = sorted(self._postings)
        found = []
        for prefix in {word, term}:
            at = bisect.bisect_left(self._vocabulary, prefix)
            while at < len(self._vocabulary) and self._vocabulary[at].startswith(prefix):
                found.append(self._vocabulary[at])
                at += 1
        # The most frequent continuations first (the likelier meant), bounded.
        found = sorted(set(found), key=lambda t: -len(self._postings[t].rows))
        return found[:MAX_PREFIX_EXPANSION]

    def bm25(self, query: str) -> tuple[np.ndarray, np.ndarray, dict[int, set[str]]]:
        """Rows with a positive BM25 score and the scores (best first, at most CANDIDATES), and the
        query words each row matched."""
        n = len(self.rows)
        pairs = analysis.query_terms(query)
        if not n or not pairs:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), {}
        lengths = self._lengths_np()
        average = max(self._total_length / n, 1.0)
        scores = np.zeros(n, dtype=np.float32)
        touched: list[tuple[np.ndarray, str]] = []
        statistics = (n, self._total_length)
        for term, word in pairs:
            for expanded in self._expand(term, word):
                postings = self._postings[expanded]
                rows, counts = postings.as_arrays()
                if postings.weights is None or postings.weighed_for != statistics:
                    df = len(rows)
                    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                    norm = K1 * (1 - B + B * lengths[rows] / average)
                    postings.weights = idf * counts * (K1 + 1) / (counts + norm)
                    postings.weighed_for = statistics
                scores[rows] += postings.weights
                touched.append((rows, word))
        order = best_rows(scores, CANDIDATES, floor=_ABOVE_ZERO)
        matched: dict[int, set[str]] = {}
        for rows, word in touched:
            # A posting list's rows ascend (rows are numbered as they are added), so a binary
            # search per candidate finds them: np.isin hashed or sorted the whole list instead,
            # which for a common word at 100,000 messages cost more than the scoring.
            at = np.minimum(np.searchsorted(rows, order), len(rows) - 1)
            for row in order[rows[at] == order].tolist():
                matched.setdefault(row, set()).add(word)
        return order, scores[order], matched

    def nearest(self, vector: np.ndarray | None, *, min_similarity: float) -> tuple[np.ndarray, np.ndarray]:
        """Rows whose vectors are at least ``min_similarity`` close to ``vector`` (best first, at
        most CANDIDATES), with their similarities."""
        n = len(self.rows)
        if vector is None or not self.dimensions or not n or not np.any(vector):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        similarities = np.empty(n, dtype=np.float32)
        # Block by block: over a few thousand rows OpenBLAS splits one product across its threads,
        # and on busy cores (daphne workers, the task worker) handing work to them and waiting
        # costs milliseconds, ten times the product itself. Blocks stay on the calling thread.
        block = max(1, SIMILARITY_BLOCK_VALUES // max(1, query.size))
        for start in range(0, n, block):
            stop = min(n, start + block)
            np.matmul(self._vectors[start:stop], query, out=similarities[start:stop])
        # The reading with the previous turn: (v + w p) . q / |v + w p|, from the same products.
        # A row's previous turn is the row before it (``_previous``; a document's first row has
        # none, and a scale of 0), so a shifted view reads it without gathering by index.
        with_previous = np.empty_like(similarities)
        with_previous[0] = 0.0
        np.multiply(similarities[:-1], PREVIOUS_TURN_WEIGHT, out=with_previous[1:])
        with_previous += similarities
        with_previous *= self._context_scale[:n]
        np.maximum(similarities, with_previous, out=similarities)
        order = best_rows(similarities, CANDIDATES, floor=min_similarity)
        return order, similarities[order]

    def search(
        self,
        query: str,
        *,
        vector: np.ndarray | None = None,
        limit: int = 10,
        min_similarity: float = 0.5,
        exclude: Callable[[ArchivedMessage], bool] | None = None,
        window: int = 0,
    ) -> list[MessageHit]:
        """The ``limit`` most relevant messages for ``query`` (see the module docstring); with
        ``window``, each with up to that many turns on each side (``before``, ``after``)."""
        if limit <= 0:
            return []
        word_rows, word_scores, matched = self.bm25(query)
        vector_rows, similarities = self.nearest(vector, min_similarity=min_similarity)
        fused: dict[int, float] = {}
        for ranking in (word_rows, vector_rows):
            rank = 0
            for row in ranking.tolist():
                if exclude is not None and exclude(self.rows[row]):
                    continue
                rank += 1
                fused[row] = fused.get(row, 0.0) + 1.0 / (RRF_K + rank)
        words_of = dict(zip(word_rows.tolist(), word_scores.tolist(), strict=True))
        similarity_of = dict(zip(vector_rows.tolist(), similarities.tolist(), strict=True))
        best = sorted(fused, key=lambda row: (-fused[row], -self.rows[row].created_at.timestamp(), -row))
        return [
            MessageHit(
                message=self.rows[row],
                score=fused[row],
                words=words_of.get(row),
                similarity=similarity_of.get(row),
                matched=tuple(sorted(matched.get(row, ()))),
                **(self._window(self.rows[row], window, exclude) if window > 0 else {}),
            )
            for row in best[:limit]
        ]

    def _window(
        self, message: ArchivedMessage, size: int, exclude: Callable[[ArchivedMessage], bool] | None
    ) -> dict[str, tuple[ArchivedMessage, ...]]:
        ordered = self._sessions.get(message.session, [])
        at = self._position(ordered, message.seq)
        if at is None:
            return {}

        def side(rows: Iterable[tuple[int, int]]) -> tuple[ArchivedMessage, ...]:
            out = []
            for _, row in rows:
                if exclude is not None and exclude(self.rows[row]):
                    break
                out.append(self.rows[row])
            return tuple(out)

        return {"before": side(reversed(ordered[max(0, at - size):at])), "after": side(ordered[at + 1:at + 1 + size])}

    @staticmethod
    def _position(ordered: list[tuple[int, int]], seq: int) -> int | None:
        """Where the message ``seq`` is in a conversation's sorted (seq, row) list, if it is."""
        at = bisect.bisect_left(ordered, (seq, -1))
        return at if at < len(ordered) and ordered[at][0] == seq else None

    def around(self, handle: str, *, before: int, after: int) -> list[ArchivedMessage]:
        """The messages of the handle's conversation from ``before`` turns before it to ``after``
        after it, in order; [] when no archived message has that handle in this scope."""
        document_seq, seq = parse_handle(handle)
        session = self._documents.get(document_seq)
        if session is None:
            return []
        ordered = self._sessions.get(session, [])
        at = self._position(ordered, seq)
        if at is None or self.rows[ordered[at][1]].document_seq != document_seq:
            return []
        start, stop = max(0, at - max(0, before)), min(len(ordered), at + max(0, after) + 1)
        return [self.rows[row] for _, row in ordered[start:stop]]

    def conversation(self, session: str) -> list[ArchivedMessage]:
        """Every archived message of one conversation, in order."""
        return [self.rows[row] for _, row in self._sessions.get(session, [])]

    def rows_of(self, indexes: Iterable[int]) -> list[ArchivedMessage]:
        return [self.rows[i] for i in indexes]
