"""The agents app's JSON router: conversations and their messages and pruned catalog, core
memory, experiences, and the scope tree. Mounted at ``/api/`` by modex_web/api.py.

Authentication is the API's (session with CSRF, or a personal API token). Everything is the
caller's own: another user's conversation is 404, exactly like one that does not exist.
Status codes: 400 bad parameters, 403 not allowed (SOUL.md, scope tree writes for non-staff),
404 unknown or not yours, 409 changed meanwhile / layer off, 422 invalid input or over a cap.
"""

from __future__ import annotations

from django.conf import settings
from ninja import Query, Router, Status
from ninja.errors import HttpError

from agents.chat import service as chat

from agents.editor import tree as scope_tree

from agents.personal import memory as user_memory
from agents.api_schemas import (
    AgentOut,
    CatalogOut,
    ChangeOut,
    ConversationDetailOut,
    ConversationOut,
    CoreFileIn,
    CoreFileOut,
    CoreOut,
    Error,
    ExperienceOut,
    MessagesOut,
    ScopeTreeOut,
    ScopeUpdateIn,
    ScopeUpdateOut,
    message_out,
)
from agents.models import Conversation
from agents.runtime.services import get_services
from memory.compression.pruned_format import PrunedCatalogError
from memory.core_memory import CoreFileState, CoreMemoryConflict, CoreMemoryDisabled, CoreMemoryFull, UnknownCoreFile
from memory.inspection_catalog import table_of_contents
from memory.scopes import SessionScope

router = Router()
ERRORS = {400: Error, 403: Error, 404: Error, 409: Error, 422: Error}
_SAVE_STATUS = {"saved": 200, "unchanged": 200, "invalid": 422, "conflict": 409, "broken": 409, "failed": 503}


def _conversation(request, conversation_id: str) -> Conversation:
    try:
        return chat.get_conversation(user=request.auth, conversation_id=conversation_id)
    except chat.ConversationNotFound:
        raise HttpError(404, "No such conversation.") from None


def _conversation_out(conversation: Conversation) -> dict:
    return {"id": conversation.pk, "title": conversation.title, "agent": conversation.agent,
            "created_at": conversation.created_at, "updated_at": conversation.updated_at}


def _session_out(session: SessionScope) -> dict:
    services = get_services()
    head = services.bundle.messages.head(session)
    return {"version": head.version, "last_seq": head.last_seq, "count": head.count, "tokens": head.tokens,
            "catalogued": services.catalog.count(session)}


def _file_out(state: CoreFileState, *, editable: bool) -> dict:
    return {"file": state.file, "scope": state.scope.key(), "text": state.text, "version": state.version,
            "tokens": state.tokens, "cap": state.cap, "updated_at": state.updated_at, "editable": editable}


# -- conversations ----------------------------------------------------------------------------


@router.get("/conversations", response=list[ConversationOut], tags=["conversations"], summary="Your conversations")
def list_conversations(request, limit: int = Query(50, ge=1, le=200), offset: int = Query(0, ge=0, le=10**6)):
    mine = Conversation.objects.filter(owner=request.auth).order_by("-updated_at")
    return [_conversation_out(c) for c in mine[offset : offset + limit]]


@router.get("/conversations/{conversation_id}", response={200: ConversationDetailOut, **ERRORS},
            tags=["conversations"], summary="One conversation and its session's state")
def get_conversation(request, conversation_id: str):
    conversation = _conversation(request, conversation_id)
    return {**_conversation_out(conversation), "session": _session_out(SessionScope(conversation.session_id))}


@router.get("/conversations/{conversation_id}/messages", response={200: MessagesOut, **ERRORS},
            tags=["conversations"], summary="The session's live messages (a window by seq)")
def conversation_messages(
    request,
    conversation_id: str,
    after_seq: int | None = Query(None, ge=0, le=2**53, description="Only messages with a higher seq"),
    last: int = Query(100, ge=0, le=1000, description="At most this many, the newest of the window"),
):
    conversation = _conversation(request, conversation_id)
    session = SessionScope(conversation.session_id)
    messages = get_services().bundle.messages.read(session, after_seq=after_seq, last=last)
    return {"conversation": conversation.pk, "messages": [message_out(m) for m in messages],
            "session": _session_out(session)}


@router.get("/conversations/{conversation_id}/pruned", response={200: CatalogOut, **ERRORS},
            tags=["conversations"], summary="The pruned catalog: table of contents and the removed messages")
def conversation_pruned(
    request,
    conversation_id: str,
    offset: int = Query(0, ge=0, le=10**7),
    limit: int = Query(100, ge=1, le=500),
):
    conversation = _conversation(request, conversation_id)
    session = SessionScope(conversation.session_id)
    catalog = get_services().catalog
    try:
        entries = catalog.entries(session)
        toc = table_of_contents(catalog, session)
    except PrunedCatalogError as exc:
        raise HttpError(503, f"The pruned catalog cannot be read: {exc}") from None
    return {
        "conversation": conversation.pk, "total": len(entries),
        "toc": [{"file": t.label, "line": t.line, "seq": t.seq, "heading": t.heading} for t in toc],
        "entries": [message_out(e.message) for e in entries[offset : offset + limit]],
    }


# -- core memory and experiences --------------------------------------------------------------


