"""Chat pages: the conversation list, one conversation, rename, delete, its pruned catalog, and
its earlier messages in pages (the "load earlier" control's htmx request).

Every view needs a signed-in user and works on that user's conversations only: another user's
conversation id is a 404, the same as an unknown one. Forms carry CSRF tokens; writes are POST.
"""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.chat import service as chat
from agents.chat.compaction import CompactOutcome, compact_now
from agents.chat.sections import SECTION_KEYS
from agents.chat.fragments import EarlierNotFound, earlier_page, page_context
from memory.highlight import MAX_QUERY_CHARS, contains_all, excerpt, query_words
from memory.inspection_catalog import entry_text
from agents.runtime.model_status import capabilities_of, discover_once, memory_work, sizing_of


_VIEWABLE = frozenset(key for key, _label in SECTION_KEYS)


def _model_facts() -> tuple[bool, str]:
    svc = chat.services()
    return svc.offline, getattr(svc.model, "name", "model")


def _sidebar(request: HttpRequest, active_id: str | None = None) -> dict:
    return {
        "conversations": chat.list_conversations(user=request.user),
        "agents": chat.main_agents(),
        "active_id": active_id,
    }


def owned(view):
    """Resolve ``conversation_id`` to the user's conversation (else 404) as ``conversation``."""

    @wraps(view)
    def wrapper(request: HttpRequest, conversation_id: str, *args, **kwargs) -> HttpResponse:
        try:
            conversation = chat.get_conversation(user=request.user, conversation_id=conversation_id)
        except chat.ConversationNotFound:
            raise Http404("No such conversation.") from None
        return view(request, conversation, *args, **kwargs)

    return login_required(wrapper)


@login_required
@require_GET
def conversation_list(request: HttpRequest) -> HttpResponse:
    """The conversation list, and the main agents to start a conversation with."""
    offline, model_name = _model_facts()
    context = {**_sidebar(request), "offline": offline, "model_name": model_name}
    return render(request, "chat/index.html", context)


@login_required
@require_POST
def conversation_create(request: HttpRequest) -> HttpResponse:
    try:
        conversation = chat.create_conversation(user=request.user, agent=request.POST.get("agent", ""), reuse_empty=True)
    except chat.ChatError as exc:
        messages.error(request, str(exc))
        return redirect("chat:list")
    return redirect("chat:conversation", conversation.pk)


@owned
@require_GET
def conversation_detail(request: HttpRequest, conversation) -> HttpResponse:
    """The chat page: history re-rendered from the session, meter, composer on the socket.
    The model server is asked once for its window, so header and meter show the real one."""
    svc = chat.services()
    discover_once(svc.model)
    offline, model_name = _model_facts()
    try:
        agent, agent_error = chat.resolve_agent(conversation.agent), None
    except chat.AgentUnavailable as exc:
        agent, agent_error = None, str(exc)
    context = page_context(conversation=conversation, agent=agent, offline=offline, model_name=model_name)
    context.update(_sidebar(request, conversation.pk))
    context.update(agent_error=agent_error, ws_url=f"/ws/chat/{conversation.pk}/")
    context.update(
        sizing=sizing_of(agent, svc.model) if agent is not None else None,
        capabilities=capabilities_of(svc.model),
        work_text=memory_work(svc).describe(),
    )
    return render(request, "chat/conversation.html", context)


@owned
@require_POST
def conversation_rename(request: HttpRequest, conversation) -> HttpResponse:
    try:
        chat.rename_conversation(user=request.user, conversation_id=conversation.pk, title=request.POST.get("title", ""))
    except chat.InvalidTitle as exc:
        messages.error(request, str(exc))
    return redirect("chat:conversation", conversation.pk)


@owned
@require_http_methods(["GET", "POST"])
def conversation_delete(request: HttpRequest, conversation) -> HttpResponse:
    """GET: what will be deleted, and a confirmation form. POST: delete, back to the list."""
    if request.method == "GET":
        svc = chat.services()
        session = chat.session_of(conversation)
        context = {
            **_sidebar(request, conversation.pk),
            "conversation": conversation,
            "message_count": svc.bundle.messages.head(session).count,
            "catalogued": svc.catalog.count(session),
        }
        return render(request, "chat/confirm_delete.html", context)
    try:
        chat.delete_conversation(user=request.user, conversation_id=conversation.pk)
    except chat.ConversationBusy as exc:
        messages.error(request, str(exc))
        return redirect("chat:conversation", conversation.pk)
    messages.success(request, f"Deleted “{conversation.title}” and its session memory.")
    return redirect("chat:list")


@owned
@require_POST
def conversation_compact(request: HttpRequest, conversation) -> HttpResponse:
    """"Compact now": one cleanup of this conversation, whatever its size; back to the page the
    form was on (the conversation, or its pruned catalog) with what happened."""
    try:
        outcome = compact_now(user=request.user, conversation_id=conversation.pk)
    except chat.AgentUnavailable as exc:
        outcome = CompactOutcome(False, str(exc))
    (messages.success if outcome.done else messages.error)(request, outcome.message)
    target = "chat:pruned" if request.POST.get("back") == "pruned" else "chat:conversation"
    return redirect(target, conversation.pk)


@owned
@require_GET
def conversation_pruned(request: HttpRequest, conversation) -> HttpResponse:
    """The conversation's pruned catalog: a table of contents (as ``grep "^## \\["``), then
    every block, escaped. ``?q=``: the blocks holding every word searched for (the start of a
    word is enough), each with an excerpt, matches marked."""
    blocks = chat.pruned_blocks(conversation=conversation)
    query = " ".join(request.GET.get("q", "").split())[:MAX_QUERY_CHARS]
    words = query_words(query)
    hits = [
        (block, excerpt(entry_text(block.entry), words, limit=320))
        for block in blocks if contains_all(entry_text(block.entry), words)
    ]
    context = {
        **_sidebar(request, conversation.pk),
        "conversation": conversation,
        "blocks": blocks,
        "files": sorted({block.entry.path.name for block in blocks}),
        "q": query,
        "searched": bool(words),
        "hits": hits,
    }
    return render(request, "chat/pruned.html", context)


@owned
@require_GET
def conversation_earlier(request: HttpRequest, conversation) -> HttpResponse:
    """The messages before ``?before=<message id>``, one page, as HTML for the "load earlier"
    control to put in its place (the next control first, if more come before them)."""
    try:
        html = earlier_page(conversation=conversation, before=request.GET.get("before", ""))
    except EarlierNotFound:
        raise Http404("No such message in this conversation.") from None
    return HttpResponse(html)


@owned
@require_GET
def conversation_context(request: HttpRequest, conversation) -> HttpResponse:
    """What the latest model step was sent, by section (agents.chat.context_view). ``?section=``
    picks one; an htmx request gets that section alone (the meter's viewer), a plain one the
    whole request on a page of its own with that section open. Owner only, like every view
    here: staff included, another user's conversation is a 404."""
    key = request.GET.get("section", "")
    if key and key not in _VIEWABLE:
        raise Http404("No such section.")
    snapshot = chat.context_snapshot(conversation=conversation)
    section = snapshot.section(key) if snapshot is not None and key else None
    context = {"conversation": conversation, "snapshot": snapshot, "section": section, "key": key}
    if request.htmx:
        return render(request, "chat/fragments.html#context_section", {**context, "dialog": True})
    context.update(_sidebar(request, conversation.pk))
    return render(request, "chat/context.html", context)
