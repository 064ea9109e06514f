"""Background work on Django's Tasks framework: Dream Engine consolidation, experience review.

Two tasks, both idempotent and safe to retry:

* ``consolidate_core_memory(agent, user, mode)``: one Dream Engine run. The engine's lease and
  cursor compare-and-set make a duplicate run a no-op; a model failure is recorded with its next
  attempt time and a retry is enqueued for then (``run_after``, when the backend defers).
* ``review_experience(agent, user, session, final_id, final_seq)``: the ExperienceReviewAgent
  for one finished run, keyed by session + final message id (a retry never writes twice).

What triggers them (never blocking a chat turn: they only enqueue):

* CLEANUP_FINISHED (``register_long_term_hooks(services)``): a cleanup that wrote an archive
  document queues an incremental consolidation for the session's agent and user. The event
  names only the session, so the session's owner is remembered at the end of each run by the
  ``long_term_session`` AFTER_GRAPH hook (``LongTermSessionHook``); a cleanup in a session
  whose owner is not known yet (its first run) is marked and queued when that run ends.
* AFTER_GRAPH ``experience_review`` (``agents.experience.supplement``): queues the review.

``install_long_term_session`` is a runtime installer (``MODEX_RUNTIME_HOOKS``);
``register_long_term_hooks`` is registered with ``agents.runtime.services.on_build`` at ready.

Tasks run in ``manage.py db_worker`` (django-tasks-db) in production; they resolve their services
and agents through ``current_environment()`` (the process's services and booted declaration;
tests install their own with ``task_environment``). ``arun_recorded_tasks`` runs what a
``DummyBackend`` recorded, in order: the test suite's deterministic worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, TaskResultStatus, task, task_backends
from django.utils import timezone

from agents.llm import as_text_completion
from agents.runtime.hooks import HookPoint, RuntimeHooks
from memory.dream import ConsolidationMode, ConsolidationStatus, DreamEngine, DreamOptions
from memory.hooks import CleanupFinished, MemoryHookPoint
from memory.messages import Message, utcnow
from memory.scopes import Scope, SessionScope
from memory.stores.base import ConcurrentChange, KVStore

if TYPE_CHECKING:
    from agents.runtime.loop import Runtime
    from agents.runtime.services import MemoryServices

logger = logging.getLogger("agents.tasks")

OWNER_KEY = "long_term.owner"
PENDING_KEY = "dream.pending"
SESSION_HOOK = "long_term_session"


# -- where tasks find their services and agents ----------------------------------------------


@dataclass(frozen=True)
class TaskEnvironment:
    """What a task runs against: the memory services, how to find a declared agent, and the
    clock the Dream Engine's backoff is judged by."""

    services: MemoryServices
    find_agent: Callable[[str], Any]
    clock: Callable[[], datetime] = utcnow


_lock = threading.Lock()
_installed: list[TaskEnvironment] = []


def current_environment() -> TaskEnvironment:
    """The installed environment, else the process's services and booted declaration."""
    with _lock:
        if _installed:
            return _installed[-1]
    from agents.declarations import get_declaration
    from agents.runtime.services import get_services

    return TaskEnvironment(services=get_services(), find_agent=lambda name: get_declaration().find(name))


@contextlib.contextmanager
def task_environment(environment: TaskEnvironment) -> Iterator[TaskEnvironment]:
    """Run tasks against ``environment`` inside the block (tests, one-off scripts)."""
    with _lock:
        _installed.append(environment)
    try:
        yield environment
    finally:
        with _lock:
            _installed.remove(environment)


#: The Dream Engine asks for JSON; servers that offer JSON mode are asked to keep to it.
DREAM_RESPONSE_FORMAT = {"type": "json_object"}


def dream_engine(*, services: MemoryServices, clock: Callable[[], datetime] = utcnow) -> DreamEngine:
    """The Dream Engine over ``services``: their stores, hooks and chat model (in JSON mode),
    each call capped at ``MODEX_MAX_TOKENS_DREAM`` and made as background work through the gate
    (it waits while a user's turn runs, ``agents.runtime.gate``; its time limit does not count
    that wait)."""
    options = DreamOptions(lease_ttl=float(getattr(settings, "MODEX_TASK_LEASE_TTL", 600.0)))
    # Each call's limit counts the model's time, not the wait for chat at the gate before it.
    options = replace(options, model_timeout=services.background_timeout(options.model_timeout))
    model = as_text_completion(
        services.calls(background=True, label="dream"),
        max_tokens=services.caps.dream,
        response_format=DREAM_RESPONSE_FORMAT,
    )
    return DreamEngine(bundle=services.bundle, model=model, hooks=services.hooks, clock=clock, options=options)


def _long_term(agent: Any) -> bool:
    config = getattr(agent, "memory_config", None)
    return bool(config and not config.is_subagent and config.archive_enabled and config.core_enabled)


# -- the tasks --------------------------------------------------------------------------------


