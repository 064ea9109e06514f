"""What a cleanup returns or raises: ``CleanupStatus``, ``CleanupResult``, ``CleanupFailed``
(memory.compression.cleanup runs the pipeline and re-exports them)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from memory.scopes import SessionScope


class CleanupStatus(enum.StrEnum):
    """How a cleanup ended. Only COMMITTED changed the session."""

    COMMITTED = "committed"  # the prune was committed
    SKIPPED = "skipped"  # under the threshold and not forced
    NOTHING_TO_EVICT = "nothing_to_evict"  # everything after the compact summary fits in keep_tokens
    BUSY = "busy"  # another cleanup of this session holds the lease
    # the session changed under the cleanup, the lease was lost, the summarizer withdrew, or a
    # cleanup ahead of need got no summary from the model; nothing committed
    ABORTED = "aborted"


class CleanupFailed(Exception):
    """A step of the cleanup failed (disk full, store down, a bug); ``step`` names it.

    Every fault inside the pipeline surfaces as this exception, whatever step it happened in
    (reading the session, loading the intent, the lease, choosing the boundary, the summary,
    the catalog, the archive, the commit, the hooks), chained to the original exception. The
    message says what state the session is in; in every case the next cleanup resumes.
    """

    def __init__(self, message: str, *, step: str, session: SessionScope) -> None:
        super().__init__(message)
        self.step = step
        self.session = session


@dataclass(frozen=True, slots=True)
class CleanupResult:
    """What a cleanup did, with the figures the hooks and the meter report."""

    status: CleanupStatus
    session: SessionScope
    reason: str  # a sentence a person can act on
    threshold: int
    tokens_before: int
    tokens_after: int
    through_seq: int | None = None
    evicted_count: int = 0  # messages moved to the catalog (the old compact summary not counted)
    kept_count: int = 0
    catalog_path: Path | None = None
    archive_document_id: str | None = None
    summary_id: str | None = None
    fallback_summary: bool = False
    summary_error: str | None = None
    summarizer_calls: int = 0
    oversized_seqs: tuple[int, ...] = ()  # evicted messages larger than the whole context window
    commit_attempts: int = 0
    resumed: bool = False  # finished a cut that an earlier, interrupted cleanup had planned
    #: Whether the model answered the whole summary template with any section (None: not asked;
    #: ``memory.compression.summary.SummaryOutcome.template_followed``).
    template_followed: bool | None = None
    template_ran_on: bool = False  # the answer without a section chatted on past the budget

    @property
    def committed(self) -> bool:
        return self.status is CleanupStatus.COMMITTED

    @property
    def under_threshold(self) -> bool:
        return self.tokens_after <= self.threshold
