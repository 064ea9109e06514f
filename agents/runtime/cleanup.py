"""Session compression as a runtime hook: the seed's hook-driven cleanup pipeline.

``cleanup_hook`` runs at ``HookPoint.BEFORE_STEP``: when the session is over its threshold (or
the step asks for it with ``force``, after the endpoint refused a context as too long) it runs
``compact`` (``memory.compression.arun_cleanup`` with the run's model as summarizer) and
streams ``CleanupStarted`` / ``CleanupDone`` into the turn. The loop knows nothing of
compression: without this hook installed (remove ``agents.runtime.cleanup.install`` from
``MODEX_RUNTIME_HOOKS``) sessions simply grow, and assembly's governance keeps what is sent
inside the window.

**Cleanup ahead of need** (``install_ahead``, in ``MODEX_RUNTIME_HOOKS`` by default): a cleanup
inside a turn makes that turn wait for the summary, two minutes and more with a small local
model on a CPU. So when a turn ends and a turn as long as the longest of the latest three would
carry the session over its threshold (``due_ahead``), ``CleanupAheadHook`` (AFTER_GRAPH) queues
the ``cleanup_ahead`` task for when the turn's hold on the model has run out, and the task
worker compacts the session in the pauses before the next messages. It is the cleanup the
threshold would run a turn later, as background model work, with these differences:

* chat goes first: its summary calls give the model up to a turn or a typing user and ask again
  once chat is quiet (``agents.runtime.gate``; a small model's summary may take several pauses,
  and the server's prompt cache keeps what a restarted call had read); it comes before other
  background work (the gate's urgent mark, held for the whole cleanup: a consolidation or a
  review does not start meanwhile, and one running gives the model up to it). Meanwhile it holds the
  session's cleanup lease, so a turn that crosses the threshold does not wait for a cleanup of
  its own: that cleanup finds the lease busy, the turn goes on (assembly keeps what is sent
  inside the window), and the cleanup ahead commits when its summary is written (appends and
  the commit never conflict, ``memory.compression.cleanup``). Each summary call may wait for
  chat as long as any background call (``MODEX_BACKGROUND_MAX_WAIT``) and then run its own time;
* a model slower than the conversation does not let it run away: once the session is past
  ``hard_limit`` (halfway from the threshold to the usable window), the cleanup ahead stops when
  chat next keeps it from the model (``stop_when``: nothing written, the lease released,
  ``SummarizerWithdrawn``), and the turn's own cleanup waits up to ``LEASE_WAIT`` for the lease,
  once a turn, and runs as without it (a holder that does not give way, such as archiving or a
  crashed worker, costs the turn that wait once; a cleanup forced by a refused context does not
  wait: the turn asks again with the window it learned);
* it commits only a summary the model wrote (``fallback=False``): when the model fails or stays
  busy, the session stays as it was, the lease is released, and the threshold's cleanup runs,
  fallback and all, as before (an interrupted cleanup's recorded cut is finished whoever wrote
  its summary: that is what makes it exactly once);
* it keeps the whole latest turn (``ahead_keep``), so the user can still edit or regenerate
  their last message;
* it checks again when it runs that it is due (a turn may have cleaned up meanwhile), and
  again after it commits: turns that arrived while it waited may leave the session due again,
  and no turn's end queued another meanwhile (it was under way), so it queues itself once more;
* it has a queue of its own (``AHEAD_QUEUE``), which ``make run`` gives a worker of its own, so
  it never waits for a consolidation or a review that is itself waiting for chat; a worker
  that runs every queue takes it first (``AHEAD_PRIORITY``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.tasks import task
from django.utils import timezone

from agents.llm import as_text_completion
from agents.runtime.events import CleanupDone, CleanupStarted, RuntimeEvent
from agents.runtime import summary_style
from agents.runtime.hooks import HookPoint, RuntimeHooks
from agents.runtime.sizing import probe_window, sized_agent
from agents.runtime.tools.history_tools import archive_scope_for
from memory.compression.cleanup import INTENT_KEY, LEASE_NAME, CleanupFailed, CleanupResult, CleanupStatus, arun_cleanup
from memory.compression.summary import SummaryOptions, default_options
from memory.config import MemoryConfig
from memory.locks import lease_active
from memory.messages import Message
from memory.scopes import SessionScope
from memory.threads import run_blocking

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext
    from agents.runtime.loop import Runtime
    from agents.runtime.services import MemoryServices

logger = logging.getLogger("agents.runtime.cleanup")

CLEANUP_HOOK = "cleanup"
AHEAD_HOOK = "cleanup_ahead"


async def compact(
    *,
    services: MemoryServices,
    session: SessionScope,
    agent: Any,
    user_id: str,
    model: Any,
    force: bool = False,
    lease_ttl: float | None = None,
    fallback: bool = True,
    summary_options: SummaryOptions | None = None,
) -> CleanupResult:
    """One cleanup of ``session`` as the runtime runs it: ``model`` summarizes, the archive is
    written when ``agent`` has it on. Raises ``CleanupFailed`` (the session is unchanged).
    ``fallback=False``: commit only a summary the model wrote (the cleanup ahead of need);
    ``summary_options``: default ``default_options(config)``, as ``arun_cleanup``'s."""
    config = agent.memory_config
    options: dict[str, Any] = {} if lease_ttl is None else {"lease_ttl": lease_ttl}
    summary = summary_options or default_options(config)
    # A model that answered the whole template with no section before is asked each one alone.
    alone = await run_blocking(summary_style.sections_alone, services.bundle.kv, model)
    if alone:
        summary = replace(summary, sections_alone=True)
    result = await arun_cleanup(
        bundle=services.bundle,
        session=session,
        config=config,
        summarizer=as_text_completion(model, max_tokens=services.caps.summary),
        catalog=services.catalog,
        hooks=services.hooks,
        archive_scope=archive_scope_for(agent=agent.name, user_id=user_id) if config.archive_enabled else None,
        force=force,
        embedder=services.retrieval.embedder,
        fallback=fallback,
        summary_options=summary,
        **options,
    )
    try:
        await run_blocking(summary_style.learn, services.bundle.kv, model,
                           followed=result.template_followed, asked_alone=alone and result.summarizer_calls > 0,
                           ran_on=result.template_ran_on)
    except Exception:  # advisory: the cleanup is done either way
        logger.warning("remembering how %s answers the summary template failed", model, exc_info=True)
    return result


