"""Archiving: every conversation reaches long-term memory, each message exactly once.

Two paths write a session's history to the archive (when the agent's archive is on):

* cleanup (``memory.compression.cleanup``) archives what it evicts, before its commit;
* conversation archiving (``archive_conversation``) archives what was never evicted: a
  conversation idle for a while, one its user left for another, or every one on command
  (``manage.py archive_sessions``). The live conversation is left as it is.

Both go through ``archive_messages``, under the session's ``cleanup`` lease (so they never run
at once on one session) and fenced by it. One *archive cursor* per session (the ``archive``
consumer of the CursorStore, in the session scope) is the seq of the last message archived;
only messages after it are archived, and it advances with compare-and-set, fenced.

Exactly once, crash-safe: the document for the messages that start at seq *s* has an id derived
from the session and *s*, and ``ArchiveStore.put`` is idempotent by id. A writer that crashed
between its put and its cursor move, or lost a race, finds the stored document under the same
id on its next try and moves the cursor to that document's last seq; whatever it held beyond
that goes into the next document. So a message is in exactly one document, whatever happened.

Documents record their messages' time span (``metadata``: ``first_at``, ``last_at``,
``first_seq``, ``last_seq``, ``source``), get a title from their content, and carry the vectors
of their messages (``ArchiveStore.put_vectors``) when an embedder is given. A conversation
document's summary is a dated digest of what was said (no model call: cheap, offline, never
wrong about what is in it); a cleanup document's is the compact summary.
"""

from __future__ import annotations

import enum
import logging
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from memory.locks import LeaseBusy, acquire_lease, default_holder, release_lease
from memory.messages import KIND_COMPACT_SUMMARY, Message, storable_message, utcnow
from memory.retrieval.embeddings import Embedder, EmbeddingUnavailable, encode
from memory.retrieval.messages import message_text, searchable
from memory.scopes import Scope, SessionScope
from memory.stores.base import ArchiveDocument, ConcurrentChange, Fence, MemoryStoreBundle
from memory.text import storable
from memory.tokens import count_text
from memory.transcript import chain_spans

logger = logging.getLogger("memory.archiving")

ARCHIVE_CURSOR = "archive"
LEASE_NAME = "cleanup"  # the cleanup pipeline's lease: archiving and cleanup of a session never overlap
SOURCE_CLEANUP = "cleanup"
SOURCE_CONVERSATION = "conversation"
TITLE_CHARS = 72
DIGEST_TOKENS = 160
_ATTEMPTS = 5
_ID_NAMESPACE = uuid.UUID("2d8f4a61-73c5-4e0b-9a1d-5b7e0c3f9a24")


def document_id_for(session: SessionScope, first_seq: int) -> str:
    """The id of the archive document whose messages start at ``first_seq`` in ``session``."""
    return uuid.uuid5(_ID_NAMESPACE, f"{session.key()}|{first_seq}").hex


# -- what a document says about itself ------------------------------------------------------


def day(moment: datetime) -> str:
    """A date as people write it: "8 May 2023"."""
    return f"{moment.day} {moment:%B %Y}"


def span_text(first: datetime, last: datetime) -> str:
    """"8 May 2023", or "8–9 May 2023", or "30 April – 2 May 2023"."""
    if first.date() == last.date():
        return day(first)
    if (first.year, first.month) == (last.year, last.month):
        return f"{first.day}–{last.day} {last:%B %Y}"
    if first.year == last.year:
        return f"{first.day} {first:%B} – {day(last)}"
    return f"{day(first)} – {day(last)}"


