"""HTML for the chat page and its socket: view models of messages, and a turn's events as fragments.

The page and the socket render the same partials of ``templates/chat/fragments.html``, so a
message looks the same streamed live or re-rendered from history. Socket fragments are htmx
out-of-band swaps: an element with an id and ``hx-swap-oob="true"`` replaces its twin, a
``<div hx-swap-oob="beforeend:#target">`` appends its children to the target.

``ChatStream`` keeps the little state one connection needs across events (the live assistant
bubble of the current step, the tool cards shown, the meter's totals) and records meter points
through ``agents.chat.service``. All model and user text is escaped (``agents.chat.rendering``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from urllib.parse import urlencode
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from agents.chat import service as chat
from agents.chat.meter import MeterHistory, MeterView, chart_view, completion_width, meter_view
from agents.declarations import AgentNode
from agents.runtime.loop import MAX_USER_CHARS
from agents.runtime.events import (
    CleanupDone,
    CleanupStarted,
    ContentChunk,
    ContextReady,
    MessageStored,
    ReasoningChunk,
    RuntimeEvent,
    ToolFinished,
    ToolStarted,
    TurnFailed,
    TurnFinished,
    TurnStarted,
)
from agents.models import Conversation
from agents.runtime.sizing import sized_config, model_window
from agents.runtime.outcomes import CUT_OFF_KINDS, KIND_CONTENT_FILTERED, KIND_TURN_FAILED, KIND_TURN_STOPPED
from agents.chat.rendering import dom_id, render_markdown
from memory.messages import Message, ToolCall
from memory.threads import run_blocking

logger = logging.getLogger(__name__)

FRAGMENTS = "chat/fragments.html"
#: The new title and list bump wait at most this long for the reply's first text (ChatStream).
ACTIVITY_DELAY_SECONDS = 0.5
#: The messages of a page load, a sync frame or a "load earlier" page are rendered newest first
#: until they fill this many bytes; earlier ones come by "load earlier". A sync frame stays far
#: under daphne's 1 MiB limit on a WebSocket frame, however long the conversation.
STREAM_BUDGET_BYTES = 256 * 1024
EARLIER_PAGE_MESSAGES = 40  # at most this many messages per "load earlier" page
TOOL_PREVIEW_CHARS = 20000  # longer tool outputs are cut in the page (the session keeps them whole)
# The one limit on a message, stated under the composer; the runtime refuses longer ones.
LIMIT_CONTEXT = {"max_chars": MAX_USER_CHARS, "max_chars_label": f"{MAX_USER_CHARS:,}"}


# -- view models ------------------------------------------------------------------------------


def _pretty_arguments(arguments_json: str) -> str:
    try:
        return json.dumps(json.loads(arguments_json), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return arguments_json


def _preview(text: str | None) -> str:
    text = text or ""
    if len(text) <= TOOL_PREVIEW_CHARS:
        return text
    return text[:TOOL_PREVIEW_CHARS] + f"\n… ({len(text) - TOOL_PREVIEW_CHARS:,} more characters)"


@dataclass(frozen=True, slots=True)
class ToolCallView:
    dom_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class MessageView:
    """What the message partial needs; ``content_html`` is safe (escaped, then markdown).
    ``tool`` is the tool card context of a tool result (see ``_tool_context``)."""

    dom_id: str
    role: str
    seq: int | None
    created_at: object
    content_html: SafeString
    reasoning: str
    tool_calls: tuple[ToolCallView, ...]
    is_summary: bool
    tokens: int | None
    tool: dict | None = None
    failed: bool = False  # the marked reply of a failed turn: its text is the error
    stopped: bool = False  # the marked reply of a turn stopped before any output
    cut_off: str = ""  # why the server cut the reply off ("" when it is whole)
    pruned: bool = False  # moved to the pruned catalog by a cleanup: shown, no longer sent


def message_view(message: Message, *, calls: dict[str, ToolCall] | None = None, pruned: bool = False) -> MessageView:
    """The view of one message; ``calls`` (call id → ToolCall) gives a tool result its arguments;
    ``pruned`` marks a message of the pruned catalog."""
    tool = None
    if message.role == "tool":
        call = (calls or {}).get(message.tool_call_id or "") or ToolCall(
            id=message.tool_call_id or message.id, name=message.name or "tool", arguments_json=""
        )
        tool = _tool_context(call, message.content, None, pruned=pruned)
    return MessageView(
        dom_id=dom_id("msg", message.id),
        role=message.role,
        seq=message.seq,
        created_at=message.created_at,
        content_html=render_markdown(message.content) if message.role != "tool" else render_markdown(""),
        reasoning=message.reasoning_content or "",
        tool_calls=tuple(ToolCallView(dom_id("call", c.id), c.name, _pretty_arguments(c.arguments_json)) for c in message.tool_calls),
        is_summary=message.is_compact_summary,
        tokens=message.tokens,
        tool=tool,
        failed=message.kind == KIND_TURN_FAILED,
        stopped=message.kind == KIND_TURN_STOPPED,
        cut_off=_cut_off_note(message.kind),
        pruned=pruned,
    )


def _sized(agent: AgentNode | None):
    """The agent's memory config as the runtime uses it: sized to the model's real window."""
    if agent is None:
        return None
    return sized_config(agent.memory_config, model_window(chat.get_runtime().model))


def _cut_off_note(kind: str) -> str:
    if kind not in CUT_OFF_KINDS:
        return ""
    if kind == KIND_CONTENT_FILTERED:
        return "Cut off by the server's content filter: this reply is incomplete."
    return "Cut off by the server at its length limit: this reply is incomplete."


def message_views(messages: Iterable[Message], *, pruned: Iterable[Message] = ()) -> list[MessageView]:
    """Views of a run of messages in order (``pruned`` ones, from the catalog, first), pairing
    each tool result with its call."""
    calls: dict[str, ToolCall] = {}
    views = []
    for is_pruned, run in ((True, pruned), (False, messages)):
        for message in run:
            calls.update((c.id, c) for c in message.tool_calls)
            views.append(message_view(message, calls=calls, pruned=is_pruned))
    return views


@dataclass(frozen=True, slots=True)
class Earlier:
    """The "load earlier" control: where the previous page of messages is, and how many
    messages come before the ones shown."""

    url: str
    count: int


class EarlierNotFound(LookupError):
    """The message a "load earlier" request starts before is not in the conversation."""


def render_window(views: list[MessageView], *, pruned_url: str, budget: int = STREAM_BUDGET_BYTES,
                  limit: int | None = None) -> tuple[list[SafeString], int]:
    """The message partials of the latest ``views`` that fit ``budget`` bytes of UTF-8 (and
    ``limit`` messages), rendered newest first and returned in order, and how many views at
    the start were left out. The newest one is always rendered, whatever its size."""
    pieces: list[SafeString] = []
    size = 0
    for index in range(len(views) - 1, -1, -1):
        html = partial("message", m=views[index], pruned_url=pruned_url)
        weight = len(html.encode("utf-8", "surrogatepass"))
        if pieces and (size + weight > budget or (limit is not None and len(pieces) >= limit)):
            return pieces[::-1], index + 1
        pieces.append(SafeString(html))
        size += weight
    return pieces[::-1], 0


def _earlier(conversation: Conversation, messages: list[Message], first: int) -> Earlier | None:
    if first <= 0:
        return None
    url = reverse("chat:earlier", args=[conversation.pk]) + "?" + urlencode({"before": messages[first].id})
    return Earlier(url=url, count=first)


def page_context(*, conversation: Conversation, agent: AgentNode | None, offline: bool, model_name: str) -> dict:
    """Everything templates/chat/conversation.html needs besides the sidebar. The stream holds
    the latest messages that fit STREAM_BUDGET_BYTES (the page and a sync frame stay small
    whatever the conversation's length); a "load earlier" control fetches the rest in pages."""
    history = chat.history(conversation=conversation)
    meter = chat.meter_history(conversation=conversation)
    pruned_url = reverse("chat:pruned", args=[conversation.pk])
    shown = list(history.pruned) + list(history.messages)
    views = message_views(history.messages, pruned=history.pruned)
    rendered, cut = render_window(views, pruned_url=pruned_url)
    earlier = None
    if history.hidden + cut:
        url = reverse("chat:earlier", args=[conversation.pk]) + "?" + urlencode({"before": shown[cut].id})
        earlier = Earlier(url=url, count=history.hidden + cut)
    return {
        "conversation": conversation,
        "agent": agent,
        "rendered": rendered,
        "earlier": earlier,
        "catalogued": history.catalogued,
        "pruned_url": pruned_url,
        "context_url": reverse("chat:context", args=[conversation.pk]),
        "meter": _meter_from_history(meter, agent),
        "chart": chart_view(meter),
        "running": False,
        "dom_ids": [view.tool["dom_id"] if view.tool else view.dom_id for view in views[cut:]],
        "exchange": chat.last_exchange(conversation=conversation),
        **LIMIT_CONTEXT,
        "offline": offline,
        "model_name": model_name,
    }


def earlier_page(*, conversation: Conversation, before: str) -> str:
    """The page of messages right before the message ``before`` (an id): at most
    EARLIER_PAGE_MESSAGES, within STREAM_BUDGET_BYTES, in order, preceded by the next "load
    earlier" control if more come before them. Raises EarlierNotFound for an unknown id."""
    whole = chat.whole_history(conversation=conversation)
    messages = list(whole.pruned) + list(whole.messages)
    index = next((i for i, m in enumerate(messages) if m.id == before), None)
    if index is None:
        raise EarlierNotFound("No such message in this conversation.")
    start = max(0, index - EARLIER_PAGE_MESSAGES)
    calls: dict[str, ToolCall] = {}
    for message in messages[:start]:  # a tool result on this page may answer a call before it
        calls.update((c.id, c) for c in message.tool_calls)
    views = []
    for position in range(start, index):
        message = messages[position]
        calls.update((c.id, c) for c in message.tool_calls)
        views.append(message_view(message, calls=calls, pruned=position < len(whole.pruned)))
    pruned_url = reverse("chat:pruned", args=[conversation.pk])
    rendered, cut = render_window(views, pruned_url=pruned_url)
    earlier = _earlier(conversation, messages, start + cut)
    control = partial("load_earlier", earlier=earlier) if earlier else ""
    return control + "".join(rendered)


def _meter_from_history(history: MeterHistory, agent: AgentNode | None, completion: int = 0) -> MeterView:
    last = history.last
    if last is None:
        config = _sized(agent)
        return meter_view(
            sections=(),
            total=0,
            window=config.context_window if config else 0,
            threshold=config.threshold if config else 0,
        )
    return meter_view(
        sections=history.sections,
        total=last.total,
        window=last.window,
        threshold=last.threshold,
        completion=completion,
        session=last.session,
        words=history.words,
    )


# -- fragments --------------------------------------------------------------------------------


def partial(partial_name: str, /, **context) -> str:
    """Render one partial of templates/chat/fragments.html."""
    return render_to_string(f"{FRAGMENTS}#{partial_name}", context)


def append(target: str, html: str) -> str:
    """An OOB fragment appending ``html`` (already safe) to ``#target``."""
    return format_html('<div hx-swap-oob="beforeend:#{}">{}</div>', target, SafeString(html))


def error_fragment(text: str, *, kind: str = "error") -> str:
    """A notice (an error unless ``kind`` says otherwise) appended to the message stream (the socket stays open)."""
    return append("messages", partial("notice", kind=kind, text=text))


def refusal_fragment(reason: str, text: str) -> str:
    """A message refused before anything of it was stored: the reason, and its text handed back
    to the composer (``#composer-draft``), so that what was typed is not lost with the refusal."""
    return error_fragment(reason) + (partial("draft", text=text, oob="true") if text.strip() else "")


#: A finished reply is announced to screen readers with at most this many characters of it.
ANNOUNCE_CHARS = 600


def announced_text(message: Message | None) -> str:
    """What the live region says when a reply is finished: "Reply finished." and its text,
    markdown marks dropped, cut at ANNOUNCE_CHARS (the whole reply is in the conversation)."""
    if message is None:
        return "Reply finished."
    text = " ".join(re.sub(r"[*_`#>|~]+", " ", message.content or "").split())
    if len(text) > ANNOUNCE_CHARS:
        text = text[:ANNOUNCE_CHARS].rsplit(" ", 1)[0] + "… (the rest is in the conversation)"
    return f"Reply finished: {text}" if text else "Reply finished."


def announcer_fragment(message: Message | None) -> str:
    """The screen-reader announcement of a finished reply (the live region's content)."""
    return partial("announcer", text=announced_text(message), oob="true")


def composer_fragment(*, running: bool, agent_ok: bool = True) -> str:
    return partial("composer", running=running, agent_ok=agent_ok, oob="true", **LIMIT_CONTEXT)


def status_fragment(text: str, state: str = "idle") -> str:
    return partial("status", text=text, state=state, oob="true")


class ChatStream:
    """Renders one connection's turn events to OOB fragments (and records the meter).

    ``post`` sends a fragment that is not the answer to an event: the conversation's new title,
    which is written beside the turn instead of in front of its reply. It is written once the
    reply's first text is on its way (or ACTIVITY_DELAY_SECONDS after the message, or when the
    turn ends, whichever comes first), so it never competes with the first token."""

    def __init__(self, *, conversation: Conversation, agent: AgentNode | None, post: Callable[[str], None]) -> None:
        self.post = post
        self._background: set[asyncio.Task] = set()
        self._replying = asyncio.Event()  # set when the reply's first text (or the turn's end) is rendered
        self.conversation = conversation
        self.agent = agent
        self.session = chat.session_of(conversation)
        self.pruned_url = reverse("chat:pruned", args=[conversation.pk])
        self.context_url = reverse("chat:context", args=[conversation.pk])
        self._live: str | None = None
        self._shown_calls: set[str] = set()
        self._total = 0
        config = _sized(agent)
        self._window = config.context_window if config is not None else 0
        self._turn = uuid.uuid4().hex[:8]
        self._cleanup_id = "cleanup"
        self._failure: str | None = None
        self._synced: set[str] = set()  # ids of the messages the last sync rendered
        self._muted = False  # joined a step whose text so far was too long to show: its deltas are not shown
        #: The meter history once a ContextReady or committed CleanupDone is recorded: the turn
        #: records each once for all its sockets (agents.chat.turns.LiveTurn.recorded).
        self.recorded: Callable[[RuntimeEvent], Awaitable[MeterHistory]] = self._record_now

    # the turn's events --------------------------------------------------------------------

    async def render(self, event: RuntimeEvent) -> str:
        """The fragments for one runtime event ("" when the event shows nothing)."""
        if isinstance(event, ContentChunk):
            tokens = event.completion_tokens
            width = completion_width(total=self._total, window=self._window, completion=tokens)
            return (
                self._chunk("content", event.text)
                + partial("meter_completion_seg", completion=tokens, width=width, oob="true")
                + partial("meter_completion_num", completion=tokens, oob="true")
            )
        if isinstance(event, ReasoningChunk):
            return self._chunk("reasoning", event.text)
        if isinstance(event, ContextReady):
            history = await self.recorded(event)
            self._total, self._window = event.total_tokens, event.window
            meter = meter_view(
                sections=event.sections,
                total=event.total_tokens,
                window=event.window,
                threshold=event.threshold,
                session=event.session_tokens,
                words=history.words,
            )
            html = partial("meter", meter=meter, context_url=self.context_url, oob="true") + partial("chart", chart=chart_view(history), oob="true")
            # The meter may follow the step's first text (agents.chat.outbox): "Writing…" stays.
            return html if self._live is not None else html + status_fragment("Thinking…", "busy")
        if isinstance(event, MessageStored):
            return await self._stored(event.message)
        if isinstance(event, TurnStarted):
            self._replying.clear()
            self._turn, self._live = uuid.uuid4().hex[:8], None
            self._shown_calls.clear()
            return (composer_fragment(running=True) + partial("exchange_actions", running=True, oob="true")
                    + status_fragment("Assembling the context…", "busy"))
        if isinstance(event, ToolStarted):
            self._shown_calls.add(event.call.id)
            return append("messages", partial("tool_card", **_tool_context(event.call, None, None))) + status_fragment(
                f"Running {event.call.name}…", "busy"
            )
        if isinstance(event, ToolFinished):
            card = partial("tool_card", oob="true", **_tool_context(event.call, event.content, event.ok))
            return card + status_fragment("Thinking…", "busy")
        if isinstance(event, CleanupStarted):
            self._cleanup_id = f"cleanup-{uuid.uuid4().hex[:10]}"
            notice = partial("cleanup", dom_id=self._cleanup_id, running=True, event=event, pruned_url=self.pruned_url)
            return append("messages", notice) + status_fragment("Cleaning up: moving older messages out…", "busy")
        if isinstance(event, CleanupDone):
            html = partial(
                "cleanup", dom_id=self._cleanup_id, event=event, pruned_url=self.pruned_url, oob="true"
            )
            if event.committed:
                history = await self.recorded(event)
                catalogued = await sync_to_async(chat.services().catalog.count, thread_sensitive=True)(self.session)
                html += partial("chart", chart=chart_view(history), oob="true")
                html += partial("pruned_link", pruned_url=self.pruned_url, catalogued=catalogued, oob="true")
            return html
        if isinstance(event, TurnFinished):
            self._live = None
            return status_fragment("Finishing…", "busy") + announcer_fragment(event.message)
        if isinstance(event, TurnFailed):
            # A recorded failure is shown by its marked reply in the stream (also after a reload).
            self._failure = "" if event.recorded else f"The model call failed ({event.kind}): {event.error}"
        return ""

    async def ended(self) -> str:
        """The turn's task is over (sent only then, so the next message is never "busy").
        After a failed model call the stream is re-rendered from the session, which holds what
        the runtime kept of the cut-off reply, and the error follows it. The memory work the
        turn queued (a review, a consolidation) is shown under the meter."""
        self._replying.set()
        return await self._ended() + await memory_work_fragment()

    async def _ended(self) -> str:
        failure, self._failure = self._failure, None
        if failure is None:
            # The reply is whole now: "Reply so far" goes back to zero (the meter counts it in Messages).
            reset = partial("meter_completion_seg", completion=0, width="0%", oob="true") + partial(
                "meter_completion_num", completion=0, oob="true"
            )
            return composer_fragment(running=False) + await self.exchange_fragment() + status_fragment("") + reset
        notice = error_fragment(failure) if failure else ""
        return await self.sync(running=False) + notice + status_fragment("The reply failed.", "error")

    async def stopped(self) -> str:
        """After a stop: the stream re-rendered from the session (the partial reply with its
        note, interrupted tool calls closed), then a notice."""
        self._replying.set()
        notice = partial("notice", kind="info", text="Stopped. What was written so far is kept in the conversation.")
        return await self.sync(running=False) + append("messages", notice) + status_fragment("Stopped.")

    async def exchange_fragment(self) -> str:
        """The last exchange's actions (regenerate or retry, edit), re-rendered from the session."""
        if self.agent is None:
            return partial("exchange_actions", exchange=None, oob="true")
        exchange = await run_blocking(chat.last_exchange, conversation=self.conversation)
        return partial("exchange_actions", exchange=exchange, oob="true")

    def failed(self, text: str) -> str:
        """The turn could not start or broke down (``ended`` follows)."""
        return error_fragment(text)

    async def join(self, snapshot, *, overflow_note: str) -> str:
        """A sync while a turn runs (a page loaded or reconnected mid-reply): the conversation
        as stored, then the reply of the current step so far (``snapshot``, an
        agents.chat.turns.Snapshot) in a live bubble the next deltas go on filling, and the
        tool call running, if any."""
        html = await self.sync(running=True)
        self._total, self._window = snapshot.total or self._total, snapshot.window or self._window
        if snapshot.call is not None and dom_id("tool", snapshot.call.id) not in self._synced:
            self._shown_calls.add(snapshot.call.id)
            html += append("messages", partial("tool_card", **_tool_context(snapshot.call, None, None)))
        if snapshot.overflow:
            # Only the step's tail would stream in: the whole reply shows once it is stored.
            self._muted = True
            html += error_fragment(overflow_note, kind="info")
        elif snapshot.content or snapshot.reasoning:
            if snapshot.reasoning:
                html += self._chunk("reasoning", snapshot.reasoning)
            if snapshot.content:
                html += self._chunk("content", snapshot.content)
        return html

    async def sync(self, *, running: bool) -> str:
        """Re-render the whole page state (after a reconnect): messages, meter, chart, composer."""
        self._live, self._muted = None, False
        self._shown_calls.clear()
        context = await sync_to_async(page_context, thread_sensitive=True)(
            conversation=self.conversation, agent=self.agent, offline=False, model_name=""
        )
        self._synced = set(context.get("dom_ids", ()))
        return (
            partial("message_list", oob="true", **context)
            + partial("meter", meter=context["meter"], context_url=context["context_url"], oob="true")
            + partial("chart", chart=context["chart"], oob="true")
            + composer_fragment(running=running, agent_ok=self.agent is not None)
            + partial("exchange_actions", exchange=context["exchange"] if self.agent is not None else None, running=running, oob="true")
            + status_fragment("Writing…" if running else "", "busy" if running else "idle")
        )

    # helpers ------------------------------------------------------------------------------

    async def _record_now(self, event: RuntimeEvent) -> MeterHistory:
        return await chat.arecord(session=self.session, event=event)

    def _chunk(self, part: str, text: str) -> str:
        if self._muted:
            return ""
        html = ""
        if self._live is None:
            self._live = f"live-{self._turn}-{uuid.uuid4().hex[:6]}"
            html = append("messages", partial("live_assistant", live_id=self._live))
            html += status_fragment("Writing…", "busy")
            self._replying.set()
        return html + format_html('<div hx-swap-oob="beforeend:#{}-{}">{}</div>', self._live, part, text)

    async def _stored(self, message: Message) -> str:
        self._muted = False
        if message.role == "tool" and message.tool_call_id in self._shown_calls:
            return ""  # already shown by ToolStarted/ToolFinished
        view = message_view(message)
        if view.dom_id in self._synced or (message.role == "tool" and dom_id("tool", message.tool_call_id or "") in self._synced):
            # A page that joined mid-turn: the sync read the session after this message was
            # stored (and after its event was queued): shown already; the live bubble goes.
            live, self._live = self._live, None
            return format_html('<div id="{}" hx-swap-oob="delete"></div>', live) if live and message.role == "assistant" else ""
        if message.role == "assistant" and self._live is not None:
            live, self._live = self._live, None
            # The final render (markdown, collapsible parts) replaces the streamed bubble.
            return partial("message", m=view, pruned_url=self.pruned_url, oob=f"outerHTML:#{live}")
        html = partial("message", m=view, pruned_url=self.pruned_url)
        if message.role == "user":
            task = asyncio.create_task(self._note_activity(message.content), name=f"chat-activity-{self.conversation.pk}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return append("messages", html)

    async def _note_activity(self, first_text: str) -> None:
        """Bump the conversation in the list and post its new title, if the message gave it one."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._replying.wait(), ACTIVITY_DELAY_SECONDS)
        try:
            new_title = await run_blocking(chat.note_activity, conversation_id=self.conversation.pk, first_text=first_text)
        except Exception:
            logger.exception("could not note the activity of conversation %s", self.conversation.pk)
            return
        if new_title:
            self.conversation.title = new_title
            self.post(
                partial("conversation_title", conversation=self.conversation, oob="true")
                + partial("conversation_item", c=self.conversation, active=True, oob="true")
            )


async def memory_work_fragment() -> str:
    """The "memory work queued" line under the meter, re-rendered (empty and hidden: none)."""
    from agents.runtime.model_status import memory_work

    try:
        text = (await sync_to_async(memory_work, thread_sensitive=True)(chat.services())).describe()
    except Exception:
        logger.warning("could not read the memory work queued", exc_info=True)
        return ""
    return partial("memory_work", work_text=text, oob="true")


def _tool_context(call: ToolCall, content: str | None, ok: bool | None, *, pruned: bool = False) -> dict:
    return {
        "pruned": pruned,
        "dom_id": dom_id("tool", call.id),
        "name": call.name,
        "arguments": _pretty_arguments(call.arguments_json),
        "output": _preview(content) if content is not None else None,
        "ok": ok,
    }
