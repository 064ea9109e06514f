"""The four store interfaces of the memory system, and the bundle that carries them.

Each ABC keeps few abstract methods; conveniences are concrete and built on them. Stores take
and return frozen values (``Message``, ``KVItem``, ``ArchiveDocument``), never ORM objects.
Every backend must pass the conformance suite in ``tests/memory/stores/`` unchanged.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memory.messages import Message, new_message_id, utcnow
from memory.scopes import Scope, validate_id

# -- errors -----------------------------------------------------------------------------------


class StoreError(Exception):
    """Base of every error a store raises on purpose."""


class ConcurrentChange(StoreError):
    """The data changed since the caller read it; nothing was written. Re-read and retry."""


class VersionConflict(ConcurrentChange):
    """A compare-and-set write found another version than the one expected."""

    def __init__(self, message: str, *, expected: int | None, actual: int | None) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class DuplicateMessage(StoreError):
    """A message id that already exists in the session was appended again; nothing was written."""


class InvalidPrune(StoreError):
    """A prune request that does not describe a valid cut of the current session."""


class InvalidKey(StoreError, ValueError):
    """A KV key or cursor consumer name that is not allowed."""


class StorageUnavailable(StoreError):
    """The backend cannot read or write (disk full, permissions, database gone)."""


class FencedOut(StoreError):
    """A write carried the fence of a lease that has passed to another holder; nothing was written.

    The writer stalled past its lease's ttl and someone else took over: it must stop, not retry.
    """


def validate_key(key: object, *, what: str = "key") -> str:
    """KV keys and consumer names follow the scope id rule, so they are safe file names."""
    try:
        return validate_id(key, what=what)
    except ValueError as exc:
        raise InvalidKey(str(exc)) from None


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionHead:
    """A session's state at one moment; ``version`` changes on every mutation of the session."""

    scope: Scope
    version: int
    last_seq: int  # highest seq ever assigned in the session (0 when nothing was appended)
    count: int  # live (not pruned, not soft-deleted) messages
    tokens: int  # sum of the live messages' token counts


@dataclass(frozen=True, slots=True)
class PruneResult:
    head: SessionHead
    evicted: tuple[Message, ...]
    summary: Message | None


@dataclass(frozen=True, slots=True)
class KVItem:
    scope: Scope
    key: str
    value: str
    version: int  # starts at 1, +1 per write
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ArchiveDocument:
    """A long-term document made from evicted history: the messages and their summary."""

    session: str  # the session scope key the history came from
    summary: str
    messages: tuple[Message, ...] = ()
    title: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_message_id)
    seq: int | None = None  # set by the store: 1, 2, ... per scope, in put order
    created_at: datetime = field(default_factory=utcnow)

    def search_text(self) -> str:
        parts = [self.title, self.summary]
        parts.extend(m.content or "" for m in self.messages)
        return "\n".join(p for p in parts if p)


@dataclass(frozen=True, slots=True)
class ArchiveState:
    """What an archive scope holds, in two numbers: the highest document seq ever handed out and
    how many documents exist. Seqs only grow and documents never change, so a reader that
    remembers these knows whether documents were added since (read those after its seq) or
    removed (the count fell behind)."""

    last_seq: int
    count: int


@dataclass(frozen=True, slots=True)
class ArchiveHit:
    document: ArchiveDocument
    score: float  # higher is more relevant; comparable only within one result list
    snippet: str


#: Pass as ``expected_version`` to make a KV write conditional on the key not existing yet.
MUST_NOT_EXIST = 0


@dataclass(frozen=True, slots=True)
class KVWrite:
    """One write of ``KVStore.commit``: ``value`` None deletes the key. ``expected_version`` as
    in ``KVStore.put`` (None: unconditional; ``MUST_NOT_EXIST``: the key must not exist yet)."""

    scope: Scope
    key: str
    value: str | None
    expected_version: int | None = None


@dataclass(frozen=True, slots=True)
class CursorMove:
    """The cursor move of ``KVStore.commit``: ``CursorStore.set``'s arguments as a value
    (``expected`` left at ``...`` moves it unconditionally; None means "must be unset")."""

    scope: Scope
    consumer: str
    position: int
    expected: int | None | object = ...


