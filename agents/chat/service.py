"""Chat services: conversations, their history for rendering, the meter, the process's Runtime.

Everything the chat views and the consumer do goes through here (they parse input, call one
function, render). Every function that takes a ``user`` scopes to it: a conversation of anyone
else is ``ConversationNotFound``, exactly like one that does not exist, so an id never tells an
outsider whether it exists.

Deleting a conversation removes its session messages, every KV item of its session scope (the
meter, todo lists, leases) and its pruned catalog, then the row. Long-term memory made from it
(archive documents, core memory) belongs to the agent and user, not the conversation, and stays.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from agents.chat.sockets import close_conversation_sockets
from agents.chat.context_view import ContextSnapshot, load_snapshot, record_snapshot, snapshot_of
from agents.chat.meter import MeterHistory, load_history, record_cleanup, record_context
from agents.declarations import AgentNode, get_declaration
from agents.runtime.events import CleanupDone, ContextReady
from agents.models import Conversation
from agents.runtime.loop import ARCHIVED, REPLACE_TAIL, TURN_LEASE, Runtime
from agents.runtime.outcomes import KIND_TURN_FAILED
from agents.runtime.tools.history_tools import archive_scope_for
from memory.archiving import archived_through
from agents.runtime.services import MemoryServices, get_services
from memory.compression.pruned import PrunedEntry, first_uncommitted_seq
from memory.locks import LeaseBusy, acquire_lease, lease_active
from memory.messages import Message
from memory.scopes import InvalidScopeId, SessionScope
from memory.threads import run_blocking
from memory.transcript import is_legal

DEFAULT_TITLE = "New conversation"
MAX_TITLE = 200
HISTORY_LIMIT = 400  # messages re-rendered on a page load; older live ones are counted, not shown


class ChatError(Exception):
    """Base of the chat services' errors; the message is fit to show to the user."""


class ConversationNotFound(ChatError):
    """No such conversation for this user (missing, or someone else's)."""


class AgentUnavailable(ChatError):
    """The conversation's agent is not a main agent of the booted declaration."""


class ConversationBusy(ChatError):
    """A reply is being written in the conversation; the operation must wait for it."""


class InvalidTitle(ChatError, ValueError):
    """A title that is empty or too long."""


# -- the process's runtime --------------------------------------------------------------------

_lock = threading.Lock()
_runtime: Runtime | None = None


def get_runtime() -> Runtime:
    """The process-wide Runtime over ``agents.runtime.services.get_services()`` (built on first use)."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime(services=get_services())
        return _runtime


def set_runtime_for_tests(runtime: Runtime | None) -> None:
    """Make ``get_runtime()`` return ``runtime`` (None: build from settings again). Tests only."""
    global _runtime
    with _lock:
        _runtime = runtime


def services() -> MemoryServices:
    """The memory services of the process's runtime (views and consumer share them)."""
    return get_runtime().services


# -- agents -----------------------------------------------------------------------------------


def main_agents() -> tuple[AgentNode, ...]:
    """The main agents a conversation can be started with, in declaration order (internal
    agents, declared with ``chat: false``, are not)."""
    return get_declaration().chat_agents()


def resolve_agent(name: str) -> AgentNode:
    """The main agent called ``name`` people may chat with; raises AgentUnavailable if it is not
    (or no longer) one, or if it is internal (``chat: false``)."""
    node = get_declaration().find(name)
    if node is None or not node.is_main:
        raise AgentUnavailable(
            f"The agent {name!r} is not a main agent of the declaration any more; start a new conversation."
        )
    if not node.for_chat:
        raise AgentUnavailable(f"The agent {node.name!r} works behind the scenes and is not offered for chat; "
                               "start a conversation with another agent.")
    return node


# -- conversations ----------------------------------------------------------------------------


def session_of(conversation: Conversation) -> SessionScope:
    return SessionScope(conversation.session_id)


def list_conversations(*, user: AbstractBaseUser) -> list[Conversation]:
    """The user's conversations, most recently active first."""
    return list(Conversation.objects.filter(owner=user).order_by("-updated_at"))


