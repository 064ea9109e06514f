"""Proposals: changes to a shared core memory file (SOUL.md) that staff accept or reject.

SOUL.md is read by every user of an agent, so neither the agent talking to one user nor the
Dream Engine consolidating one user's archive may write it (``memory.core_memory``): what they
would have written is recorded here, with where it came from, and nothing reaches anyone's
context until a staff member accepts it.

Each proposal is the KV item ``proposal.<id>`` in the agent's scope (``AgentScope(agent)``, where
SOUL.md lives), holding JSON: the file, the action (``append``, ``replace``, ``remove``), the text,
the text to replace, who proposed it (``agent`` or ``dream``), the user whose conversation it came
from, that conversation (its session scope key), archive document and message (``seq``, when
known), an excerpt of what was said, the file's version when it was proposed, and its status
(``pending``, then ``accepted`` or ``rejected`` with who decided and when). Writes are
compare-and-set on the proposal's version, so two staff members never both decide one proposal.

Limits keep one user from flooding staff: at most ``MAX_PENDING_PER_USER`` pending proposals per
user and agent, ``MAX_PENDING`` per agent (``ProposalLimit``); a proposal identical to a pending or
rejected one is not recorded again (a rejected change stays rejected). Decided proposals beyond
the newest ``KEEP_DECIDED`` are deleted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from memory.core_lines import clean_text, normalize_line
from memory.scopes import AgentScope, validate_id
from memory.stores.base import MUST_NOT_EXIST, KVItem, KVStore, KVWrite, VersionConflict

KEY_PREFIX = "proposal."
ACTIONS = ("append", "replace", "remove")
PENDING, ACCEPTED, REJECTED = "pending", "accepted", "rejected"
MAX_PENDING = 200
MAX_PENDING_PER_USER = 20
KEEP_DECIDED = 100
MAX_TEXT = 2000
MAX_EVIDENCE = 1200


class ProposalError(Exception):
    """Base of the proposal errors; the message says what to do."""


class ProposalNotFound(ProposalError):
    """No proposal by that id for that agent."""


class ProposalDecided(ProposalError):
    """The proposal was accepted or rejected already (perhaps by someone else meanwhile)."""


class ProposalLimit(ProposalError):
    """Too many proposals are waiting for staff; nothing was recorded."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """One proposed change to a shared file (see the module docstring). ``version`` is the KV
    item's, for compare-and-set; ``key`` the KV key."""

    id: str
    agent: str
    file: str
    action: str
    text: str
    old: str
    source: str
    user: str
    session: str
    document: str
    evidence: str
    said_at: datetime | None
    created_at: datetime
    base_version: int
    status: str = PENDING
    decided_by: str = ""
    decided_at: datetime | None = None
    note: str = ""
    version: int = 0
    seq: int | None = None  # the message it rests on (its seq in ``session``), when known

    @property
    def key(self) -> str:
        return KEY_PREFIX + self.id

    @property
    def pending(self) -> bool:
        return self.status == PENDING

    def same_change(self, other: Proposal) -> bool:
        return (self.file, self.action, normalize_line(self.old), normalize_line(self.text)) == (
            other.file, other.action, normalize_line(other.old), normalize_line(other.text))

    def describe(self) -> str:
        if self.action == "append":
            return f"add “{self.text}”"
        if self.action == "remove":
            return f"remove “{self.old}”"
        return f"replace “{self.old}” with “{self.text}”"

    def to_json(self) -> str:
        data = {
            "id": self.id, "agent": self.agent, "file": self.file, "action": self.action, "text": self.text,
            "old": self.old, "source": self.source, "user": self.user, "session": self.session,
            "document": self.document, "evidence": self.evidence,
            "said_at": self.said_at.isoformat() if self.said_at else None,
            "created_at": self.created_at.isoformat(), "base_version": self.base_version, "status": self.status,
            "decided_by": self.decided_by, "decided_at": self.decided_at.isoformat() if self.decided_at else None,
            "note": self.note,
        }
        if self.seq is not None:
            data["seq"] = self.seq
        return json.dumps(data, ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_item(cls, item: KVItem) -> Proposal | None:
        """The proposal in a KV item; None for a damaged one (listed by nobody, harmless)."""
        try:
            data = json.loads(item.value)

            def when(name: str) -> datetime | None:
                return datetime.fromisoformat(data[name]) if data.get(name) else None

            return cls(
                id=str(data["id"]), agent=str(data["agent"]), file=str(data["file"]), action=str(data["action"]),
                text=str(data.get("text") or ""), old=str(data.get("old") or ""), source=str(data["source"]),
                user=str(data.get("user") or ""), session=str(data.get("session") or ""),
                document=str(data.get("document") or ""), evidence=str(data.get("evidence") or ""),
                said_at=when("said_at"), created_at=datetime.fromisoformat(data["created_at"]),
                base_version=int(data.get("base_version") or 0), status=str(data.get("status") or PENDING),
                decided_by=str(data.get("decided_by") or ""), decided_at=when("decided_at"),
                note=str(data.get("note") or ""), version=item.version, seq=_seq(data.get("seq")),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _seq(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _clip(text: str, limit: int) -> str:
    text = " ".join((text or "").split()) if "\n" not in (text or "") else (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def list_proposals(*, kv: KVStore, agent: str, status: str | None = None) -> list[Proposal]:
    """The agent's proposals (``status`` filters), newest first."""
    scope = AgentScope(validate_id(agent, what="agent id"))
    found = [p for p in (Proposal.from_item(i) for i in kv.list(scope, prefix=KEY_PREFIX)) if p is not None]
    if status is not None:
        found = [p for p in found if p.status == status]
    return sorted(found, key=lambda p: p.created_at, reverse=True)


def get_proposal(*, kv: KVStore, agent: str, proposal_id: str) -> Proposal:
    """One proposal; raises ProposalNotFound (also for an id that is not a valid key)."""
    try:
        key = KEY_PREFIX + validate_id(proposal_id, what="proposal id")
        item = kv.get(AgentScope(validate_id(agent, what="agent id")), key)
    except ValueError:
        raise ProposalNotFound(f"no proposal {proposal_id!r}") from None
    proposal = Proposal.from_item(item) if item is not None else None
    if proposal is None:
        raise ProposalNotFound(f"no proposal {proposal_id!r} for agent {agent!r}")
    return proposal


def draft(
    *,
    agent: str,
    user: str,
    file: str,
    action: str,
    text: str,
    old: str,
    source: str,
    origin,
    base_version: int,
    now: datetime,
) -> Proposal:
    """A new pending proposal (not stored). Raises ValueError for an action it cannot be."""
    if action not in ACTIONS:
        raise ValueError(f"a proposal's action is one of {', '.join(ACTIONS)}, got {action!r}")
    text, old = clean_text(text or "").strip(), clean_text(old or "").strip()
    if action in ("append", "replace") and not text:
        raise ValueError(f"a proposal to {action} needs the text")
    if action in ("replace", "remove") and not old:
        raise ValueError(f"a proposal to {action} needs the text it changes")
    return Proposal(
        id=uuid.uuid4().hex[:16], agent=agent, file=file, action=action, text=_clip(text, MAX_TEXT),
        old=_clip(old, MAX_TEXT), source=source, user=user, session=origin.session, document=origin.document,
        evidence=_clip(clean_text(origin.evidence or ""), MAX_EVIDENCE), said_at=origin.said_at, created_at=now,
        base_version=base_version, seq=origin.seq,
    )


def staged_write(*, kv: KVStore, proposal: Proposal) -> tuple[Proposal, KVWrite | None]:
    """The write that records ``proposal``, or ``(the existing one, None)`` when an identical
    change is pending or was rejected. Raises ProposalLimit when too many are pending."""
    existing = list_proposals(kv=kv, agent=proposal.agent)
    same = next((p for p in existing if p.status in (PENDING, REJECTED) and p.same_change(proposal)), None)
    if same is not None:
        return same, None
    pending = [p for p in existing if p.pending]
    if len(pending) >= MAX_PENDING or sum(p.user == proposal.user for p in pending) >= MAX_PENDING_PER_USER:
        raise ProposalLimit(
            f"{len(pending)} proposals to {proposal.file} of {proposal.agent} are waiting for staff; "
            "nothing more is recorded until they are decided"
        )
    scope = AgentScope(proposal.agent)
    return proposal, KVWrite(scope, proposal.key, proposal.to_json(), expected_version=MUST_NOT_EXIST)


def propose(
    *,
    kv: KVStore,
    agent: str,
    user: str,
    file: str,
    action: str,
    text: str,
    old: str,
    source: str,
    origin,
    clock: Callable[[], datetime],
    base_version: int,
) -> Proposal:
    """Record a proposal now (see ``CoreMemory.propose``)."""
    proposal = draft(agent=agent, user=user, file=file, action=action, text=text, old=old, source=source,
                     origin=origin, base_version=base_version, now=clock())
    recorded, write = staged_write(kv=kv, proposal=proposal)
    if write is None:
        return recorded
    [item] = kv.commit([write])
    return replace(recorded, version=item.version)


def decided(proposal: Proposal, *, status: str, by: str, at: datetime, note: str = "") -> KVWrite:
    """The write that marks ``proposal`` decided (compare-and-set on the version it was read at)."""
    done = replace(proposal, status=status, decided_by=by, decided_at=at, note=note)
    return KVWrite(AgentScope(proposal.agent), proposal.key, done.to_json(), expected_version=proposal.version)


def reject(*, kv: KVStore, proposal: Proposal, by: str, at: datetime, note: str = "") -> Proposal:
    """Mark ``proposal`` rejected. Raises ProposalDecided if it is not pending any more."""
    if not proposal.pending:
        raise ProposalDecided(f"this proposal was {proposal.status} already")
    try:
        [item] = kv.commit([decided(proposal, status=REJECTED, by=by, at=at, note=note)])
    except VersionConflict:
        raise ProposalDecided("this proposal was decided by someone else meanwhile") from None
    prune_decided(kv=kv, agent=proposal.agent)
    return replace(proposal, status=REJECTED, decided_by=by, decided_at=at, note=note, version=item.version)


def prune_decided(*, kv: KVStore, agent: str) -> int:
    """Delete decided proposals beyond the newest ``KEEP_DECIDED``; returns how many."""
    done = [p for p in list_proposals(kv=kv, agent=agent) if not p.pending]
    done.sort(key=lambda p: p.decided_at or p.created_at, reverse=True)
    old = done[KEEP_DECIDED:]
    for proposal in old:
        kv.delete(AgentScope(agent), proposal.key)
    return len(old)


__all__ = [
    "ACCEPTED",
    "ACTIONS",
    "PENDING",
    "REJECTED",
    "Proposal",
    "ProposalDecided",
    "ProposalError",
    "ProposalLimit",
    "ProposalNotFound",
    "decided",
    "draft",
    "get_proposal",
    "list_proposals",
    "propose",
    "prune_decided",
    "reject",
    "staged_write",
]
