"""A person's own archive with one agent: browse and search their archived conversations, read
one, and remove one from memory. Shared by the archive pages (agents/personal/archive_views.py).

Everything here works in the archive scope of the requesting user with the agent
(``archive_scope_for(agent=, user_id=<user pk>)``): nobody reaches another user's archive
through here, staff included (the admin is where staff inspect archives).

Reading goes through the process's ``Retrieval`` (``memory.retrieval``): the conversation's
archived messages in order, and message search (words and meaning fused, prefixes of words
matched: "lisb" finds Lisbon). Titles and the list of conversations come from the archive
documents' summaries (``ArchiveStore.list_summaries``: no message bodies read).

**Removing a conversation from memory** (``forget_conversation``) takes out everything long-term
memory holds of it:

* its archive documents (and their vectors): search, automatic recall and the archive section
  no longer see it (``Retrieval`` notices removed documents on its next call);
* the lines of USER.md and MEMORY.md the agent or the Dream Engine wrote from it, found by their
  provenance (``LineSource.session`` / ``LineSource.document`` in the line ledger); they are
  deleted as the person's own edit, so the Dream Engine does not bring them back from what was
  said before;
* the changes to the agent's identity (SOUL.md) proposed from it that still wait for staff.

It holds the Dream Engine's lease of the archive scope (a consolidation running meanwhile could
land lines from a document being removed: ``ArchiveBusy`` then, nothing changed) and the
session's cleanup lease (no cleanup or archiving of that conversation adds a document meanwhile).
The session's archive cursor stays where it is, so what was archived is not archived again; what
is said later in a conversation that still exists is archived as usual. The conversation itself
(its messages and pruned catalog, in the chat list) and the experiences are not touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.safestring import SafeString

from agents.declarations import AgentNode
from agents.personal import memory as user_memory
from agents.runtime.services import get_services
from agents.runtime.tools.history_tools import archive_scope_for
from memory import core_proposals
from memory.archiving import ARCHIVE_CURSOR, archived_through
from memory.archiving import LEASE_NAME as CLEANUP_LEASE
from memory.core_lines import content_lines
from memory.core_memory import MEMORY, USER, CoreMemoryConflict, CoreMemoryDisabled
from memory.dream import LEASE_NAME as DREAM_LEASE
from memory.locks import Lease, LeaseBusy, acquire_lease, default_holder, release_lease
from memory.highlight import MAX_QUERY_CHARS, excerpt, highlight, query_words
from memory.retrieval.messages import ArchivedMessage
from memory.scopes import AgentScope, InvalidScopeId, Scope, SessionScope
from memory.stores.base import ArchiveDocument, ConcurrentChange, VersionConflict

#: Search results shown at most.
SEARCH_LIMIT = 50
#: A message longer than this is shown in a search result as an excerpt around its first match.
EXCERPT_CHARS = 420
#: Lines written from a conversation by these writers are removed with it (people's own lines stay).
MACHINE_WRITERS = frozenset({"agent", "dream"})
_LEASE_TTL = 60.0
_ATTEMPTS = 5


class ArchiveError(Exception):
    """Base of the errors of this module; the message says what to do."""


class ConversationNotArchived(ArchiveError):
    """No archived conversation by that id in the user's archive with that agent."""


class ArchiveBusy(ArchiveError):
    """The Dream Engine, a cleanup or archiving works on it right now: nothing was changed."""


# -- values -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchivedConversation:
    """One conversation of the user's archive with an agent."""

    conversation_id: str  # the session id (the chat conversation's id)
    session: str  # the session scope key
    title: str
    first_at: datetime | None
    last_at: datetime | None
    messages: int  # archived messages that can be read and searched
    documents: tuple[str, ...]  # archive document ids, in archive order
    live: bool  # the conversation is still in the user's chat list


@dataclass(frozen=True, slots=True)
class ArchiveHitView:
    """One search result: the message, its conversation, and its text with the matches marked."""

    message: ArchivedMessage
    conversation: ArchivedConversation
    excerpt: SafeString
    by_meaning: bool  # found by meaning, none of the query's words is in it


@dataclass(frozen=True, slots=True)
class MessageView:
    message: ArchivedMessage
    text: SafeString  # escaped, with the query's words marked


@dataclass(frozen=True, slots=True)
class CoreLine:
    """A line of a core memory file that came from a conversation."""

    file: str
    text: str
    who: str


@dataclass(frozen=True, slots=True)
class Removal:
    """What removing a conversation from memory takes out (the plan shown before, or what was
    done)."""

    conversation: ArchivedConversation
    lines: tuple[CoreLine, ...]
    proposals: int
    core_enabled: bool


# -- the scope --------------------------------------------------------------------------------


def scope_for(*, user, agent: AgentNode) -> Scope:
    """The archive scope of ``user`` with ``agent`` (their own; no one else's)."""
    return archive_scope_for(agent=agent.name, user_id=user_memory.user_id(user))


def _session(conversation_id: str) -> SessionScope:
    try:
        return SessionScope(conversation_id)
    except (InvalidScopeId, TypeError):
        raise ConversationNotArchived("No such archived conversation.") from None