def get_conversation(*, user: AbstractBaseUser | AnonymousUser | None, conversation_id: str) -> Conversation:
    """The user's conversation ``conversation_id``; raises ConversationNotFound otherwise."""
    if not user or not user.is_authenticated or not isinstance(conversation_id, str):
        raise ConversationNotFound("No such conversation.")
    try:
        SessionScope(conversation_id)
    except InvalidScopeId:
        raise ConversationNotFound("No such conversation.") from None
    conversation = Conversation.objects.filter(pk=conversation_id, owner=user).first()
    if conversation is None:
        raise ConversationNotFound("No such conversation.")
    return conversation


def _clean_title(title: str) -> str:
    cleaned = " ".join((title or "").split())
    if not cleaned:
        raise InvalidTitle("Give the conversation a title.")
    if len(cleaned) > MAX_TITLE:
        raise InvalidTitle(f"A title has at most {MAX_TITLE} characters.")
    return cleaned


def create_conversation(*, user: AbstractBaseUser, agent: str, title: str = "", reuse_empty: bool = False) -> Conversation:
    """Start a conversation with main agent ``agent``; raises AgentUnavailable, InvalidTitle.

    ``reuse_empty`` (the chat page's "New" and "Chat with" buttons): return the user's latest
    untitled conversation with that agent instead when nothing was said in it yet, so clicking
    again does not pile up empty conversations."""
    node = resolve_agent(agent)
    if reuse_empty and not title:
        latest = Conversation.objects.filter(owner=user, agent=node.name, title=DEFAULT_TITLE).order_by("-updated_at").first()
        if latest is not None and services().bundle.messages.head(session_of(latest)).count == 0:
            return latest
    return Conversation.objects.create(owner=user, agent=node.name, title=_clean_title(title) if title else DEFAULT_TITLE)


def rename_conversation(*, user: AbstractBaseUser, conversation_id: str, title: str) -> Conversation:
    """Set the title; raises ConversationNotFound, InvalidTitle."""
    conversation = get_conversation(user=user, conversation_id=conversation_id)
    conversation.title = _clean_title(title)
    conversation.save(update_fields=["title", "updated_at"])
    return conversation


def delete_conversation(*, user: AbstractBaseUser, conversation_id: str) -> None:
    """Delete the conversation and its session memory (messages, session KV, pruned catalog),
    and close its open chat sockets (4404, in every worker on the channel layer).

    Takes the session's turn lease first, so a reply being written is never cut in half:
    raises ConversationBusy then (stop the reply, or wait). The row goes first, while the lease
    is held: a socket's next turn finds the conversation gone before it writes anything (and a
    turn that checked just before removes what it wrote once it sees the row gone:
    ``purge_session``). Idempotent on the memory side: deleting again finishes a partial job."""
    conversation = get_conversation(user=user, conversation_id=conversation_id)
    svc = services()
    session = session_of(conversation)
    try:
        acquire_lease(kv=svc.bundle.kv, scope=session, name=TURN_LEASE, ttl=120.0)
    except LeaseBusy:
        raise ConversationBusy("A reply is still being written in this conversation; stop it first.") from None
    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk, owner=user).delete()
    close_conversation_sockets(conversation_id=conversation.pk)
    purge_session(session=session)


def purge_session(*, session: SessionScope) -> None:
    """Remove a session's memory: messages, session KV (the meter, todo lists, leases) and its
    pruned catalog."""
    svc = services()
    svc.bundle.messages.clear(session)
    for item in svc.bundle.kv.list(session):
        svc.bundle.kv.delete(session, item.key)
    svc.catalog.delete_session(session)


def is_deleted(*, conversation_id: str) -> bool:
    """Whether the conversation is gone (deleted since it was loaded)."""
    return not Conversation.objects.filter(pk=conversation_id).exists()


def note_activity(*, conversation_id: str, first_text: str | None = None) -> str | None:
    """Bump the conversation in the list; title a still-untitled one from its first message.
    Returns the new title when it changed."""
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        return None
    fields = ["updated_at"]
    if first_text and conversation.title == DEFAULT_TITLE:
        words = " ".join(first_text.split())
        conversation.title = (words[:60].rsplit(" ", 1)[0] + "…") if len(words) > 60 else words
        fields.append("title")
    conversation.updated_at = timezone.now()
    conversation.save(update_fields=fields)
    return conversation.title if "title" in fields else None


