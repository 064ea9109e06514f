"""Archived conversations for the recall benchmark: many short dated sessions of everyday text, seeded.

A user talks with the assistant in short conversations (2-12 exchanges), from half an hour to
half a day apart (100,000 messages span about four years), each about one or two everyday
topics of the generated recall dataset (``agents.evaluation.generated_text``: meal planning, sleep, a presentation, ...). What is said
varies the way real chat does:

* sentences come from the topics' openers, follow-ups and answers, with asides, closers and
  elaborations; a user's message often adds something about their life: a person by relation
  and name, a city, a job, a hobby, a dish, a day, a time, an amount;
* about a fifth of the content words of every sentence are swapped for words drawn by
  frequency rank (a Zipf law) from the English word tokens of the cl100k vocabulary (about
  24,000 words, most frequent first), so the vocabulary has the long tail of real chat and no
  sentence repeats word for word across 100,000 messages;
* numbers, names and places are drawn per message, so the rare terms a question asks about are
  rare in the archive too.

``queries`` makes the latest user messages of a new conversation from the same generator with
another seed: what automatic recall searches for.
"""

from __future__ import annotations

import bisect
import itertools
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from agents.evaluation import generated_text as g
from memory.messages import Message
from memory.retrieval.text import STOP_WORDS

START = datetime(2019, 3, 4, 8, 30, tzinfo=UTC)
SWAP_SHARE = 0.2
_WORD = re.compile(r"[A-Za-z][a-z]{3,}")
_TOKEN = re.compile(rb"^ [a-z]{4,14}$")
_VOWEL = re.compile(r"[aeiouy]")


@dataclass(frozen=True)
class Conversation:
    key: str  # the session's id
    messages: tuple[Message, ...]


@lru_cache(maxsize=1)
def vocabulary() -> tuple[tuple[str, ...], tuple[float, ...]]:
    """English word tokens of cl100k (rank order ≈ frequency order) and Zipf cumulative weights."""
    from memory.tokens import encoding

    enc = encoding()
    found: list[str] = []
    for rank in range(enc.n_vocab):
        try:
            raw = enc.decode_single_token_bytes(rank)
        except KeyError:
            continue
        if _TOKEN.match(raw):
            word = raw[1:].decode()
            if word not in STOP_WORDS and _VOWEL.search(word[1:]) and word[-1] not in "jqxz":
                found.append(word)
    weights = itertools.accumulate(1.0 / (r + 20) for r in range(len(found)))
    return tuple(found), tuple(weights)


def _topics() -> list[tuple[list[str], list[str], list[tuple[str, str]]]]:
    return [(list(openers), list(answers), list(pairs)) for _, openers, answers, pairs in g.TOPICS]