@task()
async def consolidate_core_memory(agent: str, user: str, mode: str = ConsolidationMode.INCREMENTAL.value) -> dict:
    """One Dream Engine consolidation of ``agent``'s archive about ``user`` (see module doc)."""
    env = current_environment()
    node = env.find_agent(agent)
    if node is None or not _long_term(node):
        return {"status": ConsolidationStatus.DISABLED.value}
    result = await dream_engine(services=env.services, clock=env.clock).aconsolidate(
        agent=agent, user=user, config=node.memory_config, mode=mode
    )
    if result.status is ConsolidationStatus.FAILED and result.next_attempt_at is not None:
        await sync_to_async(enqueue_consolidation, thread_sensitive=True)(
            agent=agent, user=user, mode=mode, run_after=result.next_attempt_at
        )
    return {
        "status": result.status.value,
        "documents": result.documents,
        "edits": [edit.describe() for edit in result.applied],
        "cursor": result.cursor,
        "error": result.error,
        "next_attempt_at": result.next_attempt_at.isoformat() if result.next_attempt_at else None,
        "run_id": result.run_id,
        "proposals": list(result.proposals),
        "warnings": list(result.warnings),
    }


def session_scope(key: str) -> SessionScope:
    """The session scope a task's argument names (ValueError for any other key)."""
    scope = Scope.parse(key)
    if not isinstance(scope, SessionScope):
        raise ValueError(f"not a session scope key: {key!r}")
    return scope


@task()
async def review_experience(agent: str, user: str, session: str, final_id: str, final_seq: int) -> dict:
    """The ExperienceReviewAgent for the run of ``session`` that ended with ``final_id``."""
    from agents.experience.supplement import experience_enabled
    from agents.experience.review import ExperienceReviewAgent, ReviewStatus

    env = current_environment()
    node = env.find_agent(agent)
    if node is None or not experience_enabled(node):
        return {"status": "disabled"}
    scope = session_scope(session)
    outcome = await ExperienceReviewAgent(services=env.services).areview(
        agent=node, user=user, session=scope, final_id=final_id, final_seq=final_seq
    )
    if outcome.status is ReviewStatus.FAILED and outcome.next_attempt_at is not None:
        await sync_to_async(enqueue_experience_review, thread_sensitive=True)(
            agent=agent,
            user=user,
            session=session,
            final_id=final_id,
            final_seq=final_seq,
            run_after=outcome.next_attempt_at,
        )
    return {
        "status": outcome.status.value,
        "created": list(outcome.created),
        "updated": list(outcome.updated),
        "error": outcome.error,
    }


# -- enqueueing -------------------------------------------------------------------------------


def _enqueue(task_obj: Any, *, run_after: datetime | None, **kwargs: Any) -> Any:
    backend = task_obj.get_backend()
    if run_after is not None:
        if not backend.supports_defer:
            # No deferral (e.g. ImmediateBackend): the recorded next attempt waits for the next
            # trigger instead; running now would retry in a tight loop.
            return None
        task_obj = task_obj.using(run_after=run_after)
    return task_obj.enqueue(**kwargs)


def enqueue_consolidation(
    *, agent: str, user: str, mode: str = ConsolidationMode.INCREMENTAL.value, run_after: datetime | None = None
) -> Any:
    """Queue a consolidation; returns the TaskResult (None when a deferral is not possible)."""
    return _enqueue(consolidate_core_memory, run_after=run_after, agent=agent, user=user, mode=str(mode))


def enqueue_experience_review(
    *, agent: str, user: str, session: str, final_id: str, final_seq: int, run_after: datetime | None = None
) -> Any:
    """Queue an experience review of one finished run."""
    return _enqueue(
        review_experience,
        run_after=run_after,
        agent=agent,
        user=user,
        session=session,
        final_id=final_id,
        final_seq=final_seq,
    )


def waiting_tasks() -> dict[str, int]:
    """How many consolidations, reviews and cleanups ahead of need are queued or running in the
    task backend, by task name (``consolidate_core_memory``, ``review_experience``,
    ``cleanup_ahead``): what the pages call memory work queued. Empty when the backend cannot
    say (``immediate``)."""
    # The cleanup ahead's task by name: agents.runtime.cleanup queues it through this module.
    names = {consolidate_core_memory.name, review_experience.name, "cleanup_ahead"}
    backend = task_backends[DEFAULT_TASK_BACKEND_ALIAS]
    waiting = (TaskResultStatus.READY, TaskResultStatus.RUNNING)
    counts: dict[str, int] = {}
    if hasattr(backend, "results"):  # DummyBackend: what it recorded
        for result in backend.results:
            if result.task.name in names and result.status in waiting:
                counts[result.task.name] = counts.get(result.task.name, 0) + 1
        return counts
    if getattr(settings, "MODEX_TASKS_BACKEND", "") != "db":
        return counts
    from django_tasks_db.models import DBTaskResult

    rows = DBTaskResult.objects.filter(status__in=list(waiting)).values_list("task_path", flat=True)
    for path in rows:
        name = path.rsplit(".", 1)[-1]
        if name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


