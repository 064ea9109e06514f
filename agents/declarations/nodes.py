"""The typed, frozen values a declaration loads into, and the vocabulary it accepts.

``agents.declarations`` is the public entry point and re-exports everything here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from memory.config import MemoryConfig

KNOWN_TOOLS: tuple[str, ...] = ("core_memory", "archive_search", "archive_read", "pruned_lookup", "todo", "subagent", "experience")
# A supplement name-merges its tools into the roster (and the runtime wires its hooks).
SUPPLEMENT_TOOLS: dict[str, tuple[str, ...]] = {"experience": ("experience",)}
KNOWN_SUPPLEMENTS: tuple[str, ...] = tuple(SUPPLEMENT_TOOLS)
MAIN_AGENT_ONLY_TOOLS: frozenset[str] = frozenset({"experience"})
# The tools of the long-term layers: a subagent has no archive and no core memory, so on a
# subagent these could never run.
LONG_TERM_TOOLS: dict[str, str] = {"archive_search": "archive", "archive_read": "archive", "core_memory": "core memory"}

BACKENDS: tuple[str, ...] = ("file", "sqlite")
DEFAULT_BACKEND = "sqlite"  # the bot default (the framework default, without a declaration, is file)
PROVIDERS: tuple[str, ...] = ("offline", "openai")  # openai = any OpenAI-compatible endpoint

MEMORY_TOGGLES: tuple[str, ...] = ("archive_enabled", "core_enabled")
MAIN_MEMORY_KEYS: tuple[str, ...] = (
    "archive_enabled",
    "core_enabled",
    "compression_threshold",
    "keep_tokens",
    "pruned_budget_tokens",
    "archive_budget_tokens",
)
SUBAGENT_MEMORY_KEYS: tuple[str, ...] = ("compression_threshold",)
AGENT_KEYS: tuple[str, ...] = (
    "description",
    "instructions",
    "tools",
    "tool_supplements",
    "model",
    "memory",
    "subagents",
    "chat",
)
ROOT_KEYS: tuple[str, ...] = ("persistence", "model", "agents")
PERSISTENCE_KEYS: tuple[str, ...] = ("backend",)
MODEL_KEYS: tuple[str, ...] = ("provider", "name", "context_window")

# Agent names key memory scopes (AgentScope), so they follow the scope id rule.
AGENT_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, slots=True)
class Persistence:
    """Which store backend holds memory (``file`` or ``sqlite``). Nothing migrates on a switch."""

    backend: str = DEFAULT_BACKEND


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """The chat model an agent talks to.

    ``provider`` is ``offline`` (the built-in deterministic model) or ``openai`` (any
    OpenAI-compatible endpoint; its URL and key come from the environment, never from the
    file). ``context_window`` also sizes the agent's memory (threshold defaults)."""

    provider: str = "offline"
    name: str = "modex-offline"
    context_window: int = 16384


@dataclass(frozen=True, slots=True)
class AgentNode:
    """One declared agent, with everything resolved.

    * ``path``: YAML path parts of the node (``("agents", "default", "subagents", "researcher")``);
      ``line`` is the line of its name.
    * ``depth``: 0 for a main agent (a top-level entry of ``agents:``), 1+ for subagents.
    * ``tools`` / ``tool_supplements``: as declared; ``effective_tools`` adds the supplements' tools.
    * ``memory_overrides``: the keys the node's ``memory:`` block sets, in file order.
    * ``model``: the effective model (file-level ``model:``, then each ancestor's and the
      node's own ``model:`` override, key by key).
    * ``memory_config``: preset by position + the overrides, sized by ``model.context_window``;
      ``experience_enabled`` is ``"experience" in tool_supplements``.
    * ``chat``: whether people are offered this main agent to chat with (``chat: false`` marks
      an internal agent, e.g. one that reviews runs); subagents never are.
    """

    name: str
    path: tuple[str, ...]
    line: int
    depth: int
    parent: str | None
    description: str
    instructions: str
    tools: tuple[str, ...]
    tool_supplements: tuple[str, ...]
    memory_overrides: tuple[tuple[str, bool | int], ...]
    model: ModelSettings
    memory_config: MemoryConfig
    subagents: tuple[AgentNode, ...] = field(default=())
    chat: bool = True

    @property
    def is_main(self) -> bool:
        return self.depth == 0

    @property
    def for_chat(self) -> bool:
        """A main agent people may start a conversation with."""
        return self.is_main and self.chat

    @property
    def preset(self) -> str:
        return self.memory_config.preset

    @property
    def yaml_path(self) -> str:
        return ".".join(self.path)

    @property
    def overrides(self) -> dict[str, bool | int]:
        return dict(self.memory_overrides)

    @property
    def effective_tools(self) -> tuple[str, ...]:
        """Declared tools, then each supplement's tools not already listed (name merge)."""
        merged = list(self.tools)
        for supplement in self.tool_supplements:
            merged.extend(t for t in SUPPLEMENT_TOOLS.get(supplement, ()) if t not in merged)
        return tuple(merged)

    def walk(self) -> Iterator[AgentNode]:
        """This node, then its subagents depth-first, in file order."""
        yield self
        for child in self.subagents:
            yield from child.walk()


@dataclass(frozen=True, slots=True)
class Declaration:
    """A validated ``bot.yml``. ``agents`` are the main agents (roots), in file order.

    ``source`` names where it came from; ``sha256`` is the hex digest of the exact bytes
    loaded (empty when built from text), which the scope editor uses to detect a file that
    changed under it."""

    persistence: Persistence
    model: ModelSettings
    agents: tuple[AgentNode, ...]
    source: str = ""
    sha256: str = ""

    def walk(self) -> Iterator[AgentNode]:
        """Every node, depth-first pre-order: each main agent followed by its subagents."""
        for agent in self.agents:
            yield from agent.walk()

    def main_agents(self) -> tuple[AgentNode, ...]:
        return self.agents

    def chat_agents(self) -> tuple[AgentNode, ...]:
        """The main agents offered for chat (those without ``chat: false``), in file order."""
        return tuple(agent for agent in self.agents if agent.chat)

    def find(self, name: str) -> AgentNode | None:
        """The node called ``name`` anywhere in the tree (names are unique), or ``None``."""
        return next((node for node in self.walk() if node.name == name), None)
