"""The recall benchmark's pipeline: read a history in, ask one question.

**Reading in** (``ingest``): for every history and configuration, into a fresh workspace
(``file`` backend). Each dataset turn is appended as one ``Message`` with the id
``Turn.message_id`` and ``created_at`` = its session's date plus a second per message. Before an
assistant turn is appended (where the runtime's BEFORE_STEP cleanup hook runs) the session is
cleaned up exactly as that hook does when it is over its threshold
(``agents.runtime.cleanup.compact``: the model summarizes, the archive is written when the
configuration has it); a cleanup that wrote an archive document is consolidated by the Dream
Engine when core memory is on (what the app's background task does after such a cleanup).

Mappings (``RunSetup.mapping``):

* ``per-session`` (default): each dataset session is its own conversation (Modex session) of
  that user with the agent; when it ends, ``conversation_ended`` runs. Each question is then
  asked in a new conversation of that user, as a user comes back weeks later to ask.
* ``single``: everything in one conversation; the question is its next turn.

Full context (``EvalConfig.cleanup`` False) keeps the whole history in one conversation, never
cleans up, and asks as its next turn, whatever the mapping.

**Asking** (``ask``): in a copy of the read-in workspace, through ``Runtime.run_turn``, so the
answer sees what the memory kept and nothing an earlier question left. The agent is told the
day it is asked. The row records the answer, its scores, the evidence recall
(``agents.evaluation.evidence``; core memory lines are traced by the line ledgers read just before
the turn) and what the turn cost.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.evaluation import evidence as ev
from agents.evaluation.configs import Budget, EvalConfig, MeteredModel, agent_for, instructions_for
from agents.evaluation.data import Dataset, History, Question, Session, safe_id
from agents.evaluation.scoring import score_answer
from agents.runtime.cleanup import compact
from agents.runtime.events import CleanupDone, ContextReady, ToolFinished, ToolStarted, TurnFailed, TurnFinished
from memory.compression.cleanup import CleanupStatus
from memory.messages import Message
from memory.scopes import SessionScope
from memory.text import storable
from memory.threads import run_blocking as _io
from memory.tokens import compute_message_tokens

REPLY_RESERVE = 1024  # tokens full context keeps free for instructions, tools and the answer
MAPPINGS = ("per-session", "single")


class EndpointFailed(Exception):
    """The model endpoint failed (unreachable, timing out, rate limited) after its retries. The
    run stops; every answer finished so far is kept and the next run resumes from there."""


def _check_endpoint(model: MeteredModel, doing: str) -> None:
    if model.outages:
        raise EndpointFailed(f"the model endpoint failed while {doing}: {model.outages[-1]}")


@dataclass
class RunSetup:
    """What one run compares: the dataset, the model, the configurations, the budget, the mapping."""

    dataset: Dataset
    model: Any  # ChatModel
    configs: tuple[EvalConfig, ...]
    budget: Budget = field(default_factory=Budget)
    offline: bool = True
    mapping: str = "per-session"

    def __post_init__(self) -> None:
        if self.mapping not in MAPPINGS:
            raise ValueError(f"unknown mapping {self.mapping!r}; choose {' or '.join(MAPPINGS)}")

    def describe(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset.describe(),
            "model": self.model.name,
            "offline": self.offline,
            "configs": [c.name for c in self.configs],
            "budget": asdict(self.budget),
            "mapping": self.mapping,
        }

    def key(self) -> str:
        """A short hash of ``describe()``: runs of the same setup share a run directory."""
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()[:8]

    def one_conversation(self, config: EvalConfig) -> bool:
        return not config.cleanup or self.mapping == "single"


def conversation_of(setup: RunSetup, config: EvalConfig, history: History, session: Session) -> SessionScope:
    """The Modex conversation a dataset session is read into."""
    if setup.one_conversation(config):
        return SessionScope(safe_id(f"{history.id}.all"))
    return SessionScope(safe_id(f"{history.id}.{session.id}"))


def question_conversation(setup: RunSetup, config: EvalConfig, history: History, question: Question) -> SessionScope:
    """Where ``question`` is asked: the one conversation's next turn, or a new conversation."""
    if setup.one_conversation(config):
        return conversation_of(setup, config, history, history.sessions[-1])
    return SessionScope(safe_id(f"{history.id}.ask.{question.id}"))


def session_messages(session: Session) -> list[Message]:
    return [
        Message(role=turn.role, content=storable(turn.text), id=turn.message_id, created_at=session.stamp(n))
        for n, turn in enumerate(session.turns)
    ]