async def cleanup_hook(*, ctx: ToolContext, force: bool = False, **_: Any) -> AsyncIterator[RuntimeEvent]:
    """BEFORE_STEP: compact ``ctx.session`` when it is over its threshold (always if ``force``)."""
    services, config = ctx.services, ctx.agent.memory_config
    # The head the run's last write read in its own trip, used once; else read it here.
    head, ctx.head = ctx.head, None
    if head is None:
        head = await run_blocking(services.bundle.messages.head, ctx.session)
    if not force and head.tokens <= config.threshold:
        return
    yield CleanupStarted(tokens=head.tokens, threshold=config.threshold)
    async def attempt() -> CleanupResult:
        return await compact(
            services=services,
            session=ctx.session,
            agent=ctx.agent,
            user_id=ctx.user_id,
            model=ctx.runtime.calls,  # through the gate with the turn's priority
            force=force,
            lease_ttl=ctx.runtime.cleanup_lease_ttl,
        )

    try:
        result = await attempt()
        if result.status is CleanupStatus.BUSY and not force and head.tokens > hard_limit(config) and not ctx.lease_waited:
            # Far over the threshold: a cleanup ahead of need holding the lease stops when chat
            # keeps it from the model (``stop_when``); wait for that, once a turn, then clean up here.
            ctx.lease_waited = True
            waited = 0.0
            while result.status is CleanupStatus.BUSY and waited < LEASE_WAIT:
                await asyncio.sleep(LEASE_POLL)
                waited += LEASE_POLL
                result = await attempt()
    except CleanupFailed as exc:
        # The session is unchanged; the turn goes on (assembly keeps the context in the window).
        logger.error("cleanup of %s failed at %s: %s", ctx.session.key(), exc.step, exc)
        yield CleanupDone(False, str(exc), 0, 0, head.tokens, head.tokens, None, False)
        return
    except Exception as exc:  # a fault outside the pipeline's own steps: same outcome, logged whole
        logger.exception("cleanup of %s failed", ctx.session.key())
        yield CleanupDone(False, f"cleanup failed: {exc}", 0, 0, head.tokens, head.tokens, None, False)
        return
    yield CleanupDone(
        committed=result.committed,
        reason=result.reason,
        evicted_count=result.evicted_count,
        kept_count=result.kept_count,
        tokens_before=result.tokens_before,
        tokens_after=result.tokens_after,
        through_seq=result.through_seq,
        fallback_summary=result.fallback_summary,
    )


# -- cleanup ahead of need --------------------------------------------------------------------


#: How many of the session's latest turns ``due_ahead`` takes the longest of.
AHEAD_TURNS = 3
#: The task's queue ("ahead": ``make run`` gives it a worker of its own, modex_web/settings.py)
#: and its priority in a worker that runs every queue: before the reviews and consolidations
#: queued earlier (the next turn waits on it; they wait on nothing).
AHEAD_QUEUE = "ahead"
AHEAD_PRIORITY = 10
#: How long a turn far over its threshold waits for a cleanup ahead to give the lease back, and
#: how often it looks (the cleanup ahead sees the turn within the gate's background poll).
LEASE_WAIT = 15.0
LEASE_POLL = 0.25


