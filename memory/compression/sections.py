"""Fitting a structured summary into its token budget section by section, item by item.

Cutting a summary from its end loses whole sections (the reasoning trail, the open tasks, the
tool results come last). ``fit_sections`` instead gives every section its share of the budget:
sections smaller than an equal share keep everything, and what they leave is shared among the
larger ones (water-filling). No section is ever dropped, and nothing is cut in the middle:
a section keeps whole items (a bullet with its continuation lines, or a line), its first one
and then the newest that fit, and one marker line in the place of those left out, saying how
many (``- (… 3 more cut to fit)``; the header points to the pruned catalog). An item
larger than its section's whole share keeps its leading whole sentences, marked ``…``. So a
summary never ends "Todo list (add): 1.", and the result is at most the budget.
"""

from __future__ import annotations

import re

from memory import tokens as tok
from memory.compression.statements import sentences
from memory.compression.summary_input import SECTIONS

_HEADING_LINE = re.compile(
    rf"(?im)^[ \t]{{0,3}}#{{1,6}}[ \t]*\**[ \t]*(?:{'|'.join(re.escape(n) for n in SECTIONS)})\b.*$"
)
# An item starts at a bullet or number at most one space in; a line indented further (a nested
# bullet, as under "- On 8 May 2023:") continues the item above it.
_ITEM_START = re.compile(r"^ ?(?:[-*•+]|\d{1,3}[.)])\s")
_ELLIPSIS = "…"
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


def items(body: str) -> list[str]:
    """The items of a section body: each bullet or numbered line with the lines that continue it
    (nested bullets included); in a body without bullets, each line."""
    lines = [line for line in body.split("\n") if line.strip()]
    if not any(_ITEM_START.match(line) for line in lines):
        return lines
    out: list[str] = []
    for line in lines:
        if _ITEM_START.match(line) or not out:
            out.append(line)
        else:
            out[-1] += "\n" + line
    return out


def cut_marker(count: int) -> str:
    return f"- (… {count} more cut to fit)"


class _Cut:
    """One section being shortened: its items, and how many are left out so far.

    Items are left out in a fixed order, the oldest after the first one first, then of the first
    and the newest the larger (the newest on a tie): so what remains is the first item and the
    newest that fit, with one marker line where the others were. A section that is one item of several sentences (a
    paragraph) is cut by whole sentences the same way.
    """

    def __init__(self, heading: str, body: str, *, keep_first: bool = False) -> None:
        self.heading = heading
        entries = items(body)
        if len(entries) == 1 and not _ITEM_START.match(entries[0]):
            entries = sentences(entries[0].replace("\n", " ")) or entries
        self.entries = entries
        ends = [len(entries) - 1] if len(entries) > 1 else []
        if not keep_first and entries:
            ends.append(0)
        # Of the two ends, the larger goes first (a huge first item does not push the others
        # out); on a tie the newest, so the first stays.
        ends.sort(key=lambda i: -tok.count_text(entries[i]))
        self.order = [i for i in dict.fromkeys([*range(1, max(1, len(entries) - 1)), *ends]) if i < len(entries)]
        self.dropped: set[int] = set()
        self.silent = False  # not even the marker fits
        self.original = body

    def can_drop(self) -> bool:
        return len(self.dropped) < len(self.order) or (bool(self.dropped) and not self.silent)

    def drop(self) -> None:
        if len(self.dropped) < len(self.order):
            self.dropped.add(self.order[len(self.dropped)])
        else:
            self.silent = True

    def body(self) -> str:
        if not self.dropped:
            return self.original
        lines: list[str] = []
        marked = False
        for index, entry in enumerate(self.entries):
            if index not in self.dropped:
                lines.append(entry)
            elif not marked and not self.silent:
                lines.append(cut_marker(len(self.dropped)))
                marked = True
        return _JOIN.join(lines)

    def block(self) -> str:
        return _JOIN.join(part for part in (self.heading, self.body()) if part)


def _fit(cuts: list[_Cut], budget: int, note: str | None, protected: set[int]) -> str | None:
    """Leave items out, from the largest unprotected section first, until the whole fits."""

    def render() -> str:
        return "\n\n".join([*([note] if note else []), *(c.block() for c in cuts if c.block())])

    costs = [tok.count_text(c.block()) for c in cuts]
    while True:
        result = render()
        if tok.count_text(result) <= budget:
            return result
        candidates = [i for i, c in enumerate(cuts) if i not in protected and c.can_drop()]
        candidates = candidates or [i for i, c in enumerate(cuts) if c.can_drop()]
        if not candidates:
            return None
        index = max(candidates, key=lambda i: costs[i])
        cuts[index].drop()
        costs[index] = tok.count_text(cuts[index].block())


def cut_body(body: str, allowance: int) -> str:
    """``body`` within ``allowance`` tokens by whole items: the first item, then the newest that
    fit, a marker line for the rest. Never half an item (see the module docstring)."""
    if tok.count_text(body) <= allowance:
        return body
    return _fit([_Cut("", body)], allowance, None, set()) or ""


def _headings_only(pieces: list[tuple[str, str]], budget: int) -> str:
    """As many whole heading lines as ``budget`` holds (a budget too small for the summary)."""
    kept: list[str] = []
    for heading, _ in pieces:
        if heading and tok.count_text("\n\n".join([*kept, heading])) <= budget:
            kept.append(heading)
    return "\n\n".join(kept)


def fit_sections(text: str, budget: int, *, note: str | None = None, protect: str | None = None) -> str:
    """``text`` within ``budget`` tokens, every section shortened by whole items, none dropped.

    Unchanged when it fits. Otherwise ``note`` (a line saying the summary was shortened) goes
    first when it fits too. Items are left out of the largest section first, so small sections
    keep everything and the large ones share what is left; the section named ``protect`` (e.g.
    "Reasoning trail") loses items only when no other section has any left. The first line of
    the text before the first heading (a fallback summary's own heading) is kept. Text without
    any section heading is cut as one section.
    """
    if tok.count_text(text) <= budget:
        return text
    pieces = split_sections(text) or [("", text)]
    for current_note in (note, None):
        cuts = [_Cut(heading, body, keep_first=not heading) for heading, body in pieces]
        protected = {
            i for i, (heading, _) in enumerate(pieces) if protect and heading.lstrip("#* ").startswith(protect)
        }
        result = _fit(cuts, budget, current_note, protected)
        if result is not None:
            return result
    return _headings_only(pieces, budget)
