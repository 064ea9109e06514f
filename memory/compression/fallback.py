"""The deterministic fallback summary, used when the summarizer failed on every attempt."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory import tokens as tok
from memory.compression.sections import fit_sections
from memory.compression.summary_input import line_excerpt
from memory.messages import Message

FALLBACK_HEADING = "# Fallback summary"


def fit_tokens(text: str, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens (unchanged when it fits)."""
    return text if tok.count_text(text) <= max_tokens else tok.truncate_text(text, max_tokens)


_MIN_EXCERPT = 24  # characters of a reasoning line at the least, before lines are elided
_MAX_TOOL_LINES = 12


def _trail_lines(reasoning: Sequence[Message], limit: int) -> list[str]:
    return [f"- seq {m.seq}: {line_excerpt(m.reasoning_content, limit)}" for m in reasoning]


def _cost(lines: Sequence[str]) -> int:
    return tok.count_text("\n".join(lines))


def _elided(reasoning: Sequence[Message]) -> str:
    span = f"seq {reasoning[0].seq}" if len(reasoning) == 1 else f"seq {reasoning[0].seq}–{reasoning[-1].seq}"
    return f"- … {len(reasoning)} more reasoning step(s), {span}, elided to fit; pruned_lookup has them"


def reasoning_trail(reasoning: Sequence[Message], budget: int) -> list[str]:
    """One line per reasoning step, as long as ``budget`` allows all of them to be.

    The longest excerpt that lets every step keep its line is used (found by bisection); when
    not even short lines all fit, steps are elided from the middle (the first and the latest
    matter most) and one line says how many, and which.
    """
    if not reasoning:
        return ["- none"]
    longest = max(len(" ".join((m.reasoning_content or "").split())) for m in reasoning)
    low, high = _MIN_EXCERPT, max(_MIN_EXCERPT, longest)
    if _cost(_trail_lines(reasoning, low)) <= budget:
        while low < high:  # the largest limit whose lines still fit
            middle = (low + high + 1) // 2
            if _cost(_trail_lines(reasoning, middle)) <= budget:
                low = middle
            else:
                high = middle - 1
        return _trail_lines(reasoning, low)
    lines = _trail_lines(reasoning, _MIN_EXCERPT)
    costs = [tok.count_text(line) + 1 for line in lines]
    head, tail = 0, len(lines)  # lines[:head] and lines[tail:] are shown
    used = tok.count_text(_elided(reasoning)) + 1
    while head < tail:
        index = head if head <= len(lines) - tail else tail - 1
        if used + costs[index] > budget:
            break
        used += costs[index]
        if index == head:
            head += 1
        else:
            tail -= 1
    while True:
        shown = [*lines[:head], _elided(reasoning[head:tail]), *lines[tail:]] if head < tail else lines
        if head == 0 and tail == len(lines) or _cost(shown) <= budget:
            return shown
        if head > len(lines) - tail:  # give back one shown line, from the longer end
            head -= 1
        else:
            tail += 1


@dataclass(frozen=True, slots=True)
class _Detail:
    """How much the sections other than the reasoning trail say (smaller budgets say less)."""

    excerpt: int  # characters of a request, reply or result excerpt
    reason: int  # characters of the failure reason
    tools: int  # tool lines at most
    previous: int  # the previous summary's share: budget // previous
    intro: bool  # the line saying how the summary was built


_DETAILS = (
    _Detail(excerpt=160, reason=240, tools=12, previous=3, intro=True),
    _Detail(excerpt=80, reason=80, tools=6, previous=4, intro=True),
    _Detail(excerpt=40, reason=40, tools=3, previous=6, intro=False),
    _Detail(excerpt=16, reason=24, tools=1, previous=8, intro=False),
)


