"""A run's writes to its session: the one way the loop stores messages, and how it keeps the
transcript legal when a turn starts after a crash, fails, or is cut short.

Every message is made storable first and fenced by the turn's lease (FencedOut if another
worker has taken the conversation over). A turn's first write repairs what a crashed turn left
open and stores the user's message in one append. A turn that fails or is stopped answers the
user's message (agents.runtime.outcomes) and closes any open tool chain from what the store
holds, not from what the loop believed.
"""

from __future__ import annotations

import logging

from agents.llm import CompletionBuilder
from agents.runtime.outcomes import failed_reply, stopped_reply
from memory.messages import Message, storable_message
from memory.scopes import SessionScope
from memory.stores.base import Fence, MessageStore, SessionHead
from memory.threads import run_blocking as _io
from memory.transcript import may_leave_calls_open, missing_results

logger = logging.getLogger("agents.runtime.loop")

STOPPED_NOTE = "[stopped before the answer was complete]"
TAIL = 64  # how far back the repair looks for a chain a crash left open


class SessionWrites:
    """The writes of one run to ``session``, fenced by ``fence`` (the turn lease's token)."""

    def __init__(self, *, messages: MessageStore, session: SessionScope, fence: Fence | None) -> None:
        self.messages, self.session, self.fence = messages, session, fence

    async def append(self, batch: list[Message]) -> list[Message]:
        """Store ``batch`` in one append; what was stored (with seqs)."""
        clean = [storable_message(m) for m in batch]
        return await _io(self.messages.append, self.session, clean, fence=self.fence)

    async def append_reading_head(self, batch: list[Message]) -> tuple[list[Message], SessionHead]:
        """``append``, and the session's head after it, read in the same trip to a store thread
        (the next step's cleanup check then need not read it)."""
        return await _io(self._append_and_head, [storable_message(m) for m in batch])

    def open(self, text: str) -> tuple[list[Message], SessionHead]:
        """A turn's first write (on a store thread): the results a crashed turn left missing at
        the session's end, then the user's message, as one append (one transaction). Returns
        what was stored, the user's message last, and the session's head after it. The tail
        is read only when the session's last message could leave calls open (most turns follow
        a final answer: one message read, not TAIL)."""
        last = self.messages.read(self.session, last=1)
        open_end = bool(last) and may_leave_calls_open(last[-1])
        synthetic = self._missing(self.messages.read(self.session, last=TAIL)) if open_end else []
        return self._append_and_head([storable_message(m) for m in (*synthetic, Message(role="user", content=text))])

    def _append_and_head(self, clean: list[Message]) -> tuple[list[Message], SessionHead]:
        return self.messages.append(self.session, clean, fence=self.fence), self.messages.head(self.session)

    async def record_failure(self, builder: CompletionBuilder, error: str) -> list[Message]:
        """Answer the turn's user message: the partial reply the user saw, else a marked
        failed reply carrying ``error``."""
        return await self._keep_partial(builder) or await self.append([failed_reply(error)])

    async def _keep_partial(self, builder: CompletionBuilder) -> list[Message]:
        """A reply cut off mid-stream: keep what the user already saw (tool calls are never partial)."""
        if builder.content or builder.reasoning_content:
            partial = Message(
                role="assistant",
                content=(builder.content + "\n\n" + STOPPED_NOTE).strip(),
                reasoning_content=builder.reasoning_content or None,
            )
            return await self.append([partial])
        return []

    async def abandon(self, builder: CompletionBuilder, reply_id: str | None) -> None:
        """Close a turn cut short, from what the store holds, not from what the loop believed.

        A cancel can land while a write is finishing in its worker thread: the message is then
        stored although the await raised. So the partial reply is kept only if the reply itself
        never made it to the store, and open calls are closed by the same repair a crashed turn
        gets, read again after that: a write still finishing when the tail was first read has
        landed by then, and the repair adds a result only for calls that have none.
        """
        try:
            tail = await _io(self.messages.read, self.session, last=TAIL)
            if reply_id is None or all(m.id != reply_id for m in tail):
                if not await self._keep_partial(builder) and tail and tail[-1].role == "user":
                    # Stopped before any output: the user's message still gets its (marked) answer.
                    await self.append([stopped_reply()])
            await self._repair_tail()
        except Exception:  # the next turn's first write closes the chain instead
            logger.exception("could not close the interrupted turn of %s", self.session.key())

    async def _repair_tail(self) -> list[Message]:
        """Persist synthetic results for calls a crashed turn left open at the session's end."""
        synthetic = self._missing(await _io(self.messages.read, self.session, last=TAIL))
        return await self.append(synthetic) if synthetic else []

    def _missing(self, tail: list[Message]) -> list[Message]:
        if synthetic := missing_results(tail):
            logger.warning("repairing %d interrupted tool call(s) in %s", len(synthetic), self.session.key())
        return synthetic
