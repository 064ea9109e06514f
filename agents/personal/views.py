"""The user's memory pages and API token settings (login required; everyone sees only their own).

* ``/memory/``: the main agents, and for each what its memory holds for you.
* ``/memory/<agent>/``: your core memory files (edit with compare-and-set: the form carries the
  version you saw), their change history, and the agent's experiences.
* ``/settings/tokens/``: personal API tokens; a new token is shown once.
* ``/settings/password/``: change your password; revokes your API tokens, signs your other
  browser sessions out and closes your chat sockets (agents/personal/revocation.py).

Views parse the form, call one service (``agents.personal.memory``, ``agents.personal.tokens``), render.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents.personal import tokens
from agents.personal.login_forms import ThrottledPasswordChangeForm

from agents.personal import memory as user_memory
from memory.core_memory import CORE_FILES, CoreMemoryConflict, CoreMemoryDisabled, CoreMemoryFull, UnknownCoreFile

FILE_ROLES = user_memory.FILE_ROLES


class CoreFileForm(forms.Form):
    text = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}))
    expected_version = forms.IntegerField(min_value=0, widget=forms.HiddenInput)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=tokens.MAX_NAME, label="Token name",
                           widget=forms.TextInput(attrs={"placeholder": "e.g. nightly export script"}))
    read_only = forms.BooleanField(required=False, label="Read only (GET requests only)")


def _agent_or_404(request: HttpRequest, agent: str) -> user_memory.AgentMemory:
    try:
        return user_memory.agent_memory(user=request.user, agent=agent)
    except user_memory.AgentNotFound:
        raise Http404("No such agent.") from None


def _cards(memory: user_memory.AgentMemory, *, bound: dict | None = None) -> list[dict]:
    """One card per core file: its view, its form (the bound one for the file just posted)."""
    bound = bound or {}
    cards = []
    for view in memory.files:
        posted = bound.get(view.file)
        form = posted["form"] if posted else CoreFileForm(
            initial={"text": view.state.text, "expected_version": view.state.version}, prefix=view.file
        )
        cards.append({"view": view, "form": form, "role": FILE_ROLES[view.file],
                      "conflict": posted.get("conflict") if posted else None})
    return cards


@login_required
@require_GET
def memory_index(request: HttpRequest) -> HttpResponse:
    agents = [user_memory.agent_memory(user=request.user, agent=a.name) for a in user_memory.main_agents()]
    return render(request, "memory/index.html", {"agents": agents})


@login_required
@require_GET
def agent_memory(request: HttpRequest, agent: str) -> HttpResponse:
    memory = _agent_or_404(request, agent)
    return render(request, "memory/agent.html", {"memory": memory, "cards": _cards(memory)})


@login_required
@require_POST
def edit_core_file(request: HttpRequest, agent: str, file: str) -> HttpResponse:
    """Save one core memory file. Conflict (changed meanwhile) → 409, over the cap → 422, and
    in both cases nothing is written and the posted text is shown again, so nothing is lost."""
    try:
        user_memory.main_agent(agent)
    except user_memory.AgentNotFound:
        raise Http404("No such agent.") from None
    if file not in CORE_FILES:
        raise Http404("No such file.")
    form = CoreFileForm(request.POST, prefix=file)
    status, conflict = 422, None
    if form.is_valid():
        try:
            user_memory.update_core_file(user=request.user, agent=agent, file=file, text=form.cleaned_data["text"],
                                         expected_version=form.cleaned_data["expected_version"])
        except CoreMemoryConflict as exc:
            status = 409
            conflict = user_memory.read_core_file(user=request.user, agent=agent, file=file)
            form = CoreFileForm({f"{file}-text": form.cleaned_data["text"],
                                 f"{file}-expected_version": conflict.state.version}, prefix=file)
            form.is_valid()
            form.add_error(None, f"{exc} Your text is kept below and the current text is shown beside it: merge "
                                 "them and save again (saving now replaces the current version).")
        except CoreMemoryFull as exc:
            form.add_error("text", str(exc))
        except user_memory.ReadOnlyFile as exc:
            status = 403
            form.add_error(None, str(exc))
        except CoreMemoryDisabled:
            status = 409
            form.add_error(None, user_memory.how_to_enable(user=request.user))
        except UnknownCoreFile:
            raise Http404("No such file.") from None
        else:
            messages.success(request, f"Saved {file}.")
            return redirect(reverse("memory:agent", args=[agent]) + f"#file-{file}")
    memory = _agent_or_404(request, agent)
    context = {"memory": memory, "cards": _cards(memory, bound={file: {"form": form, "conflict": conflict}})}
    return render(request, "memory/agent.html", context, status=status)


# -- API tokens -------------------------------------------------------------------------------


@login_required
def token_settings(request: HttpRequest) -> HttpResponse:
    """GET: the user's tokens. POST: create one, shown once on the response page."""
    created = None
    form = TokenForm()
    status = 200
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            try:
                token, created = tokens.create_token(
                    user=request.user, name=form.cleaned_data["name"], read_only=form.cleaned_data["read_only"]
                )
            except tokens.TokenError as exc:
                form.add_error("name", str(exc))
                status = 422
            else:
                form = TokenForm()
        else:
            status = 422
    elif request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    response = render(request, "memory/tokens.html",
                      {"form": form, "created": created, "tokens": tokens.list_tokens(user=request.user)}, status=status)
    if created:
        response["Cache-Control"] = "no-store"  # the token must not linger in any cache
    return response


@login_required
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = tokens.revoke_token(user=request.user, token_id=token_id)
    except tokens.TokenNotFound:
        raise Http404("No such token.") from None
    messages.success(request, f"Revoked “{token.name}”. Scripts using it get 401 from now on.")
    return redirect("memory:tokens")


# -- password ---------------------------------------------------------------------------------


@login_required
def password_change(request: HttpRequest) -> HttpResponse:
    """GET: the form. POST: check the current password (throttled like a sign-in), set the new
    one. Saving it revokes every API token and closes every chat socket of the user (the
    post_save handler of agents/personal/revocation.py); other browser sessions are signed out
    because their stored password digest no longer matches; this one is kept signed in."""
    if request.method not in ("GET", "POST"):
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    form = ThrottledPasswordChangeForm(request.user, request.POST or None, request=request)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            user = form.save()
            update_session_auth_hash(request, user)
            messages.success(request, "Your password was changed: your API tokens were revoked, your other "
                                      "sessions signed out and your open chats closed.")
            return redirect("memory:password")
        status = 422
    active = sum(t.active for t in tokens.list_tokens(user=request.user))
    return render(request, "memory/password.html", {"form": form, "active_tokens": active}, status=status)