# -- the triggers -----------------------------------------------------------------------------


def _owner(kv: KVStore, session: SessionScope) -> dict | None:
    raw = kv.get_value(session, OWNER_KEY)
    try:
        data = json.loads(raw) if raw else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and data.get("agent") and data.get("user") else None


class ConsolidationTrigger:
    """CLEANUP_FINISHED: a cleanup that wrote an archive document queues a consolidation."""

    point = MemoryHookPoint.CLEANUP_FINISHED

    def __init__(self, *, kv: KVStore) -> None:
        self.kv = kv

    def __call__(self, event: CleanupFinished) -> None:
        if event.archive_document_id is None:
            return  # the archive is off: nothing for the Dream Engine
        owner = _owner(self.kv, event.session)
        if owner is None:
            marker = {"document": event.archive_document_id, "at": utcnow().isoformat()}
            self.kv.put(event.session, PENDING_KEY, json.dumps(marker))
            return
        if owner.get("core"):
            enqueue_consolidation(agent=owner["agent"], user=owner["user"])


class LongTermSessionHook:
    """AFTER_GRAPH: remember who a session belongs to, and queue a consolidation its cleanup
    could not (no owner known yet). Only for main agents with archive and core memory on."""

    def __init__(self, *, services: MemoryServices) -> None:
        self.kv = services.bundle.kv

    async def __call__(
        self, *, agent: Any, user_id: str, session: SessionScope, final: Message | None = None, **_: Any
    ) -> None:
        if not _long_term(agent):
            return
        await sync_to_async(self._sync, thread_sensitive=True)(agent.name, user_id, session)

    def _sync(self, agent: str, user: str, session: SessionScope) -> None:
        owner = {"agent": agent, "user": user, "core": True}
        if _owner(self.kv, session) != owner:
            self.kv.put(session, OWNER_KEY, json.dumps(owner))
        pending = self.kv.get(session, PENDING_KEY)
        if pending is None:
            return
        try:
            self.kv.delete(session, PENDING_KEY, expected_version=pending.version)
        except ConcurrentChange:
            pass  # a newer marker arrived meanwhile; queue once for both
        enqueue_consolidation(agent=agent, user=user)


def register_long_term_hooks(services: MemoryServices) -> None:
    """Register the CLEANUP_FINISHED consolidation trigger on ``services.hooks`` (idempotent)."""
    if not any(isinstance(h, ConsolidationTrigger) for h in services.hooks.handlers(MemoryHookPoint.CLEANUP_FINISHED)):
        services.hooks.add(ConsolidationTrigger(kv=services.bundle.kv))


def install_long_term_session(hooks: RuntimeHooks, agent: Any, runtime: Runtime) -> None:
    """The runtime installer: the ``long_term_session`` AFTER_GRAPH hook, for main agents with
    archive and core memory on (the agents whose cleanups feed the Dream Engine)."""
    if _long_term(agent):
        hooks.register(HookPoint.AFTER_GRAPH, LongTermSessionHook(services=runtime.services), name=SESSION_HOOK)


# -- running recorded tasks (DummyBackend) ----------------------------------------------------


async def arun_recorded_tasks(
    *,
    environment: TaskEnvironment | None = None,
    now: datetime | None = None,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    max_tasks: int = 100,
) -> list[Any]:
    """Run the READY tasks a ``DummyBackend`` recorded, oldest first, until none is due.

    A task is due when it has no ``run_after`` or it is not after ``now`` (default: the current
    time). Tasks a task enqueues run too, if due. Each result's status becomes SUCCESSFUL or
    FAILED (its return value kept), as a worker would record it. Returns the results run.
    """
    store = task_backends[backend]
    if not hasattr(store, "results"):
        raise TypeError(f"the {backend!r} task backend records no tasks (use DummyBackend)")
    ran: list[Any] = []
    with task_environment(environment) if environment else contextlib.nullcontext():
        while len(ran) < max_tasks:
            moment = now or timezone.now()
            due = next(
                (
                    r
                    for r in store.results
                    if r.status == TaskResultStatus.READY and (r.task.run_after is None or r.task.run_after <= moment)
                ),
                None,
            )
            if due is None:
                break
            object.__setattr__(due, "status", TaskResultStatus.RUNNING)
            try:
                value = await due.task.acall(*due.args, **due.kwargs)
            except Exception:
                logger.exception("recorded task %s failed", due.task.name)
                object.__setattr__(due, "status", TaskResultStatus.FAILED)
            else:
                object.__setattr__(due, "_return_value", value)
                object.__setattr__(due, "status", TaskResultStatus.SUCCESSFUL)
            ran.append(due)
    return ran


def run_recorded_tasks(**kwargs: Any) -> list[Any]:
    """``arun_recorded_tasks`` for sync callers."""
    return async_to_sync(arun_recorded_tasks)(**kwargs)
