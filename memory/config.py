"""The effective memory configuration of one agent, as the memory system sees it.

``agents.declarations`` builds one per declared node (preset + the node's ``memory:`` block);
``memory`` only reads it, so the memory system never imports agents/.

Construction rejects values that contradict each other (``InvalidMemoryConfig``).
``budget_problems()`` checks the window accounting: whether what a cleanup leaves (the compact
summary and the kept tail) fits beside the memory sections and the reply (else the summary,
the oldest message, is the first the context drops), whether a cleanup can bring the session
under the threshold at all, whether the threshold stays below the usable window (the window less
the reply reserve), and whether the pruned section can say what it must. The declaration layer reports both
at boot, with the YAML path of the key to change.
"""

from __future__ import annotations

from dataclasses import dataclass

MAIN_AGENT_PRESET = "main_agent_memory"
SUBAGENT_PRESET = "subagent_memory"

DEFAULT_CONTEXT_WINDOW = 16384
DEFAULT_THRESHOLD_RATIO = 0.75
DEFAULT_KEEP_RATIO = 0.40
REPLY_RESERVE_CAP = 1024  # tokens kept free for the model's answer: an eighth of the window, at most this
SUMMARY_HEADER_TOKENS = 64  # the compact summary's one-line header, beside its body budget
# The smallest <pruned_messages> section that still says how many messages were removed and
# how to read them (PrunedProvider's compact form, with five-digit counts).
PRUNED_MIN_BUDGET = 64


class InvalidMemoryConfig(ValueError):
    """A memory configuration whose values contradict each other."""


@dataclass(frozen=True, slots=True)
class BudgetProblem:
    """One way the budgets do not fit the window. ``keys`` are the settings involved, the one to
    change first leading; ``message`` says what does not fit and by how much."""

    keys: tuple[str, ...]
    message: str
    hint: str = ""  # what to change, when "lower one of keys" is not it


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

    @property
    def reply_reserve(self) -> int:
        """Tokens of the window kept free for the model's answer (the assembler's default)."""
        return min(REPLY_RESERVE_CAP, self.context_window // 8)

    @property
    def usable_window(self) -> int:
        """The window less the reply reserve: what a request may fill. The threshold must stay
        below it, or the session outgrows what is sent before a cleanup comes."""
        return self.context_window - self.reply_reserve

    @property
    def summary_budget(self) -> int:
        """Tokens a compact summary body may take so that summary + kept tail stays below the threshold."""
        return max(96, min(2048, (self.threshold - self.keep) // 2))

    def budget_problems(self) -> tuple[BudgetProblem, ...]:
        """Every way this configuration's budgets do not fit its window (empty when they do).

        Not raised at construction (a config built in code may be deliberately tight); the
        declaration layer reports these at boot.
        """
        problems = []
        if self.pruned_budget_tokens < PRUNED_MIN_BUDGET:
            problems.append(
                BudgetProblem(
                    ("pruned_budget_tokens",),
                    f"pruned_budget_tokens ({self.pruned_budget_tokens}) is below {PRUNED_MIN_BUDGET} tokens, the "
                    "smallest pruned catalog section that still says how many messages were removed",
                )
            )
        summary = self.summary_budget + SUMMARY_HEADER_TOKENS
        parts = [
            ("the kept tail", "keep_tokens", self.keep),
            ("the compact summary", "compression_threshold", summary),
            ("the pruned catalog", "pruned_budget_tokens", self.pruned_budget_tokens),
        ]
        if self.archive_enabled:
            parts.append(("the archive summaries", "archive_budget_tokens", self.archive_budget_tokens))
        parts.append(("the reply", "", self.reply_reserve))
        needed = sum(tokens for _, _, tokens in parts)
        if needed > self.context_window:
            listed = ", ".join(f"{what} {tokens}" for what, _, tokens in parts)
            # The biggest memory section first: it is what a small window most often cannot afford.
            sections = sorted((p for p in parts if p[1].endswith("budget_tokens")), key=lambda p: -p[2])
            keys = (*(key for _, key, _ in sections), "keep_tokens", "compression_threshold")
            problems.append(
                BudgetProblem(
                    keys,
                    f"the context window ({self.context_window} tokens) cannot hold what a cleanup leaves beside the "
                    f"memory sections and the reply ({listed}: {needed} tokens, {needed - self.context_window} too "
                    "many), so the compact summary would be dropped from the context",
                )
            )
        if self.threshold >= self.usable_window:
            problems.append(
                BudgetProblem(
                    ("compression_threshold",),
                    f"compression_threshold ({self.threshold}) is not below the usable window ({self.usable_window} "
                    f"tokens: the window of {self.context_window} less {self.reply_reserve} kept for the reply), so "
                    "the conversation would outgrow what is sent to the model before any cleanup runs, and the "
                    "model would silently work from a trimmed copy",
                    hint=f"Lower compression_threshold below {self.usable_window}, or raise model.context_window.",
                )
            )
        after = self.keep + self.summary_budget + SUMMARY_HEADER_TOKENS
        if after > self.threshold:
            problems.append(
                BudgetProblem(
                    ("keep_tokens", "compression_threshold"),
                    f"a cleanup cannot bring the session under the threshold ({self.threshold}): the kept tail "
                    f"({self.keep}) and the compact summary (up to {self.summary_budget + SUMMARY_HEADER_TOKENS}) "
                    f"take {after} tokens, so every step would clean up again",
                    hint=f"Raise compression_threshold above {after}, or lower keep_tokens.",
                )
            )
        return tuple(problems)
