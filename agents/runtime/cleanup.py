"""Session compression as a runtime hook: the seed's hook-driven cleanup pipeline.

``cleanup_hook`` runs at ``HookPoint.BEFORE_STEP``: when the session is over its threshold (or
the step asks for it with ``force``, after the endpoint refused a context as too long) it runs
``compact`` (``memory.compression.arun_cleanup`` with the run's model as summarizer) and streams ``CleanupStarted`` / ``CleanupDone`` into the
turn. The loop knows nothing of compression: without this hook installed (remove
``agents.runtime.cleanup.install`` from ``MODEX_RUNTIME_HOOKS``) sessions simply grow, and
assembly's governance keeps what is sent inside the window.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents.llm import as_text_completion
from agents.runtime.events import CleanupDone, CleanupStarted, RuntimeEvent
from agents.runtime.hooks import HookPoint, RuntimeHooks
from agents.runtime.tools.history_tools import archive_scope_for
from memory.compression.cleanup import CleanupFailed, CleanupResult, arun_cleanup
from memory.scopes import SessionScope
from memory.threads import run_blocking

if TYPE_CHECKING:
    from agents.runtime.context import ToolContext
    from agents.runtime.loop import Runtime
    from agents.runtime.services import MemoryServices

logger = logging.getLogger("agents.runtime.cleanup")

CLEANUP_HOOK = "cleanup"


async def compact(
    *,
    services: MemoryServices,
    session: SessionScope,
    agent: Any,
    user_id: str,
    model: Any,
    force: bool = False,
    lease_ttl: float | None = None,
) -> CleanupResult:
    """One cleanup of ``session`` as the runtime runs it: ``model`` summarizes, the archive is
    written when ``agent`` has it on. Raises ``CleanupFailed`` (the session is unchanged)."""
    config = agent.memory_config
    options = {} if lease_ttl is None else {"lease_ttl": lease_ttl}
    return await arun_cleanup(
        bundle=services.bundle,
        session=session,
        config=config,
        summarizer=as_text_completion(model, max_tokens=services.caps.summary),
        catalog=services.catalog,
        hooks=services.hooks,
        archive_scope=archive_scope_for(agent=agent.name, user_id=user_id) if config.archive_enabled else None,
        force=force,
        embedder=services.retrieval.embedder,
        **options,
    )


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
    try:
        result = await compact(
            services=services,
            session=ctx.session,
            agent=ctx.agent,
            user_id=ctx.user_id,
            model=ctx.runtime.calls,  # through the gate with the turn's priority
            force=force,
            lease_ttl=ctx.runtime.cleanup_lease_ttl,
        )
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


def install(hooks: RuntimeHooks, agent: Any, runtime: Runtime) -> None:
    """The installer: every agent's runs compress their session (main agents and subagents)."""
    hooks.register(HookPoint.BEFORE_STEP, cleanup_hook, name=CLEANUP_HOOK)
