"""The chat WebSocket: ``/ws/chat/<conversation_id>/`` (socket protocol only).

Connect: the user must be signed in (else closed with 4401) and own the conversation (else
4404, the same for a missing one); nothing sent by the client is read before that.

Frames from the client are JSON objects, as the htmx ws extension sends a form (its fields plus
``HEADERS``, which is ignored):

* ``{"message": "text"}``: start a turn (one at a time: a second one while a reply is being
  written gets the error "a reply is still being written"; a message refused before anything
  of it is stored comes back with its text, for the composer: ``refusal_fragment``);
* ``{"action": "stop"}``: stop the conversation's running turn, whichever socket started it
  (the runtime closes interrupted tool chains);
* ``{"message": "text", "replace": "<id>"}``: the last message edited: the turn replaces the
  exchange from the user message ``<id>`` on (it must be the conversation's last, live in the
  session, not archived: ``Runtime.run_turn(replace_from=...)``, else refused with the text
  handed back); ``"replace": ""`` is a plain message;
* ``{"action": "regenerate", "id": "<id>"}``: answer the last message (``<id>``) again, or retry
  it after a failed turn: the same, with its stored text;
* ``{"action": "sync"}``: re-render the whole conversation (the page sends it at every connect);
  while a turn runs, with the reply so far, and the rest follows live.
* ``{"action": "typing"}``: the user is typing a message (the page sends it at most every 2 s
  while they do): background memory work on a gated model endpoint waits (``chat.user_typing``),
  passed on at most every TYPING_EVERY seconds and for at most MAX_TYPING_SECONDS since the
  socket's last message (a client cannot hold background work back for ever). No answer;
  ignored while a turn of the conversation runs in this process.

Anything else (binary, non-JSON, another shape, more than MAX_FRAME_BYTES) gets an error
fragment and the socket stays open.

A socket is checked again, not only at connect: it is in its user's and its conversation's
channel-layer groups (agents.chat.sockets), and closes with 4401 when its user signs out,
changes their password or is deactivated, with 4404 when the conversation is deleted; and
before every turn and every sync it reads again whether its session still signs the user in
and the conversation is still theirs (a lost group message is caught at the next frame). A user
has at most MODEX_MAX_SOCKETS_PER_USER sockets (the next one is closed with 4429) and
MODEX_MAX_TURNS_PER_USER turns running at once in this process, and MODEX_SYNCS_PER_MINUTE
syncs; a sync sends the recent part of the conversation and a "load earlier" control for the
rest (agents.chat.fragments), so its frame stays far under the server's 1 MiB. Frames to the client are HTML fragments (htmx OOB swaps)
rendered by ``agents.chat.fragments``.

A turn belongs to its conversation, not to the socket (agents.chat.turns): it runs in a task of
its own and goes on when the socket closes (a reload, a closed tab, a dropped connection); the
reply is stored whole. Every socket of this process on the conversation receives its events:
the one that sent the message, a second tab, a page reloaded mid-reply (which joins where the
reply is). A socket of another worker follows the turn by its lease and re-renders when it is
over (``_follow_earlier_turn``); its "stop" reaches the worker running the turn through the
conversation's channel-layer group (``modex.stop``).

That task only pulls events from the runtime and queues them in each watching socket's outbox;
the socket's own task renders and sends them, paced as ``agents.chat.outbox`` says (text
deltas merged, a turn's opening frames and a step's meter let the model's work go first).
"stop" (and a revocation: the user signed out, the conversation deleted) closes the turn's
generator at its next event, where everything the runtime wrote is whole, and the runtime
closes the interrupted tool chain; a turn that yields nothing for STOP_GRACE_SECONDS (a slow
model or tool) is cancelled instead. A plain cancel is the fallback, not the rule, because a
cancel that lands while the runtime is writing a message lets the write finish in its thread
while the runtime records it as not done (a duplicate tool result). The turn waits for the repair to land (``chat.asettle``) before its
sockets say "Stopped".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from channels.db import aclose_old_connections, database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from agents.chat import service as chat
from agents.chat import sockets
from agents.chat import turns
from agents.personal import memory as user_memory
from agents.chat.fragments import ChatStream, composer_fragment, error_fragment, refusal_fragment, status_fragment
from agents.chat.outbox import Outbox
from agents.runtime.loop import MAX_USER_CHARS, NOT_LAST
from memory.text import storable
from memory.threads import run_blocking

logger = logging.getLogger("agents.chat.service")

# A frame carrying any message within the runtime's character limit fits: a character is at
# most 6 bytes of JSON (a control character as \u001f), plus room for htmx's HEADERS.
MAX_FRAME_BYTES = 6 * MAX_USER_CHARS + 16 * 1024
CLOSE_UNAUTHENTICATED = sockets.CLOSE_UNAUTHENTICATED
CLOSE_NOT_FOUND = sockets.CLOSE_NOT_FOUND
CLOSE_TOO_MANY = sockets.CLOSE_TOO_MANY
TOO_MANY_TURNS = "You have {n} replies being written at once already; wait for one of them to finish."
TOO_MANY_SYNCS = "The conversation was refreshed too often; wait a moment, then reload the page."
STOP_GRACE_SECONDS = turns.STOP_GRACE_SECONDS
BUSY = turns.BUSY
#: The channel-layer message that stops a conversation's turn in whichever worker runs it.
STOP = "modex.stop"
FOLLOW_SECONDS = 600.0  # how long a freshly loaded page follows a turn started before it loaded
FOLLOW_POLL_SECONDS = 0.25
EARLIER_TURN = "A reply started before this page loaded is still being written or tidied up…"
#: A joining page's reply is longer than the turn keeps for joiners (turns.MAX_LIVE_CHARS).
LIVE_OVERFLOW = "The reply so far is too long to show while it is written; it appears here once it is complete."
EARLIER_TURN_ENDED = (
    "The reply that was being written when the page was left or reloaded has ended; what was written is shown above."
)
#: A socket writes a typing signal to the gate at most this often (the page sends one at most
#: every 2 s; the mark holds agents.runtime.gate.TYPING_HOLD seconds).
TYPING_EVERY = 1.5
#: ... and for at most this long after the socket's first signal since its last message.
MAX_TYPING_SECONDS = 120.0
SHAPE = 'Expected a JSON object such as {"message": "your text"} or {"action": "stop"}.'

_STOPPED = turns.STOPPED  # queued when the turn was stopped (its repair has landed)
_ENDED = turns.ENDED  # queued when the turn's task is over in any other way


class _Sync:
    """A sync asked for while a turn of this process runs: ``snapshot`` is the reply so far,
    taken when the sync came in (the deltas after it are queued behind this item)."""

    __slots__ = ("snapshot",)

    def __init__(self, snapshot: turns.Snapshot | None) -> None:
        self.snapshot = snapshot


class ChatConsumer(AsyncWebsocketConsumer):
    """One browser tab's socket on one conversation."""

    conversation = None
    sender: asyncio.Task | None = None
    _watching: turns.LiveTurn | None = None  # the turn this socket is subscribed to
    _following = False  # following a turn that began before this socket (see _follow_earlier_turn)
    _counted = False  # this socket counts against its user's cap (sockets.limits)
    _shut_code: int | None = None  # closing for good (revoked, deleted): no frame is read any more
    _typed_at = float("-inf")  # when this socket last passed a typing signal on (loop time)
    _typing_since: float | None = None  # its first signal since its last message (loop time)
    participants: tuple[str, ...] = ()  # the user's names (user_memory.participant_names)
    _groups: tuple[str, ...] = ()

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()  # accept first, so the browser sees the close code
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        conversation_id = self.scope["url_route"]["kwargs"].get("conversation_id", "")
        try:
            self.conversation = await database_sync_to_async(chat.get_conversation)(
                user=user, conversation_id=conversation_id
            )
            agent = await database_sync_to_async(_agent_or_none)(self.conversation.agent)
        except chat.ConversationNotFound:
            await self.accept()
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.user_id = str(user.pk)
        self.participants = user_memory.participant_names(user)
        if not sockets.limits.open_socket(self.user_id):
            self.conversation = None
            await self.accept()
            await self.close(code=CLOSE_TOO_MANY)
            return
        self._counted = True
        session = self.scope.get("session")
        self.session_key = getattr(session, "session_key", None)
        self.session_tag = sockets.session_tag(self.session_key)
        self._groups = (sockets.user_group(self.user_id), sockets.conversation_group(self.conversation.pk))
        for group in self._groups:
            await self.channel_layer.group_add(group, self.channel_name)
        self.agent = agent
        self.stream = ChatStream(conversation=self.conversation, agent=agent, post=self._post)
        self.outbox = Outbox(render=self._render, send=self._send_html, label=str(self.conversation.pk))
        await self.accept()
        self.sender = asyncio.create_task(self.outbox.run(), name=f"chat-send-{conversation_id}")
        self.warming = asyncio.create_task(self._warm_recall(), name=f"chat-warm-{conversation_id}")
        live = turns.registry.get(self.stream.session)
        if live is not None:
            self._watch(live)  # the page's sync (sent at every connect) shows the reply so far
        else:
            self.watcher = asyncio.create_task(self._follow_earlier_turn(), name=f"chat-follow-{conversation_id}")

    async def _warm_recall(self) -> None:
        """The user's archive index built while they read the page, not in their first turn."""
        try:
            await run_blocking(chat.warm_recall, conversation=self.conversation, agent=self.agent)
        except Exception:  # the turn builds it again and reports what fails
            logger.warning("could not prepare the archive index for %s", self.conversation.pk, exc_info=True)

    async def disconnect(self, code: int) -> None:
        for group in self._groups:
            with contextlib.suppress(Exception):
                await self.channel_layer.group_discard(group, self.channel_name)
        self._groups = ()
        if self._counted:
            self._counted = False
            sockets.limits.close_socket(self.user_id)
        # The turn goes on without this socket (agents.chat.turns): it only stops watching.
        self._unwatch()
        for task in (getattr(self, "watcher", None), getattr(self, "warming", None)):
            if task is not None:
                task.cancel()  # a store call under way finishes on its thread, unawaited
        if self.sender is not None:
            self.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.sender

    async def dispatch(self, message: dict) -> None:
        # Channels closes the old database connections of its synchronous thread before every
        # handler: a trip to that thread in front of every turn. For a client's frame it comes
        # after the handler instead, while the turn it started is on its way: the turn's work on
        # that thread (tools, hooks) comes later and finds it done. The one frame that reads on
        # that thread at once, a "sync", closes them first itself (receive).
        if message["type"] == "websocket.receive":
            await self.websocket_receive(message)
            await aclose_old_connections()
            return
        await super().dispatch(message)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.conversation is None or self._shut_code is not None:
            return  # closing: never read a frame of a rejected or revoked socket
        if text_data is None:
            return self._post(error_fragment("Send text frames (JSON), not binary ones."))
        if len(text_data) > MAX_FRAME_BYTES or len(text_data.encode("utf-8", "surrogatepass")) > MAX_FRAME_BYTES:
            return self._post(error_fragment(f"That message is too long: at most {MAX_USER_CHARS:,} characters."))
        try:
            frame = json.loads(text_data)
        except (ValueError, RecursionError):  # RecursionError: brackets nested past the parser's depth
            return self._post(error_fragment(f"That frame is not JSON. {SHAPE}"))
        if not isinstance(frame, dict) or not isinstance(frame.get("HEADERS", {}), dict):
            return self._post(error_fragment(SHAPE))
        action, message = frame.get("action"), frame.get("message")
        if action == "stop" and message is None:
            return await self._stop()
        if action == "typing" and message is None:
            return await self._typing()
        if action == "sync" and message is None:
            if not sockets.limits.allow_sync(self.user_id):
                return self._post(error_fragment(TOO_MANY_SYNCS))
            await aclose_old_connections()
            if not await self._still_allowed():
                return None
            live = self._live_turn()
            if live is not None:
                self._watch(live)
                return self._post(_Sync(live.snapshot()))  # taken now; later deltas queue behind it
            return self._post(await self.stream.sync(running=self._following))
        replace = frame.get("replace") or None  # the composer's hidden field: "" unless editing
        if action is None and isinstance(message, str) and (replace is None or _an_id(replace)):
            return self._start(storable(message), replace_from=replace)  # json.loads lets lone surrogates through
        if action == "regenerate" and message is None and _an_id(frame.get("id")):
            return await self._regenerate(frame["id"])
        return self._post(error_fragment(SHAPE))

    # -- revocation ---------------------------------------------------------------------------

    async def modex_revoke(self, event: dict) -> None:
        """The user signed out (``only``: that browser session), changed their password (``keep``:
        the session that changed it stays) or was deactivated: close with 4401."""
        if event.get("only") and event["only"] != self.session_tag:
            return
        if event.get("keep") and event["keep"] == self.session_tag:
            return
        await self._shut(CLOSE_UNAUTHENTICATED)

    async def modex_deleted(self, event: dict) -> None:
        """The conversation was deleted: close with 4404."""
        await self._shut(CLOSE_NOT_FOUND)

    async def modex_stop(self, event: dict) -> None:
        """A socket of another worker asked to stop the conversation's turn: stop it if it runs here."""
        turns.registry.stop(self.stream.session)

    async def _shut(self, code: int) -> None:
        """Close for good with ``code``: read no more frames, stop the running turn."""
        if self._shut_code is not None:
            return
        self._shut_code = code
        turns.registry.stop(self.stream.session)
        await self.close(code=code)

    async def _still_allowed(self) -> bool:
        """Whether the socket may go on (sockets.still_allowed); if not, it is shut."""
        # On a store thread (memory.threads), not on the one thread all of Channels' database
        # work shares: this read comes before every turn.
        code = await run_blocking(sockets.still_allowed, user_id=self.user_id, session_key=self.session_key,
                                  conversation_id=self.conversation.pk)
        if code is None:
            return True
        await self._shut(code)
        return False

    # -- turns --------------------------------------------------------------------------------

    def _live_turn(self) -> turns.LiveTurn | None:
        return turns.registry.get(self.stream.session)

    def _running(self) -> bool:
        return self._live_turn() is not None

    def _watch(self, turn: turns.LiveTurn) -> None:
        if self._watching is not turn:
            self._unwatch()
            self._watching = turn
            turn.subscribe(id(self), self.outbox.put)
            self.stream.recorded = turn.recorded

    def _unwatch(self) -> None:
        if self._watching is not None:
            self._watching.unsubscribe(id(self))
            self._watching = None

    async def _regenerate(self, message_id: str) -> None:
        if self._running():
            return self._post(error_fragment(BUSY))
        exchange = await run_blocking(chat.last_exchange, conversation=self.conversation)
        if exchange is None or exchange.message_id != message_id:
            return self._post(error_fragment(f"{NOT_LAST[:1].upper()}{NOT_LAST[1:]}."))
        if not exchange.replaceable:
            return self._post(error_fragment(exchange.reason))
        self._start(exchange.text, replace_from=message_id, hand_back=False)

    def _start(self, text: str, *, replace_from: str | None = None, hand_back: bool = True) -> None:
        """Start a turn (``replace_from``: replacing the last exchange). A refusal hands the text
        back to the composer, unless it was not typed there (``hand_back``: a regenerate)."""
        refuse = (lambda reason: refusal_fragment(reason, text)) if hand_back else error_fragment
        if self._running():
            return self._post(refuse(BUSY))
        if self.agent is None:
            return self._post(refuse(f"The agent {self.conversation.agent!r} is not declared any more."))
        if not sockets.limits.start_turn(self.user_id):
            return self._post(refuse(TOO_MANY_TURNS.format(n=sockets.limits.turns(self.user_id))))
        user_id = self.user_id
        turn = turns.registry.start(
            conversation=self.conversation, agent=self.agent, user_id=user_id, text=text, key=id(self),
            participants=self.participants,
            put=self.outbox.put, on_end=lambda: sockets.limits.end_turn(user_id),
            replace_from=replace_from, hand_back=hand_back,
            # The session may have been signed out, or the conversation deleted, since the socket
            # opened (a lost group message): nothing is written then.
            allowed=self._still_allowed,
        )
        self._unwatch()
        self._watching = turn
        self.stream.recorded = turn.recorded
        self._typing_since = None  # the message is sent: the next one may be typed as long

    async def _typing(self) -> None:
        """Pass the user's typing on to the model-call gate (awaited: a message sent right after
        finds the mark taken, and the turn's own mark replaces it)."""
        now = asyncio.get_running_loop().time()
        if self.agent is None or self._running() or now - self._typed_at < TYPING_EVERY:
            return
        if self._typing_since is None:
            self._typing_since = now
        elif now - self._typing_since > MAX_TYPING_SECONDS:
            return
        self._typed_at = now
        try:
            await run_blocking(chat.user_typing, conversation=self.conversation)
        except Exception:  # a hint to background work only: the turn itself takes its mark
            logger.warning("could not mark %s as typing", self.conversation.pk, exc_info=True)

    async def _stop(self) -> None:
        """Stop the conversation's turn: here, or in the worker that runs it."""
        if turns.registry.stop(self.stream.session):
            return
        with contextlib.suppress(Exception):
            await self.channel_layer.group_send(sockets.conversation_group(self.conversation.pk), {"type": STOP})

    async def _follow_earlier_turn(self) -> None:
        """A page loaded while a turn of this conversation was going that this process does not
        run (another worker's, or one still tidying up after a stop): say so, keep the composer
        shut, and re-render the conversation once that turn is over, so the page shows what
        became of the reply instead of a question with no answer. (A turn of this process is
        joined instead: ``_watch``.)"""
        running = await database_sync_to_async(chat.turn_in_progress)(session=self.stream.session)
        if not running or self._running():
            return
        self._following = True
        self._post(composer_fragment(running=True) + status_fragment(EARLIER_TURN, "busy"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FOLLOW_SECONDS
        try:
            while running and loop.time() < deadline:
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
                running = await database_sync_to_async(chat.turn_in_progress)(session=self.stream.session)
        finally:
            self._following = False
        if self._running():
            return
        html = await self.stream.sync(running=running)
        if not running:
            html += error_fragment(EARLIER_TURN_ENDED, kind="info")
        self._post(html)

    # -- sending ------------------------------------------------------------------------------

    def _post(self, item) -> None:
        self.outbox.put(item)

    async def _render(self, item) -> str:
        """The HTML of one outbox item (a fragment already rendered, a runtime event, a marker)."""
        if item is _STOPPED:
            return await self.stream.stopped()
        if item is _ENDED:
            return await self.stream.ended()
        if isinstance(item, _Sync):
            return await self.stream.join(item.snapshot, overflow_note=LIVE_OVERFLOW)
        if isinstance(item, turns.Refused):
            return refusal_fragment(item.reason, item.text) if item.hand_back else error_fragment(item.reason)
        if item is turns.REPLACED:
            return await self.stream.sync(running=True)
        if isinstance(item, turns.Failed):
            return self.stream.failed(item.text)
        return item if isinstance(item, str) else await self.stream.render(item)

    async def _send_html(self, html: str) -> None:
        await self.send(text_data=storable(html))


def _an_id(value: object) -> bool:
    """A message id as a frame may carry one (checked against the session afterwards)."""
    return isinstance(value, str) and 0 < len(value) <= 128 and value.isascii() and value.replace("-", "").isalnum()


class UnroutedConsumer(AsyncWebsocketConsumer):
    """Any WebSocket path without a route: the handshake is refused (403), nothing is read."""

    async def connect(self) -> None:
        await self.close()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        return None


def _agent_or_none(name: str):
    try:
        return chat.resolve_agent(name)
    except chat.AgentUnavailable:
        return None