# -- history for rendering --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class History:
    """The conversation as the page shows it: ``pruned``, the messages cleanup moved to the
    pruned catalog (the reader can still scroll back through them; the model sees only the
    compact summary), then ``messages``, the live session (compact summary first, if any).
    ``hidden``: older messages, live or pruned, not re-rendered (over HISTORY_LIMIT)."""

    messages: tuple[Message, ...]
    hidden: int
    catalogued: int  # messages cleanup moved to the pruned catalog so far
    pruned: tuple[Message, ...] = ()


def history(*, conversation: Conversation) -> History:
    """The last HISTORY_LIMIT messages of the whole conversation, for the message stream: the
    committed pruned catalog's, then the live session's."""
    svc = services()
    session = session_of(conversation)
    head = svc.bundle.messages.head(session)
    live = svc.bundle.messages.read(session, last=HISTORY_LIMIT)
    hidden_live = max(0, head.count - len(live))
    catalogued = svc.catalog.count(session)
    pruned: list[Message] = []
    hidden_pruned = 0
    if catalogued:
        entries = svc.catalog.entries(session, before_seq=first_uncommitted_seq(live))
        room = 0 if hidden_live else HISTORY_LIMIT - len(live)
        pruned = [entry.message for entry in entries[len(entries) - room:]] if room > 0 else []
        hidden_pruned = len(entries) - len(pruned)
    return History(tuple(live), hidden_live + hidden_pruned, catalogued, tuple(pruned))


def whole_history(*, conversation: Conversation) -> History:
    """Every message of the conversation, as ``history`` orders them (the committed pruned
    catalog's, then the live session's), none left out: what "load earlier" pages through."""
    svc = services()
    session = session_of(conversation)
    live = svc.bundle.messages.read(session)
    catalogued = svc.catalog.count(session)
    entries = svc.catalog.entries(session, before_seq=first_uncommitted_seq(live)) if catalogued else []
    return History(tuple(live), 0, catalogued, tuple(entry.message for entry in entries))


@dataclass(frozen=True, slots=True)
class PrunedBlock:
    """One catalogued message and its heading line, exactly as ``grep -n "^## \\["`` prints it."""

    entry: PrunedEntry
    heading: str


def pruned_blocks(*, conversation: Conversation) -> list[PrunedBlock]:
    """The committed pruned catalog of the conversation, in seq order, with each block's
    heading line read from its file."""
    svc = services()
    session = session_of(conversation)
    live = svc.bundle.messages.read(session, last=8)
    entries = svc.catalog.entries(session, before_seq=first_uncommitted_seq(live))
    lines: dict[object, list[str]] = {}
    blocks = []
    for entry in entries:
        if entry.path not in lines:
            lines[entry.path] = entry.path.read_text(encoding="utf-8").split("\n")
        file_lines = lines[entry.path]
        heading = file_lines[entry.line - 1] if 0 < entry.line <= len(file_lines) else f"## [{entry.seq}] {entry.role}"
        blocks.append(PrunedBlock(entry, heading))
    return blocks


# -- the last exchange --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LastExchange:
    """The conversation's last user message and what can be done with it: answered again
    (regenerate; "retry" when its reply is a marked failure) or edited and sent again. Both
    replace the exchange in the session (``Runtime.run_turn(replace_from=...)``), so they are
    offered only while it is live there and not yet archived; ``reason`` says why not."""

    message_id: str
    text: str
    failed: bool
    replaceable: bool
    reason: str = ""


def warm_recall(*, conversation: Conversation, agent) -> bool:
    """Build the in-memory archive index that recall searches for the conversation's user and
    agent, if this process has not yet (True when one was built or brought up to date). The
    chat socket calls it as the page opens, so the first turn after a start does not wait for
    the index (about 0.5 s at 10,000 archived messages, 6 s at 100,000)."""
    if agent is None or not agent.memory_config.archive_enabled:
        return False
    retrieval = services().retrieval
    scope = archive_scope_for(agent=conversation.agent, user_id=str(conversation.owner_id))
    if retrieval.ready(scope):
        return False
    retrieval.indexed(scope)
    return True


def user_typing(*, conversation: Conversation) -> bool:
    """The conversation's user is typing (the chat page says so while they type): background
    memory work on the chat model's endpoint gives the model up now and waits, so the message
    finds it free (``ModelGate.mark_typing``). False when the endpoint has no gate."""
    runtime = get_runtime()
    gate = runtime.services.gate
    return gate is not None and gate.mark_typing(runtime.model, session=session_of(conversation))


