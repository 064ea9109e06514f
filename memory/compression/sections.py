"""Fitting a structured summary into its token budget section by section.

Cutting a summary from its end loses whole sections (the reasoning trail, the open tasks, the
tool results come last). ``fit_sections`` instead gives every section its share of the budget:
sections smaller than an equal share keep everything, and what they leave is shared among the
larger ones (water-filling). Each section keeps its heading and the first lines of its body
that fit its share; a line cut inside ends with an ellipsis. So no section is ever dropped,
and the result is at most the budget.
"""

from __future__ import annotations

import re

from memory import tokens as tok
from memory.compression.summary_input import SECTIONS

_HEADING_LINE = re.compile(
    rf"(?im)^[ \t]{{0,3}}#{{1,6}}[ \t]*\**[ \t]*(?:{'|'.join(re.escape(n) for n in SECTIONS)})\b.*$"
)
_ELLIPSIS = "…"
_MIN_LINE_TOKENS = 4  # a line cut to fewer tokens than this is left out instead
_JOIN = "\n"


def split_sections(text: str) -> list[tuple[str, str]]:
    """``text`` as ``[(heading line, body), ...]``; text before the first heading has heading ''."""
    pieces: list[tuple[str, str]] = []
    matches = list(_HEADING_LINE.finditer(text))
    start = matches[0].start() if matches else len(text)
    preamble = text[:start].strip()
    if preamble:
        pieces.append(("", preamble))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        pieces.append((match.group(0).strip(), text[match.end() : end].strip("\n")))
    return pieces


def _cut_body(body: str, allowance: int) -> str:
    """The first lines of ``body`` within ``allowance`` tokens; the first one that does not fit
    is cut inside (with an ellipsis) when enough room is left for it."""
    if tok.count_text(body) <= allowance:
        return body
    kept: list[str] = []
    for line in body.split("\n"):
        candidate = _JOIN.join([*kept, line])
        if tok.count_text(candidate) <= allowance:
            kept.append(line)
            continue
        room = allowance - tok.count_text(_JOIN.join(kept)) - 1
        if room >= _MIN_LINE_TOKENS:
            kept.append(tok.truncate_text(line, room, marker=_ELLIPSIS))
        elif not kept:
            kept.append(_ELLIPSIS)
        break
    return _JOIN.join(kept)


def _render(pieces: list[tuple[str, str]], note: str | None) -> str:
    blocks = [note] if note else []
    for heading, body in pieces:
        blocks.append(_JOIN.join(part for part in (heading, body) if part))
    return "\n\n".join(blocks)


def _shares(costs: list[int], available: int, protected: set[int] = frozenset()) -> list[int]:
    """Water-filling: each piece gets min(its cost, an equal share of what is left); protected
    pieces are served first, whole if they fit."""
    shares = [0] * len(costs)
    remaining = max(0, available)
    for index in protected:
        shares[index] = min(costs[index], remaining)
        remaining -= shares[index]
    order = sorted((i for i in range(len(costs)) if i not in protected), key=lambda i: costs[i])
    for k, index in enumerate(order):
        share = remaining // (len(order) - k)
        shares[index] = min(costs[index], share)
        remaining -= shares[index]
    return shares


def fit_sections(text: str, budget: int, *, note: str | None = None, protect: str | None = None) -> str:
    """``text`` within ``budget`` tokens, every section shortened to its share, none dropped.

    Unchanged when it fits. Otherwise ``note`` (a line saying the summary was shortened) goes
    first when it fits too. The section named ``protect`` (e.g. "Reasoning trail") is served
    before the others share the rest. Text without any section heading is cut as one section.
    """
    if tok.count_text(text) <= budget:
        return text
    pieces = split_sections(text) or [("", text)]
    for current_note in (note, None):
        frame = tok.count_text(_render([(h, "") for h, _ in pieces], current_note))
        available = budget - frame - 2 * len(pieces)  # joins around each body
        if available >= len(pieces):
            break
    else:
        # Not even the headings fit: keep as many of them as the budget holds.
        return tok.truncate_text(_render([(h, "") for h, _ in pieces], None), budget, marker=_ELLIPSIS)
    costs = [tok.count_text(body) for _, body in pieces]
    protected = {i for i, (heading, _) in enumerate(pieces) if protect and heading.lstrip("#* ").startswith(protect)}
    shares = _shares(costs, available, protected)
    for _ in range(2 * len(pieces) + 8):
        fitted = [(heading, _cut_body(body, share)) for (heading, body), share in zip(pieces, shares, strict=True)]
        result = _render(fitted, current_note)
        excess = tok.count_text(result) - budget
        if excess <= 0:
            return result
        others = [i for i in range(len(shares)) if i not in protected and shares[i]] or range(len(shares))
        largest = max(others, key=lambda i: shares[i])
        shares[largest] = max(0, shares[largest] - excess - 1)
    return tok.truncate_text(result, budget, marker=_ELLIPSIS)
