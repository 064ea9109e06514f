"""What a summary must never lose, read from the messages without a model.

* ``user_statements``: every sentence in which the user states a fact (about themselves, the
  people, places and plans they talk about) or a preference, with its date and seq: in the
  first person or with a preference word anywhere, and any plain statement in a short message.
  The compact summary keeps each one, whatever the model wrote (``ledger_line``).
* ``decisions`` and ``open_tasks``: sentences that say something was decided, or is still to do.

These are plain rules over sentences, not language understanding: a sentence qualifies by its
shape (first person, a preference or instruction word, no question mark, not a request). They err on the side
of keeping a sentence, since each costs a line and losing a fact costs the user.

Text helpers shared by the summary and the fallback live here too: ``sentences`` (never splits
after a list number such as "1." or after "e.g."), ``excerpt`` (cuts at a word boundary and
never ends on a dangling list number).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory.compression.dates import day
from memory.messages import Message
from memory.text import storable

_SPLIT = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")
# A piece ending like this did not end a sentence: "1." of a list, "e.g.", an initial.
_NOT_AN_END = re.compile(
    r"(?:^|\s|\()(?:\d{1,3}|[A-Za-z]|e\.g|i\.e|etc|vs|Mr|Mrs|Ms|Dr|St|No|approx)\.$", re.IGNORECASE
)
# What must not end an excerpt: a list number, a bullet, an open bracket or checkbox, a colon,
# a conjunction or article (the item it opened was cut away).
_DANGLING = re.compile(
    r"(?:\s*(?:\(?\d{1,3}[.)]|\[[ xX]?\]?|[-*•:;,(\[]|\b(?:and|or|the|a|an|to|of|with|for))\s*)+$", re.IGNORECASE
)
_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*•+]|\d{1,3}[.)])\s+")

MAX_STATEMENT_CHARS = 300
MAX_STATEMENTS_PER_MESSAGE = 12
# A message this short is conversation: every plain statement in it counts, not only the first
# person ones (in a pasted document or log, only those).
CONVERSATIONAL_SENTENCES = 4
CONVERSATIONAL_CHARS = 500


def sentences(text: str | None) -> list[str]:
    """The sentences of ``text``: split at line breaks and sentence ends, list markers kept with
    their item (so "Todo: 1. buy milk" is one sentence, never "Todo: 1.")."""
    out: list[str] = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            continue
        pieces = _SPLIT.split(line)
        current = ""
        for piece in pieces:
            current = f"{current} {piece}".strip() if current else piece.strip()
            if not _NOT_AN_END.search(current):
                out.append(current)
                current = ""
        if current:
            out.append(current)
    return out


def excerpt(text: str | None, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at a word boundary, marked ``…``,
    and never ending on a dangling list number, bullet or conjunction."""
    words = " ".join((text or "").split())
    if len(words) <= limit:
        return words
    cut = words[: max(1, limit - 1)]
    space = cut.rfind(" ")
    if space >= limit * 0.5:
        cut = cut[:space]
    cut = _DANGLING.sub("", cut).rstrip()
    return (cut or words[: max(1, limit - 1)]) + "…"


# -- statements -------------------------------------------------------------------------------

_FIRST_PERSON = re.compile(
    r"\bI\b|\bI['’](?:m|ve|d|ll)\b|\b(?:me|my|mine|myself|we|we['’](?:re|ve|d|ll)|our|ours|us|ourselves)\b",
)
_FIRST_PERSON_CI = re.compile(r"\b(?:my|mine|myself|we|our|ours|ourselves)\b", re.IGNORECASE)
_PREFERENCE = re.compile(
    r"\b(?:prefer|preferably|rather|always|never|remember|note that|keep in mind|call me|favou?rite|"
    r"(?:dis)?like|love|hate|allergic|please (?:always|never|don['’]t|do not|use|avoid|keep|answer|reply|write))\b",
    re.IGNORECASE,
)
_SMALL_TALK = re.compile(
    r"^(?:hi|hello|hey|thanks?(?: you)?(?: so much| a lot)?|thank you|ok(?:ay)?|yes|yeah|yep|no|nope|sure|great|"
    r"cool|nice|perfect|awesome|bye|goodbye|good (?:morning|afternoon|evening|night)|got it|sounds good|"
    r"i see|makes sense|that'?s (?:it|all|great|fine)|lol)\b[\s!.,:)]*$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Statement:
    """One sentence the user wrote, with where and when."""

    seq: int | None
    created_at: datetime
    text: str


# A request whose only first person is its object ("Tell me about tea.") states nothing.
_REQUEST = re.compile(
    r"^(?:please\s+|(?:can|could|would|will) you\s+)*(?:tell|give|show|help|explain|find|send|write|make|list|get|"
    r"bring|book|check|look|search|summari[sz]e|translate|draft|teach|walk|let|let['’]s)\b",
    re.IGNORECASE,
)


def _is_statement(sentence: str, *, conversational: bool) -> bool:
    """A statement of fact or preference: first person or a preference word anywhere; in a
    short, conversational message also any other plain statement ("The deploy is on Friday.")."""
    if sentence.endswith("?") or _SMALL_TALK.match(sentence):
        return False
    if len(sentence.split()) < 3:
        return False
    if _PREFERENCE.search(sentence) or _FIRST_PERSON_CI.search(sentence):
        return True
    if _REQUEST.match(sentence):  # "Tell me about tea.", "Explain the plan." ask, they do not state
        return False
    return bool(_FIRST_PERSON.search(sentence)) or conversational


def _user_text(message: Message) -> str:
    # Pasted code is material, not a statement about the user; quoted lines are someone else's.
    text = _CODE_FENCE.sub(" ", storable(message.content or ""))
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(">"))


