"""What a chat socket sends, and when: one socket's queue of frames and the task that renders
and sends them (``agents.chat.consumer`` queues; this paces).

Frames go out one at a time, with one yield to the loop after each (STACK.md). The text deltas
that queued up behind one another go as one frame (``coalesce``), at most one text frame per
TEXT_FRAME_SECONDS. A turn's opening frames wait for its assembled context, so that they are
rendered while the model request is on its way (``_hold_opening``); a step's meter waits for the
step's first text (``_text_before_meter``). One item that cannot be rendered or sent is logged
and replaced by a notice; the socket goes on.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable

from agents.chat.fragments import error_fragment
from agents.runtime.events import ContentChunk, ContextReady, MessageStored, ReasoningChunk, TurnStarted

logger = logging.getLogger("agents.chat.service")

#: Text frames of one reply go out at most this often; what the model streams meanwhile joins the
#: next frame. Rendering and sending a frame costs more than the model takes per delta, so one
#: frame per delta would fall behind a fast model. The first delta of a run goes out at once.
TEXT_FRAME_SECONDS = 0.008
#: How long a step's meter waits for the step's first text to go out first (_text_before_meter).
METER_HOLD_SECONDS = 0.05
#: How long the meter that waited for a step's first text lets that text reach the socket first.
FLUSH_SECONDS = 0.001
#: How long a turn's opening frames (the composer shut, the user's message) wait for the turn's
#: next event, so that they are rendered while the model request is on its way (_hold_opening).
OPENING_HOLD_SECONDS = 0.05
UNSHOWN = "A part of the reply could not be shown; reload the page to see it."

_TEXT = (ContentChunk, ReasoningChunk)


class Outbox:
    """One socket's frames: ``put`` queues an item (a rendered fragment or a runtime event),
    ``run`` (the socket's sending task) renders each with ``render`` and sends it with ``send``."""

    def __init__(self, *, render: Callable[[object], Awaitable[str]], send: Callable[[str], Awaitable[None]],
                 label: str = "") -> None:
        self.render, self.send, self.label = render, send, label
        self.queue: asyncio.Queue = asyncio.Queue()

    def put(self, item: object) -> None:
        self.queue.put_nowait(item)

    async def run(self) -> None:
        pending: collections.deque = collections.deque()
        loop = asyncio.get_running_loop()
        text_sent = -TEXT_FRAME_SECONDS  # when the last text frame went out
        held = None  # the meter that already let its step's first text go first
        while True:
            if not pending:
                pending.append(await self.queue.get())
            if isinstance(pending[0], TurnStarted):
                await self._hold_opening(pending)
            if isinstance(pending[0], ContextReady) and pending[0] is not held:
                held = pending[0]
                await self._text_before_meter(pending)
            if isinstance(pending[0], _TEXT) and (wait := text_sent + TEXT_FRAME_SECONDS - loop.time()) > 0:
                await asyncio.sleep(wait)
            while not self.queue.empty():  # everything queued by now: chunks in it go as one frame
                pending.append(self.queue.get_nowait())
            item = coalesce(pending)
            if isinstance(item, _TEXT):
                text_sent = loop.time()
            try:
                html = await self.render(item)
                if html:
                    await self.send(html)
            except Exception:
                # One fragment that cannot be rendered or sent must not silence the socket.
                logger.exception("could not render or send a chat fragment for %s", self.label)
                with contextlib.suppress(Exception):
                    await self.send(error_fragment(UNSHOWN))
            if isinstance(item, _TEXT) and pending and isinstance(pending[0], ContextReady):
                # The meter that waited for the step's first text: its rendering would run before
                # daphne has written that text to the socket, a few passes of the loop from now.
                await asyncio.sleep(FLUSH_SECONDS)
            else:
                await asyncio.sleep(0)  # let the frame go out before the next one (STACK.md)

    async def _hold_opening(self, pending: collections.deque) -> None:
        """``pending`` starts with a turn's TurnStarted: wait, at most OPENING_HOLD_SECONDS, for
        an event other than the turn's opening ones (its first messages stored), usually the
        step's assembled context, right before the model request. Rendering those frames takes
        a millisecond or two of this process; done at once, it would run between the turn's
        first write and the request, and hold the request up. After it, they are rendered while
        the request waits for the model."""
        deadline = asyncio.get_running_loop().time() + OPENING_HOLD_SECONDS
        while True:
            while not self.queue.empty():
                pending.append(self.queue.get_nowait())
            if not all(isinstance(item, TurnStarted | MessageStored) for item in pending):
                return
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            try:
                pending.append(await asyncio.wait_for(self.queue.get(), remaining))
            except TimeoutError:
                return

    async def _text_before_meter(self, pending: collections.deque) -> None:
        """``pending`` starts with a step's meter: the step's first text goes out before it,
        if it is the next item or comes within METER_HOLD_SECONDS. Rendering the meter takes a
        few milliseconds of this process; done first, it would run while the model's first
        token is on its way and hold that token up."""
        meter = pending.popleft()
        while not self.queue.empty():
            pending.append(self.queue.get_nowait())
        if not pending:
            with contextlib.suppress(TimeoutError):
                pending.append(await asyncio.wait_for(self.queue.get(), METER_HOLD_SECONDS))
        if pending and isinstance(pending[0], _TEXT):
            pending.insert(1, meter)
        else:
            pending.appendleft(meter)


def coalesce(pending: collections.deque):
    """The next item to send: the first pending one, merged with the text chunks of the same
    kind right behind it. Deltas that queued up while a frame was going out then go as one
    frame (the latest completion count for the meter), so a fast model is relayed at the
    socket's pace (at most one text frame per TEXT_FRAME_SECONDS); a delta that finds the queue
    empty and no text frame sent within that time goes out alone, at once."""
    item = pending.popleft()
    if not isinstance(item, _TEXT):
        return item
    kind, texts = type(item), [item.text]
    while pending and type(pending[0]) is kind:
        item = pending.popleft()
        texts.append(item.text)
    if len(texts) == 1:
        return item
    if kind is ContentChunk:
        return ContentChunk(text="".join(texts), completion_tokens=item.completion_tokens)
    return ReasoningChunk(text="".join(texts))
