"""Chat turns that outlive their socket: a turn runs to its end in this process, whoever watches.

A turn belongs to its conversation, not to the socket that started it. ``start`` runs it in a
task of its own (``LiveTurn``) and every socket of this process on that conversation that
``subscribe``s gets its events, in order, in its outbox: the tab that sent the message, a
second tab, a page reloaded mid-reply. A socket that goes away only unsubscribes; the turn goes
on, writes the whole reply to the session, and records the meter, with nobody watching. Only
``stop`` (the Stop button, Esc, the conversation deleted, its user signed out) ends it early.

A socket that joins mid-turn asks for a ``snapshot``: what the reply of the current step says so
far (its text and reasoning, at most MAX_LIVE_CHARS each; past that the page is told that the
reply shows once it is complete) and the tool call running, if any. The snapshot and the
subscription are taken in the same pass of the event loop, so the joining page gets the text
so far, then every later delta, none twice and none missing.

What a turn writes beside the reply is done here once, not once per socket: the meter's points
(``recorded``: the socket's rendering awaits the same record), the tidying after a stop
(``chat.asettle``), removing what a turn wrote into a conversation deleted meanwhile.

One process: a socket of another worker (several ASGI workers on Redis) does not receive the
events; it follows the turn by its lease and re-renders when it is over (the consumer), and its
Stop reaches this process through the conversation's channel-layer group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agents.chat import service as chat
from agents.chat.meter import MeterHistory
from agents.models import Conversation
from agents.runtime.events import (
    CleanupDone,
    ContentChunk,
    ContextReady,
    MessageStored,
    ReasoningChunk,
    ToolFinished,
    ToolStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from agents.runtime.loop import TurnBusy, TurnRejected
from memory.messages import ToolCall
from memory.scopes import SessionScope
from memory.threads import run_blocking

logger = logging.getLogger("agents.chat.turns")

#: How much of the current step's text (and, separately, reasoning) a turn keeps for a page
#: that joins mid-reply, in characters. A reply longer than that is shown to a joining page once
#: it is complete (it is stored whole either way).
MAX_LIVE_CHARS = 200_000
STOP_GRACE_SECONDS = 2.0  # a stop waits this long for the turn's next event, then cancels it


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The current step of a running turn, for a page that joins it: ``content`` and
    ``reasoning`` streamed so far ("" for none; ``overflow`` when longer than MAX_LIVE_CHARS),
    the tool call running (None for none), the figures of the step's meter."""

    content: str
    reasoning: str
    overflow: bool
    call: ToolCall | None
    total: int
    window: int


#: Items a turn puts in its subscribers' outboxes besides runtime events and HTML strings.
STOPPED = object()  # the turn was stopped (its repair has landed)
REPLACED = object()  # the turn replaced the last exchange: the page re-renders the conversation
ENDED = object()  # the turn is over in any other way


