"""Text heuristics of the offline model: core memory sections, facts, and answers about the user.

Facts are recognised in first-person form (what a user types: "my name is Sam", "I live in
Lyon", "I prefer tea", "remember that the deploy is on Friday", "we decided to use SQLite") and
in the normalised form this module writes to core memory and summaries ("Name: Sam", "Lives in
Lyon", "Prefers tea", "Decided: use SQLite"), so a fact survives a round trip through USER.md,
a compact summary or an archive document and is still found.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass

USER_FILE = "USER.md"
MEMORY_FILE = "MEMORY.md"
SOUL_FILE = "SOUL.md"

#: Core memory section tags (ARCHITECTURE.md, context assembly), fixed names.
CORE_TAGS = {"your_identity": SOUL_FILE, "user_profile": USER_FILE, "known_facts": MEMORY_FILE}

# A value runs to the end of its clause.
_V = r"(?P<v>[^\n.;!?]+)"
_CLAUSE_CUT = re.compile(r",|\s+(?:and|but|because|so|although|though|which)\s+", re.IGNORECASE)
# Lists are kept in preferences and decisions ("tea and biscuits"), only asides are cut.
_SOFT_CUT = re.compile(r",|\s+(?:but|because|although|though|since)\s+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact worth keeping. ``kind`` is one of name, location, preference, work, identity,
    decision, attribute, note; ``text`` is the normalised line for ``file``."""

    kind: str
    file: str
    text: str
    value: str

    @property
    def single_valued(self) -> bool:
        """A newer fact of this kind replaces the older one instead of adding to it."""
        return self.kind in ("name", "location", "identity")


def _p(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.MULTILINE)


# (kind, file, pattern, template for the normalised line). Order matters: first match wins
# within a sentence.
_FACT_PATTERNS: tuple[tuple[str, str, re.Pattern[str], str], ...] = (
    ("identity", SOUL_FILE, _p(r"\b(?:your name (?:is|shall be|will be)|call yourself)\s+" + _V), "Name: {v}"),
    ("identity", SOUL_FILE, _p(r"^[\s\-*]*agent name\s*:\s*" + _V), "Name: {v}"),
    ("name", USER_FILE, _p(r"\b(?:my name is|my name's|call me|i am called|i'm called)\s+" + _V), "Name: {v}"),
    ("name", USER_FILE, _p(r"\b(?:the user's|user's) name (?:is|:)\s*" + _V), "Name: {v}"),
    ("name", USER_FILE, _p(r"^[\s\-*]*(?:user )?name\s*:\s*" + _V), "Name: {v}"),
    (
        "location",
        USER_FILE,
        _p(r"\b(?:i live|i'm living|i am living|i now live|i moved|i've moved|i have moved) (?:in|to)\s+" + _V),
        "Lives in {v}",
    ),
    ("location", USER_FILE, _p(r"\bi(?:'m| am) (?:based|located) in\s+" + _V), "Lives in {v}"),
    ("location", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user )lives in\s+" + _V), "Lives in {v}"),
    ("location", USER_FILE, _p(r"^[\s\-*]*location\s*:\s*" + _V), "Lives in {v}"),
    ("preference", USER_FILE, _p(r"\bi (?:really )?prefer\s+" + _V), "Prefers {v}"),
    ("preference", USER_FILE, _p(r"\bi (?:really )?(?:like|love|enjoy)\s+" + _V), "Likes {v}"),
    ("preference", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user )(prefers|likes)\s+" + _V), "{verb} {v}"),
    ("work", USER_FILE, _p(r"\bi work (?P<prep>as|at|for|on)\s+" + _V), "Works {prep} {v}"),
    ("work", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user )works (?P<prep>as|at|for|on)\s+" + _V), "Works {prep} {v}"),
    (
        "decision",
        MEMORY_FILE,
        _p(r"\b(?:we|i) (?:have )?(?:decided|agreed|chose|settled) (?:to |on |that |upon )?" + _V),
        "Decided: {v}",
    ),
    ("decision", MEMORY_FILE, _p(r"^[\s\-*]*decided\s*:\s*" + _V), "Decided: {v}"),
    ("attribute", USER_FILE, _p(r"\bmy (?P<attr>[a-z][\w -]{1,30}?) (?:is|are|was)\s+" + _V), "User's {attr} is {v}"),
    (
        "attribute",
        USER_FILE,
        _p(r"\buser's (?P<attr>[a-z][\w -]{1,30}?) (?:is|are|was)\s+" + _V),
        "User's {attr} is {v}",
    ),
)

_REMEMBER = _p(r"\bremember(?:\s+that\b|\s*:)\s*(?P<v>[^\n]+)")
_QUESTION_START = _p(r"^\s*(?:do|did|can|could|will|would|you|what|who|where|when|why|how)\b")
_TRAILING_TIME = re.compile(
    r"\s+(?:now|nowadays|these days|currently|at the moment|recently|(?:last|this) (?:week|month|year)|since \S+)$",
    re.IGNORECASE,
)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    text = (text or "").replace("\u2019", "'")
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s.strip()]


def _cut(raw: str, kind: str) -> str:
    return (_SOFT_CUT if kind in ("decision", "preference") else _CLAUSE_CUT).split(raw, maxsplit=1)[0]


_QUOTES = "\"'`*\u201c\u201d\u2018\u2019"


def clean_value(raw: str, *, cut_clauses: bool = True) -> str:
    value = raw.strip()
    if cut_clauses:
        value = _CLAUSE_CUT.split(value, maxsplit=1)[0]
    value = value.strip().strip(_QUOTES).rstrip(".!?:;, ")
    return value[:160].strip()


