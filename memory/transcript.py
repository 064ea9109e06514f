"""The tool-chain legality oracle, and the repair of interrupted chains.

A transcript is legal when every assistant message with ``tool_calls`` is followed directly by
exactly one tool message per call id (in any order), before any other message, and no tool
message appears outside such a run. Code and tests use the same function.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memory.messages import Message

INTERRUPTED_RESULT = "[no result: the tool call was interrupted before it finished]"


class IllegalTranscript(ValueError):
    """The transcript breaks the tool-chain rule; ``position`` is the first offending index."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"illegal transcript at message {position}: {reason}")
        self.position = position
        self.reason = reason


def validate_transcript(messages: Iterable[Message]) -> None:
    """Raise IllegalTranscript at the first position that breaks tool-chain legality."""
    pending: dict[str, str] = {}  # call id -> tool name, for the open chain
    chain_start = -1
    for position, message in enumerate(messages):
        if message.role == "tool":
            if not pending:
                raise IllegalTranscript(position, f"tool result {message.tool_call_id!r} has no matching call")
            if message.tool_call_id not in pending:
                raise IllegalTranscript(
                    position,
                    f"tool result {message.tool_call_id!r} does not answer the open calls "
                    f"({', '.join(sorted(pending))}) of message {chain_start}",
                )
            del pending[message.tool_call_id]
            continue
        if pending:
            raise IllegalTranscript(
                position,
                f"{message.role} message arrives while call(s) {', '.join(sorted(pending))} "
                f"of message {chain_start} have no result",
            )
        if message.role == "assistant" and message.tool_calls:
            pending = {call.id: call.name for call in message.tool_calls}
            chain_start = position
    if pending:
        raise IllegalTranscript(
            chain_start, f"call(s) {', '.join(sorted(pending))} have no result at the end of the transcript"
        )


def is_legal(messages: Iterable[Message]) -> bool:
    try:
        validate_transcript(messages)
    except IllegalTranscript:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Repair:
    """One change made by ``repair_transcript``: what, and at which input position."""

    position: int
    action: str  # "added_result" | "dropped_orphan_result" | "dropped_duplicate_result"
    tool_call_id: str


def repair_transcript(messages: Sequence[Message]) -> tuple[list[Message], list[Repair]]:
    """Return a legal copy of ``messages`` and the repairs made.

    Calls left without a result (a crashed tool, a client gone mid-turn) get a synthetic tool
    result saying so, placed directly after the chain's other results; tool results with no
    open call are dropped. Legal input comes back unchanged, with no repairs.
    """
    out: list[Message] = []
    repairs: list[Repair] = []
    pending: dict[str, str] = {}

    def close_chain(position: int) -> None:
        for call_id, name in list(pending.items()):
            out.append(Message(role="tool", content=INTERRUPTED_RESULT, tool_call_id=call_id, name=name))
            repairs.append(Repair(position, "added_result", call_id))
        pending.clear()

    for position, message in enumerate(messages):
        if message.role == "tool":
            if message.tool_call_id in pending:
                del pending[message.tool_call_id]
                out.append(message)
            else:
                repairs.append(Repair(position, "dropped_orphan_result", message.tool_call_id or ""))
            continue
        if pending:
            close_chain(position)
        out.append(message)
        if message.role == "assistant" and message.tool_calls:
            pending = {call.id: call.name for call in message.tool_calls}
    if pending:
        close_chain(len(messages))
    return out, repairs


def may_leave_calls_open(last: Message) -> bool:
    """Whether a session ending in ``last`` can have calls without results at its end: only a
    call message or a tool result can (``missing_results`` is empty for any other last
    message), so a turn's first write need read no further back than the session's last
    message to know it has nothing to repair."""
    return last.role == "tool" or (last.role == "assistant" and bool(last.tool_calls))


def missing_results(tail: Sequence[Message]) -> list[Message]:
    """The synthetic results ``repair_transcript`` adds at the very end of ``tail``: for the
    calls of its last chain that have none (a turn that crashed mid-chain). Empty otherwise."""
    repaired, repairs = repair_transcript(tail)
    added = sum(1 for r in repairs if r.action == "added_result" and r.position == len(tail))
    return repaired[len(repaired) - added :] if added else []


def chain_spans(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """Half-open index spans ``[start, end)`` of the atomic units of a legal transcript.

    A unit is a single message, or an assistant message with tool_calls together with all of
    its results. Compression cuts only between units.
    """
    spans: list[tuple[int, int]] = []
    index = 0
    count = len(messages)
    while index < count:
        message = messages[index]
        end = index + 1
        if message.role == "assistant" and message.tool_calls:
            waiting = set(message.call_ids)
            while end < count and waiting and messages[end].role == "tool":
                waiting.discard(messages[end].tool_call_id)
                end += 1
        spans.append((index, end))
        index = end
    return spans
