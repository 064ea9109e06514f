"""The user's archive pages (login required; each user sees their own archive only, staff too).

* ``GET /memory/<agent>/archive/``: the archived conversations, most recent first; with
  ``?q=`` the archived messages that match, best first;
* ``GET /memory/<agent>/archive/<conversation>/``: one archived conversation, every message
  (``?q=`` marks the words searched for);
* ``GET /memory/<agent>/archive/<conversation>/forget/``: what removing it from memory takes out;
  ``POST``: remove it (``agents.personal.archive.forget_conversation``).

Views parse the request, call one service (``agents.personal.archive``), render.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from agents.personal import archive
from agents.personal import memory as user_memory

PER_PAGE = 30


def _agent_or_404(agent: str):
    try:
        return user_memory.main_agent(agent)
    except user_memory.AgentNotFound:
        raise Http404("No such agent.") from None


def _query(request: HttpRequest) -> str:
    return " ".join(request.GET.get("q", "").split())[: archive.MAX_QUERY_CHARS]


@login_required
@require_GET
def archive_index(request: HttpRequest, agent: str) -> HttpResponse:
    node = _agent_or_404(agent)
    query = _query(request)
    context = {"agent": node, "archive_on": node.memory_config.archive_enabled, "q": query}
    if query:
        context["hits"] = archive.search(user=request.user, agent=agent, query=query)
    else:
        conversations = archive.archived_conversations(user=request.user, agent=agent)
        context["page"] = Paginator(conversations, PER_PAGE).get_page(request.GET.get("page"))
        context["total"] = len(conversations)
    return render(request, "memory/archive.html", context)


def _conversation_or_404(request: HttpRequest, agent: str, conversation_id: str) -> archive.ArchivedConversation:
    _agent_or_404(agent)
    try:
        return archive.archived_conversation(user=request.user, agent=agent, conversation_id=conversation_id)
    except archive.ConversationNotArchived:
        raise Http404("No such archived conversation.") from None


@login_required
@require_GET
def archive_conversation(request: HttpRequest, agent: str, conversation_id: str) -> HttpResponse:
    found = _conversation_or_404(request, agent, conversation_id)
    query = _query(request)
    views = archive.conversation_messages(user=request.user, agent=agent, conversation_id=conversation_id, query=query)
    return render(request, "memory/archive_conversation.html",
                  {"agent": _agent_or_404(agent), "conversation": found, "transcript": views, "q": query})


@login_required
@require_http_methods(["GET", "POST"])
def archive_forget(request: HttpRequest, agent: str, conversation_id: str) -> HttpResponse:
    """GET: what will be removed, and the confirmation form. POST: remove it, back to the list
    (a busy Dream Engine or cleanup: nothing removed, back to this page with the reason)."""
    found = _conversation_or_404(request, agent, conversation_id)
    if request.method == "GET":
        plan = archive.removal_plan(user=request.user, agent=agent, conversation_id=conversation_id)
        return render(request, "memory/archive_forget.html", {"agent": _agent_or_404(agent), "plan": plan})
    try:
        done = archive.forget_conversation(user=request.user, agent=agent, conversation_id=conversation_id)
    except archive.ArchiveBusy as exc:
        messages.error(request, str(exc))
        return redirect("memory:archive_forget", agent, conversation_id)
    except archive.ConversationNotArchived:
        raise Http404("No such archived conversation.") from None
    messages.success(request, _done_message(found, done))
    return redirect(reverse("memory:archive", args=[agent]))


def _done_message(found: archive.ArchivedConversation, done: archive.Removal) -> str:
    parts = [f"{done.conversation.messages} archived message{'s' if done.conversation.messages != 1 else ''}"]
    if done.lines:
        parts.append(f"{len(done.lines)} line{'s' if len(done.lines) != 1 else ''} of your memory files")
    if done.proposals:
        parts.append(f"{done.proposals} proposed change{'s' if done.proposals != 1 else ''} waiting for staff")
    return f"Removed “{found.title}” from memory: {', '.join(parts)}."
