"""The memory page's item-by-item actions (login required; each user's own files only).

* ``POST /memory/<agent>/files/<file>/items/<index>/edit/``: one line rewritten (``line``: the line
  as the page showed it; ``text``: the new one; ``expected_version``);
* ``POST /memory/<agent>/files/<file>/items/<index>/delete/``: one line removed;
* ``POST /memory/<agent>/files/<file>/restore/<version>/``: a kept version made current again;
* ``POST /memory/<agent>/forget/``: USER.md and MEMORY.md emptied, with ``confirm=forget``.

Each parses the form, calls one service (``agents.personal.memory``), and redirects back to the
page saying what happened; a change made meanwhile (another tab, the agent, the Dream Engine) is
refused, nothing is written, and the page shows the current text.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agents.personal import memory as user_memory
from memory.core_memory import (
    CORE_FILES,
    CoreMemoryConflict,
    CoreMemoryDisabled,
    CoreMemoryEditError,
    CoreMemoryFull,
    UnknownCoreFile,
)


class ItemForm(forms.Form):
    line = forms.CharField(strip=False, max_length=20_000)
    text = forms.CharField(required=False, max_length=2_000)
    expected_version = forms.IntegerField(min_value=0, max_value=2**62)


class VersionForm(forms.Form):
    expected_version = forms.IntegerField(min_value=0, max_value=2**62)


def _back(agent: str, file: str | None = None) -> str:
    return reverse("memory:agent", args=[agent]) + (f"#file-{file}" if file else "")


def _checked(agent: str, file: str | None) -> None:
    try:
        user_memory.main_agent(agent)
    except user_memory.AgentNotFound:
        raise Http404("No such agent.") from None
    if file is not None and file not in CORE_FILES:
        raise Http404("No such file.")


def _run(request: HttpRequest, agent: str, file: str | None, action, done: str) -> HttpResponse:
    """Call ``action``; redirect back with ``done`` or the error (and its status for scripts)."""
    try:
        action()
    except CoreMemoryConflict:
        messages.error(request, f"{file or 'Your memory'} changed since you opened this page (the agent or another "
                                "tab wrote to it); nothing was written. Here is the current text: try again.")
    except (CoreMemoryEditError, CoreMemoryFull, user_memory.NotConfirmed, user_memory.ReadOnlyFile) as exc:
        messages.error(request, str(exc))
    except CoreMemoryDisabled:
        messages.error(request, user_memory.how_to_enable(user=request.user))
    except UnknownCoreFile:
        raise Http404("No such file.") from None
    else:
        messages.success(request, done)
    return redirect(_back(agent, file))


@login_required
@require_POST
def edit_item(request: HttpRequest, agent: str, file: str, index: int) -> HttpResponse:
    _checked(agent, file)
    form = ItemForm(request.POST)
    if not form.is_valid():
        return HttpResponse("The form is incomplete: reload the page and try again.", status=400)
    data = form.cleaned_data
    return _run(request, agent, file, lambda: user_memory.edit_item(
        user=request.user, agent=agent, file=file, index=index, line=data["line"], text=data["text"],
        expected_version=data["expected_version"]), f"Changed one line of {file}.")


@login_required
@require_POST
def delete_item(request: HttpRequest, agent: str, file: str, index: int) -> HttpResponse:
    _checked(agent, file)
    form = ItemForm(request.POST)
    if not form.is_valid():
        return HttpResponse("The form is incomplete: reload the page and try again.", status=400)
    data = form.cleaned_data
    return _run(request, agent, file, lambda: user_memory.delete_item(
        user=request.user, agent=agent, file=file, index=index, line=data["line"],
        expected_version=data["expected_version"]), f"Deleted “{data['line'].strip(' -*+')}” from {file}.")


@login_required
@require_POST
def restore_version(request: HttpRequest, agent: str, file: str, version: int) -> HttpResponse:
    _checked(agent, file)
    form = VersionForm(request.POST)
    if not form.is_valid():
        return HttpResponse("The form is incomplete: reload the page and try again.", status=400)
    return _run(request, agent, file, lambda: user_memory.restore_version(
        user=request.user, agent=agent, file=file, version=version,
        expected_version=form.cleaned_data["expected_version"]), f"Restored version {version} of {file}.")


@login_required
@require_POST
def forget_everything(request: HttpRequest, agent: str) -> HttpResponse:
    _checked(agent, None)
    confirm = request.POST.get("confirm", "")
    return _run(request, agent, None, lambda: user_memory.forget_everything(
        user=request.user, agent=agent, confirm=confirm),
        "Forgotten: USER.md and MEMORY.md are empty, and what you said before stays out of them.")
