"""The generated dataset: reproducible from its seed, shipped as code, nothing downloaded.

Each user talks with the assistant over many short, dated conversations (a few days apart,
0.3-1.7k tokens each: most never reach a cleanup threshold), each about an everyday topic
(meal planning, sleep, a presentation, a garden...). In passing, the user mentions things about
themselves and about the people in their life, and asks the assistant for suggestions; those
are what the questions, asked a few days after the last conversation, are about:

* ``user_fact``: something the user said about themselves, once;
* ``people``: something about a person the user talks about ("my sister Maya ...");
* ``assistant``: something the assistant said (a book it recommended, a sum it worked out);
* ``temporal``: when something happened, said relative to the conversation's date ("I ran the
  Riverside 10k last Saturday"), or a date ahead; the answer is the day ("13 May 2023");
* ``multi_hop``: needs two conversations: one says who a person is ("my cousin Jonas"), a later
  one says something about them by name only ("Jonas got a job as a pharmacist");
* ``update``: a value said in one conversation and replaced in a later one (the newer wins);
* ``abstention``: something never said about a person who was mentioned: the right answer is
  that the assistant does not know.

Every turn has an id (``u0.s03.t05``: user, session, message in the session) and every question
names its evidence by those ids. Values are drawn without repetition within a user, so a value
occurs only where its fact is said. The same seed gives the same dataset, byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agents.evaluation import generated_text as words
from agents.evaluation.data import Dataset, History, Question, Session, Turn
from agents.evaluation.generated_facts import TEMPLATES, Draft

CATEGORIES = ("user_fact", "people", "assistant", "temporal", "multi_hop", "update", "abstention")
DEFAULT_SEED = 17


@dataclass(frozen=True)
class Size:
    """How big a generated dataset is: ``per_category`` questions of each category per user."""

    name: str
    users: int
    sessions: int
    per_category: int = 2

    def __post_init__(self) -> None:
        if self.users < 1 or self.sessions < 3 or self.per_category < 1:
            raise ValueError("a dataset needs at least 1 user, 3 sessions and 1 question per category")


SIZES = {
    "small": Size("small", users=1, sessions=10, per_category=2),
    "medium": Size("medium", users=2, sessions=16, per_category=3),
    "full": Size("full", users=5, sessions=24, per_category=4),
}


def generate(*, size: Size | str = "small", seed: int = DEFAULT_SEED) -> Dataset:
    """The dataset of ``size`` (a ``Size`` or a name in ``SIZES``) for ``seed``."""
    if isinstance(size, str):
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; choose one of {', '.join(SIZES)}")
        size = SIZES[size]
    short = [c for c in CATEGORIES if len(set(TEMPLATES[c])) < size.per_category and c != "abstention"]
    if short or size.per_category > len(TEMPLATES["abstention"]):
        raise ValueError(f"per_category={size.per_category} needs more distinct facts than the dataset has")
    histories = tuple(_history(random.Random(f"{seed}:{i}"), i, size) for i in range(size.users))
    return Dataset(
        kind="generated",
        label=f"generated {size.name} (seed {seed})",
        source=f"agents.evaluation.generated, size {size.name}, seed {seed}",
        categories=CATEGORIES,
        headline=CATEGORIES,
        histories=histories,
    )


def _history(r: random.Random, index: int, size: Size) -> History:
    u = Draft(r, index, size)
    for category in CATEGORIES:  # abstention last: it asks about people the others brought up
        for template in r.sample(TEMPLATES[category], size.per_category):
            template(u)
    sessions = tuple(_session(u, i) for i in range(size.sessions))
    questions = []
    for n, ask in enumerate(u.asks):
        evidence = tuple(exchange.ids[side] for exchange, side in ask.evidence)
        questions.append(
            Question(
                id=f"{u.key}.q{n + 1:02d}",
                history=u.key,
                category=ask.category,
                text=ask.text,
                answer=ask.answer,
                evidence=evidence,
                date=u.asked,
                stale=ask.stale,
            )
        )
    r.shuffle(questions)
    return History(id=u.key, user_name=u.name, assistant_name=None, sessions=sessions, questions=tuple(questions))


def _session(u: Draft, index: int) -> Session:
    """The ``index``-th conversation: one to three topics talked over, with the facts placed
    there said in passing."""
    r = u.r
    exchanges: list = []
    for n, (_, openers, first_answers, pairs) in enumerate(r.sample(words.TOPICS, r.choice((1, 1, 2, 2, 2, 3)))):
        opener = r.choice(openers)
        if n:
            opener = f"{r.choice(words.NEW_TOPIC)} {opener[0].lower()}{opener[1:]}"
        exchanges.append((opener, _reply(r, r.choice(first_answers))))
        for question, answer in r.sample(pairs, r.randint(3, 6)):
            exchanges.append((question, _reply(r, answer)))
    for fact in u.placed[index]:
        exchanges.insert(r.randint(1, len(exchanges)), fact)
    turns: list[Turn] = []
    for exchange in exchanges:
        user, assistant = (exchange.user, exchange.assistant) if hasattr(exchange, "user") else exchange
        for role, text in (("user", user), ("assistant", assistant)):
            turn_id = f"{u.key}.s{index + 1:02d}.t{len(turns) + 1:02d}"
            turns.append(Turn(id=turn_id, role=role, speaker=u.name if role == "user" else "assistant", text=text))
            if hasattr(exchange, "ids"):
                exchange.ids[role] = turn_id
    return Session(id=f"{u.key}.s{index + 1:02d}", date=u.dates[index], turns=tuple(turns))


def _reply(r: random.Random, answer: str) -> str:
    """The assistant's reply: the point of its answer, with a sentence or two any answer might
    have around it, and maybe a closing question."""
    parts = [answer, *r.sample(words.ELABORATIONS, r.randint(1, 3)), r.choice(words.CLOSERS)]
    return " ".join(p for p in parts if p)
