"""The staff proposals page (``/proposals/``): changes proposed to SOUL.md, with the conversation
each came from, accepted or rejected one by one; and the Dream Engine's warnings."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.proposals import service
from agents.views import staff_required
from memory.core_memory import CoreMemoryError
from memory.core_proposals import ProposalDecided, ProposalNotFound


@staff_required
@require_GET
def proposals_page(request: HttpRequest) -> HttpResponse:
    context = {"reviews": service.pending_reviews(), "warnings": service.dream_warnings()}
    response = render(request, "proposals/index.html", context)
    response["Cache-Control"] = "no-store"  # it quotes users' conversations
    return response


@staff_required
@require_POST
def decide(request: HttpRequest, agent: str, proposal_id: str) -> HttpResponse:
    decision = request.POST.get("decision")
    if decision not in ("accept", "reject"):
        return HttpResponse("Say accept or reject.", status=400)
    try:
        if decision == "accept":
            service.accept(staff=request.user, agent=agent, proposal_id=proposal_id)
            messages.success(request, "Accepted: SOUL.md changed for every user of the agent.")
        else:
            service.reject(staff=request.user, agent=agent, proposal_id=proposal_id, at=timezone.now())
            messages.success(request, "Rejected: SOUL.md is unchanged, and the same change will not be proposed again.")
    except ProposalNotFound:
        raise Http404("No such proposal.") from None
    except ProposalDecided as exc:
        messages.error(request, str(exc))
    except CoreMemoryError as exc:
        messages.error(request, f"Not accepted: {exc}")
    return redirect("proposals:index")