def hard_limit(config: MemoryConfig) -> int:
    """Tokens past which a turn does not go on without a cleanup of its own while a cleanup ahead
    of need is under way: halfway from the threshold to the usable window (the window less the
    reply's room), so the model never gets far behind, and what is sent still fits."""
    return config.threshold + (config.usable_window - config.threshold) // 2


def _turns(body: Sequence[Message]) -> list[int]:
    """The tokens of each of the latest ``AHEAD_TURNS`` turns of ``body`` (a turn runs from a user
    message to the next), oldest first."""
    starts = [i for i, m in enumerate(body) if m.role == "user"][-AHEAD_TURNS:]
    if not starts:
        return []
    ends = [*starts[1:], len(body)]
    return [sum(m.tokens or 0 for m in body[a:b]) for a, b in zip(starts, ends, strict=True)]


def ahead_keep(live: Sequence[Message], *, config: MemoryConfig) -> int:
    """The tail a cleanup ahead of need keeps: ``config.keep``, or the whole latest turn when it is
    longer, so the user can still edit or regenerate their last message (the threshold's cleanup
    runs once the next message is stored, so that one is never the latest)."""
    return _keep(_turns([m for m in live if not m.is_compact_summary]), config)


def _keep(turns: list[int], config: MemoryConfig) -> int:
    return max(config.keep, turns[-1] if turns else 0)


def due_ahead(live: Sequence[Message], *, tokens: int, config: MemoryConfig) -> bool:
    """Whether the session (``live``, ``tokens`` in all) should be compacted before its next turn:
    a turn as long as the longest of its latest ``AHEAD_TURNS`` (a short "thanks" does not hide
    that the one before was long) would carry it over ``config.threshold``, and the messages
    after its compact summary hold more than ``ahead_keep``, so a cleanup has something to evict
    (and the kept tail stays below the threshold)."""
    body = [m for m in live if not m.is_compact_summary]
    turns = _turns(body)
    if not turns:
        return False
    keep = _keep(turns, config)
    if keep >= config.threshold or sum(m.tokens or 0 for m in body) <= keep:
        return False
    return tokens + max(turns) > config.threshold


def _due(services: MemoryServices, session: SessionScope, config: MemoryConfig) -> list[Message] | None:
    """The live messages when a cleanup ahead is due, else None."""
    messages = services.bundle.messages
    head = messages.head(session)
    # A session less than half full cannot cross with one turn like its latest (those are in it).
    if 2 * head.tokens <= config.threshold:
        return None
    live = messages.read(session)
    return live if due_ahead(live, tokens=head.tokens, config=config) else None


def _queue_wanted(services: MemoryServices, session: SessionScope, config: MemoryConfig) -> bool:
    # A cleanup of the session under way (a cleanup ahead waiting for chat): it goes on; no copy.
    if lease_active(kv=services.bundle.kv, scope=session, name=LEASE_NAME):
        return False
    return _due(services, session, config) is not None


class CleanupAheadHook:
    """AFTER_GRAPH: queue ``cleanup_ahead`` when the session's next turn would cross its threshold,
    for when the turn's hold on the model (``MODEX_BACKGROUND_AFTER_TURN``) has run out."""

    def __init__(self, *, services: MemoryServices) -> None:
        self.services = services

    async def __call__(self, *, agent: Any, user_id: str, session: SessionScope, **_: Any) -> None:
        try:
            if await run_blocking(_queue_wanted, self.services, session, agent.memory_config):
                await sync_to_async(enqueue_cleanup_ahead, thread_sensitive=True)(
                    agent=agent.name, user=user_id, session=session.key(), after=_after_turn(self.services)
                )
        except Exception:  # the turn is over and stored: the threshold's own cleanup still runs
            logger.exception("queueing the cleanup ahead of %s failed", session.key())