def _match_facts(sentence: str) -> list[Fact]:
    """Every fact in one sentence, in order; a span claimed by one pattern is not reused."""
    found: list[tuple[int, Fact]] = []
    claimed: list[tuple[int, int]] = []
    for kind, file, pattern, template in _FACT_PATTERNS:
        for match in pattern.finditer(sentence):
            groups = match.groupdict()
            raw = _cut(groups["v"], kind)
            start, end = match.start(), match.start("v") + len(raw)
            if any(start < c_end and c_start < end for c_start, c_end in claimed):
                continue
            value = clean_value(raw, cut_clauses=False)
            if kind == "location":
                value = _TRAILING_TIME.sub("", value)
            attr = (groups.get("attr") or "").strip().lower()
            if not value or attr in ("name", "question", "point", "problem"):
                continue
            text = template.format(
                v=value,
                verb=match.group(1).capitalize() if "{verb}" in template else "",
                prep=(groups.get("prep") or "").lower(),
                attr=attr,
            )
            claimed.append((start, end))
            found.append((start, Fact(kind=kind, file=file, text=text, value=value)))
    return [fact for _, fact in sorted(found, key=lambda item: item[0])]


def remembered(text: str) -> str | None:
    """The X of "remember that X" / "remember: X" in ``text``; None for questions such as
    "do you remember that?"."""
    for sentence in re.split(r"\n+", text or ""):
        match = _REMEMBER.search(sentence)
        if match is None:
            continue
        head = sentence[: match.start()]
        if _QUESTION_START.search(head) or sentence.rstrip().endswith("?"):
            continue
        value = re.split(r"(?<!\d)[.!](?:\s|$)", match.group("v"), maxsplit=1)[0]
        value = clean_value(value, cut_clauses=False)
        if value:
            return value
    return None


def fact_to_remember(text: str) -> Fact:
    """What "remember that ``text``" stores: a user-profile fact when it is one, else a note
    for MEMORY.md (the text as given)."""
    facts = [f for f in _match_facts(text) if f.kind != "attribute"]
    if len(facts) == 1:
        return facts[0]
    note = text[:1].upper() + text[1:]
    return Fact(kind="note", file=MEMORY_FILE, text=note, value=text)


def extract_facts(text: str) -> list[Fact]:
    """Every fact in ``text``, in order, without duplicates."""
    facts: list[Fact] = []
    seen: set[str] = set()
    for sentence in sentences(text):
        note = remembered(sentence)
        for fact in [fact_to_remember(note)] if note else _match_facts(sentence):
            if fact.text.lower() not in seen:
                seen.add(fact.text.lower())
                facts.append(fact)
    return facts


# -- context sections ------------------------------------------------------------------------


def section(text: str, tag: str) -> str | None:
    """The unescaped content of the last ``<tag ...>...</tag>`` in ``text``, or None."""
    found = re.findall(rf"<{tag}\b[^>]*>(.*?)</{tag}>", text or "", flags=re.DOTALL)
    return html.unescape(found[-1]).strip() if found else None


def without_sections(text: str, tags: Iterable[str] | None = None) -> str:
    """``text`` with the given XML sections (default: every ``<tag>...</tag>`` block) removed."""
    if tags is None:
        return re.sub(r"<([A-Za-z_][\w.-]*)\b[^>]*>.*?</\1>", " ", text or "", flags=re.DOTALL)
    for tag in tags:
        text = re.sub(rf"<{tag}\b[^>]*>.*?</{tag}>", " ", text or "", flags=re.DOTALL)
    return text


def lines_of(text: str | None) -> list[str]:
    """Meaningful lines of a markdown file: no headings, bullets stripped."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line in ("---", "```"):
            continue
        out.append(re.sub(r"^[-*+]\s+|^\d+[.)]\s+", "", line))
    return out


# -- answering questions about the user ------------------------------------------------------

_NAME_Q = _p(r"\b(?:what(?:'s| is) my name|do you (?:know|remember) my name|who am i)\b")
_PLACE_Q = _p(
    r"\b(?:where do i live|where am i (?:based|living|from)|what city do i live in"
    r"|do you (?:know|remember) where i live)\b"
)
_ABOUT_Q = _p(
    r"\b(?:what (?:else )?do you (?:know|remember) about me|what have you (?:learned|remembered) about me"
    r"|tell me (?:what|everything) you know about me|what do you have on me)\b"
)
_ATTR_Q = _p(r"\bwhat(?:'s| is| was| are) my (?P<attr>[a-z][\w -]{1,30}?)\s*\??$")


def question_kind(text: str) -> tuple[str, str] | None:
    """``("name"|"location"|"about"|"attribute", detail)`` if ``text`` asks about the user."""
    text = (text or "").replace("\u2019", "'").strip()
    if _ABOUT_Q.search(text):
        return ("about", "")
    if _NAME_Q.search(text):
        return ("name", "")
    if _PLACE_Q.search(text):
        return ("location", "")
    match = _ATTR_Q.search(text)
    if match:
        return ("attribute", match.group("attr").strip().lower())
    return None


def find_fact(sources: Iterable[tuple[str, str]], kind: str, attr: str = "") -> tuple[str, str] | None:
    """The latest fact of ``kind`` in the first source that has one: ``(value, source_name)``.
    ``sources`` are ``(name, text)`` pairs, most authoritative first."""
    for name, text in sources:
        found = None
        for fact in extract_facts(text):
            if fact.kind != kind:
                continue
            if kind == "attribute" and not fact.text.lower().startswith(f"user's {attr} is"):
                continue
            found = fact.value
        if found:
            return found, name
    return None
