"""Where each line of a core memory file came from, and what people took out: the line ledger.

Beside each core memory file ``F`` the KV holds ``F.lines`` (JSON), written in the same commit as
the file by ``CoreMemory``::

    {"lines":   {"<normalised line>": {"by": "dream", "at": "...", "said_at": "...",
                                       "session": "session:…", "document": "<archive id>",
                                       "seq": 12}},
     "removed": {"<normalised line>" | "attr:<key>": "<when a person removed it>"},
     "cleared_at": "<when the person asked to forget everything>" | null}

``by`` is the change source (``agent``, ``dream``, ``user:<id>``, ``admin:<id>``, ``system``);
``at`` when the line was written; ``said_at`` when what it states was said (the time of the
message it came from; the Dream Engine knows it, an edit made now is "said" now); ``session`` the
conversation and ``document`` the archive document it came from; ``seq`` the message it rests on
(its seq in that conversation), when the Dream Engine's model named one. Edits made by people or
by the agent's tool rest on no one message: no ``seq``. Entries written before ``seq`` existed
read as having none.

Two uses. People see each line's source (the memory page). And facts never quietly go back: a
line's *as of* time (``said_at``, else ``at``) lets the Dream Engine refuse an older statement
that would overwrite a newer one (``Lives in Lisbon`` said in January never replaces ``Lives in
Porto`` said in June, whatever order the archive is read in), and the ``removed`` marks (with
``cleared_at``) keep it from re-adding what a person deleted, unless it was said again later.

Lines are compared the way a reader would (``normalize_line``: no bullet, case, spacing or final
full stop). ``attribute_key`` names the single-valued attribute a USER.md or SOUL.md line sets
(``Name: …``, ``Lives in …``, ``User's <thing> is …``): one line per attribute, the newer wins.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from memory.text import storable

LINES_SUFFIX = ".lines"
#: Removal marks kept per file (newest first); older ones are forgotten.
MAX_REMOVED = 200
_ATTR = "attr:"

# NUL and the other C0 controls (tab, newline, CR aside) cannot be stored portably (the KV
# stores refuse NUL) and are illegal in the XML the files are injected as; they never carry
# meaning in markdown, so writes drop them instead of failing.
_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_BULLET = re.compile(r"^(?P<prefix>\s*(?:[-*+]|\d+[.)])\s+)")
_KEY_VALUE = re.compile(r"^(?P<key>[a-z][\w' /-]{0,40}?)\s*:\s*\S")
_SINGLE_PREFIX = re.compile(r"^(?P<key>lives in|based in|located in|user's [a-z][\w -]{0,30}? is)\b")
_SINGLE_VALUED_FILES = ("USER.md", "SOUL.md")


def clean_text(text: str) -> str:
    """``text`` with LF line ends (a browser sends CRLF), without the control characters core
    memory files never hold, made storable (lone surrogates, which a model's JSON can produce,
    become U+FFFD)."""
    return storable(_CONTROL_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n")))


def normalize_line(line: str) -> str:
    """A line compared the way a reader would: no bullet, case, spacing or final full stop."""
    line = _BULLET.sub("", line or "")
    return " ".join(line.split()).casefold().rstrip(".;,")


def attribute_key(file: str, line: str) -> str | None:
    """The single-valued attribute a USER.md / SOUL.md line sets, or None."""
    if file not in _SINGLE_VALUED_FILES:
        return None
    norm = normalize_line(line)
    match = _SINGLE_PREFIX.match(norm) or _KEY_VALUE.match(norm)
    if not match:
        return None
    key = match.group("key").strip()
    return "lives in" if key in ("lives in", "based in", "located in") else key


def content_lines(text: str) -> list[str]:
    """The lines of a file that state something (no blank lines, headings or rules)."""
    return [line for line in (text or "").splitlines() if line.strip() and not _structural(line)]


def _structural(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("#") or stripped in ("---", "***", "```")


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _seq(value: object) -> int | None:
    """A message seq as stored (a non-negative int); None for anything else (a damaged entry
    loses that provenance, nothing more)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True, slots=True)
class LineSource:
    """Where one line came from (see the module docstring)."""

    by: str
    at: datetime
    said_at: datetime | None = None
    session: str = ""
    document: str = ""
    seq: int | None = None  # the message it rests on, by its seq in ``session``

    @property
    def as_of(self) -> datetime:
        """When what the line states was last known true: when it was said, else written."""
        return self.said_at or self.at

    def to_data(self) -> dict[str, str | int]:
        data: dict[str, str | int] = {"by": self.by, "at": self.at.isoformat()}
        if self.said_at is not None:
            data["said_at"] = self.said_at.isoformat()
        if self.session:
            data["session"] = self.session
        if self.document:
            data["document"] = self.document
        if self.seq is not None:
            data["seq"] = self.seq
        return data

    @classmethod
    def from_data(cls, data: object) -> LineSource | None:
        if not isinstance(data, Mapping):
            return None
        at = _time(data.get("at"))
        if at is None:
            return None
        return cls(str(data.get("by") or "unknown"), at, _time(data.get("said_at")),
                   str(data.get("session") or ""), str(data.get("document") or ""), _seq(data.get("seq")))