def _agent(agent: str):
    try:
        return user_memory.main_agent(agent)
    except user_memory.InternalAgent as exc:
        raise HttpError(404, str(exc)) from None
    except user_memory.AgentNotFound:
        raise HttpError(404, "No such agent.") from None


@router.get("/agents", response=list[AgentOut], tags=["memory"], summary="The main agents and their memory layers")
def list_agents(request):
    return [
        {"name": a.name, "description": a.description, "archive_enabled": a.memory_config.archive_enabled,
         "core_enabled": a.memory_config.core_enabled, "experience_enabled": a.memory_config.experience_enabled}
        for a in user_memory.main_agents()
    ]


@router.get("/agents/{agent}/core", response={200: CoreOut, **ERRORS}, tags=["memory"],
            summary="Your core memory files with this agent")
def read_core(request, agent: str):
    memory = user_memory.agent_memory(user=request.auth, agent=_agent(agent).name)
    return {
        "agent": memory.agent.name, "enabled": memory.core_enabled,
        "how_to_enable": None if memory.core_enabled else memory.how_to_enable,
        "files": [_file_out(f.state, editable=f.editable) for f in memory.files],
    }


def _core_call(fn):
    try:
        return fn()
    except user_memory.InternalAgent as exc:
        raise HttpError(404, str(exc)) from None
    except user_memory.AgentNotFound:
        raise HttpError(404, "No such agent.") from None
    except UnknownCoreFile:
        raise HttpError(404, "No such core memory file: use SOUL.md, USER.md or MEMORY.md.") from None
    except CoreMemoryDisabled:
        raise HttpError(409, user_memory.HOW_TO_ENABLE) from None
    except user_memory.ReadOnlyFile as exc:
        raise HttpError(403, str(exc)) from None
    except CoreMemoryConflict as exc:
        raise HttpError(409, str(exc)) from None
    except CoreMemoryFull as exc:
        raise HttpError(422, str(exc)) from None


@router.get("/agents/{agent}/core/{file}", response={200: CoreFileOut, **ERRORS}, tags=["memory"],
            summary="One core memory file")
def read_core_file(request, agent: str, file: str):
    view = _core_call(lambda: user_memory.read_core_file(user=request.auth, agent=agent, file=file))
    return _file_out(view.state, editable=view.editable)


@router.put("/agents/{agent}/core/{file}", response={200: CoreFileOut, **ERRORS}, tags=["memory"],
            summary="Replace a core memory file (compare-and-set on expected_version)")
def write_core_file(request, agent: str, file: str, payload: CoreFileIn):
    state = _core_call(lambda: user_memory.update_core_file(
        user=request.auth, agent=agent, file=file, text=payload.text, expected_version=payload.expected_version
    ))
    return _file_out(state, editable=True)


@router.get("/agents/{agent}/core/{file}/history", response={200: list[ChangeOut], **ERRORS}, tags=["memory"],
            summary="Who changed a core memory file, newest first")
def core_file_history(request, agent: str, file: str):
    view = _core_call(lambda: user_memory.read_core_file(user=request.auth, agent=agent, file=file))
    return [{"version": h.change.version, "at": h.change.at,
             "source": user_memory.shown_source(h.change.source, viewer=request.auth), "who": h.who,
             "action": h.change.action, "tokens": h.change.tokens, "detail": h.change.detail} for h in view.history]


@router.get("/agents/{agent}/experiences", response={200: list[ExperienceOut], **ERRORS}, tags=["memory"],
            summary="Your experiences (lessons) of this agent, made from your runs")
def list_experiences(request, agent: str):
    return [
        {"slug": e.slug, "name": e.name, "description": e.description, "body": e.body,
         "updated_at": e.updated_at, "version": e.version}
        for e in user_memory.experiences(user=request.auth, agent=_agent(agent))
    ]


# -- the scope tree ---------------------------------------------------------------------------


@router.get("/scopes", response=ScopeTreeOut, tags=["scopes"], summary="The declaration's agent tree and memory switches")
def read_scopes(request):
    tree = scope_tree.read_tree(path=settings.MODEX_SCOPES_FILE)
    if not request.auth.is_staff:
        tree["file"] = None  # where the declaration lives on the server is for staff
    return tree


@router.put("/scopes", response={200: ScopeUpdateOut, 403: Error, 409: ScopeUpdateOut, 422: Error | ScopeUpdateOut,
                                  503: ScopeUpdateOut},
            tags=["scopes"], summary="Change memory switches (staff; refused if the file's sha256 changed)")
def update_scopes(request, payload: ScopeUpdateIn):
    if not request.auth.is_staff:
        raise HttpError(403, "Only staff can change the scope declaration.")
    updates = {name: scope_tree.TreeUpdate(**node.dict()) for name, node in payload.nodes.items()}
    try:
        outcome = scope_tree.update_tree(path=settings.MODEX_SCOPES_FILE, sha256=payload.sha256, nodes=updates,
                                         actor=request.auth.get_username())
    except scope_tree.ScopeTreeError as exc:
        raise HttpError(422, str(exc)) from None
    body = {"status": outcome.status, "message": outcome.message,
            "diff": [f"{line.sign}{line.text}" for line in outcome.diff], "tree": scope_tree.tree(outcome.state)}
    return Status(_SAVE_STATUS.get(outcome.status, 200), body)
