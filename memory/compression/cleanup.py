"""The cleanup pipeline: compact a session that crossed its threshold, losing nothing.

In order (the steps live in ``memory.compression.steps``, one function each):

1. ``head.tokens`` vs ``config.threshold``: skip unless over it (or ``force``).
2. Take the session's cleanup lease (``memory.locks``): cleanups of one session never overlap,
   across processes wherever the KV store is shared.
3. Dispatch CLEANUP_TRIGGERED.
4. ``choose``: the tool-chain-safe prune boundary keeping a tail of ``config.keep`` tokens.
5. ``summarize``: the structured compact summary, the previous one merged in (a deterministic
   fallback when the summarizer fails; never an exception, never a loop). A cleanup ahead of
   need (``fallback=False``) stops here instead, ABORTED, when the model did not write it, and
   any cleanup does when its summarizer withdraws (``SummarizerWithdrawn``).
6. ``save_intent``: the planned cut and its summary, in the session's KV (``cleanup.pending``).
7. ``write_catalog``: the evicted messages into the pruned catalog.
8. ``write_archive``: when ``config.archive_enabled`` and an archive scope is given, the evicted
   messages after the session's archive cursor (``memory.archiving``: conversation archiving may
   have archived some already), each exactly once.
9. ``commit``: ``prune(through_seq, [compact_summary], expected_version)``. A concurrent append
   changes the version but not the evicted range, so the commit is retried (bounded).
10. ``clear_intent``, then dispatch CLEANUP_FINISHED.

Every durable write under the lease carries its fence (``Lease.fence``: holder and generation)
and is refused (FencedOut) once another holder has taken the lease over: the intent's save,
clear and discard (KV put/delete with ``fence=``), the catalog (``write_catalog``: the lease is
checked and held still in the step that creates the file), the commit (``prune(fence=...)``).
A cleanup that stalled past its lease (a slow summarizer, a paused process) and wakes after a
takeover therefore changes nothing; the new holder resumes its intent. docs/faults.md lists
each write and its fence.

Why this is safe: every step before the commit only adds data, and the commit is one atomic
store operation, so a crash anywhere leaves the old session or the new one. The intent makes
the next cleanup finish the *same* cut with the *same* summary, even if messages were appended
meanwhile (the catalog write is idempotent per message, the archive put per id, and the
summarizer is not called again), so each message ends up exactly once in the session or the
catalog (and the archive), in order. Catalog blocks of a cut not yet committed are those whose
seq is still live (``memory.compression.pruned.first_uncommitted_seq``).

Cost: one cleanup reads the live session (bounded by the threshold) and writes what it evicts;
nothing in it reads the whole history, so it costs the same after 100 or 100,000 messages.

Sync and async: ``arun_cleanup`` is the implementation (the runtime is async). Store calls go
through ``sync_to_async`` (thread-sensitive), so the Django ORM backend is safe from async code;
``run_cleanup`` is the sync entry point for tasks and management commands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from asgiref.sync import async_to_sync

from memory.compression import steps
from memory.compression.pruned import PrunedCatalog
from memory.compression.results import CleanupFailed, CleanupResult, CleanupStatus
from memory.compression.steps import INTENT_KEY, LEASE_NAME, Abort, CleanupIntent, CleanupRun, derived_id, io
from memory.compression.summary import SummaryOptions, Summarizer, default_options
from memory.compression.summary_calls import SummarizerWithdrawn
from memory.config import MemoryConfig
from memory.hooks import CleanupFinished, CleanupTriggered, MemoryHookDispatcher, MemoryHookPoint
from memory.locks import LeaseBusy, LeaseLost, acquire_lease, default_holder, release_lease
from memory.messages import Message, utcnow
from memory.scopes import Scope, SessionScope
from memory.stores.base import FencedOut, MemoryStoreBundle, SessionHead
from memory.text import storable
from memory.tokens import message_tokens

DEFAULT_LEASE_TTL = 600.0


def _result(run: CleanupRun, status: CleanupStatus, reason: str, head: SessionHead, **fields: Any) -> CleanupResult:
    fields.setdefault("tokens_after", head.tokens)
    fields.setdefault("template_followed", getattr(run, "template_followed", None))
    fields.setdefault("template_ran_on", getattr(run, "template_ran_on", False))
    return CleanupResult(
        status=status,
        session=run.session,
        reason=reason,
        threshold=run.config.threshold,
        tokens_before=head.tokens,
        **fields,
    )


_UNCHANGED = "The session is unchanged; the next cleanup resumes from here."
_BEFORE_LEASE = "The session is unchanged and no cleanup was started."
_SETTLED_LATER = "The session is either unchanged or compacted; the next cleanup settles which and finishes."
_COMPACTED = "The session was compacted; the next cleanup clears the leftover intent."
_COMPACTED_DONE = "The session was compacted and the cleanup is complete; only its CLEANUP_FINISHED handlers did not all run."


def _failed(name: str, session: SessionScope, exc: Exception, outcome: str) -> CleanupFailed:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return CleanupFailed(f"cleanup of {session.key()} failed at {name}: {detail}. {outcome}", step=name, session=session)


async def _step(name: str, run: CleanupRun | SessionScope, awaitable: Any, *, outcome: str = _UNCHANGED) -> Any:
    """Await one step; any fault but the pipeline's own outcomes becomes CleanupFailed(step=name).

    ``run`` may be the bare session for the steps before the run exists (the lease)."""
    session = run if isinstance(run, SessionScope) else run.session
    try:
        return await awaitable
    except (Abort, LeaseBusy, LeaseLost, FencedOut, CleanupFailed, SummarizerWithdrawn):
        raise  # the pipeline's own outcomes, turned into results by the caller
    except Exception as exc:
        raise _failed(name, session, exc, outcome) from exc


async def _sync_step(name: str, run: CleanupRun, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
    """``_step`` for a plain (sync, in-memory) step such as choosing the boundary."""

    async def call() -> Any:
        return fn(**kwargs)

    return await _step(name, run, call())


def _commit_reason(
    run: CleanupRun,
    intent: CleanupIntent,
    *,
    evicted: int,
    before: SessionHead,
    after: SessionHead,
    oversized: tuple[int, ...],
) -> str:
    threshold = run.config.threshold
    if after.tokens <= threshold:
        reason = f"compacted {evicted} messages through seq {intent.through_seq}"
    elif after.last_seq > before.last_seq:
        reason = (
            f"compacted through seq {intent.through_seq}, but messages appended during the cleanup keep the session "
            f"at {after.tokens} tokens, over the threshold of {threshold}; the next cleanup handles them"
        )
    else:
        reason = (
            f"compacted through seq {intent.through_seq}, but the summary and the kept tail take {after.tokens} "
            f"tokens, over the threshold of {threshold}: keep_tokens is too close to the threshold"
        )
    if oversized:
        reason += (
            f"; message(s) at seq {', '.join(map(str, oversized))} exceed the {run.config.context_window}-token "
            "window: they are whole in the pruned catalog and only excerpted in context"
        )
    return reason


async def _complete(
    *, run: CleanupRun, intent: CleanupIntent, head: SessionHead, live: Sequence[Message], resumed: bool
) -> CleanupResult:
    """Steps 7-10 for a saved intent: catalog, archive, commit, clear, CLEANUP_FINISHED."""
    history = [m for m in live if m.seq is not None and m.seq <= intent.through_seq and not m.is_compact_summary]
    catalog_path = await _step(
        "the pruned catalog", run, steps.write_catalog(run=run, history=history, cleanup_at=intent.cleanup_at)
    )
    document_id = await _step("the archive", run, steps.write_archive(run=run, intent=intent, history=history))
    await _step("the lease", run, steps.keep_lease(run))
    pruned, attempts = await _step(
        "the commit", run, steps.commit(run=run, intent=intent, expected_version=head.version), outcome=_SETTLED_LATER
    )
    intent_left = False
    try:
        await _step("clearing the intent", run, steps.clear_intent(run=run, intent=intent), outcome=_COMPACTED)
    except (LeaseLost, FencedOut) as exc:
        # The cut is committed; the lease passed to another cleanup after the commit, and only
        # it may touch the intent now (it finds the cut committed and clears the intent).
        steps.logger.warning("cleanup of %s: committed, but the intent is left to the next holder (%s)",
                             run.session.key(), exc)
        intent_left = True
    after = pruned.head
    window = run.config.context_window
    oversized = tuple(m.seq for m in history if m.seq is not None and message_tokens(m) > window)
    reason = _commit_reason(run, intent, evicted=len(history), before=head, after=after, oversized=oversized)
    if intent_left:
        reason += "; the lease was taken over after the commit, so the next cleanup clears the intent"
    result = CleanupResult(
        status=CleanupStatus.COMMITTED,
        session=run.session,
        reason=reason,
        threshold=run.config.threshold,
        tokens_before=head.tokens,
        tokens_after=after.tokens,
        through_seq=intent.through_seq,
        evicted_count=len(history),
        kept_count=max(0, after.count - 1),  # everything live but the new summary
        catalog_path=catalog_path,
        archive_document_id=document_id,
        summary_id=intent.summary_id,
        fallback_summary=intent.fallback,
        summary_error=intent.error,
        summarizer_calls=0 if resumed else intent.calls,
        oversized_seqs=oversized,
        commit_attempts=attempts,
        resumed=resumed,
        template_followed=run.template_followed,
        template_ran_on=run.template_ran_on,
    )
    event = CleanupFinished(
        session=run.session,
        evicted_count=result.evicted_count,
        kept_count=result.kept_count,
        tokens_before=result.tokens_before,
        tokens_after=result.tokens_after,
        catalog_path=catalog_path,
        archive_document_id=document_id,
        fallback_summary=intent.fallback,
        through_seq=intent.through_seq,
    )
    await _step("CLEANUP_FINISHED", run, steps.finished(run=run, event=event), outcome=_COMPACTED_DONE)
    return result


async def _pass(*, run: CleanupRun, force: bool) -> CleanupResult:
    head: SessionHead = await _step("reading the session", run, io(run.bundle.messages.head, run.session))
    live: list[Message] = await _step("reading the session", run, io(run.bundle.messages.read, run.session))
    intent = await _step("loading the intent", run, steps.load_intent(run=run, live=live))
    if intent is not None:
        return await _complete(run=run, intent=intent, head=head, live=live, resumed=True)
    threshold = run.config.threshold
    if not force and head.tokens <= threshold:
        return _result(run, CleanupStatus.SKIPPED, f"{head.tokens} tokens is within the threshold of {threshold}", head)
    await _step(
        "CLEANUP_TRIGGERED",
        run,
        run.hooks.adispatch(
            MemoryHookPoint.CLEANUP_TRIGGERED,
            CleanupTriggered(session=run.session, tokens=head.tokens, threshold=threshold, forced=force),
        ),
    )
    boundary = await _sync_step("choosing the boundary", run, steps.choose, messages=live, keep_tokens=run.config.keep)
    if boundary.through_seq is None:
        return _result(
            run,
            CleanupStatus.NOTHING_TO_EVICT,
            f"nothing to evict: everything after the compact summary fits in keep_tokens ({run.config.keep})",
            head,
        )
    cleanup_at = run.now()
    try:
        outcome = await _step("the summary", run, steps.summarize(run=run, boundary=boundary, cleanup_at=cleanup_at))
    except SummarizerWithdrawn as exc:
        return _result(run, CleanupStatus.ABORTED, f"{exc}; nothing was committed", head)
    run.template_followed, run.template_ran_on = outcome.template_followed, outcome.template_ran_on
    # The summarizer may have taken long: is the lease still ours?
    await _step("the lease", run, steps.keep_lease(run))
    if outcome.fallback and not run.fallback:
        # A cleanup ahead of need (the session is not over its threshold yet) waits for a summary
        # the model writes: the cleanup the threshold calls for will still fall back if it must.
        return _result(
            run, CleanupStatus.ABORTED, f"the model did not write the summary ({outcome.error}); nothing was committed", head
        )
    if outcome.fallback:
        steps.logger.warning("cleanup of %s: fallback summary used (%s)", run.session.key(), outcome.error)
    intent = CleanupIntent(
        through_seq=boundary.through_seq,
        through_id=boundary.evicted[-1].id,
        summary_id=derived_id("summary", session=run.session, through_seq=boundary.through_seq),
        archive_document_id=derived_id("archive", session=run.session, through_seq=boundary.through_seq),
        summary=storable(outcome.content),  # a KV value and a message: valid Unicode text
        fallback=outcome.fallback,
        error=outcome.error,
        calls=outcome.calls,
        cleanup_at=cleanup_at,
        holder=run.lease.holder,
        generation=run.lease.generation,
    )
    await _step("saving the intent", run, steps.save_intent(run=run, intent=intent))
    return await _complete(run=run, intent=intent, head=head, live=live, resumed=False)


async def _guarded_pass(*, run: CleanupRun, force: bool, head: SessionHead) -> CleanupResult:
    try:
        return await _pass(run=run, force=force)
    except Abort as exc:
        if not exc.resumable:
            await _step("discarding the intent", run, io(steps.discard_intent, run))
        reason = str(exc)
    except (LeaseLost, FencedOut) as exc:
        # Our lease ran out and another worker took over (the store refused our write, if it
        # came to one); it resumes our intent, if any.
        reason = str(exc)
    current = await _step("reading the session", run, io(run.bundle.messages.head, run.session))
    return _result(run, CleanupStatus.ABORTED, f"{reason}; nothing was committed", head, tokens_after=current.tokens)


async def arun_cleanup(
    *,
    bundle: MemoryStoreBundle,
    session: SessionScope,
    config: MemoryConfig,
    summarizer: Summarizer,
    catalog: PrunedCatalog,
    hooks: MemoryHookDispatcher,
    archive_scope: Scope | None = None,
    force: bool = False,
    summary_options: SummaryOptions | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    sleep: Callable[[float], Any] = asyncio.sleep,
    now: Callable[[], datetime] = utcnow,
    embedder: Any = None,
    fallback: bool = True,
) -> CleanupResult:
    """Compact ``session`` if it is over ``config.threshold`` (or ``force``); see the module doc.

    Returns a CleanupResult for every expected outcome (committed, skipped, nothing to evict,
    busy, aborted); ``result.reason`` says why, e.g. why the session is still over the
    threshold. Raises CleanupFailed, and nothing else, when a step fails (disk full, store
    down); the next cleanup resumes. An interrupted earlier cleanup is finished first, whatever the token
    count. ``summary_options`` defaults to ``default_options(config)`` (the summary's budget); ``lease_ttl``
    (seconds) bounds how long a crashed worker blocks the session; ``sleep`` (retry backoff) and
    ``now`` are injectable for tests. ``embedder`` (``memory.retrieval.embeddings.Embedder``)
    stores the vectors of what the cleanup archives, for archive search. ``fallback=False``
    commits only a summary the model wrote: when the summarizer fails, the cleanup ends ABORTED
    with nothing written (an interrupted cut is still finished with the summary it recorded,
    whoever wrote it: that cut must be completed). A summarizer that raises
    ``SummarizerWithdrawn`` ends the cleanup ABORTED with nothing written, whatever ``fallback``.
    """
    options = summary_options or default_options(config)
    head: SessionHead = await _step("reading the session", session, io(bundle.messages.head, session))
    if not force and head.tokens <= config.threshold:
        # The common case costs one head read plus one KV read (for an interrupted cleanup).
        if await _step("loading the intent", session, io(bundle.kv.get, session, INTENT_KEY)) is None:
            return CleanupResult(
                status=CleanupStatus.SKIPPED,
                session=session,
                reason=f"{head.tokens} tokens is within the threshold of {config.threshold}",
                threshold=config.threshold,
                tokens_before=head.tokens,
                tokens_after=head.tokens,
            )
    try:
        lease = await _step(
            "the lease",
            session,
            io(acquire_lease, kv=bundle.kv, scope=session, name=LEASE_NAME, ttl=lease_ttl, holder=default_holder()),
            outcome=_BEFORE_LEASE,
        )
    except LeaseBusy as exc:
        return CleanupResult(
            status=CleanupStatus.BUSY,
            session=session,
            reason=f"another cleanup of this session is running ({exc})",
            threshold=config.threshold,
            tokens_before=head.tokens,
            tokens_after=head.tokens,
        )
    run = CleanupRun(
        bundle=bundle,
        session=session,
        config=config,
        summarizer=summarizer,
        catalog=catalog,
        hooks=hooks,
        archive_scope=archive_scope,
        options=options,
        sleep=sleep,
        now=now,
        lease=lease,
        lease_ttl=lease_ttl,
        embedder=embedder,
        fallback=fallback,
    )
    try:
        first = await _guarded_pass(run=run, force=force, head=head)
        if not (first.resumed and first.committed) or (first.under_threshold and not force):
            return first
        # The interrupted cut is done and the session is still over: compact the rest now.
        second = await _guarded_pass(run=run, force=force, head=head)
        if not second.committed:
            return first
        return replace(
            second,
            tokens_before=first.tokens_before,
            evicted_count=first.evicted_count + second.evicted_count,
            resumed=True,
        )
    finally:
        await _release(run)


async def _release(run: CleanupRun) -> None:
    # Not raised: whatever the cleanup did is settled by now, and a lease that could not be
    # released only blocks the next cleanup until its ttl runs out (as a crashed worker's does).
    try:
        await io(release_lease, kv=run.bundle.kv, lease=run.lease)
    except Exception:
        steps.logger.exception(
            "cleanup of %s: the lease could not be released; it expires in at most %gs",
            run.session.key(),
            run.lease_ttl,
        )


def run_cleanup(
    *,
    bundle: MemoryStoreBundle,
    session: SessionScope,
    config: MemoryConfig,
    summarizer: Summarizer,
    catalog: PrunedCatalog,
    hooks: MemoryHookDispatcher,
    archive_scope: Scope | None = None,
    force: bool = False,
    summary_options: SummaryOptions | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    sleep: Callable[[float], Any] = asyncio.sleep,
    now: Callable[[], datetime] = utcnow,
    embedder: Any = None,
    fallback: bool = True,
) -> CleanupResult:
    """Sync ``arun_cleanup`` (same arguments), for Django tasks and management commands.

    Must not be called from a thread that runs an event loop; there, await ``arun_cleanup``.
    Store calls run in the calling thread (asgiref's thread-sensitive mode).
    """
    return async_to_sync(arun_cleanup)(
        bundle=bundle,
        session=session,
        config=config,
        summarizer=summarizer,
        catalog=catalog,
        hooks=hooks,
        archive_scope=archive_scope,
        force=force,
        summary_options=summary_options,
        lease_ttl=lease_ttl,
        sleep=sleep,
        now=now,
        embedder=embedder,
        fallback=fallback,
    )


__all__ = [
    "DEFAULT_LEASE_TTL",
    "INTENT_KEY",
    "LEASE_NAME",
    "CleanupFailed",
    "CleanupResult",
    "CleanupStatus",
    "arun_cleanup",
    "derived_id",
    "run_cleanup",
]