def user_statements(history: Iterable[Message]) -> list[Statement]:
    """Every statement of fact or preference in the user's messages of ``history``, in order.

    At most ``MAX_STATEMENTS_PER_MESSAGE`` per message (a pasted document is not a list of
    facts about the user; the pruned catalog keeps it whole); a sentence longer than
    ``MAX_STATEMENT_CHARS`` is excerpted."""
    out: list[Statement] = []
    for message in history:
        if message.role != "user" or message.is_compact_summary or not message.content:
            continue
        found = 0
        said = sentences(_user_text(message))
        conversational = len(said) <= CONVERSATIONAL_SENTENCES and sum(map(len, said)) <= CONVERSATIONAL_CHARS
        for sentence in said:
            sentence = _BULLET.sub("", sentence).strip()
            if not _is_statement(sentence, conversational=conversational):
                continue
            out.append(Statement(message.seq, message.created_at, excerpt(sentence, MAX_STATEMENT_CHARS)))
            found += 1
            if found >= MAX_STATEMENTS_PER_MESSAGE:
                break
    return out


def ledger_line(statement: Statement) -> str:
    """``- On 8 May 2023 the user said: "I moved to Porto." (seq 12)``: a fact, its date, its source."""
    where = f" (seq {statement.seq})" if statement.seq is not None else ""
    return f'- On {day(statement.created_at)} the user said: "{statement.text}"{where}'


# -- coverage: is a statement already said in a text? ----------------------------------------

_WORD = re.compile(r"[\w][\w'’-]*", re.UNICODE)
_STOP = frozenset(
    "the a an and or but if then than that this these those there their they them he she it its his her "
    "is are was were be been being am do does did have has had will would shall should can could may might "
    "must to of in on at by for with from into onto about as so not no yes very really just also too "
    "i i'm i've i'd i'll me my mine myself we we're our ours us you your yours what which who whom when where "
    "why how all any some each every more most much many few one two please".split()
)


def _content_words(text: str) -> list[str]:
    words = (m.group().lower().strip("'’-") for m in _WORD.finditer(text))
    return [w for w in words if len(w) >= 3 and w not in _STOP]


def _salient(text: str) -> list[str]:
    """Names and numbers: capitalised words not opening the sentence, and words with digits."""
    words = [m.group() for m in _WORD.finditer(text)]
    return [
        w.lower().strip("'’-")
        for i, w in enumerate(words)
        if any(c.isdigit() for c in w) or (i > 0 and w[:1].isupper() and w not in ("I", "I'm", "I've", "I'd", "I'll"))
    ]


def covered(statement: str, text: str) -> bool:
    """Whether ``text`` already says ``statement``: all its names and numbers appear in it, or,
    when it has none, at least three quarters of its content words do."""
    haystack = {w.lower().strip("'’-") for w in _WORD.findall(text)}
    salient = _salient(statement)
    if salient:
        return all(w in haystack for w in salient)
    words = _content_words(statement)
    if not words:
        return True
    return sum(w in haystack for w in words) * 4 >= len(words) * 3


# -- decisions and open tasks -----------------------------------------------------------------

_DECISION = re.compile(
    r"\b(?:decided|decide to|agreed|we['’]ll go with|let['’]s go with|going with|chose|settled on|the plan is|"
    r"we will use|let['’]s use|we['’]ll use)\b",
    re.IGNORECASE,
)
_OPEN_TASK = re.compile(
    r"\b(?:todo|to-do|next step|still (?:need|have) to|remaining|open task|follow[- ]up|pending|need to|"
    r"remind me|don['’]t forget|later today|tomorrow)\b",
    re.IGNORECASE,
)


def _matching(history: Sequence[Message], pattern: re.Pattern[str], roles: tuple[str, ...]) -> list[Statement]:
    out = []
    for message in history:
        if message.role not in roles or message.is_compact_summary or not message.content:
            continue
        for sentence in sentences(_user_text(message)):
            sentence = _BULLET.sub("", sentence).strip()
            if pattern.search(sentence) and not sentence.endswith("?"):
                out.append(Statement(message.seq, message.created_at, excerpt(sentence, 200)))
    return out


def decisions(history: Sequence[Message]) -> list[Statement]:
    """Sentences of the user or the assistant saying something was decided."""
    return _matching(history, _DECISION, ("user", "assistant"))


def open_tasks(history: Sequence[Message]) -> list[Statement]:
    """Sentences of the user or the assistant naming something still to do."""
    return _matching(history, _OPEN_TASK, ("user", "assistant"))


def dated_line(statement: Statement, who: str | None = None) -> str:
    """``- 8 May 2023 (seq 12): <text>``, or with ``who``: ``- 8 May 2023, user (seq 12): <text>``."""
    speaker = f", {who}" if who else ""
    where = f" (seq {statement.seq})" if statement.seq is not None else ""
    return f"- {day(statement.created_at)}{speaker}{where}: {statement.text}"
