"""The recall dataset: generated from a seed, shipped as code, nothing downloaded.

Each user has a history of several sessions (conversations) of chat turns. Most turns are
filler (small talk about everyday topics, long enough that the session crosses its threshold
and is cleaned up several times); a few plant facts about the user:

* ``single_fact``: told once in the last session, the one the questions are asked in;
* ``updated_fact``: told in the first session, changed in a later one (the newer value wins);
* ``multi_session``: told once in an earlier session, never repeated;
* ``tool_result``: only inside a tool result (a note the assistant opened), never typed;
* ``not_told``: never mentioned; the right answer is that the agent does not know.

Every fact is planted in the first half of its session, so the rest of the session buries it.
Values are distinct words and codes that occur nowhere else, so a normalized contains-match on
the planted value scores an answer (``scoring``). The same seed gives the same dataset, byte for
byte, on every machine.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("single_fact", "updated_fact", "multi_session", "tool_result", "not_told")
NOTE_TOOL = "read_note"
DEFAULT_SEED = 17


@dataclass(frozen=True)
class Size:
    """How big a generated dataset is: ``per_kind`` questions of every kind per user."""

    name: str
    users: int
    sessions: int
    turns: int  # turns per session (user message + reply), facts included
    per_kind: int = 2

    def __post_init__(self) -> None:
        if self.users < 1 or self.sessions < 2 or self.turns < 8 or self.per_kind < 1:
            raise ValueError("a dataset needs at least 1 user, 2 sessions, 8 turns per session and 1 question per kind")


SIZES = {
    "small": Size("small", users=1, sessions=3, turns=30),
    "medium": Size("medium", users=2, sessions=4, turns=40),
    "full": Size("full", users=5, sessions=6, turns=50),
}


@dataclass(frozen=True)
class ToolExchange:
    """A tool call the assistant made before its reply, with the tool's result."""

    name: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Turn:
    user: str
    assistant: str
    tool: ToolExchange | None = None


@dataclass(frozen=True)
class Session:
    index: int
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """One question; ``expected`` is the planted value (None for ``not_told``), ``stale`` the
    value an ``updated_fact`` replaced, ``told_in`` the sessions where the value was given."""

    id: str
    user: str
    kind: str
    text: str
    expected: str | None
    stale: str | None = None
    told_in: tuple[int, ...] = ()


