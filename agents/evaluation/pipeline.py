"""The recall benchmark's pipeline: read a history in, ask one question.

For every user and configuration, the user's history is ingested once into a fresh workspace
(``file`` backend): each turn is appended to the session as it was said (user message, the
assistant's tool call and the tool's result where there was one, the reply), and after each
turn the cleanup runs exactly as the runtime's cleanup hook runs it (``agents.runtime.cleanup.compact``:
the model summarizes, the archive is written when the configuration has it). After each session
the Dream Engine consolidates the archive into core memory (configuration ``archive_core``).
The history is a fixed transcript, so every configuration and every model sees the same past.

Each question is then asked in a copy of that workspace, as the next user turn of the last
session, through ``Runtime.run_turn``: the answer sees what the memory kept and nothing a
previous question left behind. Full context keeps the whole history in one session and never
cleans up.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from agents.evaluation.configs import Budget, EvalConfig, MeteredModel, agent_for
from agents.evaluation.dataset import Dataset, Question, Turn, UserHistory
from agents.evaluation.scoring import match_score
from agents.runtime.cleanup import compact
from agents.runtime.events import CleanupDone, ToolStarted, TurnFailed, TurnFinished
from memory.compression.cleanup import CleanupStatus
from memory.messages import Message, ToolCall
from memory.scopes import SessionScope
from memory.text import storable
from memory.threads import run_blocking as _io
from memory.tokens import compute_message_tokens

REPLY_RESERVE = 1024  # tokens full context keeps free for instructions, tools and the answer


class EndpointFailed(Exception):
    """The model endpoint failed (unreachable, timing out, rate limited) after its retries. The
    run stops; every answer finished so far is kept and the next run resumes from there."""


def _check_endpoint(model: MeteredModel, doing: str) -> None:
    if model.outages:
        raise EndpointFailed(f"the model endpoint failed while {doing}: {model.outages[-1]}")


@dataclass
class RunSetup:
    """What one run compares: the dataset, the model, the configurations, the token budget."""

    dataset: Dataset
    model: Any  # ChatModel
    configs: tuple[EvalConfig, ...]
    budget: Budget = field(default_factory=Budget)
    offline: bool = True

    def describe(self) -> dict[str, Any]:
        return {
            "dataset": {
                "size": self.dataset.size.name,
                "seed": self.dataset.seed,
                "fingerprint": self.dataset.fingerprint(),
                "users": len(self.dataset.users),
                "sessions_per_user": self.dataset.size.sessions,
                "turns_per_user": self.dataset.users[0].turn_count,
                "questions_per_user": len(self.dataset.users[0].questions),
            },
            "model": self.model.name,
            "offline": self.offline,
            "configs": [c.name for c in self.configs],
            "budget": asdict(self.budget),
        }

    def key(self) -> str:
        """A short hash of ``describe()``: runs of the same setup share a run directory."""
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()[:8]


def session_of(config: EvalConfig, user: str, index: int) -> SessionScope:
    return SessionScope(f"{user}-all" if not config.cleanup else f"{user}-s{index}")


def turn_messages(turn: Turn, *, call_id: str) -> list[Message]:
    messages = [Message(role="user", content=storable(turn.user))]
    if turn.tool is not None:
        call = ToolCall(id=call_id, name=turn.tool.name, arguments_json=json.dumps(turn.tool.arguments))
        messages.append(Message(role="assistant", content=None, tool_calls=(call,)))
        messages.append(Message(role="tool", content=storable(turn.tool.result), tool_call_id=call_id, name=call.name))
    messages.append(Message(role="assistant", content=storable(turn.assistant)))
    return messages


def history_tokens(history: UserHistory) -> int:
    return sum(
        compute_message_tokens(m)
        for s in history.sessions
        for i, t in enumerate(s.turns)
        for m in turn_messages(t, call_id=f"c{s.index}-{i}")
    )


def _services(workspace: Path, model: MeteredModel) -> Any:
    """Memory services over ``workspace``, without the background-task triggers: the benchmark
    runs the Dream Engine itself, between sessions, instead of queueing it."""
    from agents.runtime.services import build_services
    from agents.tasks import ConsolidationTrigger
    from memory.hooks import MemoryHookPoint

    services = build_services(backend="file", workspace=workspace, model=model)
    for handler in services.hooks.handlers(MemoryHookPoint.CLEANUP_FINISHED):
        if isinstance(handler, ConsolidationTrigger):
            services.hooks.unregister(MemoryHookPoint.CLEANUP_FINISHED, handler)
    return services


async def ingest(*, history: UserHistory, config: EvalConfig, setup: RunSetup, workspace: Path) -> dict[str, Any]:
    """Read ``history`` into a fresh ``workspace`` under ``config``; returns what it cost."""
    from agents.tasks import dream_engine

    model = MeteredModel(setup.model)
    services = _services(workspace, model)
    agent = agent_for(config, setup.budget, model_name=model.name, offline=setup.offline)
    store = services.bundle.messages
    started = time.perf_counter()
    stats = {"cleanups": 0, "fallback_summaries": 0, "consolidations": 0, "core_edits": 0, "dream_failures": 0}
    for session in history.sessions:
        scope = session_of(config, history.user, session.index)
        for i, turn in enumerate(session.turns):
            await _io(store.append, scope, turn_messages(turn, call_id=f"call-{session.index}-{i}"))
            if not config.cleanup:
                continue
            head = await _io(store.head, scope)
            if head.tokens <= agent.memory_config.threshold:
                continue
            result = await compact(services=services, session=scope, agent=agent, user_id=history.user, model=model)
            _check_endpoint(model, f"reading the history of {history.user} in ({config.name})")
            if result.status is CleanupStatus.COMMITTED:
                stats["cleanups"] += 1
                stats["fallback_summaries"] += int(result.fallback_summary)
        if config.core:
            # After every session, the last one included: in the app the consolidation its
            # cleanups queued has run in the background by the time the user asks again.
            outcome = await dream_engine(services=services).aconsolidate(
                agent=agent.name, user=history.user, config=agent.memory_config, force=True
            )
            _check_endpoint(model, f"consolidating the memory of {history.user} ({config.name})")
            stats["consolidations"] += 1
            stats["core_edits"] += len(outcome.applied)
            stats["dream_failures"] += int(outcome.error is not None)
    calls, prompt, completion = model.snapshot()
    stats.update(model_calls=calls, prompt_tokens=prompt, completion_tokens=completion)
    stats["wall_s"] = round(time.perf_counter() - started, 3)
    return stats


async def ask(
    *, question: Question, config: EvalConfig, setup: RunSetup, snapshot: Path, scratch: Path
) -> dict[str, Any]:
    """Ask ``question`` in a copy of ``snapshot`` through the runtime; the row of the result."""
    from agents.runtime.loop import Runtime

    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(snapshot, scratch)
    try:
        model = MeteredModel(setup.model)
        services = _services(scratch, model)
        agent = agent_for(config, setup.budget, model_name=model.name, offline=setup.offline)
        session = session_of(config, question.user, setup.dataset.size.sessions - 1)
        runtime = Runtime(services=services)
        started = time.perf_counter()
        turn = runtime.run_turn(agent=agent, user_id=question.user, session=session, text=question.text)
        events = [event async for event in turn]
        wall = time.perf_counter() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _check_endpoint(model, f"answering {question.id} ({config.name})")
    finished = [e for e in events if isinstance(e, TurnFinished)]
    failed = [e for e in events if isinstance(e, TurnFailed)]
    final = finished[-1].message if finished else None
    answer = (final.content or "") if final is not None else ""
    calls, prompt, completion = model.snapshot()
    return {
        "config": config.name,
        "question": question.id,
        "user": question.user,
        "kind": question.kind,
        "text": question.text,
        "expected": question.expected,
        "stale": question.stale,
        "answer": answer,
        "reasoning": ((final.reasoning_content or "") if final is not None else "")[:300],
        "correct": match_score(question, answer) if not failed else False,
        "error": failed[-1].error if failed else None,
        "tokens_sent": prompt,
        "completion_tokens": completion,
        "model_calls": calls,
        "steps": finished[-1].steps if finished else None,
        "tools": [e.call.name for e in events if isinstance(e, ToolStarted)],
        "cleanups": sum(1 for e in events if isinstance(e, CleanupDone) and e.committed),
        "wall_s": round(wall, 4),
    }
