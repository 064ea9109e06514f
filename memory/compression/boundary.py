"""The prune boundary: where a cleanup cuts the session, without ever splitting a tool chain.

The session is read as a sequence of atomic units: a unit starts at every non-tool message and
takes the tool messages that follow it. On a legal transcript these are exactly
``memory.transcript.chain_spans``: a single message, or an assistant message with all of its
tool results (parallel calls in one message are one unit). The kept tail is the longest run of
whole units, counted from the end, whose tokens fit in ``keep_tokens``; everything before it is
evicted. So the first kept message is never a tool result, and a chain that would straddle the
cut is evicted whole.

Illegal input (an interrupted chain that was not repaired) is not repaired here: the boundary
works on stored messages and names the cut by seq, so it must not invent or drop messages.
Instead an assistant message whose results are missing is a unit of its own, and a stray tool
result sticks to the unit before it (one at the very head is evicted with the first cut). The
cut therefore never adds a violation; ``repair_transcript`` is the runtime's job before a model
call.

An open chain at the end of the session (an assistant message whose tools are still running,
with none or some of its results stored) is always kept, whatever keep_tokens says: its late
results will be appended after whatever the cut leaves, and evicting the call would leave
them orphaned after the compact summary.

Cost: one pass over cached counts (``Message.tokens``); nothing is re-tokenized unless a
message was never counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory.messages import Message
from memory.tokens import message_tokens


@dataclass(frozen=True, slots=True)
class PruneBoundary:
    """A chosen cut: ``messages[:cut]`` are evicted, ``messages[cut:]`` kept.

    ``through_seq`` is the seq of the last evicted message (what ``MessageStore.prune`` takes),
    or None when there is nothing worth evicting (then ``cut`` is 0).
    """

    through_seq: int | None
    cut: int
    evicted: tuple[Message, ...]
    kept: tuple[Message, ...]
    evicted_tokens: int
    kept_tokens: int

    @property
    def is_empty(self) -> bool:
        return self.through_seq is None

    @property
    def evicted_count(self) -> int:
        return len(self.evicted)

    @property
    def kept_count(self) -> int:
        return len(self.kept)

    @property
    def tokens(self) -> int:
        return self.evicted_tokens + self.kept_tokens

    @property
    def previous_summaries(self) -> tuple[Message, ...]:
        """Evicted ``[compact_summary]`` messages: merged into the new summary, not catalogued."""
        return tuple(m for m in self.evicted if m.is_compact_summary)

    @property
    def history(self) -> tuple[Message, ...]:
        """Evicted messages other than compact summaries: what the pruned catalog receives."""
        return tuple(m for m in self.evicted if not m.is_compact_summary)


def choose_boundary(*, messages: Sequence[Message], keep_tokens: int) -> PruneBoundary:
    """Pick the tool-chain-safe cut that keeps the largest tail within ``keep_tokens``.

    ``messages`` are the live session in seq order (every one with a seq). The tail may be
    empty when even the last unit is larger than ``keep_tokens`` (e.g. one huge message): that
    unit is evicted whole and the catalog keeps it, unless it is an open chain at the end
    (``open_chain_start``): that one is kept even when larger than ``keep_tokens``. A ``[compact_summary]`` at the head is
    always evicted with the rest; if it would be the only thing evicted, nothing is (the
    boundary is empty), so cleaning a freshly cleaned session changes nothing.
    """
    count = len(messages)
    counts = [message_tokens(m) for m in messages]
    for message in messages:
        if message.seq is None:
            raise ValueError("choose_boundary needs stored messages (every message must have a seq)")
    open_start = open_chain_start(messages)

    cut = count
    kept_tokens = 0
    unit_tokens = 0
    for index in range(count - 1, -1, -1):
        unit_tokens += counts[index]
        if messages[index].role == "tool":
            continue  # a tool result never starts a unit: it belongs to the call before it
        if kept_tokens + unit_tokens > keep_tokens and index != open_start:
            break
        kept_tokens += unit_tokens
        unit_tokens = 0
        cut = index

    if not any(not m.is_compact_summary for m in messages[:cut]):
        cut, kept_tokens = 0, sum(counts)
    evicted = tuple(messages[:cut])
    return PruneBoundary(
        through_seq=evicted[-1].seq if evicted else None,
        cut=cut,
        evicted=evicted,
        kept=tuple(messages[cut:]),
        evicted_tokens=sum(counts[:cut]),
        kept_tokens=kept_tokens,
    )


def open_chain_start(messages: Sequence[Message]) -> int | None:
    """Index of the assistant message of a chain still open at the end of ``messages``, or None.

    Open: the last non-tool message calls tools and not every call has its result after it
    (only tool messages follow it)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "tool":
            continue
        if message.role != "assistant" or not message.tool_calls:
            return None
        answered = {m.tool_call_id for m in messages[index + 1 :]}
        return index if any(call.id not in answered for call in message.tool_calls) else None
    return None