def _live_titles(user, conversation_ids: Iterable[str]) -> dict[str, str]:
    from agents.models import Conversation

    ids = list(conversation_ids)
    if not ids:
        return {}
    return dict(Conversation.objects.filter(owner=user, pk__in=ids).values_list("pk", "title"))


def _conversations(user, scope: Scope, documents: Sequence[ArchiveDocument]) -> dict[str, ArchivedConversation]:
    """The archived conversations of ``documents`` (summaries: no messages), keyed by session key."""
    retrieval = get_services().retrieval
    grouped: dict[str, list[ArchiveDocument]] = {}
    for document in documents:
        grouped.setdefault(document.session, []).append(document)
    ids = {key: key.partition(":")[2] for key in grouped}
    titles = _live_titles(user, ids.values())
    found = {}
    for key, docs in grouped.items():
        docs.sort(key=lambda d: d.seq or 0)
        messages = retrieval.conversation(scope, key)
        first = messages[0].created_at if messages else _metadata_time(docs[0], "first_at")
        last = messages[-1].created_at if messages else _metadata_time(docs[-1], "last_at")
        conversation_id = ids[key]
        title = titles.get(conversation_id) or next((d.title for d in docs if d.title), "") or "A conversation"
        found[key] = ArchivedConversation(
            conversation_id=conversation_id, session=key, title=title, first_at=first, last_at=last,
            messages=len(messages), documents=tuple(d.id for d in docs), live=conversation_id in titles,
        )
    return found


def _metadata_time(document: ArchiveDocument, key: str) -> datetime:
    value = document.metadata.get(key) if isinstance(document.metadata, dict) else None
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return document.created_at


def _newest_first(conversation: ArchivedConversation) -> tuple:
    when = conversation.last_at or conversation.first_at
    return (when.timestamp() if when else 0.0, conversation.session)


# -- reading ----------------------------------------------------------------------------------


def archived_conversations(*, user, agent: str) -> list[ArchivedConversation]:
    """The user's archived conversations with ``agent``, most recent first. Raises AgentNotFound."""
    node = user_memory.main_agent(agent)
    scope = scope_for(user=user, agent=node)
    found = _conversations(user, scope, get_services().bundle.archive.list_summaries(scope))
    return sorted(found.values(), key=_newest_first, reverse=True)


def archived_conversation(*, user, agent: str, conversation_id: str) -> ArchivedConversation:
    """One archived conversation; raises AgentNotFound, ConversationNotArchived."""
    node = user_memory.main_agent(agent)
    session = _session(conversation_id)
    scope = scope_for(user=user, agent=node)
    documents = [d for d in get_services().bundle.archive.list_summaries(scope) if d.session == session.key()]
    if not documents:
        raise ConversationNotArchived("No such archived conversation.")
    return _conversations(user, scope, documents)[session.key()]


def conversation_messages(*, user, agent: str, conversation_id: str, query: str = "") -> list[MessageView]:
    """Every archived message of one conversation, in order, the words of ``query`` marked."""
    node = user_memory.main_agent(agent)
    session = _session(conversation_id)
    messages = get_services().retrieval.conversation(scope_for(user=user, agent=node), session.key())
    words = query_words(query)
    return [MessageView(m, highlight(m.text, words)) for m in messages]


def search(*, user, agent: str, query: str, limit: int = SEARCH_LIMIT) -> list[ArchiveHitView]:
    """The archived messages of the user with ``agent`` that best match ``query``, best first.
    An empty query finds nothing. Raises AgentNotFound."""
    node = user_memory.main_agent(agent)
    query = (query or "")[:MAX_QUERY_CHARS]
    if not query.strip():
        return []
    scope = scope_for(user=user, agent=node)
    hits = get_services().retrieval.search(scope, query, limit=limit)
    if not hits:
        return []
    sessions = {hit.message.session for hit in hits}
    documents = [d for d in get_services().bundle.archive.list_summaries(scope) if d.session in sessions]
    conversations = _conversations(user, scope, documents)
    views = []
    for hit in hits:
        conversation = conversations.get(hit.message.session)
        if conversation is None:  # removed between the search and the listing
            continue
        words = hit.matched
        views.append(ArchiveHitView(hit.message, conversation, excerpt(hit.message.text, words, limit=EXCERPT_CHARS),
                                    by_meaning=not words))
    return views


# -- removing a conversation ------------------------------------------------------------------


def _lines_from(user, node: AgentNode, conversation: ArchivedConversation) -> tuple[CoreLine, ...]:
    """The lines of USER.md and MEMORY.md the agent or the Dream Engine wrote from it."""
    if not node.memory_config.core_enabled:
        return ()
    memory = user_memory.core_memory(user=user, agent=node)
    documents = set(conversation.documents)
    found = []
    for file in (USER, MEMORY):
        ledger = memory.ledger(file=file)
        for line in content_lines(memory.read(file=file).text):
            source = ledger.source_of(line)
            if source is None or source.by not in MACHINE_WRITERS:
                continue
            if source.session == conversation.session or (source.document and source.document in documents):
                found.append(CoreLine(file, line, user_memory.describe_source(source.by, viewer=user)))
    return tuple(found)


