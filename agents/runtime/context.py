"""``ToolContext``: what a tool may use while it runs (the type the tools and hooks take)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.runtime.hooks import RuntimeHooks
from agents.runtime.services import MemoryServices
from agents.runtime.tools.scratchpad import RunScratchpad
from memory.scopes import SessionScope
from memory.stores.base import Fence, SessionHead

if TYPE_CHECKING:
    from agents.runtime.loop import Runtime


@dataclass
class ToolContext:
    """What a tool may use while it runs: the run's agent, user, session and services."""

    services: MemoryServices
    runtime: Runtime
    agent: Any  # agents.declarations.AgentNode
    user_id: str
    session: SessionScope
    scratchpad: RunScratchpad
    hooks: RuntimeHooks = field(default_factory=RuntimeHooks)  # the run's (Runtime.hooks_for)
    depth: int = 0
    subagent_sessions: list[SessionScope] = field(default_factory=list)
    fence: Fence | None = None  # the turn lease's fencing token: every session write carries it
    #: The session's head as the run's own last write left it, or None when it is not known:
    #: spares the cleanup check a read before each step, which uses it once. It is read after
    #: each write, so it covers whatever a step's tools wrote before their results; only a
    #: handler that runs after that read (AFTER_TOOL) could change the session unseen, and the
    #: loop drops the head when there is one.
    head: SessionHead | None = None
    #: Whether this turn has waited once for a cleanup ahead of need to give the session back
    #: (``agents.runtime.cleanup``): a holder that does not give way costs a turn that wait once.
    lease_waited: bool = False
    #: The names of the conversation's people (the user's), which archive search leaves out of
    #: its queries: they say who spoke, not what was said (memory.retrieval.text.without_names).
    participants: tuple[str, ...] = ()
