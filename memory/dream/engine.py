"""The Dream Engine: archive → core memory consolidation, the only writer of its results.

``DreamEngine.aconsolidate(agent=, user=, config=, mode=)`` runs one consolidation of what one
agent has archived about one user (the archive scope, by default ``CompositeScope(agent, user)``):

1. Nothing unless both ``archive_enabled`` and ``core_enabled`` are on (``DISABLED``: nothing
   read, nothing written).
2. A recorded failure whose next attempt is still ahead: ``DEFERRED`` (unless ``force``), so a
   failing model is retried with backoff, never in a tight loop.
3. The ``dream`` lease (``memory.locks``) in the archive scope: consolidations of one agent and
   user never overlap (``BUSY`` otherwise). Each run has an id, in its logs and its record.
4. Everything not consolidated yet (``full`` mode: everything), in chunks that fit the budget
   (``memory.dream.reading``: every message of both speakers, with its date; a long document or
   message is split and the reading point can lie inside it). Per chunk: ask the model
   (``ConsolidationModel``: wire messages in, text out) for JSON edits (``memory.dream.prompt``);
   an answer that is not that JSON is sent back once with the parse error (a *repair*), and a
   second one fails the chunk. After every model call the lease is renewed: a run whose lease
   passed to another run stops there. The edits are validated and dated
   (``memory.dream.edits``), applied to USER.md and MEMORY.md on their current text (an agent
   edit made meanwhile survives; an edit older than the line it would replace, or than a
   person's removal, is skipped), and SOUL.md edits become proposals for staff
   (``memory.core_proposals``: SOUL.md is shared by every user of the agent).
5. The chunk lands in ONE fenced commit (``KVStore.commit``): the files with their histories
   and line ledgers, the proposals, the dream cursor and the reading point. A run whose lease
   was taken over meanwhile (it stalled past the ttl) is refused by the store as a whole
   (FencedOut): its edits are discarded, logged with its run id, and the run ends SUPERSEDED. A
   file changed meanwhile is re-read and the edits re-applied.
6. CONSOLIDATION_FINISHED with the documents read, the edits applied and the cursor.

Nothing goes back: a full re-run reads every document again, but each fact is dated by the
message it came from, so an older document never overwrites a newer value (between chunks, or
when a later chunk fails); the cursor and reading point only move forward.

A model failure (error, timeout, an answer that is not the JSON asked for even after the repair)
changes nothing for its chunk: the failure, its kind, the answer's start, the attempt count and
the next attempt time are recorded in the KV (``dream.failure`` in the archive scope) and the
result says when to retry. Chunks before it stay applied. The last run of each scope is recorded
too (``dream.last_run``): status, run id, counts and warnings, for the staff page.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync

from memory.config import MemoryConfig
from memory.core_memory import CoreMemory
from memory.dream.edits import CoreEdit, InvalidAnswer, RejectedEdit, ShownDocument, parse_answer, validate_edits
from memory.dream.landing import DREAM_CONSUMER, LeaseTakenOver, Run, land
from memory.dream.prompt import build_prompt, repair_prompt
from memory.dream.reading import POSITION_KEY, Chunk, Position, read_chunk
from memory.dream.values import (
    ConsolidationFailed,
    ConsolidationMode,
    ConsolidationModel,
    ConsolidationProgress,
    ConsolidationResult,
    ConsolidationStatus,
    DreamOptions,
    FailureKind,
    FailureRecord,
)
from memory.hooks import ConsolidationFinished, MemoryHookDispatcher, MemoryHookPoint
from memory.locks import Lease, LeaseBusy, LeaseLost, acquire_lease, release_lease, renew_lease
from memory.messages import utcnow
from memory.scopes import AgentScope, CompositeScope, Scope, UserScope
from memory.stores.base import ConcurrentChange, FencedOut, MemoryStoreBundle
from memory.threads import run_blocking as _io

logger = logging.getLogger("memory.dream")

LEASE_NAME = "dream"
FAILURE_KEY = "dream.failure"
LAST_RUN_KEY = "dream.last_run"
_ANSWER_CHARS = 300


def default_archive_scope(*, agent: str, user: str) -> Scope:
    """Where an agent's archive documents about ``user`` live (the runtime's archive scope)."""
    return CompositeScope(AgentScope(agent), UserScope(user))


class _Superseded(Exception):
    """Internal: this run's lease passed to another run; what it had not committed is dropped."""


