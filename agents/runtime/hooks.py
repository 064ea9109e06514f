"""The runtime's own hook points, separate from the memory system's MemoryHookPoint set.

Every agent's run has its own ``RuntimeHooks``: the runtime-wide handlers (``Runtime.hooks``,
registered by callers) followed by what the *installers* registered for that agent. Installers
are how capabilities join the loop without the loop knowing them: cleanup (BEFORE_STEP), the
experience review (AFTER_GRAPH, only for agents with the supplement), the long-term session
binding. The app registers the installers named by ``settings.MODEX_RUNTIME_HOOKS`` at ready; a
deployment replaces or removes one by changing that list (or ``unregister_installer``).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

logger = logging.getLogger("agents.runtime.hooks")


class HookPoint(enum.Enum):
    BEFORE_STEP = "before_step"
    """At the start of each step, before the context is assembled (``ctx``, ``force``). A
    handler may be an async generator: its events join the turn's stream (cleanup is one)."""
    BEFORE_MODEL = "before_model"
    """Just before a model call, with the assembled request."""
    AFTER_MODEL = "after_model"
    """After a model call returned its message (or failed)."""
    BEFORE_TOOL = "before_tool"
    """Before one tool call runs, with its validated arguments."""
    AFTER_TOOL = "after_tool"
    """After one tool call, with its result or error."""
    AFTER_GRAPH = "after_graph"
    """When an agent's run has finished (the final answer is persisted)."""


Handler = Callable[..., Any]


class RuntimeHooks:
    """Handlers per point, run in registration order (a parent's first); a failing handler is
    logged, never fatal."""

    def __init__(self, parent: RuntimeHooks | None = None) -> None:
        self._parent = parent
        self._handlers: dict[HookPoint, list[tuple[str, Handler]]] = defaultdict(list)

    def register(self, point: HookPoint, handler: Handler, *, name: str | None = None) -> None:
        self._handlers[point].append((name or getattr(handler, "__name__", repr(handler)), handler))

    def unregister(self, point: HookPoint, name: str) -> bool:
        """Remove this object's handlers called ``name`` at ``point``; True if there were any."""
        before = len(self._handlers[point])
        self._handlers[point] = [(n, h) for n, h in self._handlers[point] if n != name]
        return len(self._handlers[point]) != before

    def entries(self, point: HookPoint) -> list[tuple[str, Handler]]:
        inherited = self._parent.entries(point) if self._parent is not None else []
        return [*inherited, *self._handlers[point]]

    def names(self, point: HookPoint) -> list[str]:
        return [name for name, _ in self.entries(point)]

    async def fire(self, point: HookPoint, **payload: Any) -> None:
        async for _ in self.stream(point, **payload):
            pass

    async def stream(self, point: HookPoint, **payload: Any) -> AsyncIterator[Any]:
        """Run the handlers of ``point``; yield the events of those that are async generators."""
        for name, handler in self.entries(point):
            try:
                result = handler(**payload)
                if hasattr(result, "__aiter__"):
                    async for event in result:
                        yield event
                elif inspect.isawaitable(result):
                    await result
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception:
                logger.exception("runtime hook %s at %s failed; the run continues", name, point.value)


Installer = Callable[[RuntimeHooks, Any, Any], None]
"""``installer(hooks, agent, runtime)``: register ``agent``'s handlers on ``hooks``."""

_lock = threading.Lock()
_installers: dict[str, Installer] = {}


def register_installer(name: str, installer: Installer) -> None:
    """Add (or replace) the installer ``name``; runtimes apply it to the agents they meet next."""
    with _lock:
        _installers[name] = installer


def unregister_installer(name: str) -> bool:
    with _lock:
        return _installers.pop(name, None) is not None


def installers() -> list[tuple[str, Installer]]:
    with _lock:
        return list(_installers.items())