class _Speaker:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words, self.weights = vocabulary()
        self.total = self.weights[-1]
        self.topics = _topics()

    def word(self) -> str:
        return self.words[bisect.bisect_left(self.weights, self.rng.random() * self.total)]

    def vary(self, sentence: str) -> str:
        """``sentence`` with about SWAP_SHARE of its content words swapped for vocabulary words."""

        def swap(match: re.Match) -> str:
            token = match.group(0)
            if token.lower() in STOP_WORDS or self.rng.random() >= SWAP_SHARE:
                return token
            word = self.word()
            return word.capitalize() if token[0].isupper() else word

        return _WORD.sub(swap, sentence)

    def person(self) -> str:
        relation, gender = self.rng.choice(g.RELATIONS)
        names = g.FEMALE if gender == "f" else g.MALE if gender == "m" else g.FEMALE + g.MALE
        return f"my {relation} {self.rng.choice(names)}"

    def life(self) -> str:
        """Something the user says about their life, in passing."""
        r = self.rng
        day = r.choice(("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"))
        templates = (
            lambda: f"{self.person().capitalize()} is moving to {r.choice(g.CITIES)} in {r.choice(('March', 'June', 'September', 'the autumn', 'the spring'))}.",
            lambda: f"I'm meeting {self.person()} at {r.choice(g.CAFES)} on {day} at {r.randint(7, 20)}:{r.choice(('00', '15', '30', '45'))}.",
            lambda: f"{self.person().capitalize()} just started as a {r.choice(g.JOBS)} at {r.choice(g.ORGS)}.",
            lambda: f"I've been doing {r.choice(g.HOBBIES)} {r.randint(2, 4)} times a week since {r.choice(('January', 'April', 'last summer', 'my birthday'))}.",
            lambda: f"We're cooking {r.choice(g.DISHES)} for {r.randint(3, 12)} people on {day}.",
            lambda: f"My {r.choice(g.BREEDS)} {r.choice(g.PET_NAMES)} has the vet on {day}, it's going to cost about {r.randint(40, 400)} euros.",
            lambda: f"I finally booked the {r.choice(g.APPOINTMENTS)} for {day} the {r.randint(2, 28)}th.",
            lambda: f"{self.person().capitalize()} lent me {r.choice(g.BOOKS)[0]} and I'm on page {r.randint(20, 380)}.",
            lambda: f"I'm learning {r.choice(g.LANGUAGES)} with {self.person()}, {r.randint(10, 45)} minutes every evening.",
            lambda: f"{self.person().capitalize()} sold the {r.choice(g.CARS)} for {r.randint(2, 19)},{r.randint(100, 999)}.",
            lambda: f"I'm signed up for the {r.choice(g.RACES)} with {self.person()}.",
            lambda: f"We went to {r.choice(g.PLACES)} in {r.choice(g.CITIES)} with {self.person()}.",
        )
        return r.choice(templates)()

    def user(self, topic, first: bool) -> str:
        r = self.rng
        openers, _, pairs = topic
        if first:
            text = r.choice(openers)
        else:
            text = r.choice(pairs)[0]
            if r.random() < 0.2:
                text = f"{r.choice(g.ASIDE)} {text[0].lower()}{text[1:]}"
        if r.random() < 0.35:
            text = f"{text} {self.life()}" if r.random() < 0.5 else f"{self.life()} {text}"
        return self.vary(text)

    def assistant(self, topic, first: bool) -> str:
        r = self.rng
        _, answers, pairs = topic
        parts = [r.choice(answers) if first else r.choice(pairs)[1]]
        parts += r.sample(g.ELABORATIONS, k=r.randint(0, 2))
        if r.random() < 0.5:
            parts.append(r.choice(g.CLOSERS))
        return self.vary(" ".join(p for p in parts if p))


def conversations(*, messages: int, seed: int, prefix: str = "archived") -> list[Conversation]:
    """Conversations holding ``messages`` messages in all (the last one cut to fit), oldest first."""
    rng = random.Random(seed)
    speaker = _Speaker(rng)
    out: list[Conversation] = []
    clock = START
    made = 0
    while made < messages:
        clock += timedelta(hours=rng.choice((0.5, 1, 2, 3, 5, 8, 14)) * rng.uniform(0.8, 1.2))
        exchanges = rng.randint(2, 12)
        topic = rng.choice(speaker.topics)
        at = clock
        unit: list[Message] = []
        for i in range(exchanges):
            if i and rng.random() < 0.15:
                topic = rng.choice(speaker.topics)  # "Different question: ..."
                first = True
            else:
                first = i == 0
            for role, text in (("user", speaker.user(topic, first)), ("assistant", speaker.assistant(topic, first))):
                at += timedelta(seconds=rng.randint(15, 240))
                unit.append(Message(role=role, content=text, created_at=at))
        unit = unit[: messages - made]
        out.append(Conversation(f"{prefix}-{len(out):06d}", tuple(unit)))
        made += len(unit)
    return out


def queries(*, count: int, seed: int) -> list[str]:
    """``count`` user messages of new conversations: what recall searches the archive for."""
    rng = random.Random(seed)
    speaker = _Speaker(rng)
    return [speaker.user(rng.choice(speaker.topics), rng.random() < 0.3) for _ in range(count)]