_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def first_sentence(text: str, limit: int) -> str:
    """The first sentence of ``text`` on one line, cut at a word before ``limit`` characters."""
    flat = " ".join(text.split())
    cut = _SENTENCE_END.split(flat, maxsplit=1)[0]
    if len(cut) <= limit:
        return cut
    shortened = cut[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:-")
    return (shortened or cut[: limit - 1]) + "…"


def title_for(messages: Sequence[Message]) -> str:
    """A title from the content: the first substantive thing the user said (else anyone)."""
    spoken = [m for m in messages if m.role in ("user", "assistant") and (m.content or "").strip()]
    candidates = [m for m in spoken if m.role == "user"] + spoken
    titles = [first_sentence(m.content or "", TITLE_CHARS) for m in candidates]
    return next((t for t in titles if len(t.split()) >= 3), titles[0] if titles else "Conversation")


def digest(messages: Sequence[Message], *, budget: int = DIGEST_TOKENS) -> str:
    """A dated digest of a conversation: its date span, then what each side said first, in order,
    within ``budget`` tokens (a line is dropped whole, never cut; the count of the rest is said)."""
    spoken = [m for m in messages if m.role in ("user", "assistant") and (m.content or "").strip()]
    if not spoken:
        return "A conversation with no text (tool work only)."
    header = f"On {span_text(spoken[0].created_at, spoken[-1].created_at)} ({len(spoken)} messages):"
    lines = [header]
    used = count_text(header)
    shown = 0
    for message in spoken:
        line = f"- {message.role}: {first_sentence(message.content or '', 160)}"
        cost = count_text(line) + 1
        if used + cost > budget - 8:
            break
        lines.append(line)
        used += cost
        shown += 1
    if shown < len(spoken):
        lines.append(f"- … and {len(spoken) - shown} more messages")
    return "\n".join(lines)


def build_document(
    *,
    session: SessionScope,
    messages: Sequence[Message],
    source: str,
    summary: str | None,
    now: datetime,
    extra: dict | None = None,
) -> ArchiveDocument:
    stored = tuple(storable_message(m) for m in messages)  # older sessions may hold lone surrogates
    first, last = stored[0], stored[-1]
    metadata = {
        "source": source,
        "first_seq": first.seq,
        "last_seq": last.seq,
        "first_at": min(m.created_at for m in stored).isoformat(),
        "last_at": max(m.created_at for m in stored).isoformat(),
        "messages": len(stored),
        **(extra or {}),
    }
    return ArchiveDocument(
        id=document_id_for(session, first.seq or 0),
        session=session.key(),
        summary=storable(summary) if summary else digest(stored),
        messages=stored,
        title=storable(title_for(stored)),
        metadata=metadata,
        created_at=now,
    )


def document_last_seq(document: ArchiveDocument) -> int:
    """The last session seq a stored document covers (older documents say it differently)."""
    for key in ("last_seq", "through_seq"):
        value = document.metadata.get(key)
        if isinstance(value, int):
            return value
    seqs = [m.seq for m in document.messages if m.seq is not None]
    return max(seqs, default=0)


# -- the cursor ----------------------------------------------------------------------------------


def archived_through(bundle: MemoryStoreBundle, *, session: SessionScope, archive_scope: Scope) -> tuple[int, int | None]:
    """(the seq through which ``session`` is archived, the cursor as stored).

    A session archived by cleanups before the cursor existed has no cursor: its documents say
    how far they go (read once; the first move stores the cursor)."""
    stored = bundle.cursors.get(session, ARCHIVE_CURSOR)
    if stored is not None:
        return stored, stored
    key = session.key()
    covered = [document_last_seq(d) for d in bundle.archive.list_summaries(archive_scope, session=key)]
    return max(covered, default=0), None


# -- archiving ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Archived:
    """What ``archive_messages`` did: the documents it wrote (or found already written) and the
    seq the session is archived through."""

    documents: tuple[ArchiveDocument, ...] = ()
    through_seq: int = 0
    embedded: bool = False


def _units(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without compact summaries and without a tool chain left open at the end
    (a turn still running, or one that crashed: its calls wait for their results)."""
    kept = [m for m in messages if m.kind != KIND_COMPACT_SUMMARY]
    spans = chain_spans(kept)
    if spans:
        start, end = spans[-1]
        last = kept[start]
        if last.role == "assistant" and last.tool_calls:
            answered = {m.tool_call_id for m in kept[start + 1 : end]}
            if not set(last.call_ids) <= answered:
                kept = kept[:start]
    return kept


def archive_messages(
    *,
    bundle: MemoryStoreBundle,
    session: SessionScope,
    archive_scope: Scope,
    messages: Sequence[Message],
    source: str,
    fence: Fence | None,
    summary: str | None = None,
    embedder: Embedder | None = None,
    now: Callable[[], datetime] = utcnow,
    extra: dict | None = None,
) -> Archived:
    """Archive those of ``messages`` (in seq order) that lie after the session's archive cursor.

    Called under the session's cleanup lease, with its ``fence`` on every write (FencedOut if
    the lease was taken over: nothing more is written). ``summary`` is the document's summary
    (a cleanup's compact summary), else a dated digest is made. See the module docstring for
    why each message lands in exactly one document.
    """
    ordered = _units(sorted((m for m in messages if m.seq is not None), key=lambda m: m.seq))
    through, stored_cursor = archived_through(bundle, session=session, archive_scope=archive_scope)
    written: list[ArchiveDocument] = []
    embedded = False
    for _ in range(_ATTEMPTS * max(1, len(ordered))):
        todo = [m for m in ordered if m.seq > through]
        if not todo:
            break
        document = build_document(session=session, messages=todo, source=source, summary=summary, now=now(),
                                  extra=extra)
        stored = bundle.archive.put(archive_scope, document, fence=fence)
        if embedder is not None:
            embedded = _embed(bundle, archive_scope, stored, embedder) or embedded
        end = max(document_last_seq(stored), through)
        try:
            bundle.cursors.set(session, ARCHIVE_CURSOR, end, expected=stored_cursor, fence=fence)
        except ConcurrentChange:
            # Another writer moved it (possible only across a lost lease, or before this
            # session's first cursor): read where it is and carry on from there.
            through, stored_cursor = archived_through(bundle, session=session, archive_scope=archive_scope)
            written.append(stored)
            continue
        through, stored_cursor = end, end
        written.append(stored)
        summary = None  # a cleanup's summary describes its whole cut: only its first document gets it
    unique = {d.id: d for d in written}
    return Archived(documents=tuple(unique.values()), through_seq=through, embedded=embedded)


def _embed(bundle: MemoryStoreBundle, scope: Scope, document: ArchiveDocument, embedder: Embedder) -> bool:
    """Store the vectors of ``document``'s messages; False when the embedder cannot answer (the
    document stays searchable by words; ``reembed`` or retrieval fills them in later)."""
    import numpy as np

    rows = [i for i, m in enumerate(document.messages) if searchable(m)]
    vectors = np.zeros((len(document.messages), embedder.dimensions), dtype=np.float32)
    if rows:
        try:
            vectors[rows] = embedder.embed([message_text(document.messages[i]) for i in rows])
        except EmbeddingUnavailable as exc:
            logger.warning("archive document %s is stored without vectors: %s", document.id, exc)
            return False
    return bundle.archive.put_vectors(scope, document.id, model=embedder.model, vectors=encode(vectors))


def reembed(*, bundle: MemoryStoreBundle, archive_scope: Scope, embedder: Embedder, limit: int | None = None) -> int:
    """Store vectors of ``embedder``'s model for the scope's documents that have none (or another
    model's); returns how many documents were embedded. Idempotent; ``limit`` bounds one pass."""
    have = {doc_id for doc_id, (model, _) in bundle.archive.vectors(archive_scope).items() if model == embedder.model}
    done = 0
    for document in bundle.archive.list(archive_scope):
        if document.id in have:
            continue
        if limit is not None and done >= limit:
            break
        if _embed(bundle, archive_scope, document, embedder):
            done += 1
    return done


# -- whole conversations --------------------------------------------------------------------------


class ArchivingStatus(enum.Enum):
    ARCHIVED = "archived"  # documents were written
    UP_TO_DATE = "up_to_date"  # nothing after the cursor
    NOT_IDLE = "not_idle"  # the conversation had a message more recently than the idle time
    BUSY = "busy"  # a cleanup or another archiving of the session holds its lease


@dataclass(frozen=True, slots=True)
class ArchivingResult:
    status: ArchivingStatus
    session: SessionScope
    documents: tuple[ArchiveDocument, ...] = ()
    through_seq: int = 0
    reason: str = ""

    @property
    def archived(self) -> bool:
        return self.status is ArchivingStatus.ARCHIVED

    @property
    def messages(self) -> int:
        return sum(len(d.messages) for d in self.documents)


def archive_conversation(
    *,
    bundle: MemoryStoreBundle,
    session: SessionScope,
    archive_scope: Scope,
    idle_for: timedelta | None = None,
    embedder: Embedder | None = None,
    lease_ttl: float = 600.0,
    now: Callable[[], datetime] = utcnow,
) -> ArchivingResult:
    """Archive the messages of ``session`` that are not archived yet; the session is unchanged.

    With ``idle_for``, only if its last message is at least that old (``NOT_IDLE`` otherwise):
    a conversation still going on is archived when it pauses. ``BUSY`` when a cleanup (or
    another archiving) of the session holds its lease; the next trigger catches up.
    """
    # Read first, without the lease: a conversation archived through its last message (the
    # common case when a user switches conversations) costs two reads, not a lease's writes.
    through, _ = archived_through(bundle, session=session, archive_scope=archive_scope)
    if bundle.messages.head(session).last_seq <= through:
        return ArchivingResult(ArchivingStatus.UP_TO_DATE, session, through_seq=through)
    try:
        lease = acquire_lease(kv=bundle.kv, scope=session, name=LEASE_NAME, ttl=lease_ttl, holder=default_holder())
    except LeaseBusy as exc:
        return ArchivingResult(ArchivingStatus.BUSY, session, reason=str(exc))
    try:
        through, _ = archived_through(bundle, session=session, archive_scope=archive_scope)
        pending = bundle.messages.read(session, after_seq=through)
        if not _units(pending):
            return ArchivingResult(ArchivingStatus.UP_TO_DATE, session, through_seq=through)
        if idle_for is not None and pending and pending[-1].created_at > now() - idle_for:
            return ArchivingResult(
                ArchivingStatus.NOT_IDLE, session, through_seq=through,
                reason=f"its last message is from {pending[-1].created_at.isoformat()}",
            )
        done = archive_messages(
            bundle=bundle, session=session, archive_scope=archive_scope, messages=pending,
            source=SOURCE_CONVERSATION, fence=lease.fence, embedder=embedder, now=now,
        )
        status = ArchivingStatus.ARCHIVED if done.documents else ArchivingStatus.UP_TO_DATE
        return ArchivingResult(status, session, documents=done.documents, through_seq=done.through_seq)
    finally:
        try:
            release_lease(kv=bundle.kv, lease=lease)
        except Exception:
            logger.exception("archiving of %s: the lease could not be released; it expires by itself", session.key())


__all__ = [
    "ARCHIVE_CURSOR",
    "Archived",
    "ArchivingResult",
    "ArchivingStatus",
    "archive_conversation",
    "archive_messages",
    "archived_through",
    "digest",
    "document_id_for",
    "reembed",
    "span_text",
    "title_for",
]
