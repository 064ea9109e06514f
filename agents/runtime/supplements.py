"""Tool supplements: what ``tool_supplements: [name]`` adds to a main agent, by name.

A supplement contributes tools (name-merged into the compiled roster) and context providers
(supplement sections of the assembled context). Capabilities register theirs at app ready
(``agents.experience.supplement`` registers ``experience``), so the runtime and the roster compiler find
them here without importing them. Subagents never get supplements.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.runtime.tools.base import Tool
from memory.assembly.base import MemoryProvider


@dataclass(frozen=True, slots=True)
class Supplement:
    name: str
    tools: Callable[[Any], list[Tool]]
    """The tools it adds for one agent node."""
    providers: Callable[[Any], tuple[MemoryProvider, ...]]
    """The context providers it adds for one agent node."""


_lock = threading.Lock()
_supplements: dict[str, Supplement] = {}


def register_supplement(supplement: Supplement) -> None:
    with _lock:
        _supplements[supplement.name] = supplement


def unregister_supplement(name: str) -> bool:
    with _lock:
        return _supplements.pop(name, None) is not None


def declared(agent: Any) -> list[Supplement]:
    """The registered supplements ``agent`` declares, in declaration order (none on a subagent)."""
    if agent.memory_config.is_subagent:
        return []
    with _lock:
        return [_supplements[name] for name in agent.tool_supplements if name in _supplements]


def supplement_tools(agent: Any) -> list[Tool]:
    return [tool for supplement in declared(agent) for tool in supplement.tools(agent)]


def supplement_providers(agent: Any) -> tuple[MemoryProvider, ...]:
    return tuple(provider for supplement in declared(agent) for provider in supplement.providers(agent))
