"""The runtime's own hook points, separate from the memory system's MemoryHookPoint set."""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("agents.runtime.hooks")


class HookPoint(enum.Enum):
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
    """Handlers per point, run in registration order; a failing handler is logged, never fatal."""

    def __init__(self) -> None:
        self._handlers: dict[HookPoint, list[tuple[str, Handler]]] = defaultdict(list)

    def register(self, point: HookPoint, handler: Handler, *, name: str | None = None) -> None:
        self._handlers[point].append((name or getattr(handler, "__name__", repr(handler)), handler))

    def names(self, point: HookPoint) -> list[str]:
        return [name for name, _ in self._handlers[point]]

    async def fire(self, point: HookPoint, **payload: Any) -> None:
        for name, handler in list(self._handlers[point]):
            try:
                result = handler(**payload)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("runtime hook %s at %s failed; the run continues", name, point.value)