@dataclass(frozen=True)
class UserHistory:
    user: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turn_count(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


@dataclass(frozen=True)
class Dataset:
    size: Size
    seed: int
    users: tuple[UserHistory, ...] = field(default=())

    @property
    def questions(self) -> list[Question]:
        return [q for u in self.users for q in u.questions]

    def fingerprint(self) -> str:
        """A short hash of the whole dataset: results are only resumed against the same one."""
        data = json.dumps([asdict(u) for u in self.users], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(data.encode()).hexdigest()[:12]


# -- the facts ---------------------------------------------------------------------------------


def _digits(n: int) -> Any:
    return lambda r: "".join(r.choice(string.digits[1:]) for _ in range(n))


def _letters(n: int) -> Any:
    return lambda r: "".join(r.choice("BCDFGHJKLMNPQRSTVWXZ") for _ in range(n))


def _pick(*values: str) -> Any:
    return lambda r: r.choice(values)


#: Things a user says about themselves: (attribute, value maker). Attributes are plain words
#: so the question "What is my <attribute>?" reads naturally.
PERSONAL = (
    ("gym locker code", _digits(4)),
    ("favourite colour", _pick("teal", "ochre", "magenta", "turquoise", "lilac", "maroon", "vermilion")),
    ("bike brand", _pick("Brompton", "Cannondale", "Gazelle", "Bianchi", "Cervelo", "Pinarello")),
    ("home town", _pick("Tromso", "Ghent", "Porto", "Aarhus", "Bergamo", "Kilkenny", "Brno")),
    ("favourite dish", _pick("ramen", "paella", "pierogi", "moussaka", "bibimbap", "goulash")),
    ("dentist", _pick("Doctor Okafor", "Doctor Lindqvist", "Doctor Moreau", "Doctor Takahashi")),
    ("piano teacher", _pick("Ines Varga", "Tomas Berglund", "Leila Haddad", "Oskar Nyberg")),
    ("project codename", _pick("Bluefin", "Kestrel", "Marmoset", "Quillfeather", "Juniper")),
    ("employee number", lambda r: "E" + _digits(5)(r)),
    ("favourite tea", _pick("oolong", "rooibos", "sencha", "genmaicha", "darjeeling")),
    ("favourite author", _pick("Italo Calvino", "Toni Morrison", "Octavia Butler", "Stanislaw Lem")),
    ("team mascot", _pick("otter", "pelican", "wombat", "narwhal", "ibex")),
)

#: Facts found only in a note the assistant opened: (attribute, note title, value maker).
NOTES = (
    ("parking spot", "garage", lambda r: f"{_letters(1)(r)}-{_digits(2)(r)}"),
    ("insurance policy number", "insurance", lambda r: "PX" + _digits(6)(r)),
    ("library card number", "library", _digits(8)),
    ("flight confirmation code", "travel", _letters(6)),
    ("parcel tracking number", "parcel", lambda r: "TRK" + _digits(7)(r)),
    ("restaurant booking reference", "dinner", lambda r: "RB" + _digits(5)(r)),
)

#: Never told: the agent must say it does not know.
UNTOLD = (
    "blood type",
    "passport number",
    "middle name",
    "shoe size",
    "favourite band",
    "wedding date",
    "star sign",
    "licence plate",
)

_PLANT = ("By the way,", "Before I forget,", "Just so you know,", "One thing about me:", "A small detail:")
_PLANT_TAIL = (
    "I mention it because it keeps coming up.",
    "It might be useful at some point.",
    "Keep it in mind, please.",
    "Anyway, back to other things.",
)
_PLANT_REPLY = (
    "Thanks for telling me, I will keep that in mind.",
    "Noted. Let me know whenever it matters.",
    "Good to know, thank you.",
)
_UPDATE = ("Update:", "A correction to something I told you earlier:", "Things have changed:")
_UPDATE_REPLY = ("Got it, I will use the new one from now on.", "Thanks, I have the change.")
_NOTE_ASK = ("Could you open my note called {t}?", "Please read my {t} note.", "Open the {t} note for me, please.")
_NOTE_REPLY = ("I opened your {t} note. Anything you want me to do with it?", "Here is your {t} note, as saved.")
_NOTE_EXTRA = (
    "Saved for later reference.",
    "Check again before the end of the season.",
    "Ask at the front desk if anything is unclear.",
)

# -- the filler ------------------------------------------------------------------------------

_TOPICS = (
    "keeping houseplants alive through the winter",
    "baking sourdough bread at home",
    "planning a long walk in the hills",
    "learning to draw with charcoal",
    "cleaning a cast iron pan",
    "getting better sleep",
    "the history of the bicycle",
    "how tides work",
    "starting a vegetable garden on a balcony",
    "brewing coffee with a pour over",
    "writing a short story",
    "why leaves change colour in autumn",
    "taking care of old books",
    "choosing a good rain jacket",
    "how bees make honey",
    "learning a new language as an adult",
    "repairing a flat tyre",
    "organising a small kitchen",
    "watching birds in a city park",
    "the basics of composting",
    "how lighthouses were kept running",
    "stretching after a run",
    "making a simple bookshelf",
    "how volcanoes form islands",
    "packing light for a trip",
    "reading maps without a phone",
    "keeping a journal",
    "why the sky looks blue",
    "cooking lentils so they stay firm",
    "the rules of chess openings",
)
_ASK = (
    "I have been wondering about {topic}. Where would you start if you were me?",
    "Can you give me a few practical ideas about {topic}? I only have a little time for it.",
    "Tell me something interesting about {topic}, please. Keep it short but useful.",
    "What do people usually get wrong about {topic}?",
    "I read a little about {topic} and got confused. Could you explain the main idea plainly?",
    "Could you walk me through {topic} step by step?",
)
_OPEN = (
    "Good question.",
    "Happy to help with that.",
    "Here is a short overview.",
    "That is a nice thing to look into.",
)
_POINTS = (
    "start small and change one thing at a time",
    "watch what happens for a while before deciding anything",
    "keep notes, because memory is less reliable than it feels",
    "the simplest tools are usually enough at the beginning",
    "patience matters more than expensive equipment",
    "a little practice every day beats a long session once a week",
    "ask someone nearby who has done it before",
    "most mistakes are easy to undo if you notice them early",
    "the weather and the season change more than people expect",
    "reading one good guide is better than skimming many",
    "rest is part of the process, not a break from it",
    "the first attempt is for learning, not for results",
)
_CLOSE = (
    "Would you like more detail on any part of it?",
    "Tell me how it goes.",
    "I can suggest a next step once you have tried that.",
    "That should be enough to get going.",
)


def _filler(r: random.Random) -> Turn:
    topic = r.choice(_TOPICS)
    points = r.sample(_POINTS, 4)
    reply = (
        f"{r.choice(_OPEN)} With {topic}, {points[0]}. After that, {points[1]}. "
        f"Many people also find that {points[2]}, and in the long run {points[3]}. {r.choice(_CLOSE)}"
    )
    return Turn(user=r.choice(_ASK).format(topic=topic), assistant=reply)


def question_text(attribute: str) -> str:
    return f"What is my {attribute}?"


def _plant(r: random.Random, attribute: str, value: str) -> Turn:
    return Turn(
        user=f"{r.choice(_PLANT)} my {attribute} is {value}. {r.choice(_PLANT_TAIL)}", assistant=r.choice(_PLANT_REPLY)
    )


def _update(r: random.Random, attribute: str, value: str) -> Turn:
    return Turn(user=f"{r.choice(_UPDATE)} my {attribute} is now {value}.", assistant=r.choice(_UPDATE_REPLY))


def _note(r: random.Random, attribute: str, title: str, value: str, day: int) -> Turn:
    result = f"Note {title!r} (saved on day {day} of the month):\nMy {attribute} is {value}. {r.choice(_NOTE_EXTRA)}"
    return Turn(
        user=r.choice(_NOTE_ASK).format(t=title),
        assistant=r.choice(_NOTE_REPLY).format(t=title),
        tool=ToolExchange(name=NOTE_TOOL, arguments={"title": title}, result=result),
    )


# -- generation --------------------------------------------------------------------------------


def generate(*, size: Size | str = "small", seed: int = DEFAULT_SEED) -> Dataset:
    """The dataset of ``size`` (a ``Size`` or a name in ``SIZES``) for ``seed``."""
    if isinstance(size, str):
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
        size = SIZES[size]
    if size.per_kind * 3 > len(PERSONAL) or size.per_kind > len(NOTES) or size.per_kind > len(UNTOLD):
        raise ValueError(f"per_kind={size.per_kind} needs more distinct facts than the dataset has")
    users = tuple(_user(random.Random(f"{seed}:{i}"), f"u{i}", size) for i in range(size.users))
    return Dataset(size=size, seed=seed, users=users)


def _user(r: random.Random, user: str, size: Size) -> UserHistory:
    last = size.sessions - 1
    # planted[session] = turns to place in the first half of that session
    planted: dict[int, list[Turn]] = {i: [] for i in range(size.sessions)}
    questions: list[Question] = []
    personal = r.sample(PERSONAL, size.per_kind * 3)
    notes = r.sample(NOTES, size.per_kind)
    untold = r.sample(UNTOLD, size.per_kind)

    def ask(kind: str, attribute: str, expected: str | None, stale: str | None = None, told_in=()) -> None:
        qid = f"{user}-q{len(questions) + 1:02d}"
        questions.append(Question(qid, user, kind, question_text(attribute), expected, stale, tuple(told_in)))

    for attribute, make in personal[: size.per_kind]:
        value = make(r)
        planted[last].append(_plant(r, attribute, value))
        ask("single_fact", attribute, value, told_in=(last,))
    for attribute, make in personal[size.per_kind : 2 * size.per_kind]:
        old = make(r)
        new = make(r)
        while new == old:
            new = make(r)
        later = r.randint(1, last)
        planted[0].append(_plant(r, attribute, old))
        planted[later].append(_update(r, attribute, new))
        ask("updated_fact", attribute, new, stale=old, told_in=(0, later))
    for attribute, make in personal[2 * size.per_kind :]:
        value = make(r)
        where = r.randint(0, last - 1)
        planted[where].append(_plant(r, attribute, value))
        ask("multi_session", attribute, value, told_in=(where,))
    for attribute, title, make in notes:
        value = make(r)
        where = r.randint(0, last)
        planted[where].append(_note(r, attribute, title, value, day=r.randint(2, 27)))
        ask("tool_result", attribute, value, told_in=(where,))
    for attribute in untold:
        ask("not_told", attribute, None)

    sessions = []
    for index in range(size.sessions):
        facts = planted[index]
        half = max(len(facts), size.turns // 2)
        if len(facts) > half:
            raise ValueError(f"session {index} of {user} has more facts than half its turns")
        slots = sorted(r.sample(range(half), len(facts)))
        turns = [_filler(r) for _ in range(size.turns - len(facts))]
        for slot, fact in zip(slots, facts, strict=True):
            turns.insert(slot, fact)
        sessions.append(Session(index=index, turns=tuple(turns)))
    r.shuffle(questions)
    return UserHistory(user=user, sessions=tuple(sessions), questions=tuple(questions))
