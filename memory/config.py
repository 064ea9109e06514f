"""The effective memory configuration of one agent, as the memory system sees it.

``agents.declarations`` builds one per declared node (preset + the node's ``memory:`` block);
``memory`` only reads it, so the memory system never imports agents/.
"""

from __future__ import annotations

from dataclasses import dataclass

MAIN_AGENT_PRESET = "main_agent_memory"
SUBAGENT_PRESET = "subagent_memory"

DEFAULT_CONTEXT_WINDOW = 16384
DEFAULT_THRESHOLD_RATIO = 0.75
DEFAULT_KEEP_RATIO = 0.40


class InvalidMemoryConfig(ValueError):
    """A memory configuration whose values contradict each other."""


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """What one agent's memory does. Long-term layers are off unless switched on."""

    preset: str = MAIN_AGENT_PRESET
    context_window: int = DEFAULT_CONTEXT_WINDOW
    compression_threshold: int | None = None  # session tokens that trigger cleanup; None: 75% of window
    keep_tokens: int | None = None  # tokens of recent history kept after cleanup; None: 40% of threshold
    archive_enabled: bool = False
    core_enabled: bool = False
    experience_enabled: bool = False
    pruned_budget_tokens: int = 1200  # budget of the <pruned> section in the context
    archive_budget_tokens: int = 1500  # budget of the archive summaries section

    def __post_init__(self) -> None:
        if self.preset not in (MAIN_AGENT_PRESET, SUBAGENT_PRESET):
            raise InvalidMemoryConfig(f"unknown preset {self.preset!r}")
        if self.core_enabled and not self.archive_enabled:
            raise InvalidMemoryConfig("core_enabled requires archive_enabled (core memory is fed by the archive)")
        if self.preset == SUBAGENT_PRESET and (self.archive_enabled or self.core_enabled or self.experience_enabled):
            raise InvalidMemoryConfig("subagents carry no long-term layers (archive, core memory, experience)")
        if self.context_window < 256:
            raise InvalidMemoryConfig("context_window must be at least 256 tokens")
        if self.threshold > self.context_window:
            raise InvalidMemoryConfig(
                f"compression_threshold ({self.threshold}) exceeds the context window ({self.context_window})"
            )
        if self.keep >= self.threshold:
            raise InvalidMemoryConfig(f"keep_tokens ({self.keep}) must be below the threshold ({self.threshold})")

    @property
    def is_subagent(self) -> bool:
        return self.preset == SUBAGENT_PRESET

    @property
    def threshold(self) -> int:
        if self.compression_threshold is not None:
            return self.compression_threshold
        return int(self.context_window * DEFAULT_THRESHOLD_RATIO)

    @property
    def keep(self) -> int:
        if self.keep_tokens is not None:
            return self.keep_tokens
        return int(self.threshold * DEFAULT_KEEP_RATIO)
