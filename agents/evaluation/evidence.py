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

One exception, for core memory only, **by provenance**: the Dream Engine rewrites what was said
into short lines ("I work as a paramedic at Greenfield Hospital, so ..." becomes "Works as a
paramedic at Greenfield Hospital"), and records in the file's line ledger the message each line
rests on (``memory.core_lines.LineSource``: its conversation, archive document and ``seq``). A
line derived from the turn, recorded so by that provenance, is the turn's content rewritten: the
turn counts for the core memory tier when a line of the core memory section sent holds, in the
ledger, the turn's archived message as its source (that document of that conversation, the
message with that seq, whose id is ``Turn.message_id``). It is exact: only lines present in the
section as sent (a line cut at the file's cap is not the line), only the message the ledger
records (no text matching at all), and a line with no recorded message (a person's or the
agent's edit, a model that named none) counts for no turn. ``CoreProvenance`` reads the ledgers
and the archive; without it (core memory off) nothing is counted this way.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.evaluation.data import Turn
from agents.experience.supplement import SECTION_NAME as EXPERIENCE_SECTION
from memory.assembly.archive import SECTION_NAME as ARCHIVE_SECTION
from memory.assembly.core import CORE_TAGS
from memory.assembly.core import SECTION_NAME as CORE_SECTION
from memory.assembly.pruned import SECTION_NAME as PRUNED_SECTION
from memory.core_lines import LineLedger, content_lines
from memory.core_memory import CORE_FILES, CoreMemory

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
CORE_TIER = SECTION_TIERS[CORE_SECTION]
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
_CORE_FILE_ELEMENTS = {
    file: re.compile(rf"<{tag}(?:\s[^>]*)?>(?P<text>.*?)</{tag}>", re.DOTALL) for file, tag in CORE_TAGS.items()
}


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
class CoreProvenance:
    """What the by-provenance rule (module doc) reads: each core memory file's line ledger, as
    it stood when the context was assembled, and ``archived(document id, session, seq)``, the
    id of that archived message (None when that document of that session holds no such
    message)."""

    ledgers: Mapping[str, LineLedger]
    archived: Callable[[str, str, int], str | None]

    def message_of(self, file: str, line: str) -> str | None:
        """The id of the archived message ``line`` of ``file`` rests on, by its ledger; None
        when the ledger records none."""
        ledger = self.ledgers.get(file)
        source = ledger.source_of(line) if ledger is not None else None
        if source is None or source.seq is None or not source.session or not source.document:
            return None
        return self.archived(source.document, source.session, source.seq)


def core_provenance(*, bundle: Any, agent: str, user: str, config: Any, archive_scope: Any) -> CoreProvenance:
    """The core memory ledgers of ``agent`` and ``user`` read now from ``bundle``, and the
    archive of ``archive_scope`` to map a (document, session, seq) to its message, read when
    asked (once per document)."""
    memory = CoreMemory(kv=bundle.kv, config=config, agent=agent, user=user)
    ledgers = {file: memory.ledger(file=file) for file in CORE_FILES}
    documents: dict[str, dict[tuple[str, int], str]] = {}

    def archived(document_id: str, session: str, seq: int) -> str | None:
        if document_id not in documents:
            try:
                document = bundle.archive.get(archive_scope, document_id)
            except ValueError:  # an id that is not a key: no such document
                document = None
            documents[document_id] = {} if document is None else {
                (document.session, m.seq): m.id for m in document.messages if m.seq is not None}
        return documents[document_id].get((session, seq))

    return CoreProvenance(ledgers, archived)


def core_lines_sent(context: Any) -> list[tuple[str, str]]:
    """``(file, line)`` for each line that states something in the core memory section of
    ``context`` (``memory.assembly.core``: one element per file), as it was sent."""
    lines = []
    for section in context.sections:
        if section.name != CORE_SECTION:
            continue
        for file, element in _CORE_FILE_ELEMENTS.items():
            for match in element.finditer(section.text):
                lines.extend((file, line) for line in content_lines(html.unescape(match.group("text"))))
    return lines


@dataclass(frozen=True)
class Sight:
    """What one request or tool output showed: message ids sent, texts by tier, and the ids of
    the messages the core memory lines sent rest on (the by-provenance rule)."""

    ids: frozenset[str]
    texts: tuple[tuple[str, str], ...]  # (tier, normalized words joined with spaces, padded)
    derived: frozenset[str] = field(default_factory=frozenset)

    def tiers_of(self, turn: Turn, wanted: str | None) -> list[str]:
        tiers = [SESSION_TAIL] if turn.message_id in self.ids else []
        if wanted is not None:
            tiers.extend(tier for tier, text in self.texts if wanted in text and tier not in tiers)
        if turn.message_id in self.derived and CORE_TIER not in tiers:
            tiers.append(CORE_TIER)
        return tiers


def sight_of_context(context: Any, provenance: CoreProvenance | None = None) -> Sight:
    """A request as the runtime assembled it (``memory.assembly.assembler.AssembledContext``);
    with ``provenance``, the core memory lines sent are traced to the messages they rest on."""
    ids, texts = set(), []
    for section in context.sections:
        tier = SECTION_TIERS.get(section.name, OTHER_SECTIONS)
        texts.append((tier, _joined(words_of(html.unescape(section.text)))))
    for message in context.session_messages:
        if message.is_compact_summary:
            texts.append((COMPACT_SUMMARY, _joined(words_of(message.content))))
        else:
            ids.add(message.id)
    derived = set()
    if provenance is not None:
        derived = {found for file, line in core_lines_sent(context) if (found := provenance.message_of(file, line))}
    return Sight(frozenset(ids), tuple(texts), frozenset(derived))


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
