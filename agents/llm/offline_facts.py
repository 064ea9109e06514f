"""Text heuristics of the offline model: core memory sections, facts, and answers about the user.

Facts are recognised in first-person form (what a user types: "my name is Sam", "I live in
Lyon", "I prefer tea", "remember that the deploy is on Friday", "we decided to use SQLite") and
in the normalised form this module writes to core memory and summaries ("Name: Sam", "Lives in
Lyon", "Prefers tea", "Decided: use SQLite"), so a fact survives a round trip through USER.md,
a compact summary or an archive document and is still found.

Where the user lives is read by a small grammar rather than one pattern per phrasing: a subject
(``I``, ``we``, ``my wife and I`` …), any adverbs (``recently``, ``just``, ``now`` …), then a verb
of moving (``moved``, ``relocated``, ``have moved`` …) followed by its places in any order
(``from X``, ``out of X`` name the old place; ``to Y``, ``back to Y``, ``over to Y`` the new one),
or a verb of living (``live``, ``am based``, ``reside`` …) with ``in Y``, negated or not (``no
longer``, ``don't … any more``: then Y is a past place). The new place is the ``location``
("Lives in Porto"); the old one is kept as ``past_location`` ("Previously lived in Lisbon"), so
the newer value wins and the older is not lost. A place ends at the next preposition, a time
phrase ("last year", "in 2021"), a quote or the end of the clause.

Where the user works is one value too (``employer``: "I work at X", "I accepted an offer from
X", "I got a new job at X" all give "Works at X", the newer replacing the older); what they work
as adds up. "I'm allergic to X" gives "Allergic to X". The people the user talks about go to
MEMORY.md when named with their relation: "my sister Maya moved to Porto" gives "Sister Maya
moved to Porto" (moved to, lives in, works at, works as).
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

# A value runs to the end of its clause (a double quote ends it too: quoted text is not the value).
_V = r"(?P<v>[^\n.;!?\"\u201c\u201d]+)"
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
        return self.kind in ("name", "location", "identity", "employer")

    @property
    def key(self) -> str:
        """What two facts must share to be the same fact: the kind for a single-valued one,
        else the normalised line."""
        return self.kind if self.single_valued else normalize(self.text)


def normalize(line: str) -> str:
    """A line compared the way a reader would: no bullet, quotes, case, spacing or final stop."""
    line = re.sub(r"^[\s\-*+]*(?:\d+[.)]\s+)?", "", line or "")
    return " ".join(line.split()).strip(_QUOTES).casefold().rstrip(".;,!")


def _p(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.MULTILINE)


#: Whom "my <relation> <Name> moved to ..." may be about.
_RELATIONS = (
    "sister", "brother", "mother", "mum", "mom", "father", "dad", "son", "daughter", "cousin", "aunt", "uncle",
    "grandmother", "grandma", "grandfather", "grandpa", "niece", "nephew", "friend", "best friend", "boss",
    "colleague", "coworker", "neighbour", "neighbor", "flatmate", "roommate", "partner", "wife", "husband",
    "girlfriend", "boyfriend", "fiancé", "fiancée",
)

# (kind, file, pattern, template for the normalised line). Order matters: first match wins
# within a sentence.
_FACT_PATTERNS: tuple[tuple[str, str, re.Pattern[str], str], ...] = (
    ("identity", SOUL_FILE, _p(r"\b(?:your name (?:is|shall be|will be)|call yourself)\s+" + _V), "Name: {v}"),
    ("identity", SOUL_FILE, _p(r"^[\s\-*]*agent name\s*:\s*" + _V), "Name: {v}"),
    ("name", USER_FILE, _p(r"\b(?:my name is|my name's|call me|i am called|i'm called)\s+" + _V), "Name: {v}"),
    ("name", USER_FILE, _p(r"\b(?:the user's|user's) name (?:is|:)\s*" + _V), "Name: {v}"),
    ("name", USER_FILE, _p(r"^[\s\-*]*(?:user )?name\s*:\s*" + _V), "Name: {v}"),
    ("location", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user )lives in\s+" + _V), "Lives in {v}"),
    ("location", USER_FILE, _p(r"^[\s\-*]*location\s*:\s*" + _V), "Lives in {v}"),
    (
        "past_location",
        USER_FILE,
        _p(r"(?:^[\s\-*]*|\b(?:the )?user )(?:previously|formerly|used to) (?:lived|live) in\s+" + _V),
        "Previously lived in {v}",
    ),
    ("preference", USER_FILE, _p(r"\bi (?:really )?prefer\s+" + _V), "Prefers {v}"),
    ("preference", USER_FILE, _p(r"\bi (?:really )?(?:like|love|enjoy)\s+" + _V), "Likes {v}"),
    ("preference", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user )(prefers|likes)\s+" + _V), "{verb} {v}"),
    # Where the user works is one place (a new job replaces it); what they work as or on adds up.
    ("employer", USER_FILE, _p(r"\bi (?:now |currently |still )?work (?P<prep>at|for)\s+" + _V), "Works {prep} {v}"),
    (
        "employer",
        USER_FILE,
        _p(r"\bi(?: have|'ve)?(?: just| finally| recently| now)? (?:got|accepted|took|started|landed|began|start) "
           r"(?:a |an |the |my )?(?:new )?(?:job|offer|position|role|post) (?P<prep>at|with|from)\s+" + _V),
        "Works at {v}",
    ),
    ("work", USER_FILE, _p(r"\bi (?:now |currently |still )?work (?P<prep>as|on)\s+" + _V), "Works {prep} {v}"),
    ("employer", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user )works (?P<prep>at|for)\s+" + _V), "Works {prep} {v}"),
    ("work", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user )works (?P<prep>as|on)\s+" + _V), "Works {prep} {v}"),
    ("health", USER_FILE, _p(r"\bi(?:'m| am)(?: \w+ly)? allergic to\s+" + _V), "Allergic to {v}"),
    ("health", USER_FILE, _p(r"(?:^[\s\-*]*|\b(?:the )?user (?:is )?)allergic to\s+" + _V), "Allergic to {v}"),
    # The people the user talks about: where they moved or live, what they do.
    (
        "person",
        MEMORY_FILE,
        _p(r"\bmy (?P<attr>" + "|".join(_RELATIONS) + r")(?:,)? (?P<name>(?-i:[A-Z][\w'-]+))(?:,)?"
           r"(?: has| have)?(?: just| recently| finally| now)? (?P<verb>moved to|relocated to|lives in|works at|works as|"
           r"started at)\s+" + _V),
        "{Attr} {name} {verb} {v}",
    ),
    (
        "person",
        MEMORY_FILE,
        _p(r"^[\s\-*]*(?P<attr>" + "|".join(_RELATIONS) + r") (?P<name>(?-i:[A-Z][\w'-]+)) (?P<verb>moved to|"
           r"relocated to|lives in|works at|works as|started at)\s+" + _V),
        "{Attr} {name} {verb} {v}",
    ),
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

# -- where the user lives: a small grammar (see the module docstring) ----------------------------

_SUBJECT = (r"(?:i|we|my (?:wife|husband|partner|family|girlfriend|boyfriend|parents|kids|children|fiancée?)"
            r"(?: and i)?|me and my \w+|the family and i)")
_ADVERBS = (r"(?:\s+(?:recently|just|finally|now|also|already|eventually|then|actually|officially|since|"
            r"have|has|had|'ve|'d|'re|'m|am|are|been|all|both))*")
_MOVING = r"(?:moved|relocated|moving|relocating|move|relocate|emigrated|emigrating|went back|came back)"
_LIVING = r"(?:live|living|lived|reside|residing|resided|based|located|settled|staying for good)"
_NEGATION = re.compile(r"\b(?:no longer|not|n't|never)\b", re.IGNORECASE)
#: Where each preposition puts its place: the new home or the old one.
_PLACE_ROLES: tuple[tuple[str, str], ...] = (
    ("away from", "old"), ("out of", "old"), ("from", "old"),
    ("back to", "new"), ("over to", "new"), ("down to", "new"), ("up to", "new"), ("to", "new"),
    ("into", "new"), ("in", "new"), ("at", "new"),
)
_PREPOSITION = "|".join(re.escape(word) for word, _ in _PLACE_ROLES)
_MOVE = re.compile(rf"\b{_SUBJECT}(?:'ve|'d|'re|'m)?{_ADVERBS}\s+{_MOVING}\b(?P<rest>[^\n.;!?]*)", re.IGNORECASE)
_LIVE = re.compile(rf"\b(?P<head>{_SUBJECT}(?:'ve|'d|'re|'m)?(?:\s+(?:do not|don't|no longer|not|never|"
                   rf"now|currently|still|actually|also|am|are|have|'ve|been|now))*)\s+{_LIVING}\s+"
                   rf"(?:in|at)\s+(?P<rest>[^\n.;!?,]*)", re.IGNORECASE)
_NO_LONGER_IN = re.compile(r"\b(?:no longer|not)\s+(?:in|at)\s+(?P<rest>[^\n.;!?]*)", re.IGNORECASE)
_PLACE_CUT = re.compile(
    rf"\s+(?:{_PREPOSITION}|and|but|because|so|since|when|after|before|for|with|where|which|as|"
    r"last|this|next|a (?:year|month|week)|(?:two|three|four|five|a few|several) (?:years?|months?|weeks?)|"
    r"any ?more|now|recently|ago|on|by|during|until)\b|,|[\"\u201c\u201d]|\s+\d",
    re.IGNORECASE,
)
_TIME_WORDS = frozenset({"january", "february", "march", "april", "may", "june", "july", "august", "september",
                         "october", "november", "december", "spring", "summer", "autumn", "fall", "winter",
                         "the", "time", "order", "case", "general", "fact", "total", "person", "between"})
_NOT_A_PLACE = frozenset({"it", "them", "there", "here", "home", "work", "bed", "school", "a", "an", "the", "my",
                          "our", "your", "this", "that", "house", "flat", "apartment", "office", "town"})


def _place(text: str) -> str:
    """The place at the start of ``text``, up to the next preposition, time phrase or clause end."""
    value = _PLACE_CUT.split(text.strip(), maxsplit=1)[0]
    value = clean_value(value, cut_clauses=False)
    value = _TRAILING_TIME.sub("", value).strip()
    words = value.split()
    if not words or words[0].lower() in _NOT_A_PLACE and len(words) == 1 or len(words) > 5:
        return ""
    if words[0][:1].isdigit() or (words[0].lower() in _TIME_WORDS and len(words) <= 2 and
                                  words[0].lower() not in ("the",)):
        return ""  # "in 2020", "in May", "in spring": a time, not a place
    if words[0].lower() in ("the", "a", "an") and len(words) > 1 and not words[1][:1].isupper():
        return ""  # "to the office", "in a flat": not a home town
    return value


_LEAD_WORDS = frozenset({"recently", "just", "finally", "permanently", "eventually", "all", "the", "way", "last",
                         "this", "year", "month", "week", "spring", "summer", "autumn", "winter", "fall", "in",
                         "house", "home", "abroad", "again", "out", "away", "back", "over"})


def _places(rest: str) -> list[tuple[int, str, str]]:
    """``(offset, role, place)`` for each preposition phrase at the top of ``rest`` (the verb's
    own: "moved the meeting to Friday" moves no one's home)."""
    found = []
    matches = list(re.finditer(rf"(?:^|\s)(?P<prep>{_PREPOSITION})\s+", rest, re.IGNORECASE))
    if matches:
        lead = re.findall(r"[\w']+", rest[: matches[0].start()].lower())
        if any(word not in _LEAD_WORDS and not word.isdigit() for word in lead):
            return []
    for match in matches:
        role = dict(_PLACE_ROLES)[match.group("prep").lower()]
        place = _place(rest[match.end():])
        if place:
            found.append((match.start(), role, place))
    return found


def _homes(sentence: str) -> list[tuple[int, int, Fact]]:
    """Where the user lives now and lived before, from ``sentence``: ``(start, end, fact)``."""
    out: list[tuple[int, int, Fact]] = []

    def add(start: int, end: int, role: str, place: str) -> None:
        if role == "new":
            out.append((start, end, Fact("location", USER_FILE, f"Lives in {place}", place)))
        else:
            out.append((start, end, Fact("past_location", USER_FILE, f"Previously lived in {place}", place)))

    for match in _MOVE.finditer(sentence):
        places = _places(match.group("rest"))
        news = [p for p in places if p[1] == "new"]
        for _, role, place in places:
            if role == "old" or place == news[-1][2]:  # several "to"s: the last is where they ended up
                add(match.start(), match.end(), role, place)
    for match in _LIVE.finditer(sentence):
        rest = match.group("rest")
        place = _place(rest)
        if place:
            negated = bool(_NEGATION.search(match.group("head"))) or bool(
                re.search(r"\bany ?more\b", rest, re.IGNORECASE))
            add(match.start(), match.end(), "old" if negated else "new", place)
    for match in _NO_LONGER_IN.finditer(sentence):
        place = _place(match.group("rest"))
        if place:
            add(match.start(), match.end(), "old", place)
    return out


#: An XML attribute as the context's markup writes it: name="value".
ATTRIBUTES = re.compile(r'(\w+)="([^"]*)"')
_REMEMBER = _p(r"\bremember(?:\s+that\b|\s*:)\s*(?P<v>[^\n]+)")
_REMEMBER_AFTER = _p(r"^(?P<v>.*?\w.*?)[\s,;:–—-]+(?:and\s+|so\s+)?(?:please\s+)?remember\s+(?:that|this|it)(?:,?\s+please)?\s*[.!]*\s*$")
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
    for start, end, fact in _homes(sentence):
        if not any(f.text == fact.text for _, f in found):
            found.append((start, fact))
        claimed.append((start, end))
    for kind, file, pattern, template in _FACT_PATTERNS:
        for match in pattern.finditer(sentence):
            groups = match.groupdict()
            raw = _cut(groups["v"], kind)
            start, end = match.start(), match.start("v") + len(raw)
            if any(start < c_end and c_start < end for c_start, c_end in claimed):
                continue
            value = clean_value(raw, cut_clauses=False)
            if kind in ("location", "employer", "person"):
                value = _TRAILING_TIME.sub("", value)
            attr = (groups.get("attr") or "").strip().lower()
            if not value or attr in ("name", "question", "point", "problem"):
                continue
            text = template.format(
                v=value,
                verb=(groups.get("verb") or "").lower() or (match.group(1).capitalize() if "{verb}" in template else ""),
                prep=(groups.get("prep") or "").lower(),
                attr=attr,
                Attr=attr.capitalize(),
                name=groups.get("name") or "",
            )
            claimed.append((start, end))
            found.append((start, Fact(kind=kind, file=file, text=text, value=value)))
    return [fact for _, fact in sorted(found, key=lambda item: item[0])]


_OPEN_QUOTE = re.compile(r"[\"\u201c\u2018']\s*$")
_CLOSE_QUOTE = re.compile(r"[\"\u201d\u2019]")


def remembered(text: str) -> str | None:
    """The X of "remember that X" / "remember: X" in ``text``; None for questions such as
    "do you remember that?". Quoted ("the user said: “remember that I live in Lisbon” (seq 4)")
    X ends at its closing quote; a quoted phrase with nothing to keep (a hint such as
    "try “remember that …”") is no request."""
    for sentence in re.split(r"\n+", text or ""):
        for match in _REMEMBER.finditer(sentence):
            head = sentence[: match.start()]
            if _QUESTION_START.search(head) or sentence.rstrip().endswith("?"):
                continue
            value = match.group("v")
            if _OPEN_QUOTE.search(head):
                value = _CLOSE_QUOTE.split(value, maxsplit=1)[0]
            value = re.split(r"(?<!\d)[.!](?:\s|$)", value, maxsplit=1)[0]
            value = clean_value(value, cut_clauses=False)
            if re.search(r"\w", value):
                return value
        # The request after the statement: "I'm allergic to hazelnuts, remember that."
        after = _REMEMBER_AFTER.search(sentence)
        if after is not None and not _QUESTION_START.search(after.group("v")):
            value = clean_value(re.split(r"(?<!\d)[.!?]\s+", after.group("v"))[-1], cut_clauses=False)
            if re.search(r"\w", value):
                return value
    return None


# Where a "remember that" sentence holds a second statement: "and" (or ";", or a comma) before a
# clause of its own, "I …" or a subject with a verb ("my favourite colour is green", "the standup
# is at 10"). "I like tea and biscuits" or "the sea and the mountains" stay one.
_SUBJECT_WORDS = r"(?:my|our|the|his|her|their|your|this|that|it|we|they|he|she|there)"
_VERBS = (r"(?:is|are|was|were|am|be|been|has|have|had|will|would|can|could|should|must|shall|may|might|"
          r"lives?|works?|likes?|loves?|prefers?|enjoys?|moved|decided|agreed|needs?|wants?|starts?|ends?|"
          r"begins?|runs?|meets?|goes|opens?|closes?|'s|'re|'ll)")
_CLAUSE_START = (rf"(?:i\b|i'm\b|i've\b|i'd\b|{_SUBJECT_WORDS}\b(?:\s+[\w'-]+){{0,4}}?\s+{_VERBS}\b)")
_SPLIT_FACTS = re.compile(rf"\s*(?:;\s*|,?\s+and\s+(?:also\s+)?(?:that\s+)?|,\s*(?:also\s+)?(?:that\s+)?)(?={_CLAUSE_START})",
                          re.IGNORECASE)


def statements(text: str) -> list[str]:
    """The statements of a "remember that" sentence, each on its own ("I live in Lisbon and my
    favourite colour is green": two)."""
    return [part.strip(" ,;") for part in _SPLIT_FACTS.split(text or "") if part.strip(" ,;")]


def _whole_attribute(fact: Fact, statement: str) -> Fact:
    """An attribute asked to be remembered keeps the rest of its statement ("my address is
    5 Main St, Springfield"): the statement was already split from the others."""
    if fact.kind != "attribute":
        return fact
    at = statement.find(fact.value)
    whole = clean_value(statement[at:], cut_clauses=False) if at >= 0 else fact.value
    if not whole.startswith(fact.value) or whole == fact.value:
        return fact
    return Fact(kind=fact.kind, file=fact.file, text=fact.text[: len(fact.text) - len(fact.value)] + whole, value=whole)


def facts_to_remember(text: str) -> list[Fact]:
    """What "remember that ``text``" stores: each statement of it as its own line, a user-profile
    fact normalised as the Dream Engine writes it, so the two never keep one fact twice ("my name
    is Sam and my favourite colour is green": "Name: Sam", "User's favourite colour is green"), anything
    else as a note for MEMORY.md, as written ("the deploy is on Friday and the standup is at 10":
    two notes)."""
    facts: list[Fact] = []
    seen: set[str] = set()
    for part in statements(text):
        found = [_whole_attribute(f, part) for f in _match_facts(part)]
        if not found:
            note = part[:1].upper() + part[1:]
            found = [Fact(kind="note", file=MEMORY_FILE, text=note, value=part)]
        for fact in found:
            if normalize(fact.text) not in seen:
                seen.add(normalize(fact.text))
                facts.append(fact)
    if not facts:
        note = text[:1].upper() + text[1:]
        facts.append(Fact(kind="note", file=MEMORY_FILE, text=note, value=text))
    return facts


def fact_to_remember(text: str) -> Fact:
    """The first of ``facts_to_remember(text)``."""
    return facts_to_remember(text)[0]


def extract_facts(text: str) -> list[Fact]:
    """Every fact in ``text``, in order, without duplicates."""
    facts: list[Fact] = []
    seen: set[str] = set()
    for sentence in sentences(text):
        note = remembered(sentence)
        for fact in facts_to_remember(note) if note else _match_facts(sentence):
            if normalize(fact.text) not in seen:
                seen.add(normalize(fact.text))
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
