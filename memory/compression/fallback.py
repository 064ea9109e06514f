"""What a summary says without a model: the fallback summary, and the sections a model left out.

``fallback_body`` is used when the summarizer failed on every attempt; ``filled_section`` writes
one section a model's answer lacked (``memory.compression.summary``). Both read the same
material from the messages (``Material``):

* Goal: the first and the latest user requests, dated.
* Decisions: sentences saying something was decided, and the last assistant reply.
* Facts learned: every user statement of fact or preference, dated, with its seq
  (``memory.compression.statements``): never only the first and last messages.
* Open tasks: sentences naming something still to do, and the latest request to answer.
* Reasoning trail: one line per evicted reasoning step, as long as the budget allows.
* Tool results that matter: the tools used and the last result.

A previous summary's sections are carried into the same sections (its facts before the new
ones), so repeated fallbacks lose nothing that still fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memory import tokens as tok
from memory.compression.answers import parse_sections
from memory.compression.dates import day
from memory.compression.sections import cut_body, fit_sections, items, split_sections
from memory.compression.statements import (
    Statement,
    covered,
    dated_line,
    decisions,
    excerpt,
    ledger_line,
    open_tasks,
    user_statements,
)
from memory.compression.summary_input import SECTIONS
from memory.messages import Message
from memory.text import storable

FALLBACK_HEADING = "# Fallback summary"


_MIN_EXCERPT = 24  # characters of a reasoning line at the least, before lines are elided


def _trail_lines(reasoning: Sequence[Message], limit: int) -> list[str]:
    return [f"- seq {m.seq}: {excerpt(storable(m.reasoning_content or ''), limit)}" for m in reasoning]


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


# -- the material -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Material:
    """What the evicted messages say, read once, for every section built without a model."""

    history: tuple[Message, ...]
    previous: dict[str, str] = field(default_factory=dict)  # the previous summary's sections
    statements: tuple[Statement, ...] = ()
    decided: tuple[Statement, ...] = ()
    tasks: tuple[Statement, ...] = ()

    @classmethod
    def of(cls, history: Sequence[Message], previous_text: str | None) -> Material:
        history = tuple(history)
        return cls(
            history=history,
            previous=parse_sections(previous_text) if previous_text else {},
            statements=tuple(user_statements(history)),
            decided=tuple(decisions(history)),
            tasks=tuple(open_tasks(history)),
        )

    @property
    def reasoning(self) -> list[Message]:
        return [m for m in self.history if m.reasoning_content and m.reasoning_content.strip()]


@dataclass(frozen=True, slots=True)
class _Detail:
    """How much the sections other than the facts and the trail say (smaller budgets say less)."""

    excerpt: int  # characters of a request, reply or result excerpt
    reason: int  # characters of the failure reason
    tools: int  # tool lines at most
    sentences: int  # decision and task sentences at most
    intro: bool  # the line saying how the summary was built
    dates: bool = True  # requests and replies with their date


_DETAILS = (
    _Detail(excerpt=160, reason=240, tools=12, sentences=8, intro=True),
    _Detail(excerpt=80, reason=80, tools=6, sentences=4, intro=True),
    _Detail(excerpt=40, reason=40, tools=3, sentences=2, intro=False),
    _Detail(excerpt=16, reason=24, tools=1, sentences=0, intro=False, dates=False),
)


def _merged(previous: str | None, new: list[str]) -> list[str]:
    """The previous section's items, then the new lines not already among them."""
    kept = items(previous) if previous and previous.strip().lower() not in ("- none", "none", "- (none)") else []
    seen = {line.strip() for line in kept}
    return kept + [line for line in new if line.strip() not in seen]


_LEDGER = re.compile(r'^On .+? the user said: "(?P<text>.*)"(?: \(seq \d+\))?$')
_DATE_PREFIX = re.compile(r"^(?:On )?\d{1,2} [A-Z][a-z]{2} \d{4}(?: \d{2}:\d{2})?(?:,? [^:]{0,40})?:\s*")


def fact_text(item: str) -> str:
    """What a Facts learned item says, without its bullet, date and seq."""
    line = " ".join(item.split()).removeprefix("- ").removeprefix("* ")
    ledger = _LEDGER.match(line)
    if ledger:
        return ledger.group("text")
    return re.sub(r"\s*\(seq [\d, ]+\)$", "", _DATE_PREFIX.sub("", line))


def facts_lines(material: Material, *, beside: str = "", carry: bool = True) -> list[str]:
    """The Facts learned items: the previous summary's (with ``carry=False``, only those
    ``beside`` does not already say), then each user statement not said in ``beside`` (what a
    model wrote) or among them, dated, with its seq."""
    previous = _merged(material.previous.get("Facts learned"), [])
    kept = previous if carry else [item for item in previous if not covered(fact_text(item), beside)]
    said = "\n".join([beside, *kept])
    fresh = [ledger_line(s) for s in material.statements if not covered(s.text, said)]
    return kept + fresh


