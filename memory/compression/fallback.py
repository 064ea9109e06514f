"""The deterministic fallback summary, used when the summarizer failed on every attempt."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory import tokens as tok
from memory.compression.summary_input import line_excerpt
from memory.messages import Message

FALLBACK_HEADING = "# Fallback summary"


def fit_tokens(text: str, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens (unchanged when it fits)."""
    return text if tok.count_text(text) <= max_tokens else tok.truncate_text(text, max_tokens)


def fallback_body(*, history: Sequence[Message], previous_text: str | None, reason: str, max_tokens: int) -> str:
    """A deterministic summary built from the messages alone, marked as a fallback.

    It carries the previous summary (cut to at most half the budget), the first and last user
    requests, the last assistant reply, reasoning excerpts and the tools used, so the agent
    keeps its bearings even when no model could summarize.
    """
    users = [m for m in history if m.role == "user"]
    replies = [m for m in history if m.role == "assistant" and m.content]
    reasoning = [m for m in history if m.reasoning_content]
    tools: dict[str, list[int]] = {}
    for message in history:
        for call in message.tool_calls:
            tools.setdefault(call.name, []).append(message.seq or 0)

    def bullets(items: list[str]) -> str:
        return "\n".join(f"- {item}" for item in items) if items else "- none"

    goal = []
    if users:
        goal.append(f"first request (seq {users[0].seq}): {line_excerpt(users[0].content)}")
        if len(users) > 1:
            goal.append(f"latest request (seq {users[-1].seq}): {line_excerpt(users[-1].content)}")
    decisions = [f"last reply (seq {replies[-1].seq}): {line_excerpt(replies[-1].content)}"] if replies else []
    if len(reasoning) > 8:
        reasoning = reasoning[:3] + reasoning[-5:]
    trail = [f"seq {m.seq}: {line_excerpt(m.reasoning_content, 200)}" for m in reasoning]
    tool_lines = [
        f"{name} ×{len(seqs)} (seq {', '.join(map(str, seqs[:6]))}{', …' if len(seqs) > 6 else ''})"
        for name, seqs in sorted(tools.items())
    ]
    results = [m for m in history if m.role == "tool"]
    if results:
        last = results[-1]
        tool_lines.append(f"last result (seq {last.seq}, {last.name or 'tool'}): {line_excerpt(last.content)}")
    span = f"seq {history[0].seq}–{history[-1].seq}" if history else "none"
    sections = [
        f"{FALLBACK_HEADING} (the summarizer failed: {line_excerpt(reason, 240)})",
        "Built mechanically from the messages, without a model; look up details in the pruned catalog.",
    ]
    if previous_text:
        # One level deeper, so its own "## Goal" etc. read as part of it, not as this summary's.
        carried = re.sub(r"(?m)^(#{1,5})(?=\s)", r"#\1", previous_text)
        sections.append("## Previous summary\n" + fit_tokens(carried, max(32, max_tokens // 2)))
    sections += [
        "## Goal\n" + bullets(goal),
        "## Decisions\n" + bullets(decisions),
        "## Facts learned\n" + bullets([f"{len(history)} messages ({span}) are in the pruned catalog"]),
        "## Open tasks\n" + bullets([f"answer the latest request (seq {users[-1].seq})"] if users else []),
        "## Reasoning trail\n" + bullets(trail),
        "## Tool results that matter\n" + bullets(tool_lines),
    ]
    return fit_tokens("\n\n".join(sections), max_tokens)