@task(priority=AHEAD_PRIORITY, queue_name=AHEAD_QUEUE)
async def cleanup_ahead(agent: str, user: str, session: str) -> dict:
    """Compact ``session`` before its next turn needs it, if that is still due (see the module
    doc). When it commits and the session is due again (turns arrived while it waited for chat;
    their ends queued no copy, as it was under way), it queues itself once more."""
    from agents.tasks import current_environment, session_scope

    env = current_environment()
    node = env.find_agent(agent)
    if node is None:
        return {"status": "disabled"}
    services = env.services
    await probe_window(services.model)
    node = sized_agent(node, services.model)  # the threshold the chat uses, scaled to the server
    scope = session_scope(session)
    live = await run_blocking(_due, services, scope, node.memory_config)
    if live is None:
        return {"status": "not_due"}
    try:
        result = await _ahead_round(services, scope, node, user, live)
    except CleanupFailed as exc:  # the session is unchanged; the threshold's cleanup runs as before
        logger.warning("cleanup ahead of %s failed at %s: %s", session, exc.step, exc)
        return {"status": "failed", "reason": str(exc)}
    logger.info("cleanup ahead of %s: %s (%s)", session, result.status.value, result.reason)
    outcome = {"status": result.status.value, "reason": result.reason, "evicted": result.evicted_count}
    if result.committed:
        await run_blocking(_draw, services, scope, result)
        try:
            if await run_blocking(_due, services, scope, node.memory_config) is not None:
                queued = await sync_to_async(enqueue_cleanup_ahead, thread_sensitive=True)(
                    agent=agent, user=user, session=session, after=_after_turn(services)
                )
                outcome["queued_again"] = queued is not None
        except Exception:  # committed all the same: the next turn's end queues one if still due
            logger.exception("queueing the next cleanup ahead of %s failed", session)
    return outcome


def _after_turn(services: MemoryServices) -> float:
    """Seconds a cleanup ahead is queued after a turn: the turn's hold on a gated model."""
    return services.gate.after_turn if services.gated else 0.0


async def _ahead_round(
    services: MemoryServices, scope: SessionScope, node: Any, user: str, live: list[Message]
) -> CleanupResult:
    """One cleanup ahead of need of ``scope`` (``live``: its messages now). Raises CleanupFailed."""
    config = node.memory_config
    keep = ahead_keep(live, config=config)
    if keep != config.keep:
        node = replace(node, memory_config=replace(config, keep_tokens=keep))
    # An interrupted cleanup's cut is finished first (not forced: no second cut unless still over).
    pending = await run_blocking(services.bundle.kv.get, scope, INTENT_KEY)
    options = default_options(node.memory_config)
    options = replace(options, timeout=services.background_timeout(options.timeout))
    limit = hard_limit(config)

    def far_over() -> bool:  # a turn now must clean up itself: give the session back
        return services.bundle.messages.head(scope).tokens > limit

    async with services.urgent_work("cleanup ahead"):  # other background work waits, and gives way
        return await compact(
            services=services,
            session=scope,
            agent=node,
            user_id=user,
            model=services.calls(background=True, label="cleanup ahead", stop_when=far_over, urgent=True),
            force=pending is None,
            lease_ttl=float(getattr(settings, "MODEX_CLEANUP_LEASE_TTL", 600.0)),
            fallback=False,
            summary_options=options,
        )


def _draw(services: MemoryServices, session: SessionScope, result: CleanupResult) -> None:
    """Mark the cleanup on the chat's meter chart: the chat socket marks a turn's cleanups from
    the turn's events, and this one happened between turns. Only a chart: a failure is logged."""
    from agents.chat.meter import record_cleanup

    event = CleanupDone(
        committed=True, reason=result.reason, evicted_count=result.evicted_count, kept_count=result.kept_count,
        tokens_before=result.tokens_before, tokens_after=result.tokens_after, through_seq=result.through_seq,
        fallback_summary=result.fallback_summary,
    )
    try:
        record_cleanup(kv=services.bundle.kv, session=session, event=event)
    except Exception:
        logger.warning("the meter chart of %s could not mark the cleanup ahead", session.key(), exc_info=True)


def enqueue_cleanup_ahead(*, agent: str, user: str, session: str, after: float = 0.0) -> Any:
    """Queue ``cleanup_ahead`` for ``session``, to run ``after`` seconds from now (0: at once)."""
    from agents.tasks import _enqueue

    run_after = timezone.now() + timedelta(seconds=after) if after > 0 else None
    return _enqueue(cleanup_ahead, run_after=run_after, agent=agent, user=user, session=session)


def install(hooks: RuntimeHooks, agent: Any, runtime: Runtime) -> None:
    """The installer: every agent's runs compress their session (main agents and subagents)."""
    hooks.register(HookPoint.BEFORE_STEP, cleanup_hook, name=CLEANUP_HOOK)


def install_ahead(hooks: RuntimeHooks, agent: Any, runtime: Runtime) -> None:
    """The installer of the cleanup ahead of need: a main agent's runs queue it when due (a
    subagent's session is dropped when its run ends; AFTER_GRAPH fires for main runs only)."""
    hooks.register(HookPoint.AFTER_GRAPH, CleanupAheadHook(services=runtime.services), name=AHEAD_HOOK)