@dataclass(frozen=True, slots=True)
class Fence:
    """A fencing token: the lease a write is made under (``memory.locks.Lease.fence``).

    The lease is the KV item ``key`` of ``scope``; ``holder`` and ``generation`` are the fields of
    its JSON value when it was acquired (a takeover writes a new holder and generation + 1;
    renewals keep both). A store given ``fence=`` reads that item in the same atomic step as the
    write and refuses the write with FencedOut unless the lease still names this holder and
    generation: a writer that stalled past its ttl while another took over cannot land a write.
    """

    scope: Scope
    key: str
    holder: str
    generation: int

    def admits(self, lease_value: str | None) -> bool:
        """Whether ``lease_value`` (the lease item's current value, None if absent) is this lease."""
        if lease_value is None:
            return False
        try:
            data = json.loads(lease_value)
            return data["holder"] == self.holder and int(data.get("generation", 0)) == self.generation
        except (ValueError, KeyError, TypeError):
            return False

    def refused(self, what: str) -> FencedOut:
        return FencedOut(
            f"{what} refused: the {self.key} lease of {self.scope.key()} (generation {self.generation}, holder "
            f"{self.holder}) was taken over by another worker; nothing was written"
        )


# -- interfaces -------------------------------------------------------------------------------


class MessageStore(ABC):
    """Session messages, ordered by ``seq``."""

    @abstractmethod
    def append(self, scope: Scope, messages: Sequence[Message], *, fence: Fence | None = None) -> list[Message]:
        """Append ``messages`` in order, atomically (all or none), and return them as stored.

        With ``fence``, the append happens only if the fence's lease is still held by it, checked
        in the same atomic step (else FencedOut, nothing written).

        Each stored message gets ``seq = last_seq + 1, + 2, ...`` (any seq given is ignored) and
        a token count if it had none; ids and every other field are kept exactly. Raises
        DuplicateMessage if an id already exists in the scope (live, pruned or deleted) or twice
        in the batch. Bumps the session version (an empty batch changes nothing).
        """

    @abstractmethod
    def read(
        self,
        scope: Scope,
        *,
        after_seq: int | None = None,
        last: int | None = None,
        include_deleted: bool = False,
    ) -> list[Message]:
        """Live messages in ascending seq order.

        ``after_seq`` keeps only seq > after_seq; ``last`` (>= 0) keeps only the final N of what
        remains. Reading a window must cost in proportion to the window, not to the session.
        Soft-deleted messages are left out unless ``include_deleted``. Unknown scope: [].
        """

    @abstractmethod
    def head(self, scope: Scope) -> SessionHead:
        """The session's current version, last seq, live count and live tokens (cheap)."""

    @abstractmethod
    def prune(
        self,
        scope: Scope,
        *,
        through_seq: int,
        summary: Message | None,
        expected_version: int,
        fence: Fence | None = None,
    ) -> PruneResult:
        """Remove every live message with seq <= ``through_seq`` and put ``summary`` in their place.

        ``fence`` as in ``append`` (FencedOut is checked before the version).

        One atomic step: afterwards the session is ``[summary] + kept tail`` or, on any error,
        exactly what it was. The summary takes ``seq = through_seq`` (so it sorts before the
        tail) and a token count if it had none. Raises ConcurrentChange if the session's version
        is not ``expected_version``; InvalidPrune if ``through_seq`` is not a live message's seq
        or the summary's id is already used. Deleted messages in the range are dropped too.
        ``evicted`` holds the live messages removed, in seq order (not the deleted ones); the
        result's ``summary`` is the summary as stored. Bumps the version. Pruned messages are
        gone from the store (only their ids are remembered, for DuplicateMessage): the caller
        keeps them (pruned catalog, archive) before calling this.
        """

    @abstractmethod
    def soft_delete(self, scope: Scope, ids: Sequence[str]) -> int:
        """Hide live messages by id from ``read``; returns how many changed. Unknown, pruned or
        already deleted ids are ignored. Bumps the version when anything changed."""

    @abstractmethod
    def clear(self, scope: Scope) -> None:
        """Remove the whole session: its messages, deleted ones and remembered pruned ids. Idempotent.

        The head stays, empty (count 0, tokens 0), and its version and last_seq keep counting:
        a caller holding a version from before the clear can never prune the new session by
        mistake, and a seq is never given to two different messages.
        """

    # conveniences

    def tail(self, scope: Scope, n: int) -> list[Message]:
        return self.read(scope, last=n)

    def all(self, scope: Scope) -> list[Message]:
        return self.read(scope)


