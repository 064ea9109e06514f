"""Evidence recall: were the turns that hold a question's answer in what the model was given?

For each evidence turn of a question, in the answering turn:

* **in context**: in the first request the model was sent (``AssembledContext``: the memory
  sections and the session messages), that is, what the memory put in front of the model
  before the model did anything: the same for every model;
* **reachable**: in context, or in any later request of the turn, or in any tool output the
  turn produced (what a model that searches could have found).

A turn is found **by id** when the message it was ingested as (``Turn.message_id``) is among
the session messages sent (tier: session tail). Otherwise **by text**: the turn's words must
appear, whole and in order, inside a memory section, a compact summary sent as a session
message, or a tool output. Words are compared after normalization: XML entities of the
sections decoded (``&amp;`` -> ``&``), NFKC, case folded, cut at every character that is not a
letter or digit (so punctuation, spacing and line breaks do not matter). A turn of fewer than
``MIN_TEXT_WORDS`` words is found by id only (a "Yes!" would match anywhere). An excerpt that
cuts the turn short, a paraphrase or a summary of it is not the turn: it is not counted.

The tier of a section is its name in ``SECTION_TIERS`` (the providers' own section names); the
tier of a tool output is its tool in ``TOOL_TIERS``. Whatever a section or tool renders (e.g.
dated messages the archive section brings back), it counts for that tier, so a provider or tool
that changes what it shows needs no change here; a section or tool not in the table counts as
"other sections" / "other tools".
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.evaluation.data import Turn
from agents.experience.supplement import SECTION_NAME as EXPERIENCE_SECTION
from memory.assembly.archive import SECTION_NAME as ARCHIVE_SECTION
from memory.assembly.core import SECTION_NAME as CORE_SECTION
from memory.assembly.pruned import SECTION_NAME as PRUNED_SECTION

MIN_TEXT_WORDS = 5

SESSION_TAIL = "session tail"
COMPACT_SUMMARY = "compact summary"
OTHER_SECTIONS = "other sections"
OTHER_TOOLS = "other tools"

#: Section name (as the providers name their sections) -> tier.
SECTION_TIERS = {
    CORE_SECTION: "core memory",
    ARCHIVE_SECTION: "archive section",
    PRUNED_SECTION: "pruned catalog",
    EXPERIENCE_SECTION: "experience",
}
#: Tool name -> tier.
TOOL_TIERS = {
    "archive_search": "archive tools",
    "archive_read": "archive tools",
}
#: Every tier, in report order.
TIERS = (
    SESSION_TAIL,
    COMPACT_SUMMARY,
    *dict.fromkeys(SECTION_TIERS.values()),
    *dict.fromkeys(TOOL_TIERS.values()),
    OTHER_SECTIONS,
    OTHER_TOOLS,
)

_WORD = re.compile(r"[^\W_]+")


def words_of(text: str | None) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text or "").casefold())


def _joined(words: Sequence[str]) -> str:
    return " " + " ".join(words) + " "


def holds(haystack: str, turn_text: str, *, escaped: bool = False) -> bool:
    """Whether ``turn_text`` is inside ``haystack`` by the text rule (module doc); ``escaped``:
    the haystack is XML (a memory section), its entities are decoded first."""
    wanted = words_of(turn_text)
    if len(wanted) < MIN_TEXT_WORDS:
        return False
    return _joined(wanted) in _joined(words_of(html.unescape(haystack) if escaped else haystack))


@dataclass(frozen=True)
class Sight:
    """What one request or tool output showed: message ids sent, and texts by tier."""

    ids: frozenset[str]
    texts: tuple[tuple[str, str], ...]  # (tier, normalized words joined with spaces, padded)

    def tiers_of(self, turn: Turn, wanted: str | None) -> list[str]:
        tiers = [SESSION_TAIL] if turn.message_id in self.ids else []
        if wanted is not None:
            tiers.extend(tier for tier, text in self.texts if wanted in text and tier not in tiers)
        return tiers


def sight_of_context(context: Any) -> Sight:
    """A request as the runtime assembled it (``memory.assembly.assembler.AssembledContext``)."""
    ids, texts = set(), []
    for section in context.sections:
        tier = SECTION_TIERS.get(section.name, OTHER_SECTIONS)
        texts.append((tier, _joined(words_of(html.unescape(section.text)))))
    for message in context.session_messages:
        if message.is_compact_summary:
            texts.append((COMPACT_SUMMARY, _joined(words_of(message.content))))
        else:
            ids.add(message.id)
    return Sight(frozenset(ids), tuple(texts))


def sight_of_tools(outputs: Iterable[tuple[str, str]]) -> Sight:
    """Tool outputs as (tool name, output text)."""
    return Sight(frozenset(), tuple((TOOL_TIERS.get(name, OTHER_TOOLS), _joined(words_of(text))) for name, text in outputs))


@dataclass(frozen=True)
class Found:
    turn: str
    in_context: bool
    reachable: bool
    tiers: tuple[str, ...]  # every tier that held it during the turn (context first)

    def as_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "in_context": self.in_context, "reachable": self.reachable, "tiers": list(self.tiers)}


def locate(evidence: Sequence[Turn], *, first: Sight | None, later: Sequence[Sight] = ()) -> list[Found]:
    """Where each evidence turn was: ``first`` is the first request of the answering turn,
    ``later`` the turn's later requests and its tool outputs."""
    found = []
    for turn in evidence:
        words = words_of(turn.text)
        wanted = _joined(words) if len(words) >= MIN_TEXT_WORDS else None
        at_first = first.tiers_of(turn, wanted) if first is not None else []
        tiers = list(at_first)
        for sight in later:
            tiers.extend(t for t in sight.tiers_of(turn, wanted) if t not in tiers)
        found.append(Found(turn.id, bool(at_first), bool(tiers), tuple(tiers)))
    return found


def shares(found: Sequence[Found]) -> dict[str, Any]:
    """The question's figures: the share of its evidence in context, reachable, and per tier."""
    if not found:
        return {"in_context": None, "reachable": None, "tiers": {}}
    n = len(found)
    return {
        "in_context": sum(f.in_context for f in found) / n,
        "reachable": sum(f.reachable for f in found) / n,
        "tiers": {tier: sum(tier in f.tiers for f in found) / n for tier in TIERS if any(tier in f.tiers for f in found)},
    }
