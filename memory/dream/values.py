"""The Dream Engine's values: modes, statuses, options, the failure record, results.

Re-exported by ``memory.dream``; import them from there.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from memory.dream.edits import CoreEdit, RejectedEdit
from memory.dream.prompt import DEFAULT_DOCUMENT_TOKENS
from memory.scopes import Scope


class ConsolidationModel(Protocol):
    """The model seam: OpenAI-wire messages in, the reply's text out (sync or async)."""

    def __call__(self, messages: list[dict[str, Any]], /) -> str | Awaitable[str]: ...


class ConsolidationMode(enum.StrEnum):
    INCREMENTAL = "incremental"  # documents after the cursor
    FULL = "full"  # every document again (edits the files already hold change nothing)


class ConsolidationStatus(enum.StrEnum):
    CONSOLIDATED = "consolidated"  # documents were read (edits may or may not have applied)
    UP_TO_DATE = "up_to_date"  # nothing after the cursor
    DISABLED = "disabled"  # archive or core memory is off for the agent
    BUSY = "busy"  # another consolidation of this agent and user holds the lease
    DEFERRED = "deferred"  # a recent failure: the next attempt is not due yet
    FAILED = "failed"  # the model failed; nothing of the failed batch was applied
    SUPERSEDED = "superseded"  # the lease passed to another run meanwhile: this run's edits were discarded


class FailureKind(enum.StrEnum):
    MODEL = "model"  # the endpoint failed (error, refused, unreachable)
    TIMEOUT = "timeout"  # no answer within the model timeout
    INVALID_ANSWER = "invalid_answer"  # not the JSON asked for, even after the repair request
    CONFLICT = "conflict"  # the files kept changing under the consolidation


class ConsolidationFailed(Exception):
    """One chunk could not be consolidated (model error, timeout, invalid answer, conflicts).
    ``answer`` is the model's last answer when it was not the JSON asked for."""

    def __init__(self, message: str, *, kind: FailureKind = FailureKind.MODEL, answer: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.answer = answer


@dataclass(frozen=True, slots=True)
class DreamOptions:
    """Tuning. Backoff after the n-th consecutive failure: ``backoff_base * 2**(n-1)``, capped."""

    batch_documents: int = 8
    batch_tokens: int = 8000  # prompt tokens of documents per model call (a third of the window at most)
    document_tokens: int = DEFAULT_DOCUMENT_TOKENS  # the least a chunk may hold, however small the window
    model_timeout: float = 120.0
    lease_ttl: float = 600.0
    backoff_base: float = 60.0
    backoff_max: float = 6 * 3600.0
    conflict_attempts: int = 5


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """The last consecutive failures of one agent+user's consolidation (KV ``dream.failure``)."""

    attempts: int
    error: str
    failed_at: datetime
    next_attempt_at: datetime
    kind: str = FailureKind.MODEL.value
    answer: str = ""  # the start of the model's last answer, when it was not the JSON asked for
    run_id: str = ""

    @property
    def warning(self) -> str:
        """What the failure means for people, in a sentence."""
        if self.kind == FailureKind.INVALID_ANSWER:
            return ("The model did not answer with the JSON edits the Dream Engine asks for, even when asked "
                    "again: nothing was learned from these conversations. A model that follows JSON "
                    "instructions (or a server with JSON mode) fixes it.")
        if self.kind == FailureKind.TIMEOUT:
            return "The model did not answer in time: nothing was learned from these conversations yet."
        if self.kind == FailureKind.CONFLICT:
            return "The memory files kept changing during consolidation; it is tried again later."
        return "The model endpoint failed: nothing was learned from these conversations yet."

    def to_json(self) -> str:
        return json.dumps(
            {
                "attempts": self.attempts,
                "error": self.error,
                "failed_at": self.failed_at.isoformat(),
                "next_attempt_at": self.next_attempt_at.isoformat(),
                "kind": self.kind,
                "answer": self.answer,
                "run_id": self.run_id,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, raw: str) -> FailureRecord | None:
        try:
            data = json.loads(raw)
            return cls(
                attempts=int(data["attempts"]),
                error=str(data.get("error", "")),
                failed_at=datetime.fromisoformat(data["failed_at"]),
                next_attempt_at=datetime.fromisoformat(data["next_attempt_at"]),
                kind=str(data.get("kind") or FailureKind.MODEL.value),
                answer=str(data.get("answer") or ""),
                run_id=str(data.get("run_id") or ""),
            )
        except (ValueError, KeyError, TypeError):
            return None  # a damaged record must not block consolidation forever


@dataclass(frozen=True, slots=True)
class ConsolidationProgress:
    """Reported after each batch: documents read so far, the cursor reached, the newest seq."""

    documents: int
    through_seq: int
    last_seq: int
    edits: int


@dataclass(frozen=True, slots=True)
class ConsolidationResult:
    """What one consolidation did. ``files`` maps each changed file to its new version."""

    status: ConsolidationStatus
    mode: ConsolidationMode
    scope: Scope
    documents: int = 0
    applied: tuple[CoreEdit, ...] = ()
    rejected: tuple[RejectedEdit, ...] = ()
    files: Mapping[str, int] = field(default_factory=dict)
    cursor: int | None = None
    error: str | None = None
    attempts: int = 0
    next_attempt_at: datetime | None = None
    run_id: str = ""
    proposals: tuple[str, ...] = ()  # SOUL.md changes recorded for staff (described), not applied
    repairs: int = 0  # answers that were not JSON and were asked for again
    warnings: tuple[str, ...] = ()
    failure: FailureRecord | None = None

    @property
    def edits(self) -> int:
        return len(self.applied)
