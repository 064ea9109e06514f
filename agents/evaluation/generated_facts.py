"""The facts of the generated dataset (``agents.evaluation.generated``): who a user's history
is about, and for each question category the ways a fact comes up in conversation.

Each template places one or two exchanges (a user message and the assistant's reply) in the
user's sessions and adds the question about them, naming which side of which exchange holds the
answer. A template is used at most once per user, and values are never reused within a user.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agents.evaluation import generated_text as words

if TYPE_CHECKING:
    from agents.evaluation.generated import Size


def day(moment: datetime) -> str:
    """"13 May 2023": how answers name a day."""
    return f"{moment.day} {moment:%B %Y}"


@dataclass
class _Person:
    name: str
    relation: str
    female: bool

    @property
    def pron(self) -> str:
        return "she" if self.female else "he"

    @property
    def pos(self) -> str:
        return "her" if self.female else "his"


@dataclass
class _Exchange:
    """A user message and the assistant's reply; ``ids`` are filled in once it is placed."""

    user: str
    assistant: str
    ids: dict[str, str] = field(default_factory=dict)


@dataclass
class _Ask:
    category: str
    text: str
    answer: str | None
    evidence: list[tuple[_Exchange, str]]  # (exchange, "user" | "assistant")
    stale: str | None = None


class Draft:
    """One user's history in the making."""

    def __init__(self, r: random.Random, index: int, size: Size) -> None:
        self.r, self.key, self.size = r, f"u{index}", size
        self.name = r.choice(words.USERS)
        start = datetime(2023, r.randint(1, 6), r.randint(1, 28), tzinfo=UTC)
        self.dates: list[datetime] = []
        moment = start
        for _ in range(size.sessions):
            moment = moment.replace(hour=r.randint(7, 21), minute=r.choice((0, 10, 20, 30, 40, 50)))
            self.dates.append(moment)
            moment = moment + timedelta(days=r.randint(1, 6))
        self.asked = (self.dates[-1] + timedelta(days=r.randint(1, 4))).replace(hour=10, minute=0)
        self.placed: dict[int, list[_Exchange]] = {i: [] for i in range(size.sessions)}
        self.asks: list[_Ask] = []
        self.used: set[str] = set()
        relations = list(words.RELATIONS)
        r.shuffle(relations)
        self.free_relations = relations
        self.people: list[_Person] = []

    # -- drawing -----------------------------------------------------------------------------

    def take(self, pool: tuple) -> object:
        left = [v for v in pool if str(v) not in self.used]
        if not left:
            raise ValueError("the dataset ran out of distinct values; use fewer questions per category")
        value = self.r.choice(left)
        self.used.add(str(value))
        return value

    def person(self) -> _Person:
        relation, gender = self.free_relations.pop()
        female = gender == "f" or (gender == "" and self.r.random() < 0.5)
        name = str(self.take(words.FEMALE if female else words.MALE))
        person = _Person(name=name, relation=relation, female=female)
        self.people.append(person)
        return person

    def session(self, *, before_last: bool = False) -> int:
        return self.r.randrange(self.size.sessions - 1 if before_last else self.size.sessions)

    def later(self, first: int) -> int:
        return self.r.randrange(first + 1, self.size.sessions)

    def said(self, where: int, user: str, assistant: str | None = None, person: _Person | None = None) -> _Exchange:
        if assistant is None:
            pool = words.ACKNOWLEDGE_PERSON if person is not None else words.ACKNOWLEDGE
            assistant = self.r.choice(pool).format(name=person.name if person else "", pron=person.pron if person else "")
        if self.r.random() < 0.4:
            user = f"{self.r.choice(words.ASIDE)} {user[0].lower()}{user[1:]}"
        exchange = _Exchange(user=user, assistant=assistant)
        self.placed[where].append(exchange)
        return exchange

    def ask(self, category: str, text: str, answer: str | None, evidence: list[tuple[_Exchange, str]], stale=None):
        self.asks.append(_Ask(category, text, answer, evidence, stale))


def _relative(r: random.Random, when: datetime) -> tuple[str, datetime]:
    """A past day said relative to ``when``, and that day."""
    choice = r.choice(("yesterday", "two days ago", "three days ago", "Saturday", "Sunday", "Friday", "this morning"))
    if choice == "this morning":
        return choice, when
    back = {"yesterday": 1, "two days ago": 2, "three days ago": 3}.get(choice)
    if back is None:
        target = {"Friday": 4, "Saturday": 5, "Sunday": 6}[choice]
        back = (when.weekday() - target) % 7 or 7
        return f"last {choice}", when - timedelta(days=back)
    return choice, when - timedelta(days=back)


def _bare(value: str) -> str:
    """A value as an answer names it: without a leading article ("the botanical garden")."""
    for article in ("the ", "a ", "an "):
        if value.startswith(article):
            return value[len(article):]
    return value