@dataclass(frozen=True, slots=True)
class Refused:
    """The turn could not start; nothing of it was stored (for the socket that sent it)."""

    reason: str
    text: str
    hand_back: bool = True  # the text goes back to the composer (it was typed there)


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn broke down (an unexpected error, logged)."""

    text: str


class LiveTurn:
    """One running turn of one conversation, and the sockets watching it."""

    def __init__(self, *, conversation: Conversation, session: SessionScope) -> None:
        self.conversation = conversation
        self.session = session
        self.task: asyncio.Task | None = None
        self._subscribers: dict[int, Callable[[object], None]] = {}
        self._starter: int | None = None
        self._stopping = False
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._sizes = [0, 0]
        self._overflow = False
        self._call: ToolCall | None = None
        self._figures = (0, 0)
        self._records: dict[int, tuple[object, asyncio.Future]] = {}
        self._last_record: asyncio.Future | None = None

    # -- watching ---------------------------------------------------------------------------

    def subscribe(self, key: int, put: Callable[[object], None]) -> None:
        self._subscribers[key] = put

    def unsubscribe(self, key: int) -> None:
        self._subscribers.pop(key, None)

    def snapshot(self) -> Snapshot:
        """The current step as it stands (see the module's docstring)."""
        return Snapshot(
            content="".join(self._content),
            reasoning="".join(self._reasoning),
            overflow=self._overflow,
            call=self._call,
            total=self._figures[0],
            window=self._figures[1],
        )

    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def stop(self) -> None:
        """End the turn early: at its next event, where what the runtime wrote is whole, or
        cancelled after STOP_GRACE_SECONDS of silence (a slow model or tool)."""
        if not self.running() or self._stopping:
            return
        self._stopping = True
        task = self.task
        asyncio.get_running_loop().call_later(STOP_GRACE_SECONDS, lambda: task.done() or task.cancel())

    def recorded(self, event: ContextReady | CleanupDone) -> Awaitable[MeterHistory]:
        """The meter history once ``event`` (one this turn published) is recorded in it."""
        entry = self._records.get(id(event))
        if entry is None or entry[0] is not event:
            return chat.arecord(session=self.session, event=event)
        return asyncio.shield(entry[1])

    # -- running ----------------------------------------------------------------------------

    def _publish(self, item: object) -> None:
        for put in list(self._subscribers.values()):
            put(item)

    def _to_starter(self, item: object) -> None:
        put = self._subscribers.get(self._starter) if self._starter is not None else None
        if put is not None:
            put(item)

    def _note(self, event: object) -> None:
        """Keep what a joining page needs, and start the meter's records (once, in order)."""
        if isinstance(event, ContentChunk | ReasoningChunk):
            part = 0 if isinstance(event, ContentChunk) else 1
            if self._sizes[part] + len(event.text) > MAX_LIVE_CHARS:
                self._overflow = True
            elif not self._overflow:
                (self._content if part == 0 else self._reasoning).append(event.text)
                self._sizes[part] += len(event.text)
        elif isinstance(event, MessageStored | TurnStarted):
            self._content, self._reasoning, self._sizes, self._overflow = [], [], [0, 0], False
        elif isinstance(event, ToolStarted):
            self._call = event.call
        elif isinstance(event, ToolFinished):
            self._call = None
        if isinstance(event, ContextReady):
            self._figures = (event.total_tokens, event.window)
        if isinstance(event, ContextReady) or isinstance(event, CleanupDone) and event.committed:
            previous = self._last_record
            future = asyncio.ensure_future(_record_after(previous, self.session, event))
            self._records[id(event)] = (event, future)
            self._last_record = future
            if isinstance(event, ContextReady):
                # The request for the context viewer is written after the meter's point, so the
                # meter (and the text it holds back) never waits for a whole context's JSON.
                self._last_record = asyncio.ensure_future(_keep_after(future, self.session, event))

    async def run(self, *, agent, user_id: str, text: str, replace_from: str | None = None,
                  allowed: Callable[[], Awaitable[bool]] | None = None, hand_back: bool = True,
                  participants: tuple[str, ...] = ()) -> None:
        if allowed is not None and not await allowed():
            return
        runtime = chat.get_runtime()
        events = runtime.run_turn(agent=agent, user_id=user_id, session=self.session, text=text,
                                  participants=participants,
                                  **({"replace_from": replace_from} if replace_from else {}))
        stopped = False
        try:
            # Pull and publish only: nothing is awaited between the runtime's events.
            async with contextlib.aclosing(events):
                async for event in events:
                    self._note(event)
                    self._publish(event)
                    if replace_from and isinstance(event, TurnStarted):
                        self._publish(REPLACED)
                    if self._stopping and not isinstance(event, TurnFinished | TurnFailed):
                        stopped = True  # closed at an event boundary, where the runtime's state is whole
                        break
        except asyncio.CancelledError:
            stopped = True  # the stop's fallback (or the process shutting down)
        except TurnBusy:  # raised before anything was stored, as TurnRejected is
            self._to_starter(Refused(BUSY, text, hand_back))
        except TurnRejected as exc:
            self._to_starter(Refused(f"{str(exc)[:1].upper()}{str(exc)[1:]}.", text, hand_back))
        except Exception:
            logger.exception("turn of conversation %s failed", self.conversation.pk)
            self._publish(Failed("Something went wrong on our side; the error was logged."))
        if stopped:
            await chat.asettle(session=self.session)
        with contextlib.suppress(Exception):
            if self._last_record is not None:
                await asyncio.shield(self._last_record)
        if await run_blocking(chat.is_deleted, conversation_id=self.conversation.pk):
            # Deleted while this turn was on its way (between the socket's check and the turn's
            # lease): what the turn wrote belongs to nobody; remove it again.
            await run_blocking(chat.purge_session, session=self.session)
        self._publish(STOPPED if stopped else ENDED)


BUSY = "A reply is still being written; wait for it or press Stop."


async def _record_after(previous: asyncio.Future | None, session: SessionScope, event) -> MeterHistory:
    if previous is not None:
        with contextlib.suppress(Exception):
            await previous
    return await chat.arecord(session=session, event=event, keep=False)


async def _keep_after(recorded: asyncio.Future, session: SessionScope, event: ContextReady) -> None:
    await chat.akeep_snapshot(session=session, event=event, history=await recorded)


class TurnRegistry:
    """The live turns of this process, one per conversation."""

    def __init__(self) -> None:
        self._turns: dict[str, LiveTurn] = {}

    def get(self, session: SessionScope) -> LiveTurn | None:
        """The running turn of ``session`` in this process, if any."""
        turn = self._turns.get(session.key())
        return turn if turn is not None and turn.running() else None

    def start(self, *, conversation: Conversation, agent, user_id: str, text: str, key: int,
              put: Callable[[object], None], on_end: Callable[[], None] | None = None,
              replace_from: str | None = None, hand_back: bool = True,
              allowed: Callable[[], Awaitable[bool]] | None = None,
              participants: tuple[str, ...] = ()) -> LiveTurn:
        """Run a turn of ``conversation`` for ``user_id`` in a task of its own, ``put`` (the
        subscriber ``key``) subscribed to it; it starts only if ``allowed()`` says so. The
        caller checked that none runs here (``get``); one running in another worker is refused
        by the runtime (TurnBusy, handed to the starter as ``Refused``)."""
        session = chat.session_of(conversation)
        if self.get(session) is not None:
            raise RuntimeError(f"a turn of {session.key()} is already running in this process")
        turn = LiveTurn(conversation=conversation, session=session)
        turn.subscribe(key, put)
        turn._starter = key
        turn.task = asyncio.get_running_loop().create_task(
            turn.run(agent=agent, user_id=user_id, text=text, replace_from=replace_from, allowed=allowed,
                     hand_back=hand_back, participants=participants),
            name=f"chat-turn-{conversation.pk}",
        )
        self._turns[session.key()] = turn

        def done(task: asyncio.Task) -> None:
            if self._turns.get(session.key()) is turn:
                del self._turns[session.key()]
            if on_end is not None:
                on_end()

        turn.task.add_done_callback(done)
        return turn

    def stop(self, session: SessionScope) -> bool:
        """Stop the running turn of ``session`` in this process; False if there is none."""
        turn = self.get(session)
        if turn is None:
            return False
        turn.stop()
        return True

    def running(self) -> list[LiveTurn]:
        return [turn for turn in self._turns.values() if turn.running()]

    async def finish_all(self, *, stop: bool = True, timeout: float = 20.0) -> None:
        """Stop (or let finish) every running turn and wait for them. Tests and shutdown."""
        turns = self.running()
        if stop:
            for turn in turns:
                turn.stop()
        tasks = [turn.task for turn in turns if turn.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        for task in tasks:
            if not task.done():
                task.cancel()
        self._turns.clear()


registry = TurnRegistry()