def _section_lines(name: str, material: Material, detail: _Detail) -> list[str]:
    history = material.history
    users = [m for m in history if m.role == "user" and not m.is_compact_summary]
    replies = [m for m in history if m.role == "assistant" and m.content]

    def said(message: Message, what: str) -> str:
        text = excerpt(storable(message.content or ""), detail.excerpt)
        when = f"{day(message.created_at)}, " if detail.dates else ""
        return f"{what} ({when}seq {message.seq}): {text}"

    if name == "Goal":
        new = [said(users[0], "first request")] if users else []
        if len(users) > 1:
            new.append(said(users[-1], "latest request"))
    elif name == "Decisions":
        new = [dated_line(s)[2:] for s in material.decided[-detail.sentences :]] if detail.sentences else []
        if replies:
            new.append(said(replies[-1], "last reply"))
    elif name == "Open tasks":
        new = [dated_line(s)[2:] for s in material.tasks[-detail.sentences :]] if detail.sentences else []
        if users:
            new.append(f"answer the latest request (seq {users[-1].seq})")
    elif name == "Tool results that matter":
        tools: dict[str, list[int]] = {}
        for message in history:
            for call in message.tool_calls:
                tools.setdefault(storable(call.name), []).append(message.seq or 0)
        new = [
            f"{tool} ×{len(seqs)} (seq {', '.join(map(str, seqs[:6]))}{', …' if len(seqs) > 6 else ''})"
            for tool, seqs in sorted(tools.items(), key=lambda item: (-len(item[1]), item[0]))[: detail.tools]
        ]
        if len(tools) > detail.tools:
            new.append(f"and {len(tools) - detail.tools} more tool(s)")
        results = [m for m in history if m.role == "tool"]
        if results:
            last = results[-1]
            new.append(f"last result (seq {last.seq}, {storable(last.name or 'tool')}): "
                       f"{excerpt(storable(last.content or ''), detail.excerpt)}")
    else:
        raise ValueError(f"no mechanical builder for the section {name!r}")
    return _merged(material.previous.get(name), [f"- {line}" for line in new])


def filled_section(name: str, material: Material, *, beside: str = "") -> str:
    """One section built from the messages, for an answer that lacked it (full detail; the
    summary is fitted to its budget afterwards)."""
    if name == "Facts learned":
        lines = facts_lines(material, beside=beside)
    elif name == "Reasoning trail":
        previous = material.previous.get(name)
        lines = _merged(previous, reasoning_trail(material.reasoning, 10**6) if material.reasoning else [])
    else:
        lines = _section_lines(name, material, _DETAILS[0])
    return "\n".join(lines) or "- none"


# -- the fallback summary ---------------------------------------------------------------------


def fallback_body(*, history: Sequence[Message], previous_text: str | None, reason: str, max_tokens: int) -> str:
    """A deterministic summary built from the messages alone, marked as a fallback.

    It carries the previous summary section by section, keeps every user statement of fact or
    preference (dated, with its seq), the requests, decisions, tasks and tools at a detail the
    budget allows, and spends the rest on the reasoning trail: one line for every evicted step
    that had reasoning, as long as the budget allows, or, when even short lines do not all fit,
    as many as fit and a line saying how many were elided. At most ``max_tokens`` tokens; when
    the other sections must shrink they lose whole items (the first and the newest stay, a line
    says how many went), and no section is ever left out.
    """
    material = Material.of(history, previous_text)
    reasoning = material.reasoning
    least_trail = tok.count_text(_elided(reasoning) if reasoning else "- none")
    facts = "\n".join(facts_lines(material)) or "- none"
    # The trail wants a short line per step (or at least the elision line), up to a third of the
    # budget; the other sections say less on a smaller budget, and are cut by whole items if
    # even their least detail is larger than the rest.
    trail_least = tok.count_text("\n".join(_trail_lines(reasoning, _MIN_EXCERPT))) if reasoning else least_trail
    reserve = max(least_trail, min(trail_least, max_tokens // 3))
    for detail in _DETAILS:
        render = _renderer(material=material, reason=reason, detail=detail)
        fixed = tok.count_text(render(facts, []))
        if fixed + reserve + 2 <= max_tokens:
            break
    others = split_sections(fit_sections(render(facts, []), max(0, max_tokens - reserve - 2)))
    others = [(heading, "" if heading == _TRAIL else body) for heading, body in others]
    room = max(0, max_tokens - tok.count_text(_joined(others)) - 2)
    previous_trail = material.previous.get("Reasoning trail")
    carried = cut_body(previous_trail, room // 3) if previous_trail else ""
    trail = reasoning_trail(reasoning, max(0, room - tok.count_text(carried) - 1))
    if carried and trail == ["- none"]:
        trail = []
    trail_text = "\n".join(_merged(carried, trail) if carried else trail)
    body = _joined([(heading, trail_text if heading == _TRAIL else body) for heading, body in others])
    return fit_sections(body, max_tokens, protect="Reasoning trail")


_TRAIL = "## Reasoning trail"
_TRAIL_SLOT = "- (the reasoning trail)"


def _joined(pieces: list[tuple[str, str]]) -> str:
    return "\n\n".join("\n".join(part for part in (heading, body) if part) for heading, body in pieces)


def _renderer(*, material: Material, reason: str, detail: _Detail) -> Callable[[str, list[str]], str]:
    intro = [f"{FALLBACK_HEADING} (the summarizer failed: {excerpt(reason, detail.reason)})"]
    if detail.intro:
        intro.append("Built mechanically from the messages, without a model; look up details in the pruned catalog.")
    fixed = {name: "\n".join(_section_lines(name, material, detail)) or "- none"
             for name in SECTIONS if name not in ("Facts learned", "Reasoning trail")}

    def render(facts: str, trail: list[str]) -> str:
        bodies = {**fixed, "Facts learned": facts, "Reasoning trail": "\n".join(trail) or _TRAIL_SLOT}
        return "\n\n".join([*intro, *(f"## {name}\n{bodies[name]}" for name in SECTIONS)])

    return render