# -- user_fact: the user about themselves ------------------------------------------------------


def _pet(u: Draft) -> None:
    breed, pet = u.take(words.BREEDS), u.take(words.PET_NAMES)
    e = u.said(u.session(), f"We finally got a dog! She's a {breed} puppy and we've called her {pet}.")
    u.ask("user_fact", "What breed is my dog?", breed, [(e, "user")])


def _allergy(u: Draft) -> None:
    allergen = u.take(words.ALLERGENS)
    e = u.said(u.session(), f"Quick thing for any recipe ideas: I'm allergic to {allergen}, so leave it out.")
    u.ask("user_fact", "What am I allergic to?", allergen, [(e, "user")])


def _instrument(u: Draft) -> None:
    instrument = u.take(words.INSTRUMENTS)
    e = u.said(u.session(), f"I've started {instrument} lessons on Thursday evenings, my fingers hurt already.")
    u.ask("user_fact", "Which instrument am I learning to play?", instrument, [(e, "user")])


def _job(u: Draft) -> None:
    job, org = u.take(words.JOBS), u.take(words.ORGS)
    e = u.said(u.session(), f"I work as a {job} at {org}, so my weekdays are pretty packed.")
    u.ask("user_fact", "What do I do for a living?", job, [(e, "user")])


def _signed_up(u: Draft) -> None:
    race = u.take(words.RACES)
    e = u.said(u.session(), f"I signed up for the {race} in the autumn. My first proper race!")
    u.ask("user_fact", "Which race did I sign up for?", race, [(e, "user")])


def _language(u: Draft) -> None:
    language = u.take(words.LANGUAGES)
    e = u.said(u.session(), f"I'm learning {language} on my lunch breaks now, twenty minutes a day.")
    u.ask("user_fact", "Which language am I learning?", language, [(e, "user")])


def _book_club(u: Draft) -> None:
    title, _ = u.take(words.BOOKS)
    e = u.said(u.session(), f"My book club picked {title} for next month, have you read it?")
    u.ask("user_fact", "Which book is my book club reading next?", title, [(e, "user")])


# -- people: about the people the user talks about ---------------------------------------------


def _their_job(u: Draft) -> None:
    p, job, city = u.person(), u.take(words.JOBS), u.take(words.CITIES)
    e = u.said(u.session(), f"My {p.relation} {p.name} just started working as a {job} in {city}.", person=p)
    u.ask("people", f"What job did my {p.relation} just start?", job, [(e, "user")])


def _their_hobby(u: Draft) -> None:
    p, hobby = u.person(), u.take(words.HOBBIES)
    e = u.said(u.session(), f"My {p.relation} {p.name} has got really into {hobby}, {p.pron} goes every weekend now.", person=p)
    u.ask("people", f"What has my {p.relation} got into lately?", hobby, [(e, "user")])


def _their_gift(u: Draft) -> None:
    p, gift = u.person(), u.take(words.GIFTS)
    e = u.said(u.session(), f"It's my {p.relation} {p.name}'s birthday soon and {p.pron} keeps hinting about {gift}.", person=p)
    u.ask("people", f"What does my {p.relation} want for {p.pos} birthday?", _bare(gift), [(e, "user")])


def _their_business(u: Draft) -> None:
    p, business = u.person(), u.take(words.BUSINESSES)
    e = u.said(u.session(), f"My {p.relation} {p.name} runs a little {business} near the station, it's always busy.", person=p)
    u.ask("people", f"What kind of business does my {p.relation} run?", business, [(e, "user")])


def _their_pet(u: Draft) -> None:
    p, animal, pet = u.person(), u.take(words.ANIMALS), u.take(words.PET_NAMES)
    e = u.said(u.session(), f"My {p.relation} {p.name} has a {animal} called {pet}, it's ridiculous and lovely.", person=p)
    u.ask("people", f"What is the name of my {p.relation}'s {animal}?", pet, [(e, "user")])


def _their_move(u: Draft) -> None:
    p, city = u.person(), u.take(words.CITIES)
    e = u.said(u.session(), f"My {p.relation} {p.name} is moving to {city} in the summer.", person=p)
    u.ask("people", f"Which city is my {p.relation} moving to?", city, [(e, "user")])


# -- assistant: what the assistant said -------------------------------------------------------


def _book(u: Draft) -> None:
    title, author = u.take(words.BOOKS)
    e = u.said(
        u.session(),
        "I've got a long flight coming up. Can you recommend one book to take?",
        f"I'd take {title} by {author}. It's absorbing without being heavy, and the chapters are a "
        "good length for dozing off in between.",
    )
    u.ask("assistant", "Which book did you recommend for my flight?", title, [(e, "assistant")])