class KVStore(ABC):
    """Small named text values per scope, versioned for compare-and-set."""

    @abstractmethod
    def get(self, scope: Scope, key: str) -> KVItem | None:
        """The item, or None if the key does not exist. Raises InvalidKey for a bad key."""

    @abstractmethod
    def put(
        self, scope: Scope, key: str, value: str, *, expected_version: int | None = None, fence: Fence | None = None
    ) -> KVItem:
        """Write ``value`` atomically and return the new item (version + 1).

        ``fence`` as in ``MessageStore.append``; its lease must live in ``scope`` (ValueError
        otherwise) and must not be ``key`` itself.

        ``expected_version=None`` writes unconditionally; an int writes only if the current
        version equals it (``MUST_NOT_EXIST``, 0, for a key that must not exist yet), else
        raises VersionConflict (``actual`` 0 for a missing key) and writes nothing. Values are
        valid Unicode text without NUL (else ValueError): PostgreSQL text cannot hold NUL.
        """

    @abstractmethod
    def delete(
        self, scope: Scope, key: str, *, expected_version: int | None = None, fence: Fence | None = None
    ) -> bool:
        """Remove the key; True if it existed. CAS like ``put`` when expected_version is given;
        ``fence`` as in ``put`` (checked first: a refused delete removes nothing)."""

    @abstractmethod
    def list(self, scope: Scope, *, prefix: str = "") -> list[KVItem]:
        """Items of the scope whose key starts with ``prefix``, sorted by key."""

    @abstractmethod
    def commit(
        self, writes: Sequence[KVWrite], *, cursor: CursorMove | None = None, fence: Fence | None = None
    ) -> list[KVItem | None]:
        """Several KV writes, in any scopes, and at most one cursor move, as one atomic step.

        For a writer whose result spans keys that must move together (a consolidation's core
        memory files, their histories and its read position). In the same atomic step, and
        before anything is written, it checks the ``fence`` (its lease may live in any scope and
        must not be one of the written keys; FencedOut), then every write's
        ``expected_version`` (VersionConflict for the first that does not match), then the
        cursor's ``expected`` position (ConcurrentChange): any failure writes nothing at all.
        Otherwise every write and the cursor move land: afterwards all are stored or, on any
        error, none. Returns the written items in order (None for a delete; deleting a missing
        key is no error, and with ``expected_version`` 0 it is checked like a put's). A key may
        appear once (ValueError); values follow ``put``'s rules; an empty ``writes`` with no
        cursor changes nothing and returns [].

        The cursor is the one ``CursorStore.get``/``set`` of the same backend read and write.
        Where the backend has transactions (SQL) readers see all of it or none of it. The file
        backend takes the lock of every directory involved (in path order), writes a journal of
        the step, then the files: readers may see the writes land one by one while it runs, and
        a crash part-way is completed from the journal by the next ``commit`` on the same root,
        or when the root is next opened (a key someone changed since the crash is left alone).
        """

    def get_value(self, scope: Scope, key: str, default: str | None = None) -> str | None:
        item = self.get(scope, key)
        return default if item is None else item.value


class CursorStore(ABC):
    """Read positions of named consumers (e.g. the Dream Engine) per scope."""

    @abstractmethod
    def get(self, scope: Scope, consumer: str) -> int | None:
        """The consumer's position, or None if it never set one."""

    @abstractmethod
    def set(
        self,
        scope: Scope,
        consumer: str,
        position: int,
        *,
        expected: int | None | object = ...,
        fence: Fence | None = None,
    ) -> None:
        """Store ``position`` (an int >= 0) atomically. If ``expected`` is given (None meaning
        "unset"), write only when the current position equals it, else raise ConcurrentChange.
        ``fence`` as in ``MessageStore.append`` (its lease may live in any scope; FencedOut is
        checked before ``expected``)."""

    @abstractmethod
    def list(self, scope: Scope) -> dict[str, int]:
        """All consumers' positions in the scope."""


