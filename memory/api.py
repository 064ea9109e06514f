"""The memory app's JSON router: the caller's archive, listed, read and searched.

Mounted at ``/api/memory/`` by modex_web/api.py. An agent's archive about a user lives in
``CompositeScope(AgentScope(agent), UserScope(user))`` (the runtime's archive scope); every
endpoint builds that scope from the authenticated caller, so nobody can name another user's
archive: a document id from someone else's scope is 404, like one that does not exist.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Query, Router, Schema
from ninja.errors import HttpError

from memory import inspection
from memory.dream import default_archive_scope
from memory.scopes import InvalidScopeId, Scope, validate_id
from memory.stores.base import ArchiveDocument, InvalidKey, StorageUnavailable

router = Router(tags=["archive"])


class Error(Schema):
    detail: str


class ArchiveScopeOut(Schema):
    agent: str
    scope: str
    documents: int


class ArchiveDocumentOut(Schema):
    id: str
    seq: int | None
    session: str
    title: str
    summary: str
    created_at: datetime
    message_count: int
    metadata: dict[str, Any]


class ArchiveMessageOut(Schema):
    id: str
    seq: int | None
    role: str
    kind: str
    content: str | None
    reasoning_content: str | None
    tool_calls: list[dict[str, str]]
    tool_call_id: str | None
    name: str | None
    created_at: datetime


class ArchiveDocumentDetailOut(ArchiveDocumentOut):
    messages: list[ArchiveMessageOut]


class ArchiveHitOut(Schema):
    score: float
    snippet: str
    document: ArchiveDocumentOut


ERRORS = {400: Error, 404: Error, 503: Error}


def _me(request) -> str:
    return str(request.auth.pk)


def _scope(request, agent: str) -> Scope:
    try:
        return default_archive_scope(agent=validate_id(agent, what="agent"), user=_me(request))
    except InvalidScopeId:
        raise HttpError(404, "No such agent.") from None


def _document_out(document: ArchiveDocument) -> dict:
    return {"id": document.id, "seq": document.seq, "session": document.session, "title": document.title,
            "summary": document.summary, "created_at": document.created_at,
            "message_count": len(document.messages), "metadata": dict(document.metadata)}


def _message_out(message) -> dict:
    return {"id": message.id, "seq": message.seq, "role": message.role, "kind": message.kind,
            "content": message.content, "reasoning_content": message.reasoning_content,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments_json} for c in message.tool_calls],
            "tool_call_id": message.tool_call_id, "name": message.name, "created_at": message.created_at}


def _stores():
    return inspection.source().bundle


def _guard(fn):
    try:
        return fn()
    except StorageUnavailable as exc:
        raise HttpError(503, f"The archive cannot be read right now: {exc}") from None


@router.get("/archives", response={200: list[ArchiveScopeOut], **ERRORS}, summary="The agents that archived history of yours")
def list_archives(request):
    me = _me(request)
    bundle = _stores()
    out = []
    for info in _guard(lambda: inspection.scopes(bundle, store="archive", kind="composite")):
        agent = info.part("agent")
        if agent and info.part("user") == me and info.scope == default_archive_scope(agent=agent, user=me):
            out.append({"agent": agent, "scope": info.key, "documents": len(bundle.archive.list(info.scope))})
    return out


@router.get("/archives/{agent}/documents", response={200: list[ArchiveDocumentOut], **ERRORS},
            summary="Your archive documents with one agent, by seq")
def list_documents(
    request,
    agent: str,
    after_seq: int | None = Query(None, ge=0, le=2**53),
    limit: int = Query(50, ge=1, le=500),
    newest_first: bool = False,
):
    scope = _scope(request, agent)
    documents = _guard(lambda: _stores().archive.list(scope, after_seq=after_seq, limit=limit, newest_first=newest_first))
    return [_document_out(d) for d in documents]


@router.get("/archives/{agent}/documents/{document_id}", response={200: ArchiveDocumentDetailOut, **ERRORS},
            summary="One archive document with its messages")
def get_document(request, agent: str, document_id: str):
    scope = _scope(request, agent)
    try:
        document = _guard(lambda: _stores().archive.get(scope, document_id))
    except InvalidKey:
        document = None
    if document is None:
        raise HttpError(404, "No such archive document.")
    return {**_document_out(document), "messages": [_message_out(m) for m in document.messages]}


@router.get("/archives/{agent}/search", response={200: list[ArchiveHitOut], **ERRORS},
            summary="Search your archive with one agent (plain words, most relevant first)")
def search_documents(request, agent: str, q: str = Query(..., max_length=500), limit: int = Query(10, ge=1, le=50)):
    scope = _scope(request, agent)
    hits = _guard(lambda: _stores().archive.search(scope, q, limit=limit))
    return [{"score": h.score, "snippet": h.snippet, "document": _document_out(h.document)} for h in hits]