def _dish(u: Draft) -> None:
    dish = u.take(words.DISHES)
    e = u.said(
        u.session(),
        "A vegetarian friend is coming for dinner on Saturday. What should I cook?",
        f"A {dish} is a safe choice: you can make it ahead, it feels generous, and nobody misses the meat.",
    )
    u.ask("assistant", "What dish did you suggest for my vegetarian dinner guest?", dish, [(e, "assistant")])


def _place(u: Draft) -> None:
    city, place = u.take(words.CITIES), u.take(words.PLACES)
    e = u.said(
        u.session(),
        f"We have one free afternoon in {city}. What's the one thing we shouldn't miss?",
        f"I'd go to {place}. It's compact, it gives you a feel for the city, and there's a good cafe nearby.",
    )
    u.ask("assistant", f"What did you suggest we see in {city}?", _bare(place), [(e, "assistant")])


def _plant(u: Draft) -> None:
    plant = u.take(words.PLANTS)
    e = u.said(
        u.session(),
        "What's a plant that can survive in my bathroom? It barely gets any light.",
        f"A {plant} would be my pick: it copes with low light and steam, and forgives the odd missed watering.",
    )
    u.ask("assistant", "Which plant did you recommend for my bathroom?", plant, [(e, "assistant")])


def _starter(u: Draft) -> None:
    name = u.take(words.STARTER_NAMES)
    e = u.said(
        u.session(),
        "I've made my first sourdough starter. It needs a name, help!",
        f"How about {name}? Every starter deserves a slightly ridiculous name.",
    )
    u.ask("assistant", "What name did you suggest for my sourdough starter?", name, [(e, "assistant")])


def _savings(u: Draft) -> None:
    amount = u.r.choice((60, 75, 80, 90, 120, 150))
    months = int(u.take(tuple(range(5, 19))))
    e = u.said(
        u.session(),
        f"If I put away {amount} euros a month, how long until I have {amount * months} euros for a new bike?",
        f"At {amount} euros a month you would have {amount * months} euros after {months} months, a little "
        "sooner if you add anything extra along the way.",
    )
    u.ask("assistant", "How many months did you say it would take to save for the bike?", str(months), [(e, "assistant")])


# -- temporal: when ----------------------------------------------------------------------------


def _ran(u: Draft) -> None:
    race, where = u.take(words.RACES), u.session()
    when, moment = _relative(u.r, u.dates[where])
    e = u.said(where, f"I ran the {race} {when}! My legs are still complaining.")
    u.ask("temporal", f"When did I run the {race}?", day(moment), [(e, "user")])


def _visit(u: Draft) -> None:
    p, where = u.person(), u.session()
    when, moment = _relative(u.r, u.dates[where])
    e = u.said(where, f"My {p.relation} {p.name} came to visit {when}, we walked along the river for hours.", person=p)
    u.ask("temporal", f"When did my {p.relation} come to visit?", day(moment), [(e, "user")])


def _appointment(u: Draft) -> None:
    appointment, where = u.take(words.APPOINTMENTS), u.session()
    when, moment = _relative(u.r, u.dates[where])
    e = u.said(where, f"I finally had my {appointment} {when}, it went fine.")
    u.ask("temporal", f"When did I have my {appointment}?", day(moment), [(e, "user")])


def _adopted(u: Draft) -> None:
    animal, pet, where = u.take(words.ANIMALS), u.take(words.PET_NAMES), u.session()
    when, moment = _relative(u.r, u.dates[where])
    e = u.said(where, f"We picked up our new {animal}, {pet}, {when}. The flat is chaos.")
    u.ask("temporal", f"When did we get {pet}?", day(moment), [(e, "user")])


def _wedding(u: Draft) -> None:
    p, where = u.person(), u.session()
    moment = u.dates[where] + timedelta(days=u.r.randint(20, 70))
    e = u.said(where, f"My {p.relation} {p.name} is getting married on {moment:%A} {moment.day} {moment:%B}!", person=p)
    u.ask("temporal", f"When is my {p.relation}'s wedding?", day(moment), [(e, "user")])


# -- multi_hop: who a person is, and later what about them --------------------------------------

_INTRODUCTIONS = (
    "My {rel} {name} is staying with us this week, so the flat is a bit crowded.",
    "I had lunch with my {rel} {name} today, we hadn't seen each other in ages.",
    "My {rel} {name} called last night and we talked for two hours.",
    "I'm helping my {rel} {name} paint {pos} kitchen this weekend.",
)


def _hop(u: Draft, later: Callable[[object], tuple[str, str, str]]) -> None:
    """``later(person)`` gives (what is said of the person by name, the question, the answer)."""
    p = u.person()
    first = u.session(before_last=True)
    intro = u.r.choice(_INTRODUCTIONS).format(rel=p.relation, name=p.name, pos=p.pos)
    a = u.said(first, intro, person=p)
    said, question, answer = later(p)
    b = u.said(u.later(first), said, person=p)
    u.ask("multi_hop", question, answer, [(a, "user"), (b, "user")])


