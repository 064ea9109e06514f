"""When conversations are archived: every conversation reaches long-term memory, not only the
ones long enough to be cleaned up (``memory.archiving`` does the archiving itself).

For main agents with the archive on, three triggers:

* **The user comes back in another conversation.** At the first step of a turn, when this
  process last saw the user with this agent in a *different* conversation (or not at all), the
  user's other recent conversations with the agent are archived before the context is assembled,
  so what was said there can be recalled in this very turn (``catch_up``; a BEFORE_STEP hook).
  Archiving is local work (no model call): a few milliseconds for a conversation.
* **The conversation goes quiet.** After each turn a task is queued to run once the conversation
  has been idle for ``MODEX_ARCHIVE_IDLE_MINUTES``; if the user spoke again meanwhile it does
  nothing (the later turn queued its own). Needs a task backend that defers (``db``); with one
  that does not, the other two triggers still hold.
* **On command**: ``manage.py archive_sessions`` (all conversations, or one user's / agent's).

Each run that writes documents queues a Dream Engine consolidation when core memory is on.
Archiving takes the session's cleanup lease: it never runs beside a cleanup of the same session,
and a busy one is simply left to the next trigger.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.tasks import task
from django.utils import timezone

from agents.runtime.hooks import HookPoint, RuntimeHooks
from agents.runtime.tools.history_tools import archive_scope_for
from memory.archiving import ArchivingResult, ArchivingStatus, archive_conversation
from memory.scopes import SessionScope
from memory.threads import run_blocking

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext
    from agents.runtime.loop import Runtime
    from agents.runtime.services import MemoryServices

logger = logging.getLogger("agents.archiving")

CATCH_UP_HOOK = "archive_catch_up"
IDLE_HOOK = "archive_when_idle"
#: The user's most recently active other conversations that a catch-up looks at.
CATCH_UP_CONVERSATIONS = 10


def archiving_on(agent: Any) -> bool:
    config = getattr(agent, "memory_config", None)
    return bool(config and not config.is_subagent and config.archive_enabled)


def idle_time() -> timedelta:
    return timedelta(minutes=float(getattr(settings, "MODEX_ARCHIVE_IDLE_MINUTES", 30.0)))


def archive_one(
    *,
    services: MemoryServices,
    agent: Any,
    user: str,
    session: SessionScope,
    idle_for: timedelta | None = None,
    consolidate: bool = True,
) -> ArchivingResult:
    """Archive one conversation of ``user`` with ``agent`` now (sync; store work only), and queue
    a consolidation when it wrote documents and core memory is on (unless ``consolidate`` is
    False: the caller runs the Dream Engine itself)."""
    result = archive_conversation(
        bundle=services.bundle,
        session=session,
        archive_scope=archive_scope_for(agent=agent.name, user_id=user),
        idle_for=idle_for,
        embedder=services.retrieval.embedder,
        lease_ttl=float(getattr(settings, "MODEX_CLEANUP_LEASE_TTL", 600.0)),
    )
    if result.archived:
        logger.info("archived %d messages of %s (%s)", result.messages, session.key(), agent.name)
        if consolidate and agent.memory_config.core_enabled:
            from agents.tasks import enqueue_consolidation

            enqueue_consolidation(agent=agent.name, user=user)
    return result


def other_conversations(*, agent: str, user: str, current: SessionScope | None) -> list[SessionScope]:
    """The user's most recently active conversations with ``agent`` other than ``current``."""
    from agents.models import Conversation

    if not str(user).isdigit():
        return []
    rows = Conversation.objects.filter(owner_id=int(user), agent=agent).order_by("-updated_at")
    if current is not None:
        rows = rows.exclude(pk=current.id)
    return [SessionScope(pk) for pk in rows.values_list("pk", flat=True)[:CATCH_UP_CONVERSATIONS]]


def catch_up(*, services: MemoryServices, agent: Any, user: str, current: SessionScope | None) -> list[ArchivingResult]:
    """Archive what the user's other recent conversations with ``agent`` hold unarchived."""
    results = []
    for session in other_conversations(agent=agent.name, user=user, current=current):
        results.append(archive_one(services=services, agent=agent, user=user, session=session))
    return [r for r in results if r.status is not ArchivingStatus.UP_TO_DATE]


class CatchUpHook:
    """BEFORE_STEP, first step of a main agent's turn: archive the user's other conversations
    when they come back in a different one (see the module docstring)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def _switched(self, agent: str, user: str, session: SessionScope) -> bool:
        with self._lock:
            before = self._last.get((agent, user))
            self._last[(agent, user)] = session.key()
            if len(self._last) > 100_000:  # bounded: forgetting only costs one more catch-up
                self._last.clear()
        return before != session.key()

    async def __call__(self, *, ctx: ToolContext, step: int = 1, force: bool = False, **_: Any) -> None:
        if step != 1 or force or ctx.depth or not archiving_on(ctx.agent):
            return
        if not self._switched(ctx.agent.name, ctx.user_id, ctx.session):
            return
        try:
            await run_blocking(catch_up, services=ctx.services, agent=ctx.agent, user=ctx.user_id, current=ctx.session)
        except Exception:  # never fails the turn: the idle task and the command catch up later
            logger.exception("archiving the earlier conversations of user %s failed", ctx.user_id)


_catch_up = CatchUpHook()


async def archive_when_idle(*, agent: Any, user_id: str, session: SessionScope, **_: Any) -> None:
    """AFTER_GRAPH: queue the archiving of this conversation for when it has been idle."""
    if not archiving_on(agent):
        return
    await sync_to_async(enqueue_archiving, thread_sensitive=True)(agent=agent.name, user=user_id, session=session.key())


def install(hooks: RuntimeHooks, agent: Any, runtime: Runtime) -> None:
    """The runtime installer (``MODEX_RUNTIME_HOOKS``): both hooks, for main agents with the archive on."""
    if archiving_on(agent):
        hooks.register(HookPoint.BEFORE_STEP, _catch_up, name=CATCH_UP_HOOK)
        hooks.register(HookPoint.AFTER_GRAPH, archive_when_idle, name=IDLE_HOOK)


# -- the task ----------------------------------------------------------------------------------


@task()
def archive_idle_conversation(agent: str, user: str, session: str) -> dict:
    """Archive ``session`` if it has been idle for the idle time (else nothing: a later turn
    queued its own run)."""
    from agents.tasks import current_environment, session_scope

    env = current_environment()
    node = env.find_agent(agent)
    if node is None or not archiving_on(node):
        return {"status": "disabled"}
    scope = session_scope(session)
    result = archive_one(services=env.services, agent=node, user=user, session=scope, idle_for=idle_time())
    return {"status": result.status.value, "messages": result.messages, "through_seq": result.through_seq}


def enqueue_archiving(*, agent: str, user: str, session: str) -> Any:
    """Queue ``archive_idle_conversation`` for when the conversation will have been idle."""
    from agents.tasks import _enqueue

    idle = idle_time()
    run_after = timezone.now() + idle if idle > timedelta(0) else None
    return _enqueue(archive_idle_conversation, run_after=run_after, agent=agent, user=user, session=session)
