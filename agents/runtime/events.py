"""The typed events a turn yields, in order, for the consumer (or any caller) to render.

A turn: TurnStarted → MessageStored (the user's) → [CleanupStarted → CleanupDone] →
per model step: ContextReady → ReasoningChunk/ContentChunk… → MessageStored (assistant) →
[ToolStarted → ToolFinished → MessageStored (tool)]… → TurnFinished, or TurnFailed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memory.hooks import SectionAccount
from memory.messages import Message, ToolCall

if TYPE_CHECKING:
    from memory.assembly.assembler import AssembledContext


@dataclass(frozen=True, slots=True)
class TurnStarted:
    session: str
    agent: str
    model: str
    offline: bool


@dataclass(frozen=True, slots=True)
class MessageStored:
    message: Message


@dataclass(frozen=True, slots=True)
class CleanupStarted:
    tokens: int
    threshold: int


@dataclass(frozen=True, slots=True)
class CleanupDone:
    committed: bool
    reason: str
    evicted_count: int
    kept_count: int
    tokens_before: int
    tokens_after: int
    through_seq: int | None
    fallback_summary: bool


@dataclass(frozen=True, slots=True)
class ContextReady:
    """The step's request is assembled and about to be sent. ``context`` is that request itself
    (what the model is sent: sections, session messages), for callers that look inside it, such
    as the recall benchmark; the figures are what the meter draws."""

    step: int
    sections: tuple[SectionAccount, ...]
    total_tokens: int
    window: int
    threshold: int
    context: AssembledContext | None = field(default=None, repr=False, compare=False)
    session_tokens: int = 0  # the live session's stored tokens: what cleanup compares with threshold


@dataclass(frozen=True, slots=True)
class ReasoningChunk:
    text: str


@dataclass(frozen=True, slots=True)
class ContentChunk:
    text: str
    completion_tokens: int  # counted so far in this step


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call: ToolCall
    content: str
    ok: bool


@dataclass(frozen=True, slots=True)
class TurnFinished:
    message: Message | None
    steps: int
    stopped_at_step_limit: bool = False


@dataclass(frozen=True, slots=True)
class TurnFailed:
    error: str
    kind: str  # the error class name, e.g. "ModelTimeout"
    recorded: bool = False  # the failure is in the session as a marked reply (shown from there)


RuntimeEvent = (
    TurnStarted
    | MessageStored
    | CleanupStarted
    | CleanupDone
    | ContextReady
    | ReasoningChunk
    | ContentChunk
    | ToolStarted
    | ToolFinished
    | TurnFinished
    | TurnFailed
)