class ArchiveStore(ABC):
    """Long-term archive documents per scope, searchable by text."""

    @abstractmethod
    def put(self, scope: Scope, document: ArchiveDocument, *, fence: Fence | None = None) -> ArchiveDocument:
        """Store the document and return it with its ``seq`` set (next per scope).

        ``fence`` as in ``MessageStore.append`` (its lease may live in any scope, e.g. the
        session the history came from): a refused put writes nothing.

        Idempotent by id: putting an id that exists returns the stored document unchanged, so a
        retried cleanup never duplicates an archive document. Seqs are never reused, even after
        a delete (a cursor past a deleted document stays valid). Document ids follow the key
        rule (InvalidKey otherwise, here and in ``get``/``delete``); metadata holds JSON values.
        """

    @abstractmethod
    def get(self, scope: Scope, document_id: str) -> ArchiveDocument | None:
        """The document, or None."""

    @abstractmethod
    def list(
        self, scope: Scope, *, after_seq: int | None = None, limit: int | None = None, newest_first: bool = False
    ) -> list[ArchiveDocument]:
        """Documents ordered by seq (descending if ``newest_first``), after ``after_seq``;
        ``limit`` keeps the first N of that order (so the newest N when ``newest_first``)."""

    def list_summaries(
        self, scope: Scope, *, after_seq: int | None = None, limit: int | None = None, newest_first: bool = False,
        session: str | None = None,
    ) -> list[ArchiveDocument]:
        """``list`` without the history: the same documents in the same order, each with
        ``messages == ()`` and every other field as stored. For callers that show summaries
        (context assembly), so they do not pay for decoding thousands of archived messages;
        backends override it with a read that skips the messages. ``session`` (a session scope
        key) keeps only the documents archived from that session (``limit`` counts those)."""
        if session is None:
            listed = self.list(scope, after_seq=after_seq, limit=limit, newest_first=newest_first)
        else:
            listed = [d for d in self.list(scope, after_seq=after_seq, newest_first=newest_first) if d.session == session]
            listed = listed if limit is None else listed[:limit]
        return [replace(document, messages=()) for document in listed]

    @abstractmethod
    def search(self, scope: Scope, query: str, *, limit: int = 10) -> list[ArchiveHit]:
        """Documents matching the words of ``query``, most relevant first.

        The query is plain text, never a query language: quotes, operators and punctuation in it
        are treated as text. An empty query returns [].
        """

    @abstractmethod
    def delete(self, scope: Scope, document_id: str) -> bool:
        """Remove one document (and its vectors); True if it existed."""

    def archive_state(self, scope: Scope) -> ArchiveState:
        """The scope's ``ArchiveState`` (cheap: backends override the listing this default reads).

        ``last_seq`` is the highest seq of a document that exists here; backends that remember
        seqs of deleted documents may report those too (a reader only compares states)."""
        documents = self.list_summaries(scope)
        return ArchiveState(last_seq=max((d.seq or 0 for d in documents), default=0), count=len(documents))

    @abstractmethod
    def put_vectors(self, scope: Scope, document_id: str, *, model: str, vectors: bytes) -> bool:
        """Store the embedding vectors of a document's messages, replacing any stored before.

        ``vectors`` is opaque bytes (``memory.retrieval.embeddings.encode``: one row per message
        of the document, in order) made by ``model``. Returns False, writing nothing, when the
        document does not exist (it was deleted meanwhile). Atomic: a reader sees the old
        vectors or the new, never a mix."""

    @abstractmethod
    def vectors(self, scope: Scope, *, after_seq: int | None = None) -> dict[str, tuple[str, bytes]]:
        """The stored vectors of the scope's documents with seq > ``after_seq``: document id ->
        (model, bytes). Documents without vectors are left out."""


@dataclass(frozen=True, slots=True)
class MemoryStoreBundle:
    """The four stores of one backend, handed around as one value."""

    backend: str
    messages: MessageStore
    kv: KVStore
    cursors: CursorStore
    archive: ArchiveStore
