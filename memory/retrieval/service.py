"""Retrieval over an archive store: message search and reading around a message, per scope.

``Retrieval`` keeps one ``ScopeIndex`` per archive scope in process memory, built from the
store's documents the first time the scope is searched and brought up to date on every later
call: one cheap read (``ArchiveStore.archive_state``) tells whether documents were added (they
are read and indexed, nothing else) or removed (the index is rebuilt). So a search costs the
same whether the archive holds a thousand messages or a hundred thousand, and every process
(daphne workers, the task worker) sees what another one archived on its next call.

Vectors come from the store, where the archiving path wrote them beside the messages
(``ArchiveStore.put_vectors``), for the current embedding model only. A document without
vectors of that model (archived before a change of model, or before vectors existed) is
embedded in memory when the embedder is local and cheap; with a remote embedder its messages
are searched by words until ``manage.py archive_sessions --reembed`` stores their vectors.
Retrieval never writes: the assembly that calls it is read-only.

Memory is bounded: the least recently used scopes are dropped once the indexed messages of all
scopes pass ``max_messages``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from memory.retrieval.embeddings import Embedder, EmbeddingUnavailable, decode
from memory.retrieval.index import ScopeIndex
from memory.retrieval.messages import ArchivedMessage, MessageHit
from memory.retrieval.text import without_names
from memory.scopes import Scope
from memory.stores.base import ArchiveDocument, ArchiveStore

logger = logging.getLogger("memory.retrieval")

#: Default bound on the messages indexed in memory across scopes. Measured (benchmarks, workload 8):
#: an index holds about 1.1 kB per message (text and metadata, postings, 64-dim vectors), so
#: some 330 MB at this bound, and a process's resident set grows by more while one is built.
DEFAULT_MAX_MESSAGES = 300_000
#: Default similarity a message found by meaning alone needs. On WordLlama's scale at 64
#: dimensions, unrelated sentences mostly fall below 0.1 and a question and its answer, or two
#: paraphrases, mostly between 0.2 and 0.6.
DEFAULT_MIN_SIMILARITY = 0.25
_SYNC_ROUNDS = 3


@dataclass
class _Entry:
    index: ScopeIndex
    lock: threading.Lock


class Retrieval:
    """Message search over one ``ArchiveStore`` (see the module docstring).

    ``embedder`` None searches by words alone. ``local_embedding``: documents without stored
    vectors of the embedder's model may be embedded in memory (True for the embedded model).
    """

    def __init__(
        self,
        *,
        archive: ArchiveStore,
        embedder: Embedder | None,
        local_embedding: bool = True,
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
        max_messages: int = DEFAULT_MAX_MESSAGES,
    ) -> None:
        self.archive = archive
        self.embedder = embedder
        self.local_embedding = local_embedding
        self.min_similarity = min_similarity
        self.max_messages = max_messages
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._warned = False

    @property
    def model(self) -> str | None:
        return None if self.embedder is None else self.embedder.model

    # -- public -------------------------------------------------------------------------------

    def search(
        self,
        scope: Scope,
        query: str,
        *,
        limit: int = 10,
        exclude: Callable[[ArchivedMessage], bool] | None = None,
        window: int = 0,
        names: Sequence[str] = (),
    ) -> list[MessageHit]:
        """The archived messages of ``scope`` most relevant to ``query``, best first (with
        ``window``, each with up to that many turns on each side: ``MessageHit.partner``,
        ``.nearby()``). ``names``: the participants' names, left out of the query by words and by
        meaning (``text.without_names``)."""
        if not isinstance(query, str):
            raise TypeError(f"a search query must be a string, got {type(query).__name__}")
        if limit <= 0 or not query.strip():
            return []
        query = without_names(query, names)
        entry = self._synced(scope)
        if not len(entry.index):
            return []
        vector = self._query_vector(query) if entry.index.dimensions else None
        with entry.lock:
            return entry.index.search(
                query,
                vector=vector,
                limit=limit,
                min_similarity=self.min_similarity,
                exclude=exclude,
                window=window,
            )

    def around(self, scope: Scope, handle: str, *, before: int = 3, after: int = 3) -> list[ArchivedMessage]:
        """The messages around ``handle`` in its conversation (InvalidHandle for a malformed one)."""
        entry = self._synced(scope)
        with entry.lock:
            return entry.index.around(handle, before=before, after=after)

    def conversation(self, scope: Scope, session: str) -> list[ArchivedMessage]:
        """Every archived message of one conversation of ``scope``, in order."""
        entry = self._synced(scope)
        with entry.lock:
            return entry.index.conversation(session)

    def ready(self, scope: Scope) -> bool:
        """Whether ``scope``'s index is in this process's memory (built; it may lag the store
        until the next call brings it up to date). Reads nothing."""
        with self._lock:
            entry = self._entries.get(scope.key())
        return entry is not None and entry.index.document_count > 0

    def indexed(self, scope: Scope) -> int:
        """How many messages of ``scope`` are searchable."""
        return len(self._synced(scope).index)

    def forget(self, scope: Scope | None = None) -> None:
        """Drop the in-memory index of ``scope`` (all scopes when None); the next call rebuilds."""
        with self._lock:
            if scope is None:
                self._entries.clear()
            else:
                self._entries.pop(scope.key(), None)

    # -- keeping an index in step with the store ----------------------------------------------

    def _synced(self, scope: Scope) -> _Entry:
        key = scope.key()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(self._new_index(), threading.Lock())
            self._entries.move_to_end(key)
        with entry.lock:
            for _ in range(_SYNC_ROUNDS):
                state = self.archive.archive_state(scope)
                index = entry.index
                if (state.last_seq, state.count) == (index.last_document_seq, index.document_count):
                    break
                if state.count < index.document_count or state.last_seq < index.last_document_seq:
                    # Documents were removed (maybe while others were added): start again.
                    entry.index = index = self._new_index()
                self._add(scope, index, self.archive.list(scope, after_seq=index.last_document_seq or None))
            else:
                logger.info("the archive of %s kept changing while it was indexed; using what was read", key)
        self._bound()
        return entry

    def _new_index(self) -> ScopeIndex:
        dimensions = None
        if self.embedder is not None:
            try:
                dimensions = self.embedder.dimensions or None
            except EmbeddingUnavailable as exc:  # a remote model that cannot say: words only, this time
                self._warn(exc)
        return ScopeIndex(dimensions=dimensions)

    def _add(self, scope: Scope, index: ScopeIndex, documents: list[ArchiveDocument]) -> None:
        if not documents:
            return
        stored: dict[str, np.ndarray] = {}
        if self.embedder is not None:
            after = min(d.seq or 0 for d in documents) - 1
            for document_id, (model, data) in self.archive.vectors(scope, after_seq=after or None).items():
                if model == self.embedder.model:
                    try:
                        stored[document_id] = decode(data, self.embedder.dimensions)
                    except ValueError:
                        logger.warning("stored vectors of archive document %s are damaged; ignored", document_id)
        first_new = len(index)
        for document in documents:
            index.add_document(document, stored.get(document.id))
        if self.embedder is not None and self.local_embedding:
            missing = index.missing_vectors(first_new)
            if missing:
                try:
                    vectors = self.embedder.embed([index.rows[row].text for row in missing])
                except EmbeddingUnavailable as exc:
                    self._warn(exc)
                else:
                    index.set_vectors(missing, vectors)

    def _query_vector(self, query: str) -> np.ndarray | None:
        try:
            return self.embedder.embed([query])[0] if self.embedder is not None else None
        except EmbeddingUnavailable as exc:
            self._warn(exc)
            return None

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("archive search works by words only: %s", exc)

    def _bound(self) -> None:
        with self._lock:
            total = sum(len(entry.index) for entry in self._entries.values())
            while total > self.max_messages and len(self._entries) > 1:
                _, dropped = self._entries.popitem(last=False)
                total -= len(dropped.index)


_by_store: weakref.WeakKeyDictionary[ArchiveStore, Retrieval] = weakref.WeakKeyDictionary()
_by_store_lock = threading.Lock()


def retrieval_for(archive: ArchiveStore, *, factory: Callable[[ArchiveStore], Retrieval]) -> Retrieval:
    """The one ``Retrieval`` of ``archive`` in this process (made by ``factory`` the first time):
    every caller over the same store shares its indexes."""
    with _by_store_lock:
        found = _by_store.get(archive)
        if found is None:
            found = _by_store[archive] = factory(archive)
        return found