def _hop_pet(u: Draft) -> None:
    animal, pet = u.take(words.ANIMALS), u.take(words.PET_NAMES)
    _hop(u, lambda p: (f"{p.name} just adopted a {animal} called {pet}, I've had about forty photos already.",
                       f"What is the name of my {p.relation}'s {animal}?", pet))


def _hop_job(u: Draft) -> None:
    job = u.take(words.JOBS)
    _hop(u, lambda p: (f"{p.name} got the job! {p.pron.capitalize()} starts as a {job} next month.",
                       f"What job did my {p.relation} get?", job))


def _hop_city(u: Draft) -> None:
    city = u.take(words.CITIES)
    _hop(u, lambda p: (f"{p.name} has decided to move to {city}, {p.pron}'s found a flat already.",
                       f"Which city is my {p.relation} moving to?", city))


def _hop_race(u: Draft) -> None:
    race = u.take(words.RACES)
    _hop(u, lambda p: (f"{p.name} finished the {race} in under two hours, I'm so impressed.",
                       f"Which race did my {p.relation} finish?", race))


def _hop_hobby(u: Draft) -> None:
    hobby = u.take(words.HOBBIES)
    _hop(u, lambda p: (f"{p.name} has taken up {hobby} and won't stop talking about it.",
                       f"What has my {p.relation} taken up?", hobby))


# -- update: said, then replaced ---------------------------------------------------------------


def _update(u: Draft, old: str, new: str, question: str, answer: str, stale: str) -> None:
    first = u.session(before_last=True)
    u.said(first, old)
    e = u.said(u.later(first), new)
    u.ask("update", question, answer, [(e, "user")], stale=stale)


def _moved(u: Draft) -> None:
    a, b = u.take(words.CITIES), u.take(words.CITIES)
    _update(u, f"Living in {a} has its perks, the trams are great.", f"We've moved! We live in {b} now, boxes everywhere.",
            "Which city do I live in now?", b, a)


def _gym(u: Draft) -> None:
    a, b = u.take(words.GYMS), u.take(words.GYMS)
    _update(u, f"I go to {a} three times a week, usually before work.",
            f"I've switched gyms, I go to {b} now because it's closer to the office.", "Which gym do I go to now?", b, a)


def _employer(u: Draft) -> None:
    a, b = u.take(words.ORGS), u.take(words.ORGS)
    _update(u, f"Work at {a} is busy as usual.", f"Big news: I accepted an offer from {b}, I start on Monday.",
            "Where do I work now?", b, a)


def _car(u: Draft) -> None:
    a, b = u.take(words.CARS), u.take(words.CARS)
    _update(u, f"My {a} failed its inspection again, typical.", f"I finally replaced my car, I'm driving a {b} now.",
            "What car do I drive now?", b, a)


def _cafe(u: Draft) -> None:
    a, b = u.take(words.CAFES), u.take(words.CAFES)
    _update(u, f"My favourite cafe is {a}, I work from there on Fridays.",
            f"I've found a new favourite cafe: {b}. The coffee is so much better.", "What is my favourite cafe now?", b, a)


def _sport(u: Draft) -> None:
    a, b = u.take(words.SPORTS), u.take(words.SPORTS)
    _update(u, f"I play {a} with some colleagues on Tuesdays.",
            f"I've switched to {b} on Tuesdays, my knees were not enjoying the old routine.",
            "What sport do I play on Tuesdays now?", b, a)


# -- abstention: never said ---------------------------------------------------------------------


def _never(u: Draft) -> None:
    mentioned = [p for p in u.people if p.relation not in u.used]
    if not mentioned:
        mentioned = [u.person()]
        u.said(u.session(), f"My {mentioned[0].relation} {mentioned[0].name} says hello, by the way.", person=mentioned[0])
    p = u.r.choice(mentioned)
    u.used.add(p.relation)  # one abstention per person
    template, _ = u.take(words.NEVER_SAID)
    u.ask("abstention", template.format(rel=p.relation), None, [])


TEMPLATES: dict[str, tuple[Callable[[Draft], None], ...]] = {
    "user_fact": (_pet, _allergy, _instrument, _job, _signed_up, _language, _book_club),
    "people": (_their_job, _their_hobby, _their_gift, _their_business, _their_pet, _their_move),
    "assistant": (_book, _dish, _place, _plant, _starter, _savings),
    "temporal": (_ran, _visit, _appointment, _adopted, _wedding),
    "multi_hop": (_hop_pet, _hop_job, _hop_city, _hop_race, _hop_hobby),
    "update": (_moved, _gym, _employer, _car, _cafe, _sport),
    "abstention": (_never,) * 6,
}
