""""Compact now": one cleanup of a conversation on its owner's request, whatever its size.

The same pipeline a turn runs when the session crosses its threshold (``agents.runtime.cleanup.
compact``: ``memory.compression`` under the session's cleanup lease, the summary written by the
chat runtime's model with chat priority, the archive written when the agent has it on), forced,
so a user can have a long conversation compacted before it reaches the threshold. Every outcome
comes back as a sentence for the page: compacted (how many messages moved to the pruned
catalog), too short to compact, another cleanup running, or failed (nothing changed).
"""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import async_to_sync

from agents.chat import service as chat
from agents.models import Conversation
from agents.personal.memory import user_id
from agents.runtime.cleanup import compact
from memory.compression.results import CleanupFailed, CleanupStatus
from memory.tokens import message_tokens


@dataclass(frozen=True, slots=True)
class CompactOutcome:
    """What "Compact now" did: ``done`` only when the session changed; ``message`` says it."""

    done: bool
    message: str


def compact_now(*, user, conversation_id: str) -> CompactOutcome:
    """Run one forced cleanup of the user's conversation ``conversation_id`` now.

    Raises ConversationNotFound (not the user's, or no such conversation) and AgentUnavailable
    (its agent is gone or internal); every cleanup outcome is a ``CompactOutcome``."""
    conversation: Conversation = chat.get_conversation(user=user, conversation_id=conversation_id)
    agent = chat.resolve_agent(conversation.agent)
    runtime = chat.get_runtime()
    session = chat.session_of(conversation)
    head = runtime.services.bundle.messages.head(session)
    if head.count == 0:
        return CompactOutcome(False, "Nothing to compact yet: this conversation has no messages.")
    try:
        result = async_to_sync(compact)(
            services=runtime.services, session=session, agent=agent, user_id=user_id(user),
            model=runtime.calls, force=True, lease_ttl=runtime.cleanup_lease_ttl,
        )
    except CleanupFailed as exc:
        return CompactOutcome(False, f"The cleanup failed and nothing was changed: {exc}")
    if result.status is CleanupStatus.COMMITTED:
        moved = result.evicted_count
        return CompactOutcome(True, (
            f"Compacted: {moved} earlier message{'s' if moved != 1 else ''} moved to the pruned catalog and "
            f"replaced by a summary; the conversation now takes {result.tokens_after:,} tokens "
            f"(was {result.tokens_before:,})."
        ))
    if result.status is CleanupStatus.BUSY:
        return CompactOutcome(False, "A cleanup of this conversation is already running; try again in a moment.")
    if result.status is CleanupStatus.NOTHING_TO_EVICT:
        since, keep = _tokens_since_summary(runtime, session), agent.memory_config.keep
        if since <= keep:
            return CompactOutcome(False, (
                f"Too short to compact: everything since the last summary ({since:,} tokens) fits in the "
                f"part a cleanup always keeps ({keep:,} tokens)."
            ))
        return CompactOutcome(False, (
            f"Nothing to compact: the messages since the last summary ({since:,} tokens) cannot be cut before "
            f"the part a cleanup keeps ({keep:,} tokens) without splitting a turn from its tool results."
        ))
    return CompactOutcome(False, f"Nothing was compacted: {result.reason}.")


def _tokens_since_summary(runtime, session) -> int:
    """Tokens of the live messages after the conversation's last compact summary (all of them
    when it has none): what a cleanup may move, beside what it keeps."""
    live = runtime.services.bundle.messages.read(session)
    last = max((i for i, m in enumerate(live) if m.is_compact_summary), default=-1)
    return sum(message_tokens(m) for m in live[last + 1:])