class DreamEngine:
    """Consolidates archive documents into core memory over one store bundle.

    ``model`` is the consolidation seam; ``hooks`` receives CORE_MEMORY_UPDATED (through
    ``CoreMemory``) and CONSOLIDATION_FINISHED; ``caps`` overrides core file caps; ``clock``
    exists for tests.
    """

    def __init__(
        self,
        *,
        bundle: MemoryStoreBundle,
        model: ConsolidationModel,
        hooks: MemoryHookDispatcher | None = None,
        options: DreamOptions | None = None,
        caps: Mapping[str, int] | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._bundle = bundle
        self._model = model
        self._hooks = hooks
        self._options = options or DreamOptions()
        self._caps = caps
        self._clock = clock

    # -- public -------------------------------------------------------------------------------

    def consolidate(
        self,
        *,
        agent: str,
        user: str,
        config: MemoryConfig,
        mode: ConsolidationMode | str = ConsolidationMode.INCREMENTAL,
        force: bool = False,
        archive_scope: Scope | None = None,
        progress: Callable[[ConsolidationProgress], None] | None = None,
    ) -> ConsolidationResult:
        """``aconsolidate`` for sync callers (commands, scripts); not from inside an event loop."""
        return async_to_sync(self.aconsolidate)(
            agent=agent, user=user, config=config, mode=mode, force=force, archive_scope=archive_scope,
            progress=progress,
        )

    async def aconsolidate(
        self,
        *,
        agent: str,
        user: str,
        config: MemoryConfig,
        mode: ConsolidationMode | str = ConsolidationMode.INCREMENTAL,
        force: bool = False,
        archive_scope: Scope | None = None,
        progress: Callable[[ConsolidationProgress], None] | None = None,
    ) -> ConsolidationResult:
        """Run one consolidation (see the module docstring).

        Never raises for a model failure: the result says FAILED with the error and
        ``next_attempt_at``. ``force`` ignores a pending backoff (an on-demand run). A run whose
        lease passed to another run ends SUPERSEDED, having written nothing after that. Store
        errors propagate; whatever was committed before is kept.
        """
        mode = ConsolidationMode(mode)
        scope = archive_scope or default_archive_scope(agent=agent, user=user)
        if not (config.archive_enabled and config.core_enabled):
            return ConsolidationResult(ConsolidationStatus.DISABLED, mode, scope)
        failure = await _io(self.failure, scope=scope)
        if failure is not None and not force and failure.next_attempt_at > self._clock():
            return ConsolidationResult(
                ConsolidationStatus.DEFERRED, mode, scope, error=failure.error, attempts=failure.attempts,
                next_attempt_at=failure.next_attempt_at, failure=failure,
            )
        run_id = uuid.uuid4().hex[:12]
        try:
            lease = await _io(
                acquire_lease, kv=self._bundle.kv, scope=scope, name=LEASE_NAME, ttl=self._options.lease_ttl
            )
        except LeaseBusy as exc:
            return ConsolidationResult(ConsolidationStatus.BUSY, mode, scope, error=str(exc), run_id=run_id)
        run = await _io(self._start, scope=scope, mode=mode, lease=lease, run_id=run_id)
        try:
            memory = CoreMemory(
                kv=self._bundle.kv, config=config, agent=agent, user=user, hooks=self._hooks, caps=self._caps
            )
            try:
                result = await self._run(memory=memory, run=run, progress=progress, window=config.context_window)
            except _Superseded as exc:
                logger.warning(
                    "consolidation run %s of %s was superseded (%s): %d edit(s) it had not committed were "
                    "discarded; what it committed before stays", run.id, scope.key(), exc, run.pending,
                )
                result = self._result(run, ConsolidationStatus.SUPERSEDED, error=str(exc))
            if result.status is not ConsolidationStatus.SUPERSEDED:
                await _io(self._finish, run=run, result=result, failure=failure)
        finally:
            await asyncio.shield(_io(release_lease, kv=self._bundle.kv, lease=run.lease))
        if self._hooks is not None and result.status in (ConsolidationStatus.CONSOLIDATED, ConsolidationStatus.FAILED):
            event = ConsolidationFinished(
                scope=scope, mode=mode.value, documents=result.documents, edits=result.edits, cursor=result.cursor,
                error=result.error,
            )
            await self._hooks.adispatch(MemoryHookPoint.CONSOLIDATION_FINISHED, event)
        return result

    def failure(self, *, scope: Scope) -> FailureRecord | None:
        """The recorded failure of the consolidation of ``scope`` (None after a success)."""
        item = self._bundle.kv.get(scope, FAILURE_KEY)
        return FailureRecord.from_json(item.value) if item is not None else None

    def last_run(self, *, scope: Scope) -> dict[str, Any] | None:
        """The record of the last consolidation of ``scope`` that finished (see module doc)."""
        return read_last_run(self._bundle, scope)

    def has_pending(self, *, scope: Scope) -> bool:
        """True when archive documents lie after the cursor (an incremental run has work)."""
        cursor = self._bundle.cursors.get(scope, DREAM_CONSUMER) or 0
        return bool(self._bundle.archive.list(scope, after_seq=cursor, limit=1))

    # -- the run ------------------------------------------------------------------------------

    def _start(self, *, scope: Scope, mode: ConsolidationMode, lease: Lease, run_id: str) -> Run:
        cursor = self._bundle.cursors.get(scope, DREAM_CONSUMER)
        item = self._bundle.kv.get(scope, POSITION_KEY)
        position = Position.from_json(item.value) if item else None
        return Run(run_id, lease, scope, mode, cursor, position, item.version if item else 0)

    async def _run(
        self,
        *,
        memory: CoreMemory,
        run: Run,
        progress: Callable[[ConsolidationProgress], None] | None,
        window: int,
    ) -> ConsolidationResult:
        archive, scope = self._bundle.archive, run.scope
        # Documents take at most a third of the agent's window (the files and the answer need
        # room too), never more than the configured batch budget, never less than the floor.
        budget = max(self._options.document_tokens, min(self._options.batch_tokens, window // 3))
        reading = Position.after(0) if run.mode is ConsolidationMode.FULL else run.point
        newest = await _io(archive.list, scope, limit=1, newest_first=True)
        last_seq = newest[0].seq if newest else 0
        while True:
            chunk = await _io(read_chunk, archive=archive, scope=scope, start=reading, budget=budget,
                              batch_documents=self._options.batch_documents)
            if chunk.empty:
                break
            try:
                edits: list[CoreEdit] = []
                if chunk.pieces:
                    edits, refused = await self._propose(memory, chunk, run)
                    run.rejected += refused
                run.pending = len(edits)
                await _io(self._commit, memory=memory, run=run, chunk=chunk, edits=edits)
                run.pending = 0
            except ConsolidationFailed as exc:
                record = await _io(self._record_failure, run, exc)
                logger.warning("consolidation run %s of %s failed (attempt %d): %s", run.id, scope.key(),
                               record.attempts, exc)
                return self._result(run, ConsolidationStatus.FAILED, error=str(exc), failure=record)
            reading = chunk.end
            run.documents += chunk.documents
            if progress is not None:
                through = chunk.done_through if chunk.done_through is not None else (run.cursor or 0)
                progress(ConsolidationProgress(run.documents, through, max(last_seq, through), len(run.applied)))
        status = ConsolidationStatus.CONSOLIDATED if run.documents else ConsolidationStatus.UP_TO_DATE
        return self._result(run, status)

    async def _propose(self, memory: CoreMemory, chunk: Chunk, run: Run) -> tuple[list[CoreEdit], list[RejectedEdit]]:
        states = await _io(memory.read_all)
        prompt = build_prompt(pieces=chunk.pieces, files={s.file: s.text for s in states},
                              caps={s.file: s.cap for s in states})
        raw = await self._ask(prompt, run)
        try:
            answer = parse_answer(raw)
        except InvalidAnswer as exc:
            # Small models wrap JSON in prose or break it: shown their answer and the parse
            # error once, most answer with the JSON alone.
            run.repairs += 1
            raw = await self._ask(repair_prompt(prompt, answer=raw if isinstance(raw, str) else repr(raw),
                                                error=str(exc)), run)
            try:
                answer = parse_answer(raw)
            except InvalidAnswer as again:
                text = raw if isinstance(raw, str) else repr(raw)
                raise ConsolidationFailed(f"{again} (after a repair request)", kind=FailureKind.INVALID_ANSWER,
                                          answer=" ".join(text.split())[:_ANSWER_CHARS]) from None
        shown: dict[str, ShownDocument] = {}
        for piece in chunk.pieces:
            before = shown.get(piece.document.id)
            said = {**(before.said if before else {}), **piece.times}
            latest = max([t for t in (before.latest if before else None, piece.newest) if t is not None], default=None)
            shown[piece.document.id] = ShownDocument(piece.document.seq or 0, said, latest)
        return validate_edits(proposals=answer, documents=shown)

    async def _ask(self, prompt: list[dict[str, Any]], run: Run) -> Any:
        """One model call; then the lease is renewed, so a run that lost it stops here."""
        try:
            raw = await asyncio.wait_for(self._call(prompt), self._options.model_timeout)
        except TimeoutError:
            raise ConsolidationFailed(
                f"the consolidation model did not answer within {self._options.model_timeout:g} s",
                kind=FailureKind.TIMEOUT) from None
        except Exception as exc:  # any model failure; cancellation (a BaseException) propagates
            raise ConsolidationFailed(f"the consolidation model failed: {type(exc).__name__}: {exc}") from exc
        try:
            run.lease = await _io(renew_lease, kv=self._bundle.kv, lease=run.lease, ttl=self._options.lease_ttl)
        except LeaseLost as exc:
            raise _Superseded(f"its lease was taken over while the model answered: {exc}") from None
        return raw

    async def _call(self, prompt: list[dict[str, Any]]) -> Any:
        model = self._model
        if inspect.iscoroutinefunction(model) or inspect.iscoroutinefunction(type(model).__call__):
            return await model(prompt)
        result = await asyncio.to_thread(self._model, prompt)
        return await result if inspect.isawaitable(result) else result

    def _commit(self, *, memory: CoreMemory, run: Run, chunk: Chunk, edits: Sequence[CoreEdit]) -> None:
        """Apply ``edits`` and move the reading point past ``chunk``, in one fenced commit
        (``memory.dream.landing``); a run whose lease was taken over is superseded."""
        try:
            landed = land(bundle=self._bundle, memory=memory, run=run, chunk=chunk, edits=edits, clock=self._clock,
                          attempts=self._options.conflict_attempts)
        except LeaseTakenOver as exc:
            raise _Superseded(str(exc)) from None
        run.applied += landed.applied
        run.rejected += landed.skipped
        run.proposed += landed.proposed

    # -- records --------------------------------------------------------------------------------

    def _result(self, run: Run, status: ConsolidationStatus, *, error: str | None = None,
                failure: FailureRecord | None = None) -> ConsolidationResult:
        warnings = []
        if run.repairs:
            warnings.append(f"the model's answer was not the JSON asked for {run.repairs} time(s); it was asked again")
        proposed_edits = len(run.applied) + len(run.proposed)
        if status is ConsolidationStatus.CONSOLIDATED and not proposed_edits and run.rejected:
            reasons = "; ".join(sorted({r.reason for r in run.rejected})[:3])
            warnings.append(f"the model proposed {len(run.rejected)} edit(s) and none was applied: {reasons}")
        if failure is not None:
            warnings.append(failure.warning)
        return ConsolidationResult(
            status, run.mode, run.scope, documents=run.documents, applied=tuple(run.applied),
            rejected=tuple(run.rejected), files=dict(run.files), cursor=run.cursor, error=error,
            attempts=failure.attempts if failure else 0,
            next_attempt_at=failure.next_attempt_at if failure else None, run_id=run.id,
            proposals=tuple(run.proposed), repairs=run.repairs, warnings=tuple(warnings), failure=failure,
        )

    def _record_failure(self, run: Run, exc: ConsolidationFailed) -> FailureRecord:
        previous = self.failure(scope=run.scope)
        attempts = (previous.attempts if previous else 0) + 1
        delay = min(self._options.backoff_max, self._options.backoff_base * 2 ** (attempts - 1))
        now = self._clock()
        record = FailureRecord(attempts=attempts, error=str(exc)[:500], failed_at=now,
                               next_attempt_at=now + timedelta(seconds=delay), kind=exc.kind.value,
                               answer=exc.answer, run_id=run.id)
        try:
            self._bundle.kv.put(run.scope, FAILURE_KEY, record.to_json(), fence=run.lease.fence)
        except FencedOut as fenced:
            raise _Superseded(str(fenced)) from None
        return record

    def _finish(self, *, run: Run, result: ConsolidationResult, failure: FailureRecord | None) -> None:
        """The run's record (when it read something); a failure recorded before is cleared by a
        run that did not fail."""
        data = {
            "run_id": run.id, "status": result.status.value, "mode": run.mode.value,
            "at": self._clock().isoformat(), "documents": result.documents, "edits": result.edits,
            "proposals": list(result.proposals), "rejected": len(result.rejected), "repairs": result.repairs,
            "warnings": list(result.warnings), "error": result.error, "cursor": result.cursor,
        }
        try:
            if result.status in (ConsolidationStatus.CONSOLIDATED, ConsolidationStatus.FAILED):
                # (a run with nothing to read leaves the record of the last one that did)
                self._bundle.kv.put(run.scope, LAST_RUN_KEY, json.dumps(data, ensure_ascii=False),
                                    fence=run.lease.fence)
            if failure is not None and result.status is not ConsolidationStatus.FAILED:
                item = self._bundle.kv.get(run.scope, FAILURE_KEY)
                if item is not None:
                    self._bundle.kv.delete(run.scope, FAILURE_KEY, expected_version=item.version)
        except (FencedOut, ConcurrentChange):
            logger.warning("consolidation run %s of %s: its record was not written (lease lost)", run.id,
                           run.scope.key())


def read_last_run(bundle: MemoryStoreBundle, scope: Scope) -> dict[str, Any] | None:
    """The ``dream.last_run`` record of ``scope`` (None if never written or damaged)."""
    raw = bundle.kv.get_value(scope, LAST_RUN_KEY)
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


__all__ = [
    "DREAM_CONSUMER",
    "FAILURE_KEY",
    "LAST_RUN_KEY",
    "LEASE_NAME",
    "ConsolidationFailed",
    "ConsolidationMode",
    "ConsolidationModel",
    "ConsolidationProgress",
    "ConsolidationResult",
    "ConsolidationStatus",
    "DreamEngine",
    "DreamOptions",
    "FailureKind",
    "FailureRecord",
    "default_archive_scope",
    "read_last_run",
]
