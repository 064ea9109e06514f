"""The ``experience_review`` AFTER_GRAPH hook: a finished run of an agent with the supplement
queues the ExperienceReviewAgent (``agents.tasks.review_experience``).

``install`` is a runtime installer (``MODEX_RUNTIME_HOOKS``): it registers the hook only for main
agents that declare ``tool_supplements: [experience]``; every other agent's runs have no review hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from agents.experience.supplement import experience_enabled
from agents.runtime.hooks import HookPoint, RuntimeHooks
from agents.tasks import enqueue_experience_review
from memory.messages import Message
from memory.scopes import SessionScope

if TYPE_CHECKING:
    from agents.runtime.loop import Runtime

REVIEW_HOOK = "experience_review"


async def experience_review_hook(*, agent: Any, user_id: str, session: SessionScope, final: Message | None, **_: Any) -> None:
    """AFTER_GRAPH: queue the review of the finished run. Queuing is all it does: the review runs
    in the background."""
    if final is None:
        return
    await sync_to_async(enqueue_experience_review, thread_sensitive=True)(
        agent=agent.name, user=user_id, session=session.key(), final_id=final.id, final_seq=final.seq
    )


def install(hooks: RuntimeHooks, agent: Any, runtime: Runtime) -> None:
    """The installer: the review hook, only for main agents that declare the supplement."""
    if experience_enabled(agent):
        hooks.register(HookPoint.AFTER_GRAPH, experience_review_hook, name=REVIEW_HOOK)
