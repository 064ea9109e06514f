"""The Dream Engine: archive → core memory consolidation, the only writer of its results.

``DreamEngine.aconsolidate(agent=, user=, config=, mode=)`` runs one consolidation of what one
agent has archived about one user (the archive scope, by default ``CompositeScope(agent, user)``):

1. Nothing unless both ``archive_enabled`` and ``core_enabled`` are on (``DISABLED``: nothing
   read, nothing written).
2. A recorded failure whose next attempt is still ahead: ``DEFERRED`` (unless ``force``), so a
   failing model is retried with backoff, never in a tight loop.
3. The ``dream`` lease (``memory.locks``) in the archive scope: consolidations of one agent and
   user never overlap (``BUSY`` otherwise).
4. Archive documents after the ``dream`` cursor (``full`` mode: from the start), in batches.
   Per batch: ask the model (``ConsolidationModel``: wire messages in, text out) for JSON edits
   (``memory.dream.prompt``), validate them (``memory.dream.edits``), apply them per file with
   compare-and-set through ``CoreMemory`` (source ``"dream"``; on a conflict the file is re-read
   and the edits re-applied, so an agent edit made meanwhile survives), then advance the cursor
   with compare-and-set. CORE_MEMORY_UPDATED fires once per changed file.
5. CONSOLIDATION_FINISHED with the documents read, the edits applied and the cursor.

A model failure (error, timeout, an answer that is not the JSON asked for) changes nothing for
its batch (no file, no cursor): the failure, the attempt count and the next attempt time are
recorded in the KV (``dream.failure`` in the archive scope) and the result says when to retry.
Batches before it stay applied: each batch is complete on its own. A crash between a file write
and the cursor write is safe too: the retry re-applies the same edits, and edits the files
already hold change nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync

from memory.config import MemoryConfig
from memory.core_memory import CORE_FILES, CoreMemory, CoreMemoryConflict, CoreMemoryFull
from memory.dream.edits import CoreEdit, InvalidAnswer, RejectedEdit, apply_edits, parse_answer, validate_edits
from memory.dream.prompt import build_prompt
from memory.dream.values import (
    ConsolidationFailed,
    ConsolidationMode,
    ConsolidationModel,
    ConsolidationProgress,
    ConsolidationResult,
    ConsolidationStatus,
    DreamOptions,
    FailureRecord,
)
from memory.hooks import ConsolidationFinished, MemoryHookDispatcher, MemoryHookPoint
from memory.locks import Lease, LeaseBusy, LeaseLost, acquire_lease, release_lease, renew_lease
from memory.messages import utcnow
from memory.scopes import AgentScope, CompositeScope, Scope, UserScope
from memory.stores.base import ArchiveDocument, ConcurrentChange, MemoryStoreBundle
from memory.threads import run_blocking as _io
from memory.tokens import count_text

logger = logging.getLogger("memory.dream")

DREAM_CONSUMER = "dream"
LEASE_NAME = "dream"
FAILURE_KEY = "dream.failure"


def default_archive_scope(*, agent: str, user: str) -> Scope:
    """Where an agent's archive documents about ``user`` live (the runtime's archive scope)."""
    return CompositeScope(AgentScope(agent), UserScope(user))


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
            agent=agent,
            user=user,
            config=config,
            mode=mode,
            force=force,
            archive_scope=archive_scope,
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
        ``next_attempt_at``. ``force`` ignores a pending backoff (an on-demand run). Store
        errors, and LeaseLost (the lease expired mid-run and another consolidation took over),
        propagate; whatever was applied before is kept and is safe to apply again.
        """
        mode = ConsolidationMode(mode)
        scope = archive_scope or default_archive_scope(agent=agent, user=user)
        if not (config.archive_enabled and config.core_enabled):
            return ConsolidationResult(ConsolidationStatus.DISABLED, mode, scope)
        failure = await _io(self.failure, scope=scope)
        if failure is not None and not force and failure.next_attempt_at > self._clock():
            return ConsolidationResult(
                ConsolidationStatus.DEFERRED,
                mode,
                scope,
                error=failure.error,
                attempts=failure.attempts,
                next_attempt_at=failure.next_attempt_at,
            )
        try:
            lease = await _io(
                acquire_lease, kv=self._bundle.kv, scope=scope, name=LEASE_NAME, ttl=self._options.lease_ttl
            )
        except LeaseBusy as exc:
            return ConsolidationResult(ConsolidationStatus.BUSY, mode, scope, error=str(exc))
        held = [lease]  # renewed per batch; the last one is what is released
        try:
            memory = CoreMemory(
                kv=self._bundle.kv, config=config, agent=agent, user=user, hooks=self._hooks, caps=self._caps
            )
            result = await self._run(
                memory=memory, scope=scope, mode=mode, held=held, progress=progress, window=config.context_window
            )
            if failure is not None and result.status is not ConsolidationStatus.FAILED:
                await _io(self._bundle.kv.delete, scope, FAILURE_KEY)
        finally:
            await asyncio.shield(_io(release_lease, kv=self._bundle.kv, lease=held[-1]))
        if self._hooks is not None and result.status in (ConsolidationStatus.CONSOLIDATED, ConsolidationStatus.FAILED):
            event = ConsolidationFinished(
                scope=scope,
                mode=mode.value,
                documents=result.documents,
                edits=result.edits,
                cursor=result.cursor,
                error=result.error,
            )
            await self._hooks.adispatch(MemoryHookPoint.CONSOLIDATION_FINISHED, event)
        return result

    def failure(self, *, scope: Scope) -> FailureRecord | None:
        """The recorded failure of the consolidation of ``scope`` (None after a success)."""
        item = self._bundle.kv.get(scope, FAILURE_KEY)
        return FailureRecord.from_json(item.value) if item is not None else None

    def has_pending(self, *, scope: Scope) -> bool:
        """True when archive documents lie after the cursor (an incremental run has work)."""
        cursor = self._bundle.cursors.get(scope, DREAM_CONSUMER) or 0
        return bool(self._bundle.archive.list(scope, after_seq=cursor, limit=1))

    # -- the run ------------------------------------------------------------------------------

    async def _run(
        self,
        *,
        memory: CoreMemory,
        scope: Scope,
        mode: ConsolidationMode,
        held: list[Lease],
        progress: Callable[[ConsolidationProgress], None] | None,
        window: int,
    ) -> ConsolidationResult:
        cursors, archive = self._bundle.cursors, self._bundle.archive
        # Documents take at most a third of the agent's window (the files and the answer need
        # room too), and never more than the configured batch budget.
        budget = max(self._options.document_tokens, min(self._options.batch_tokens, window // 3))
        cursor = await _io(cursors.get, scope, DREAM_CONSUMER)
        position = 0 if mode is ConsolidationMode.FULL else cursor or 0
        newest = await _io(archive.list, scope, limit=1, newest_first=True)
        last_seq = newest[0].seq if newest else 0
        documents = 0
        applied: list[CoreEdit] = []
        rejected: list[RejectedEdit] = []
        files: dict[str, int] = {}
        while True:
            listed = await _io(archive.list, scope, after_seq=position, limit=self._options.batch_documents)
            batch = self._fit(listed, budget=budget)
            if not batch:
                break
            held.append(await _io(renew_lease, kv=self._bundle.kv, lease=held[-1], ttl=self._options.lease_ttl))
            try:
                edits, refused = await self._propose(memory, batch)
                done, skipped, changed = await _io(self._apply, memory, edits)
            except ConsolidationFailed as exc:
                record = await _io(self._record_failure, scope, str(exc))
                logger.warning("consolidation of %s failed (attempt %d): %s", scope.key(), record.attempts, exc)
                return ConsolidationResult(
                    ConsolidationStatus.FAILED,
                    mode,
                    scope,
                    documents=documents,
                    applied=tuple(applied),
                    rejected=tuple(rejected),
                    files=files,
                    cursor=cursor,
                    error=str(exc),
                    attempts=record.attempts,
                    next_attempt_at=record.next_attempt_at,
                )
            position = batch[-1].seq
            if cursor is None or position > cursor:
                try:
                    await _io(cursors.set, scope, DREAM_CONSUMER, position, expected=cursor)
                except ConcurrentChange:
                    # Only a consolidation that lost its lease gets here; what it applied is
                    # idempotent, and the cursor is the newer holder's to move.
                    raise LeaseLost(f"the dream cursor of {scope.key()} moved under this consolidation") from None
                cursor = position
            documents += len(batch)
            applied += done
            rejected += refused + skipped
            files.update(changed)
            if progress is not None:
                progress(ConsolidationProgress(documents, position, max(last_seq, position), len(applied)))
        status = ConsolidationStatus.CONSOLIDATED if documents else ConsolidationStatus.UP_TO_DATE
        return ConsolidationResult(
            status,
            mode,
            scope,
            documents=documents,
            applied=tuple(applied),
            rejected=tuple(rejected),
            files=files,
            cursor=cursor,
        )

    def _fit(self, documents: list[ArchiveDocument], *, budget: int) -> list[ArchiveDocument]:
        """The leading documents within ``budget`` tokens (always at least one)."""
        chosen: list[ArchiveDocument] = []
        used = 0
        for document in documents:
            cost = min(self._options.document_tokens, count_text(document.search_text()))
            if chosen and used + cost > budget:
                break
            chosen.append(document)
            used += cost
        return chosen

    async def _propose(
        self, memory: CoreMemory, batch: Sequence[ArchiveDocument]
    ) -> tuple[list[CoreEdit], list[RejectedEdit]]:
        states = await _io(memory.read_all)
        prompt = build_prompt(
            documents=batch,
            files={s.file: s.text for s in states},
            caps={s.file: s.cap for s in states},
            document_tokens=self._options.document_tokens,
        )
        try:
            raw = await asyncio.wait_for(self._call(prompt), self._options.model_timeout)
        except TimeoutError:
            raise ConsolidationFailed(
                f"the consolidation model did not answer within {self._options.model_timeout:g} s"
            ) from None
        except Exception as exc:  # any model failure; cancellation (a BaseException) propagates
            raise ConsolidationFailed(f"the consolidation model failed: {type(exc).__name__}: {exc}") from exc
        try:
            proposals = parse_answer(raw)
        except InvalidAnswer as exc:
            raise ConsolidationFailed(str(exc)) from None
        return validate_edits(proposals=proposals, documents={doc.id: doc.seq or 0 for doc in batch})

    async def _call(self, prompt: list[dict[str, Any]]) -> Any:
        model = self._model
        if inspect.iscoroutinefunction(model) or inspect.iscoroutinefunction(type(model).__call__):
            return await model(prompt)
        result = await asyncio.to_thread(self._model, prompt)
        return await result if inspect.isawaitable(result) else result

    def _apply(
        self, memory: CoreMemory, edits: Sequence[CoreEdit]
    ) -> tuple[list[CoreEdit], list[RejectedEdit], dict[str, int]]:
        applied: list[CoreEdit] = []
        skipped: list[RejectedEdit] = []
        changed: dict[str, int] = {}
        for file in CORE_FILES:
            mine = [edit for edit in edits if edit.file == file]
            if not mine:
                continue
            for _ in range(self._options.conflict_attempts):
                state = memory.read(file=file)
                text, done, refused = apply_edits(state.text, mine, cap=state.cap)
                if text == state.text:
                    # nothing applied, or edits that cancel out (added, then removed)
                    refused += [RejectedEdit(edit.to_json(), "cancelled out by a later edit") for edit in done]
                    done = []
                    break
                try:
                    written = memory.rewrite(file=file, text=text, source="dream", expected_version=state.version)
                except CoreMemoryConflict:
                    continue  # changed meanwhile (e.g. the agent's own edit): re-read, re-apply
                except CoreMemoryFull as exc:
                    refused = [RejectedEdit(edit.to_json(), str(exc)) for edit in mine]
                    done = []
                    break
                changed[file] = written.version
                break
            else:
                raise ConsolidationFailed(
                    f"{file} kept changing during consolidation ({self._options.conflict_attempts} attempts)"
                )
            applied += done
            skipped += refused
        return applied, skipped, changed

    def _record_failure(self, scope: Scope, error: str) -> FailureRecord:
        previous = self.failure(scope=scope)
        attempts = (previous.attempts if previous else 0) + 1
        delay = min(self._options.backoff_max, self._options.backoff_base * 2 ** (attempts - 1))
        now = self._clock()
        record = FailureRecord(
            attempts=attempts, error=error[:500], failed_at=now, next_attempt_at=now + timedelta(seconds=delay)
        )
        self._bundle.kv.put(scope, FAILURE_KEY, record.to_json())
        return record


__all__ = [
    "DREAM_CONSUMER",
    "FAILURE_KEY",
    "LEASE_NAME",
    "ConsolidationFailed",
    "ConsolidationMode",
    "ConsolidationModel",
    "ConsolidationProgress",
    "ConsolidationResult",
    "ConsolidationStatus",
    "DreamEngine",
    "DreamOptions",
    "FailureRecord",
    "default_archive_scope",
]