def history_tokens(history: History) -> int:
    return sum(compute_message_tokens(m) for s in history.sessions for m in session_messages(s))


def _services(workspace: Path, model: MeteredModel) -> Any:
    """Memory services over ``workspace``, without the background-task triggers: the benchmark
    runs the Dream Engine itself where the app's background worker would."""
    from agents.runtime.services import build_services
    from agents.tasks import ConsolidationTrigger
    from memory.hooks import MemoryHookPoint

    services = build_services(backend="file", workspace=workspace, model=model)
    for handler in services.hooks.handlers(MemoryHookPoint.CLEANUP_FINISHED):
        if isinstance(handler, ConsolidationTrigger):
            services.hooks.unregister(MemoryHookPoint.CLEANUP_FINISHED, handler)
    return services


async def _consolidate(*, services: Any, agent: Any, user: str) -> Any:
    from agents.tasks import dream_engine

    return await dream_engine(services=services).aconsolidate(
        agent=agent.name, user=user, config=agent.memory_config, force=True
    )


async def conversation_ended(*, services: Any, agent: Any, user: str, session: SessionScope) -> dict[str, int]:
    """What the memory does when ``user`` leaves conversation ``session`` with ``agent`` (here:
    when the benchmark moves on to the user's next conversation). The one place for it, as the
    app does it (``agents.archiving``): the conversation is archived when the agent has the
    archive on, then the Dream Engine consolidates the archive into core memory when it has core
    memory on. Returns counts for the run's statistics (``archived_messages``,
    ``consolidations``, ``core_edits``, ``dream_failures``)."""
    from agents.archiving import archive_one

    stats = {"archived_messages": 0, "consolidations": 0, "core_edits": 0, "dream_failures": 0}
    config = agent.memory_config
    if config.archive_enabled:
        result = await _io(lambda: archive_one(services=services, agent=agent, user=user, session=session, consolidate=False))
        stats["archived_messages"] += result.messages
    if config.archive_enabled and config.core_enabled:
        outcome = await _consolidate(services=services, agent=agent, user=user)
        stats["consolidations"] += 1
        stats["core_edits"] += len(outcome.applied)
        stats["dream_failures"] += int(outcome.error is not None)
    return stats


def _add(stats: dict[str, Any], more: dict[str, int]) -> None:
    for key, value in more.items():
        stats[key] = stats.get(key, 0) + value


async def ingest(*, history: History, config: EvalConfig, setup: RunSetup, workspace: Path) -> dict[str, Any]:
    """Read ``history`` into a fresh ``workspace`` under ``config``; returns what it cost."""
    model = MeteredModel(setup.model)
    services = _services(workspace, model)
    agent = agent_for(config, setup.budget, model_name=model.name, offline=setup.offline)
    store = services.bundle.messages
    started = time.perf_counter()
    stats: dict[str, Any] = {
        "conversations": 0, "cleanups": 0, "fallback_summaries": 0, "consolidations": 0, "core_edits": 0,
        "dream_failures": 0,
    }
    doing = f"reading the history of {history.id} in ({config.name})"
    for position, session in enumerate(history.sessions):
        scope = conversation_of(setup, config, history, session)
        for message in session_messages(session):
            if config.cleanup and message.role == "assistant":
                await _cleanup(services=services, scope=scope, agent=agent, user=history.id, model=model, stats=stats)
                _check_endpoint(model, doing)
            await _io(store.append, scope, [message])
        if not setup.one_conversation(config):
            stats["conversations"] += 1
            _add(stats, await conversation_ended(services=services, agent=agent, user=history.id, session=scope))
            _check_endpoint(model, doing)
    if setup.one_conversation(config):
        stats["conversations"] = 1
    calls, prompt, completion = model.snapshot()
    stats.update(model_calls=calls, prompt_tokens=prompt, completion_tokens=completion)
    stats["wall_s"] = round(time.perf_counter() - started, 3)
    return stats


async def _cleanup(*, services: Any, scope: SessionScope, agent: Any, user: str, model: Any, stats: dict) -> None:
    """What the runtime's cleanup hook does before a model step, and the consolidation the app
    queues after a cleanup that wrote an archive document."""
    head = await _io(services.bundle.messages.head, scope)
    if head.tokens <= agent.memory_config.threshold:
        return
    result = await compact(services=services, session=scope, agent=agent, user_id=user, model=model)
    if result.status is not CleanupStatus.COMMITTED:
        return
    stats["cleanups"] += 1
    stats["fallback_summaries"] += int(result.fallback_summary)
    config = agent.memory_config
    if result.archive_document_id is not None and config.core_enabled:
        outcome = await _consolidate(services=services, agent=agent, user=user)
        stats["consolidations"] += 1
        stats["core_edits"] += len(outcome.applied)
        stats["dream_failures"] += int(outcome.error is not None)


