from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from agents.editor import service as scope_editor


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The dashboard: each main agent with its memory layers, and the user's recent chats."""
    from agents.chat import service as chat
    from agents.runtime.model_status import capabilities_of, discover_once, memory_work, sizing_of

    services = chat.services()
    staff = request.user.is_staff
    discover_once(services.model)
    agents = chat.main_agents()
    gate = services.gate.limit(services.model) if services.gate is not None else None
    context = {
        "agents": [(agent, sizing_of(agent, services.model)) for agent in agents],
        "capabilities": None if services.offline else capabilities_of(services.model),
        "gate_limit": gate,
        "caps": services.caps,
        "work_text": memory_work(services).describe() if staff else "",
        "conversations": chat.list_conversations(user=request.user)[:8],
        "offline": services.offline,
        # Where the model is served and where the state lives are the operator's business:
        # staff see them, everyone else the model's name only.
        "model": services.model.describe() if staff else getattr(services.model, "name", "model"),
        "backend": services.bundle.backend,
        "workspace": settings.MODEX_WORKSPACE if staff else None,
    }
    return render(request, "home.html", context)


def staff_required(view):
    """Anonymous users go to the login page; signed-in non-staff users get 403."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not request.user.is_staff:
            raise PermissionDenied("This page is for staff users.")
        return view(request, *args, **kwargs)

    return wrapper


_OUTCOME_STATUS = {"invalid": 422, "conflict": 409, "broken": 409, "failed": 500}


@staff_required
@require_http_methods(["GET", "POST"])
def scope_editor_view(request: HttpRequest) -> HttpResponse:
    """The scope editor: GET shows the declaration tree; POST saves the memory switches."""
    path = settings.MODEX_SCOPES_FILE
    if request.method == "GET":
        state = scope_editor.load_editor(path=path)
        return render(request, "scopes/editor.html", {"state": state, "outcome": None})
    outcome = scope_editor.save_scope_edits(path=path, form=request.POST, actor=request.user.get_username())
    context = {"state": outcome.state, "outcome": outcome}
    if request.htmx:
        # htmx swaps only 2xx responses by default; the outcome banner carries the status.
        return render(request, "scopes/editor.html#editor", context)
    return render(request, "scopes/editor.html", context, status=_OUTCOME_STATUS.get(outcome.status, 200))