def fallback_body(*, history: Sequence[Message], previous_text: str | None, reason: str, max_tokens: int) -> str:
    """A deterministic summary built from the messages alone, marked as a fallback.

    It carries the previous summary (a share of the budget, cut section by section), the first
    and latest user requests, the last assistant reply, the tools used and the last result,
    and spends the rest of the budget on the reasoning trail: one line for every evicted step
    that had reasoning, as long as the budget allows, or, when even short lines do not all
    fit, as many as fit and a line saying how many were elided. The other sections say less
    on a small budget so that the trail keeps at least that line. At most ``max_tokens``
    tokens, and no section is ever cut off.
    """
    reasoning = [m for m in history if m.reasoning_content and m.reasoning_content.strip()]
    least_trail = tok.count_text(_elided(reasoning) if reasoning else "- none")
    for detail in _DETAILS:
        render = _renderer(history=history, previous_text=previous_text, reason=reason, max_tokens=max_tokens,
                           detail=detail)
        fixed = tok.count_text(render([]))
        if fixed + least_trail + 2 <= max_tokens:
            break
    body = render(reasoning_trail(reasoning, max(0, max_tokens - fixed - 2)))
    return fit_sections(body, max_tokens, protect="Reasoning trail")


def _renderer(
    *, history: Sequence[Message], previous_text: str | None, reason: str, max_tokens: int, detail: _Detail
) -> Callable[[list[str]], str]:
    users = [m for m in history if m.role == "user"]
    replies = [m for m in history if m.role == "assistant" and m.content]
    tools: dict[str, list[int]] = {}
    for message in history:
        for call in message.tool_calls:
            tools.setdefault(call.name, []).append(message.seq or 0)

    def bullets(items: list[str]) -> str:
        return "\n".join(f"- {item}" for item in items) if items else "- none"

    def excerpt(text: str | None) -> str:
        return line_excerpt(text, detail.excerpt)

    goal = []
    if users:
        goal.append(f"first request (seq {users[0].seq}): {excerpt(users[0].content)}")
        if len(users) > 1:
            goal.append(f"latest request (seq {users[-1].seq}): {excerpt(users[-1].content)}")
    decisions = [f"last reply (seq {replies[-1].seq}): {excerpt(replies[-1].content)}"] if replies else []
    tool_lines = [
        f"{name} ×{len(seqs)} (seq {', '.join(map(str, seqs[:6]))}{', …' if len(seqs) > 6 else ''})"
        for name, seqs in sorted(tools.items(), key=lambda item: (-len(item[1]), item[0]))[: detail.tools]
    ]
    if len(tools) > detail.tools:
        tool_lines.append(f"and {len(tools) - detail.tools} more tool(s)")
    results = [m for m in history if m.role == "tool"]
    if results:
        last = results[-1]
        tool_lines.append(f"last result (seq {last.seq}, {last.name or 'tool'}): {excerpt(last.content)}")
    span = f"seq {history[0].seq}–{history[-1].seq}" if history else "none"
    intro = [f"{FALLBACK_HEADING} (the summarizer failed: {line_excerpt(reason, detail.reason)})"]
    if detail.intro:
        intro.append("Built mechanically from the messages, without a model; look up details in the pruned catalog.")
    if previous_text:
        # Cut section by section first; then one level deeper, so its own "## Goal" etc. read as
        # part of it, not as this summary's.
        carried = fit_sections(previous_text, max(16, max_tokens // detail.previous))
        carried = re.sub(r"(?m)^(#{1,5})(?=\s)", r"#\1", carried)
        intro.append("## Previous summary\n" + carried)
    facts = [f"{len(history)} messages ({span}) are in the pruned catalog"]
    tasks = [f"answer the latest request (seq {users[-1].seq})"] if users else []

    def render(trail: list[str]) -> str:
        sections = [
            *intro,
            "## Goal\n" + bullets(goal),
            "## Decisions\n" + bullets(decisions),
            "## Facts learned\n" + bullets(facts),
            "## Open tasks\n" + bullets(tasks),
            "## Reasoning trail\n" + "\n".join(trail),
            "## Tool results that matter\n" + bullets(tool_lines),
        ]
        return "\n\n".join(sections)

    return render