@dataclass(frozen=True, slots=True)
class LineLedger:
    """The ledger of one file (empty when never written)."""

    lines: Mapping[str, LineSource] = field(default_factory=dict)
    removed: Mapping[str, datetime] = field(default_factory=dict)
    cleared_at: datetime | None = None

    # -- reading --------------------------------------------------------------------------------

    def source_of(self, line: str) -> LineSource | None:
        """Where ``line`` came from, or None when it predates the ledger."""
        return self.lines.get(normalize_line(line))

    def as_of(self, line: str, *, fallback: datetime | None) -> datetime | None:
        """When ``line``'s statement was known true; ``fallback`` (the file's last write) for a
        line the ledger does not know, which is at least as old as that."""
        source = self.source_of(line)
        return source.as_of if source is not None else fallback

    def removed_since(self, *, file: str, line: str, said_at: datetime | None) -> datetime | None:
        """When a person removed ``line`` (or its attribute, or everything) at or after
        ``said_at``; None if nothing of the kind. A statement made after the removal is new."""
        marks = [self.removed.get(normalize_line(line)), self.cleared_at]
        key = attribute_key(file, line)
        if key is not None:
            marks.append(self.removed.get(_ATTR + key))
        marks = [mark for mark in marks if mark is not None]
        if not marks:
            return None
        newest = max(marks)
        return newest if said_at is None or newest >= said_at else None

    # -- writing --------------------------------------------------------------------------------

    def after(
        self,
        *,
        file: str,
        old_text: str,
        new_text: str,
        source: LineSource,
        line_sources: Mapping[str, LineSource] | None = None,
        legacy_at: datetime | None,
        by_person: bool,
    ) -> LineLedger:
        """The ledger once ``old_text`` became ``new_text``.

        Lines kept keep their source (a line the ledger did not know gets ``legacy_at``, the
        file's previous write). New lines get ``line_sources[normalised line]`` or ``source``.
        When ``by_person`` (a user or staff editing by hand), each line taken out, and each
        attribute no line sets any more, is marked removed now (``source.at``).
        """
        line_sources = line_sources or {}
        old = {normalize_line(line) for line in content_lines(old_text)}
        lines: dict[str, LineSource] = {}
        for line in content_lines(new_text):
            norm = normalize_line(line)
            if norm in lines:
                continue
            if norm in old:
                known = self.lines.get(norm)
                lines[norm] = known or LineSource("unknown", legacy_at or source.at)
            else:
                lines[norm] = line_sources.get(norm, source)
        removed = dict(self.removed)
        if by_person:
            gone = old - set(lines)
            for norm in gone:
                removed[norm] = source.at
            kept_keys = {attribute_key(file, line) for line in content_lines(new_text)}
            for line in content_lines(old_text):
                key = attribute_key(file, line)
                if key is not None and key not in kept_keys:
                    removed[_ATTR + key] = source.at
        # A line added again is no longer "removed" (its mark would block nothing new anyway).
        for norm in lines:
            if norm in removed and norm not in old:
                removed.pop(norm)
        newest = sorted(removed.items(), key=lambda item: item[1], reverse=True)[:MAX_REMOVED]
        return LineLedger(lines, dict(newest), self.cleared_at)

    def cleared(self, *, at: datetime) -> LineLedger:
        """Everything forgotten at ``at``: no line, and older statements stay out."""
        return replace(self, lines={}, cleared_at=at)

    def to_json(self) -> str:
        return json.dumps(
            {
                "lines": {norm: source.to_data() for norm, source in self.lines.items()},
                "removed": {key: at.isoformat() for key, at in self.removed.items()},
                "cleared_at": self.cleared_at.isoformat() if self.cleared_at else None,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, raw: str | None) -> LineLedger:
        """The ledger in ``raw``; an empty one for None or damaged JSON (a damaged ledger loses
        provenance, never a fact: the file is the truth)."""
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
        except ValueError:
            return cls()
        if not isinstance(data, Mapping):
            return cls()
        lines = {}
        for norm, entry in (data.get("lines") or {}).items() if isinstance(data.get("lines"), Mapping) else ():
            source = LineSource.from_data(entry)
            if isinstance(norm, str) and source is not None:
                lines[norm] = source
        removed = {}
        for key, at in (data.get("removed") or {}).items() if isinstance(data.get("removed"), Mapping) else ():
            when = _time(at)
            if isinstance(key, str) and when is not None:
                removed[key] = when
        return cls(lines, removed, _time(data.get("cleared_at")))


def sources_for(lines: Iterable[tuple[str, LineSource]]) -> dict[str, LineSource]:
    """``{normalised line: source}`` for ``(line, source)`` pairs (the last one wins)."""
    return {normalize_line(line): source for line, source in lines}


__all__ = [
    "LINES_SUFFIX",
    "LineLedger",
    "LineSource",
    "attribute_key",
    "clean_text",
    "content_lines",
    "normalize_line",
    "sources_for",
]
