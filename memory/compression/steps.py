"""The steps of the cleanup pipeline, one function each, in the order ``cleanup`` runs them.

They are module-level functions called through this module (``steps.write_catalog(...)``), so a
fault-injection test can replace any one of them. Each either only adds data (the intent, the
catalog blocks, the archive document) or is the one atomic commit; see ``memory.compression
.cleanup`` for why that makes a crash at any point safe.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memory.archiving import SOURCE_CLEANUP, archive_messages
from memory.compression.boundary import PruneBoundary, choose_boundary
from memory.compression.pruned import PrunedCatalog
from memory.compression.summary import SummaryOptions, SummaryOutcome, Summarizer, compose_summary
from memory.config import MemoryConfig
from memory.hooks import CleanupFinished, MemoryHookDispatcher, MemoryHookPoint
from memory.locks import Lease, renew_lease
from memory.messages import KIND_COMPACT_SUMMARY, Message, utcnow
from memory.scopes import Scope, SessionScope
from memory.stores.base import (
    MUST_NOT_EXIST,
    ConcurrentChange,
    Fence,
    InvalidPrune,
    MemoryStoreBundle,
    PruneResult,
)
from memory.threads import run_blocking
from memory.tokens import with_tokens

logger = logging.getLogger("memory.compression")

LEASE_NAME = "cleanup"
INTENT_KEY = "cleanup.pending"
COMMIT_ATTEMPTS = 3
_ID_NAMESPACE = uuid.UUID("6f1c2a9e-4b7d-4c41-9d0e-6a2f3b8c5e17")


class Abort(Exception):
    """Stop without committing; the pipeline turns it into a CleanupResult with status ABORTED.

    ``resumable``: the planned cut is still valid (the session only kept changing), so the
    intent stays and the next cleanup finishes the same cut; otherwise the intent is dropped.
    """

    def __init__(self, message: str, *, resumable: bool = False) -> None:
        super().__init__(message)
        self.resumable = resumable


@dataclass(frozen=True, slots=True)
class CleanupIntent:
    """A planned cut and its summary, saved before anything else is written (the redo record).

    Stored as JSON at ``INTENT_KEY`` in the session scope and removed after the commit; while
    it exists, the next cleanup finishes exactly this cut instead of planning a new one.
    ``holder`` and ``generation`` name the lease it was saved under (for the record: every
    write of the intent, saving, clearing or discarding it, carries the writer's own fence).
    """

    through_seq: int
    through_id: str  # the id of the message at through_seq: a cleared and reused session never matches
    summary_id: str
    archive_document_id: str
    summary: str
    fallback: bool
    error: str | None
    calls: int
    cleanup_at: datetime
    holder: str = ""
    generation: int = 0

    def encode(self) -> str:
        data = {
            "v": 2,
            "holder": self.holder,
            "generation": self.generation,
            "through_seq": self.through_seq,
            "through_id": self.through_id,
            "summary_id": self.summary_id,
            "archive_document_id": self.archive_document_id,
            "summary": self.summary,
            "fallback": self.fallback,
            "error": self.error,
            "calls": self.calls,
            "cleanup_at": self.cleanup_at.isoformat(),
        }
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def decode(cls, value: str) -> CleanupIntent:
        data = json.loads(value)
        return cls(
            through_seq=int(data["through_seq"]),
            through_id=str(data["through_id"]),
            summary_id=str(data["summary_id"]),
            archive_document_id=str(data["archive_document_id"]),
            summary=str(data["summary"]),
            fallback=bool(data["fallback"]),
            error=data.get("error"),
            calls=int(data.get("calls", 0)),
            cleanup_at=datetime.fromisoformat(data["cleanup_at"]),
            holder=str(data.get("holder", "")),  # v1 intents did not say
            generation=int(data.get("generation", 0)),
        )


@dataclass(slots=True)
class CleanupRun:
    """Everything one cleanup works with; ``lease`` is replaced when it is renewed."""

    bundle: MemoryStoreBundle
    session: SessionScope
    config: MemoryConfig
    summarizer: Summarizer
    catalog: PrunedCatalog
    hooks: MemoryHookDispatcher
    archive_scope: Scope | None
    options: SummaryOptions
    sleep: Callable[[float], Any]
    now: Callable[[], datetime]
    lease: Lease
    lease_ttl: float
    embedder: Any = None  # memory.retrieval.embeddings.Embedder: vectors for what is archived
    fallback: bool = True  # False: a summary the model did not write commits nothing (cleanup ahead)
    template_followed: bool | None = None  # the summary's SummaryOutcome.template_followed, once asked
    template_ran_on: bool = False  # and its SummaryOutcome.template_ran_on


def derived_id(kind: str, *, session: SessionScope, through_seq: int) -> str:
    """A stable id for what one cleanup produces, so a retried cleanup reuses it."""
    return uuid.uuid5(_ID_NAMESPACE, f"{kind}|{session.key()}|{through_seq}").hex


async def io(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call a sync store function from the pipeline on a store thread (memory.threads; awaited, so ordered)."""
    return await run_blocking(fn, *args, **kwargs)


# -- the steps, in pipeline order -----------------------------------------------------------


def choose(*, messages: Sequence[Message], keep_tokens: int) -> PruneBoundary:
    """The prune boundary (``memory.compression.boundary``)."""
    return choose_boundary(messages=messages, keep_tokens=keep_tokens)


async def summarize(*, run: CleanupRun, boundary: PruneBoundary, cleanup_at: datetime) -> SummaryOutcome:
    """The compact summary of the evicted history, the evicted old summary merged in."""
    return await compose_summary(
        history=boundary.history,
        previous=boundary.previous_summaries,
        summarizer=run.summarizer,
        options=run.options,
        cleanup_at=cleanup_at,
        sleep=run.sleep,
    )


async def save_intent(*, run: CleanupRun, intent: CleanupIntent) -> None:
    """Record the cut (only if no intent exists: a stale one was removed by ``load_intent``),
    under the lease's fence."""
    await io(
        run.bundle.kv.put, run.session, INTENT_KEY, intent.encode(), expected_version=MUST_NOT_EXIST,
        fence=run.lease.fence,
    )


async def write_catalog(*, run: CleanupRun, history: Sequence[Message], cleanup_at: datetime) -> Path | None:
    """The evicted messages into the pruned catalog: idempotent per message, and fenced (the
    lease is checked, and held still, in the step that reads the catalog and creates the file)."""
    fence = run.lease.fence
    what = f"writing the pruned catalog of {run.session.key()}"
    return await io(
        run.catalog.write, run.session, history, cleanup_at=cleanup_at, guard=lambda: fenced(run.bundle.kv, fence, what)
    )


def fenced(kv: Any, fence: Fence, what: str) -> AbstractContextManager[object]:
    """``kv.fenced(fence, what)``: the KV store holding the lease keeps it still for a write made
    outside the stores (FileKVStore: under the lease directory's lock; SqlKVStore: in a
    transaction holding the lease row locked), raising FencedOut if the lease has moved on."""
    method = getattr(kv, "fenced", None)
    if method is None:
        raise TypeError(f"{type(kv).__name__} cannot fence a write made outside it (it has no fenced())")
    return method(fence, what)


async def write_archive(*, run: CleanupRun, intent: CleanupIntent, history: Sequence[Message]) -> str | None:
    """The evicted messages not archived yet, when the archive is on (``memory.archiving``: after
    the session's archive cursor, each exactly once, fenced). Returns the id of the document
    that holds the newest of them, or None when there was nothing new to archive."""
    if not (run.config.archive_enabled and run.archive_scope is not None):
        return None
    done = await io(
        archive_messages,
        bundle=run.bundle,
        session=run.session,
        archive_scope=run.archive_scope,
        messages=history,
        source=SOURCE_CLEANUP,
        fence=run.lease.fence,
        summary=intent.summary,
        embedder=run.embedder,
        now=lambda: intent.cleanup_at,
        extra={"through_seq": intent.through_seq, "fallback_summary": intent.fallback},
    )
    return done.documents[-1].id if done.documents else None


async def commit(*, run: CleanupRun, intent: CleanupIntent, expected_version: int) -> tuple[PruneResult, int]:
    """The atomic prune; returns its result and the number of attempts it took.

    Raises Abort when the cut can no longer be committed (someone else pruned) or the session
    kept changing for ``COMMIT_ATTEMPTS`` tries (resumable: the intent is kept).
    """
    summary = with_tokens(
        Message(
            role="user",  # providers that reject mid-conversation system messages accept a user turn
            content=intent.summary,
            kind=KIND_COMPACT_SUMMARY,
            id=intent.summary_id,
            created_at=intent.cleanup_at,
        )
    )
    version = expected_version
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            result = await io(
                run.bundle.messages.prune,
                run.session,
                through_seq=intent.through_seq,
                summary=summary,
                expected_version=version,
                fence=run.lease.fence,  # a cleanup that stalled past its lease commits nothing
            )
            return result, attempt
        except InvalidPrune as exc:
            raise Abort(f"the planned cut can no longer be committed ({exc})") from exc
        except ConcurrentChange:
            # Appends only add after the cut, so the evicted range is unchanged as long as the
            # message at through_seq is still live; anything else is someone else's prune.
            head = await io(run.bundle.messages.head, run.session)
            tail = await io(run.bundle.messages.read, run.session, after_seq=intent.through_seq - 1)
            if not tail or tail[0].seq != intent.through_seq or tail[0].id != intent.through_id:
                raise Abort(f"the session was pruned or changed at seq {intent.through_seq} during the cleanup")
            version = head.version
            logger.info("cleanup of %s: session changed during the cleanup; retrying the commit", run.session.key())
    raise Abort(
        f"the session kept changing; the commit was tried {COMMIT_ATTEMPTS} times (the next cleanup finishes it)",
        resumable=True,
    )


async def keep_lease(run: CleanupRun) -> None:
    """Renew the lease once a third of its ttl has passed; raises LeaseLost if it was taken.

    While more than two thirds of the ttl remain nobody can have taken it over (a takeover
    needs an expired lease), so a fast cleanup skips the extra KV writes.
    """
    if utcnow() >= run.lease.expires_at - timedelta(seconds=run.lease_ttl * 2 / 3):
        run.lease = await io(renew_lease, kv=run.bundle.kv, lease=run.lease, ttl=run.lease_ttl)


async def clear_intent(*, run: CleanupRun, intent: CleanupIntent) -> None:
    """Remove the committed cut's intent: only that one, and only under the lease's fence.

    The intent's KV version cannot tell ours from a successor's (a key's version starts again at
    1 after a delete); the fence can: the delete is refused (FencedOut) once the lease has moved
    on, and while it has not, no one else writes the intent, so what was read is what is deleted.
    """
    item = await io(run.bundle.kv.get, run.session, INTENT_KEY)
    if item is None or _summary_id_of(item.value) != intent.summary_id:
        return
    await io(run.bundle.kv.delete, run.session, INTENT_KEY, expected_version=item.version, fence=run.lease.fence)


def _summary_id_of(value: str) -> str | None:
    try:
        return CleanupIntent.decode(value).summary_id
    except (ValueError, KeyError, TypeError):
        return None


async def finished(*, run: CleanupRun, event: CleanupFinished) -> None:
    """Dispatch CLEANUP_FINISHED; handler failures are logged by the dispatcher, never raised."""
    await run.hooks.adispatch(MemoryHookPoint.CLEANUP_FINISHED, event)


async def load_intent(*, run: CleanupRun, live: Sequence[Message]) -> CleanupIntent | None:
    """The pending intent if it can still be committed; stale ones are removed."""
    item = await io(run.bundle.kv.get, run.session, INTENT_KEY)
    if item is None:
        return None
    try:
        intent = CleanupIntent.decode(item.value)
    except (ValueError, KeyError, TypeError):
        logger.warning("cleanup of %s: unreadable pending intent removed", run.session.key())
        intent = None
    committed = intent is not None and any(m.id == intent.summary_id for m in live)
    cut_live = intent is not None and any(
        m.seq == intent.through_seq and m.id == intent.through_id and not m.is_compact_summary for m in live
    )
    if intent is not None and cut_live and not committed:
        return intent
    if committed:
        logger.info("cleanup of %s: the interrupted cleanup had committed; clearing its intent", run.session.key())
    await io(run.bundle.kv.delete, run.session, INTENT_KEY, expected_version=item.version, fence=run.lease.fence)
    return None


def discard_intent(run: CleanupRun) -> None:
    """Drop the intent of a cut that can no longer be committed, under the lease's fence (sync:
    called through ``io``). The holder owns whatever intent there is: it loaded it or saved it."""
    item = run.bundle.kv.get(run.session, INTENT_KEY)
    if item is not None:
        run.bundle.kv.delete(run.session, INTENT_KEY, expected_version=item.version, fence=run.lease.fence)