def _provenance(services: Any, agent: Any, user: str) -> ev.CoreProvenance | None:
    """The core memory provenance an answering turn's evidence is traced by (None when the
    configuration has no core memory)."""
    from agents.runtime.tools.history_tools import archive_scope_for

    config = agent.memory_config
    if not config.core_enabled:
        return None
    return ev.core_provenance(bundle=services.bundle, agent=agent.name, user=user, config=config,
                              archive_scope=archive_scope_for(agent=agent.name, user_id=user))


#: The app's archiving triggers and the cleanup ahead of need are left out of the answering turn:
#: the benchmark archives each conversation itself when it ends (``conversation_ended``), cleans
#: up at the threshold (``_cleanup``), and queues nothing for a worker.
APP_ONLY_INSTALLERS = frozenset({"agents.archiving.install", "agents.runtime.cleanup.install_ahead"})


def answering_installers() -> list[tuple[str, Any]]:
    """The runtime hook installers of an answering turn: the process's, less ``APP_ONLY_INSTALLERS``."""
    from agents.runtime.hooks import installers

    return [(name, installer) for name, installer in installers() if name not in APP_ONLY_INSTALLERS]


async def ask(
    *, question: Question, history: History, config: EvalConfig, setup: RunSetup, snapshot: Path, scratch: Path
) -> dict[str, Any]:
    """Ask ``question`` in a copy of ``snapshot`` through the runtime; the row of the result."""
    from agents.runtime.loop import Runtime

    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(snapshot, scratch)
    try:
        model = MeteredModel(setup.model)
        services = _services(scratch, model)
        text = instructions_for(user_name=history.user_name, assistant_name=history.assistant_name, today=question.date)
        agent = agent_for(config, setup.budget, model_name=model.name, offline=setup.offline, instructions=text)
        session = question_conversation(setup, config, history, question)
        # The core memory ledgers as they stand when the context is assembled (the evidence
        # rule by provenance, ``agents.evaluation.evidence``).
        provenance = await _io(lambda: _provenance(services, agent, history.id))
        started = time.perf_counter()
        turn = Runtime(services=services, installers=answering_installers()).run_turn(
            agent=agent, user_id=history.id, session=session, text=question.text,
            # The dataset's speakers are the conversation's people: the user, named as an
            # account names its owner, and the agent the instructions make of the other one.
            participants=(history.user_name, history.assistant_name or ""),
        )
        events = [event async for event in turn]
        wall = time.perf_counter() - started
        contexts = [e.context for e in events if isinstance(e, ContextReady) and e.context is not None]
        sights = await _io(lambda: [ev.sight_of_context(c, provenance) for c in contexts])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _check_endpoint(model, f"answering {question.id} ({config.name})")
    finished = [e for e in events if isinstance(e, TurnFinished)]
    failed = [e for e in events if isinstance(e, TurnFailed)]
    final = finished[-1].message if finished else None
    answer = (final.content or "") if final is not None else ""
    calls, prompt, completion = model.snapshot()
    outputs = [(e.call.name, e.content) for e in events if isinstance(e, ToolFinished)]
    turns = history.turns_by_id()
    found = ev.locate(
        [turns[t] for t in question.evidence],
        first=sights[0] if sights else None,
        later=[*sights[1:], ev.sight_of_tools(outputs)],
    )
    recall = ev.shares(found)
    return {
        "config": config.name,
        "question": question.id,
        "history": history.id,
        "category": question.category,
        "text": question.text,
        "expected": question.answer,
        "stale": question.stale,
        "answer": answer,
        "reasoning": ((final.reasoning_content or "") if final is not None else "")[:300],
        "score": 0.0 if failed else score_answer(setup.dataset.kind, question, answer),
        "error": failed[-1].error if failed else None,
        "evidence": [f.as_dict() for f in found],
        "in_context": recall["in_context"],
        "reachable": recall["reachable"],
        "tiers": recall["tiers"],
        "context_tokens": contexts[0].total_tokens if contexts else None,
        "tokens_sent": prompt,
        "completion_tokens": completion,
        "model_calls": calls,
        "steps": finished[-1].steps if finished else None,
        "tools": [e.call.name for e in events if isinstance(e, ToolStarted)],
        "cleanups": sum(1 for e in events if isinstance(e, CleanupDone) and e.committed),
        "wall_s": round(wall, 4),
    }
