"""Selectors and services behind the staff proposals page.

* ``pending_reviews()``: every main agent's pending SOUL.md proposals, each with the conversation
  it came from (who, which conversation, the messages around it: the live session for the agent's
  own edit, the archive document for the Dream Engine's), newest first.
* ``accept(...)`` / ``reject(...)``: a staff member's decision (source ``admin:<pk>``).
* ``dream_warnings()``: the Dream Engine's failures and warnings per agent and user (a model that
  does not answer the JSON asked for, edits that were all refused), so they are never silent.

Staff only: the page shows what users said. Views check ``is_staff`` before calling any of this.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model

from agents.declarations import AgentNode, get_declaration
from agents.runtime.services import get_services
from memory import core_proposals as proposals
from memory.core_memory import CoreFileState, CoreMemory, SOUL
from memory.dream import FailureRecord, default_archive_scope, read_last_run
from memory.dream.engine import FAILURE_KEY
from memory.messages import Message
from memory.scopes import Scope, SessionScope

CONTEXT_MESSAGES = 6


@dataclass(frozen=True, slots=True)
class Review:
    """One pending proposal as staff review it."""

    proposal: proposals.Proposal
    agent: str
    who: str  # the user whose conversation it came from
    conversation: str  # its title, when the conversation still exists
    session: str
    document_scope: str  # the archive scope key of the document (Dream Engine proposals)
    context: tuple[Message, ...]  # the messages around it
    current: str  # SOUL.md as it is now


@dataclass(frozen=True, slots=True)
class DreamWarning:
    agent: str
    user: str
    who: str
    failure: FailureRecord | None
    last_run: dict | None

    @property
    def warnings(self) -> list[str]:
        found = list((self.last_run or {}).get("warnings") or [])
        if self.failure is not None and self.failure.warning not in found:
            found.insert(0, self.failure.warning)
        return found


def _agents() -> list[AgentNode]:
    return [a for a in get_declaration().main_agents() if a.memory_config.core_enabled]


def _names(ids: set[str]) -> dict[str, str]:
    model = get_user_model()
    numeric = [int(i) for i in ids if i.isdigit()]
    return {str(pk): name for pk, name in model.objects.filter(pk__in=numeric).values_list("pk", model.USERNAME_FIELD)}


def _context(proposal: proposals.Proposal, *, archive: Scope) -> tuple[Message, ...]:
    bundle = get_services().bundle
    shown: list[Message] = []
    if proposal.document:
        document = bundle.archive.get(archive, proposal.document)
        shown = list(document.messages) if document else []
    elif proposal.session:
        try:
            session = SessionScope.parse(proposal.session)
        except ValueError:
            session = None
        if isinstance(session, SessionScope):
            shown = [m for m in bundle.messages.read(session, last=60) if m.created_at <= proposal.created_at]
    said = [m for m in shown if m.role in ("user", "assistant") and (m.content or "").strip()]
    return tuple(said[-CONTEXT_MESSAGES:])


def pending_reviews() -> list[Review]:
    """Every pending proposal of every main agent with core memory on, newest first."""
    from agents.models import Conversation

    kv = get_services().bundle.kv
    found = [(agent, p) for agent in _agents() for p in proposals.list_proposals(kv=kv, agent=agent.name,
                                                                                  status=proposals.PENDING)]
    names = _names({p.user for _, p in found})
    sessions = {p.session.partition(":")[2] for _, p in found if p.session.startswith("session:")}
    titles = dict(Conversation.objects.filter(pk__in=sessions).values_list("pk", "title"))
    reviews = []
    for agent, proposal in found:
        memory = CoreMemory(kv=kv, config=agent.memory_config, agent=agent.name, user=proposal.user or "0")
        archive = default_archive_scope(agent=agent.name, user=proposal.user or "0")
        reviews.append(Review(
            proposal=proposal, agent=agent.name, who=names.get(proposal.user, f"user {proposal.user}"),
            conversation=titles.get(proposal.session.partition(":")[2], ""), session=proposal.session,
            document_scope=archive.key() if proposal.document else "",
            context=_context(proposal, archive=archive), current=memory.read(file=SOUL).text,
        ))
    return sorted(reviews, key=lambda r: r.proposal.created_at, reverse=True)


def _find(agent: str, proposal_id: str) -> tuple[AgentNode, proposals.Proposal]:
    node = next((a for a in _agents() if a.name == agent), None)
    if node is None:
        raise proposals.ProposalNotFound(f"no agent {agent!r} with core memory on")
    return node, proposals.get_proposal(kv=get_services().bundle.kv, agent=agent, proposal_id=proposal_id)


def accept(*, staff, agent: str, proposal_id: str) -> CoreFileState:
    """Apply the proposal to SOUL.md as ``staff`` (raises ProposalNotFound, ProposalDecided, and
    CoreMemoryError when it no longer applies)."""
    node, proposal = _find(agent, proposal_id)
    services = get_services()
    memory = CoreMemory(kv=services.bundle.kv, config=node.memory_config, agent=node.name,
                        user=proposal.user or "0", hooks=services.hooks)
    return memory.accept(proposal=proposal, source=f"admin:{staff.pk}")


def reject(*, staff, agent: str, proposal_id: str, at: datetime) -> proposals.Proposal:
    """Turn the proposal down as ``staff``: it stays out of SOUL.md and is not proposed again."""
    _, proposal = _find(agent, proposal_id)
    return proposals.reject(kv=get_services().bundle.kv, proposal=proposal, by=f"admin:{staff.pk}", at=at)


def dream_warnings() -> list[DreamWarning]:
    """Each agent and user whose consolidation failed or warned in its last run."""
    bundle = get_services().bundle
    users = [str(pk) for pk in get_user_model().objects.order_by("pk").values_list("pk", flat=True)]
    names = _names(set(users))
    out = []
    for agent in _agents():
        if not agent.memory_config.archive_enabled:
            continue
        for user in users:
            scope = default_archive_scope(agent=agent.name, user=user)
            raw = bundle.kv.get_value(scope, FAILURE_KEY)
            failure = FailureRecord.from_json(raw) if raw else None
            last = read_last_run(bundle, scope)
            item = DreamWarning(agent.name, user, names.get(user, user), failure, last)
            if item.warnings:
                out.append(item)
    return out


__all__ = ["DreamWarning", "Review", "accept", "dream_warnings", "pending_reviews", "reject"]
