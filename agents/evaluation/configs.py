"""The memory configurations the recall benchmark compares, the agent it runs, and the meter
on the model seam that counts what each answer cost."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.declarations.nodes import AgentNode, ModelSettings
from agents.llm import ModelError, ModelTimeout, ModelUnavailable, RateLimited, Usage
from memory.config import MemoryConfig
from memory.tokens import count_text

AGENT_NAME = "recall"
INSTRUCTIONS = (
    "You are a helpful assistant with a long memory of your conversations with this user. "
    "When the user asks about something said before, answer from what was said: your memory "
    "sections, the earlier conversation, and your memory tools. Answer briefly. If something was "
    "said and later changed, the newer one holds. When asked when something happened, name the day "
    "(for example 7 May 2023). If it was never said, say plainly that you do not know."
)


def instructions_for(*, user_name: str, assistant_name: str | None, today: datetime) -> str:
    """The answering agent's instructions: the same for every configuration, with who is who
    (when the dataset names both speakers, LoCoMo) and the day the question is asked."""
    parts = [INSTRUCTIONS]
    if assistant_name:
        parts.append(
            f"In these conversations the user is {user_name} and you are {assistant_name}: what "
            f"{assistant_name} said earlier, you said."
        )
    parts.append(f"Today is {today:%A} {today.day} {today:%B %Y}.")
    return "\n\n".join(parts)


@dataclass(frozen=True)
class EvalConfig:
    """One way of remembering: ``cleanup`` False is full context (the whole history, one session)."""

    name: str
    label: str
    cleanup: bool = True
    archive: bool = False
    core: bool = False


CONFIGS = (
    EvalConfig("full_context", "full context (no cleanup)", cleanup=False),
    EvalConfig("session_pruned", "session + pruned"),
    EvalConfig("archive", "+ archive", archive=True),
    EvalConfig("archive_core", "+ archive + core memory", archive=True, core=True),
)
CONFIG_NAMES = tuple(c.name for c in CONFIGS)


def configs_named(names: list[str] | None) -> tuple[EvalConfig, ...]:
    """The configurations called ``names`` (all when None), in the canonical order."""
    if not names:
        return CONFIGS
    unknown = sorted(set(names) - set(CONFIG_NAMES))
    if unknown:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(CONFIG_NAMES)}")
    return tuple(c for c in CONFIGS if c.name in names)


@dataclass(frozen=True)
class Budget:
    """Token sizes of a run: the model's window, the cleanup threshold and kept tail of the
    configurations that clean up (full context never does), and the archive section's budget."""

    context_window: int = 32768
    threshold: int = 1500
    keep: int = 500
    archive: int = field(default_factory=lambda: MemoryConfig().archive_budget_tokens)  # the shipped default

    def memory_config(self, config: EvalConfig) -> MemoryConfig:
        if not config.cleanup:
            return MemoryConfig(
                context_window=self.context_window,
                compression_threshold=self.context_window,
                keep_tokens=self.context_window // 2,
            )
        return MemoryConfig(
            context_window=self.context_window,
            compression_threshold=self.threshold,
            keep_tokens=self.keep,
            archive_enabled=config.archive,
            core_enabled=config.core,
            archive_budget_tokens=self.archive,
        )


def agent_for(
    config: EvalConfig, budget: Budget, *, model_name: str, offline: bool, instructions: str = INSTRUCTIONS
) -> AgentNode:
    """The benchmark's main agent under ``config``: memory tools only (a tier's tool is compiled
    in only when the tier is on), no subagents, no experience supplement."""
    return AgentNode(
        name=AGENT_NAME,
        path=("agents", AGENT_NAME),
        line=0,
        depth=0,
        parent=None,
        description="The recall benchmark's agent.",
        instructions=instructions,
        tools=("core_memory", "archive_search", "pruned_lookup"),
        tool_supplements=(),
        memory_overrides=(),
        model=ModelSettings(
            provider="offline" if offline else "openai", name=model_name, context_window=budget.context_window
        ),
        memory_config=budget.memory_config(config),
    )


#: Failures of the endpoint itself, after the model's own retries: results made meanwhile would
#: measure the outage, not the memory, so the run stops instead (and resumes later).
TRANSIENT = (ModelUnavailable, ModelTimeout, RateLimited)


class MeteredModel:
    """A ChatModel that forwards to ``inner`` and counts calls and tokens (the endpoint's
    reported usage; counted with ``memory.tokens`` when it reports none). ``outages`` keeps
    the TRANSIENT errors its calls raised, whoever caught them (a cleanup falls back)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.outages: list[ModelError] = []

    def describe(self) -> str:
        return self.inner.describe()

    def snapshot(self) -> tuple[int, int, int]:
        return self.calls, self.prompt_tokens, self.completion_tokens

    async def stream(
        self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **options: Any
    ) -> AsyncIterator[Any]:
        self.calls += 1
        usage: Usage | None = None
        try:
            async with contextlib.aclosing(self.inner.stream(messages=messages, tools=tools, **options)) as events:
                async for event in events:
                    if isinstance(event, Usage):
                        usage = event
                    yield event
        except TRANSIENT as exc:
            self.outages.append(exc)
            raise
        if usage is not None and usage.prompt_tokens:
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
        else:
            self.prompt_tokens += count_text(json.dumps(messages, ensure_ascii=False)) + (
                count_text(json.dumps(tools)) if tools else 0
            )