def last_exchange(*, conversation: Conversation) -> LastExchange | None:
    """The conversation's last exchange (None: no user message in the live session's end)."""
    svc = services()
    session = session_of(conversation)
    tail = svc.bundle.messages.read(session, last=REPLACE_TAIL)
    index = next((i for i in range(len(tail) - 1, -1, -1) if tail[i].role == "user" and not tail[i].is_compact_summary), None)
    if index is None:
        return None
    message = tail[index]
    archived, _stored = archived_through(
        svc.bundle, session=session, archive_scope=archive_scope_for(agent=conversation.agent, user_id=str(conversation.owner_id))
    )
    replaceable = archived < (message.seq or 0)
    return LastExchange(
        message_id=message.id,
        text=message.content,
        failed=tail[-1].kind == KIND_TURN_FAILED,
        replaceable=replaceable,
        reason="" if replaceable else f"{ARCHIVED[:1].upper()}{ARCHIVED[1:]}.",
    )


# -- the meter --------------------------------------------------------------------------------


def meter_history(*, conversation: Conversation) -> MeterHistory:
    return load_history(kv=services().bundle.kv, session=session_of(conversation))


def context_snapshot(*, conversation: Conversation) -> ContextSnapshot | None:
    """What the conversation's latest model step was sent, by section (agents.chat.context_view)."""
    return load_snapshot(kv=services().bundle.kv, session=session_of(conversation))


def _record_step(session: SessionScope, event: ContextReady, keep: bool) -> MeterHistory:
    history = record_context(kv=services().bundle.kv, session=session, event=event)
    if keep:
        _keep_snapshot(session, event, history)
    return history


def _keep_snapshot(session: SessionScope, event: ContextReady, history: MeterHistory) -> None:
    snapshot = snapshot_of(event, point=history.last)
    if snapshot is not None:
        record_snapshot(kv=services().bundle.kv, session=session, snapshot=snapshot)


async def arecord_context(*, session: SessionScope, event: ContextReady, keep: bool = True) -> MeterHistory:
    """Record a ContextReady point in the session's meter history and, with ``keep``, the step's
    request by section for the context viewer (one trip off the event loop)."""
    return await run_blocking(_record_step, session, event, keep)


async def akeep_snapshot(*, session: SessionScope, event: ContextReady, history: MeterHistory) -> None:
    """Keep the step's request by section for the context viewer, once its meter point
    (``history.last``) is recorded: a turn writes it after the point the meter waits for."""
    await run_blocking(_keep_snapshot, session, event, history)


async def arecord_cleanup(*, session: SessionScope, event: CleanupDone) -> MeterHistory:
    """Record a committed cleanup in the session's meter history (off the event loop)."""
    return await run_blocking(record_cleanup, kv=services().bundle.kv, session=session, event=event)


async def arecord(*, session: SessionScope, event: ContextReady | CleanupDone, keep: bool = True) -> MeterHistory:
    """Record a ContextReady (``arecord_context``) or a committed CleanupDone in the meter history."""
    if isinstance(event, ContextReady):
        return await arecord_context(session=session, event=event, keep=keep)
    return await arecord_cleanup(session=session, event=event)


# -- interrupted turns ------------------------------------------------------------------------


def turn_in_progress(*, session: SessionScope) -> bool:
    """Whether a turn of ``session`` is running (or tidying up after a stop), in any worker."""
    return lease_active(kv=services().bundle.kv, scope=session, name=TURN_LEASE)


def _open_calls_at_end(tail: list[Message]) -> bool:
    start = next((i for i, m in enumerate(tail) if m.role != "tool"), len(tail))
    return not is_legal(tail[start:])


async def asettle(*, session: SessionScope, timeout: float = 2.0) -> bool:
    """Wait until an interrupted turn of ``session`` has been tidied; True when it has.

    When a turn's generator is closed early, the runtime closes the open tool chain and keeps
    the partial reply in a task of its own, right after. This yields to the loop, then reads
    the session's end (on a store thread, memory.threads) until no call is left open there, or
    ``timeout`` seconds passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    messages = services().bundle.messages
    while True:
        for _ in range(8):
            await asyncio.sleep(0)
        if not _open_calls_at_end(await run_blocking(messages.read, session, last=64)):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.02)
