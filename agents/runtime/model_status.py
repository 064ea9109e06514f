"""Selectors for the pages: the model's capabilities, the window and threshold in use, and the
memory work waiting for the model. Synchronous (views call them); each reads cheaply.

``discover_once`` asks the server once per model and process, from the first page view on, so
the chat header and the meter show the window Modex really uses before any turn has run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from agents.llm.capabilities import Capabilities, offline_capabilities
from agents.runtime.sizing import model_window, probe_window, sized_config

logger = logging.getLogger("agents.runtime.model_status")

_TASK_LABELS = {"consolidate_core_memory": "consolidation", "review_experience": "review", "cleanup_ahead": "cleanup"}


def discover_once(model: Any) -> None:
    """Ask ``model``'s server for its window and capabilities, the first time only."""
    if getattr(model, "discovered", True):
        return
    try:
        async_to_sync(probe_window)(model)
    except Exception:  # never fail a page for it; the first turn asks again
        logger.info("could not ask the model server for its capabilities", exc_info=True)


def capabilities_of(model: Any) -> Capabilities:
    """What the pages show of ``model`` (the offline model can do everything it is asked)."""
    capabilities = getattr(model, "capabilities", None)
    if isinstance(capabilities, Capabilities):
        return capabilities
    return offline_capabilities(getattr(model, "name", "model"))


@dataclass(frozen=True, slots=True)
class Sizing:
    """The window and threshold an agent runs with, and bot.yml's when they differ."""

    window: int
    threshold: int
    declared_window: int
    declared_threshold: int

    @property
    def scaled(self) -> bool:
        return (self.window, self.threshold) != (self.declared_window, self.declared_threshold)

    def note(self) -> str:
        if not self.scaled:
            return ""
        return (f"sized to the server's {self.window:,}-token window "
                f"(bot.yml: window {self.declared_window:,}, threshold {self.declared_threshold:,})")


def sizing_of(agent: Any, model: Any) -> Sizing:
    config = agent.memory_config
    sized = sized_config(config, model_window(model))
    return Sizing(sized.context_window, sized.threshold, config.context_window, config.threshold)


@dataclass(frozen=True, slots=True)
class MemoryWork:
    """Background memory work not done yet: waiting at the model gate (by label), running
    there, and queued or running in the task queue (by kind)."""

    at_gate: tuple[str, ...] = ()
    running: int = 0
    in_queue: tuple[tuple[str, int], ...] = ()

    @property
    def pending(self) -> int:
        return max(len(self.at_gate) + self.running, sum(n for _, n in self.in_queue))

    def describe(self) -> str:
        """One line, "" when there is nothing."""
        if not self.pending:
            return ""
        parts = []
        if self.in_queue:
            parts.append(", ".join(f"{n} {label}{'s' if n != 1 else ''}" for label, n in self.in_queue))
        if self.at_gate:
            parts.append(f"{len(self.at_gate)} waiting for the model while chat goes first")
        elif self.running:
            parts.append(f"{self.running} running")
        return "Memory work queued: " + "; ".join(parts) + "."


def memory_work(services: Any) -> MemoryWork:
    """What is pending now (nothing known: an empty MemoryWork)."""
    from agents.tasks import waiting_tasks

    at_gate: tuple[str, ...] = ()
    running = 0
    if services.gate is not None:
        try:
            state = services.gate.state(services.model)
        except Exception:
            logger.warning("could not read the model gate", exc_info=True)
            state = None
        if state is not None:
            at_gate, running = state.queued, state.background_running
    try:
        counts = waiting_tasks()
    except Exception:
        logger.warning("could not count the queued tasks", exc_info=True)
        counts = {}
    in_queue = tuple((_TASK_LABELS.get(name, name), n) for name, n in sorted(counts.items()) if n)
    return MemoryWork(at_gate=at_gate, running=running, in_queue=in_queue)