def _proposals_from(user, node: AgentNode, conversation: ArchivedConversation) -> list[core_proposals.Proposal]:
    uid = user_memory.user_id(user)
    documents = set(conversation.documents)
    return [
        p for p in core_proposals.list_proposals(kv=get_services().bundle.kv, agent=node.name,
                                                 status=core_proposals.PENDING)
        if p.user == uid and (p.session == conversation.session or (p.document and p.document in documents))
    ]


def removal_plan(*, user, agent: str, conversation_id: str) -> Removal:
    """What ``forget_conversation`` would take out now. Raises AgentNotFound, ConversationNotArchived."""
    node = user_memory.main_agent(agent)
    conversation = archived_conversation(user=user, agent=agent, conversation_id=conversation_id)
    return Removal(conversation, _lines_from(user, node, conversation),
                   len(_proposals_from(user, node, conversation)), node.memory_config.core_enabled)


def forget_conversation(*, user, agent: str, conversation_id: str) -> Removal:
    """Remove one conversation from the user's long-term memory with ``agent`` (see the module
    docstring); returns what was removed. Raises AgentNotFound, ConversationNotArchived,
    ArchiveBusy (nothing changed: try again shortly)."""
    node = user_memory.main_agent(agent)
    session = _session(conversation_id)
    archived_conversation(user=user, agent=agent, conversation_id=conversation_id)  # exists, or not found
    bundle = get_services().bundle
    scope = scope_for(user=user, agent=node)
    held: list[Lease] = []
    try:
        for lease_scope, name, busy in (
            (scope, DREAM_LEASE, "your memory is being updated from your conversations right now"),
            (session, CLEANUP_LEASE, "this conversation is being cleaned up or archived right now"),
        ):
            try:
                held.append(acquire_lease(kv=bundle.kv, scope=lease_scope, name=name, ttl=_LEASE_TTL,
                                          holder=default_holder()))
            except LeaseBusy:
                raise ArchiveBusy(f"Nothing was removed: {busy}. Try again in a minute.") from None
        dream, cleanup = held
        # Read again under the leases: this is what goes.
        conversation = archived_conversation(user=user, agent=agent, conversation_id=conversation_id)
        lines = _lines_from(user, node, conversation)
        proposals = _proposals_from(user, node, conversation)
        _keep_cursor(bundle, session=session, scope=scope, lease=cleanup)
        for document_id in conversation.documents:
            bundle.archive.delete(scope, document_id)
        removed_lines = _remove_lines(user, node, lines)
        withdrawn = _withdraw(bundle.kv, node, proposals)
        return Removal(conversation, removed_lines, withdrawn, node.memory_config.core_enabled)
    finally:
        for lease in reversed(held):
            release_lease(kv=bundle.kv, lease=lease)


def _keep_cursor(bundle, *, session: SessionScope, scope: Scope, lease: Lease) -> None:
    """A conversation still going on whose archive cursor predates cursors (its documents said
    how far it was archived) gets one now: with the documents gone, it would be archived again."""
    through, stored = archived_through(bundle, session=session, archive_scope=scope)
    if stored is None and through and bundle.messages.head(session).count:
        try:
            bundle.cursors.set(session, ARCHIVE_CURSOR, through, expected=None, fence=lease.fence)
        except ConcurrentChange:
            pass  # set meanwhile by the archiving itself: it is there


def _remove_lines(user, node: AgentNode, lines: Sequence[CoreLine]) -> tuple[CoreLine, ...]:
    """Delete ``lines`` as the user's own edit (each file in one write, compare-and-set; a file
    changed meanwhile is read again). Lines no longer there are left out of the result."""
    if not lines:
        return ()
    try:
        memory = user_memory.core_memory(user=user, agent=node)
    except CoreMemoryDisabled:
        return ()
    removed: list[CoreLine] = []
    for file in (USER, MEMORY):
        wanted = [line for line in lines if line.file == file]
        if not wanted:
            continue
        for _ in range(_ATTEMPTS):
            state = memory.read(file=file)
            texts = {line.text for line in wanted}
            kept = [line for line in state.text.splitlines() if line not in texts]
            gone = [line for line in wanted if line.text in state.text.splitlines()]
            if not gone:
                break
            text = "\n".join(kept).strip("\n")
            try:
                memory.rewrite(file=file, text=text + "\n" if text else "",
                               source=user_memory.writer(user=user, file=file),
                               expected_version=state.version, action="forget conversation")
            except CoreMemoryConflict:
                continue
            removed.extend(gone)
            break
        else:
            raise ArchiveBusy(f"{file} kept changing while the lines were removed; the archived messages are "
                              "removed: open the memory page to delete the lines that remain.")
    return tuple(removed)


def _withdraw(kv, node: AgentNode, proposals: Sequence[core_proposals.Proposal]) -> int:
    withdrawn = 0
    for proposal in proposals:
        try:
            if kv.delete(AgentScope(node.name), proposal.key, expected_version=proposal.version):
                withdrawn += 1
        except VersionConflict:
            continue  # decided by staff meanwhile: their decision stands
    return withdrawn
