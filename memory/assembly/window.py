"""The messages window: which session messages go into the request, read cheaply and legally.

Reading: only the tail is read (``MessageStore.read(last=N)``), N estimated from the session's
average message size and doubled until the governed tail fills the budget or the session is
exhausted; a 100k-message session costs about what a 1k-message one does.

Legality: a window cut inside a chain starts with tool results whose call lies before it;
those are dropped. The rest goes through ``repair_transcript`` (an interrupted chain gets
synthetic results), governance and role alternation (never two user messages in a row), and
the selection then takes whole chain units from the
end, so the messages sent never start with a tool result and never split a chain.

Fit: the newest unit is always sent; if it alone exceeds the budget (one message larger than
the window), its largest texts are truncated in the copy with a note saying where the full
text is, so the request always stays under the window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from memory.assembly.alternation import KIND_PLACEHOLDER, alternate_roles
from memory.assembly.governance import GovernancePolicy, GovernanceReport, govern
from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import MessageStore
from memory.tokens import count_text, message_tokens, truncate_text, with_tokens
from memory.transcript import Repair, chain_spans, repair_transcript

_FIRST_READ_SLACK = 1.25
_FIRST_READ_EXTRA = 8


class WindowTooSmall(ValueError):
    """Even the newest message, truncated, does not fit the budget left for messages."""


@dataclass(frozen=True, slots=True)
class SessionTail:
    """The governed, legal tail read for one turn (more than is sent, never less)."""

    messages: tuple[Message, ...]  # repaired + governed copies, legal
    live_seqs: frozenset[int]  # seqs of the live non-summary messages read
    first_live_seq: int | None  # the first of them (exact only when ``complete``)
    complete: bool  # True when the whole live session was read
    live_count: int  # live messages in the session (from its head)
    read_count: int  # messages returned by the store, over every read
    reads: int  # store calls
    repairs: tuple[Repair, ...]
    governance: GovernanceReport
    session_tokens: int = 0  # the live session's stored tokens (from its head): what cleanup compares


@dataclass(frozen=True, slots=True)
class Selection:
    messages: tuple[Message, ...]
    tokens: int
    omitted: int  # live messages of the session not sent (older than the window)
    truncated: tuple[str, ...]  # ids of messages shortened to fit


def _truncation_note(message: Message) -> str:
    where = f"message {message.seq}" if message.seq is not None else "this message"
    return (
        f"\n[… truncated to fit the context window; the full text of {where} is kept in the session, "
        "and in the pruned catalog (pruned_lookup) once cleanup removes it …]"
    )


def _prepare(
    raw: Sequence[Message], *, complete: bool, policy: GovernancePolicy
) -> tuple[list[Message], list[Repair], GovernanceReport]:
    start = 0
    if not complete:
        # Their assistant message lies before the window: not orphans, just cut off.
        while start < len(raw) and raw[start].role == "tool":
            start += 1
    repaired, repairs = repair_transcript(raw[start:])
    governed, report = govern(repaired, policy=policy)
    alternating, _ = alternate_roles(governed)
    return [with_tokens(m) for m in alternating], repairs, report


def read_tail(*, store: MessageStore, session: SessionScope, budget: int, policy: GovernancePolicy) -> SessionTail:
    """Read the session's tail until its governed tokens reach ``budget`` (or it is all read)."""
    head = store.head(session)
    if head.count == 0:
        return SessionTail((), frozenset(), None, True, 0, 0, 0, (), GovernanceReport())
    average = max(1.0, head.tokens / head.count)
    n = min(head.count, math.ceil(max(budget, 1) / average * _FIRST_READ_SLACK) + _FIRST_READ_EXTRA)
    read_count = reads = 0
    while True:
        raw = store.read(session, last=n)
        reads += 1
        read_count += len(raw)
        complete = len(raw) < n or n >= head.count
        prepared, repairs, report = _prepare(raw, complete=complete, policy=policy)
        if complete or sum(m.tokens or 0 for m in prepared) >= budget:
            break
        n = min(head.count, n * 2)
    live = [m.seq for m in raw if m.seq is not None and not m.is_compact_summary]
    return SessionTail(
        tuple(prepared),
        frozenset(live),
        min(live, default=None),
        complete,
        head.count,
        read_count,
        reads,
        tuple(repairs),
        report,
        head.tokens,
    )


def _text_tokens(message: Message) -> int:
    return count_text(message.content) + count_text(message.reasoning_content)


def _shrink(unit: list[Message], budget: int) -> tuple[list[Message], list[str]] | None:
    """``unit`` with its largest texts truncated until it fits ``budget``; None if impossible."""
    unit = list(unit)
    truncated: list[str] = []
    for _ in range(4 * len(unit) + 4):
        total = sum(message_tokens(m) for m in unit)
        if total <= budget:
            return unit, truncated
        excess = total - budget
        index = max(range(len(unit)), key=lambda i: _text_tokens(unit[i]))
        message = unit[index]
        if not _text_tokens(message):
            return None
        if message.reasoning_content:
            # Reasoning goes before content: what the message said matters more than how.
            size = count_text(message.reasoning_content)
            kept = truncate_text(message.reasoning_content, size - excess) if size > excess else ""
            changed = replace(message, reasoning_content=kept or None, tokens=None)
        else:
            size = count_text(message.content)
            target = max(0, size - excess)
            changed = replace(
                message,
                content=truncate_text(message.content or "", target, marker=_truncation_note(message)),
                tokens=None,
            )
        unit[index] = with_tokens(changed)
        if message.id not in truncated:
            truncated.append(message.id)
    return None


def select(tail: SessionTail, *, budget: int) -> Selection:
    """Whole chain units from the end of ``tail`` within ``budget``; the newest always.

    Raises WindowTooSmall if the newest unit cannot be made to fit.
    """
    messages = list(tail.messages)
    units: list[list[Message]] = []  # newest first
    used = 0
    truncated: list[str] = []
    for start, end in reversed(chain_spans(messages)):
        unit = messages[start:end]
        cost = sum(message_tokens(m) for m in unit)
        if used + cost <= budget:
            units.append(unit)
            used += cost
            continue
        if not units:
            fitted = _shrink(unit, budget)
            if fitted is None:
                raise WindowTooSmall(
                    f"the newest message does not fit in the {budget} tokens left for messages, even truncated"
                )
            unit, truncated = fitted
            units.append(unit)
            used = sum(message_tokens(m) for m in unit)
        break
    chosen = [message for unit in reversed(units) for message in unit]
    if chosen and chosen[0].kind == KIND_PLACEHOLDER:
        # Its user message fell outside the window: a request never starts with the placeholder.
        used -= message_tokens(chosen.pop(0))
    sent_live = sum(1 for m in chosen if m.seq is not None)
    return Selection(tuple(chosen), used, max(0, tail.live_count - sent_live), tuple(truncated))
