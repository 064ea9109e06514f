"""Summaries a small model can write: partial answers completed, every user fact and its date
kept, cut by whole items only. Through the real cleanup pipeline on every backend where the
session matters; the model is a fake at the summarizer seam (its answers are what small models
were seen to write: some sections, a JSON object, a refusal, nothing)."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from memory.assembly.pruned import PrunedProvider
from memory.compression.answers import parse_sections
from memory.compression.sections import items
from memory.compression.summary import SECTIONS, SummaryOptions, compose_summary
from memory.compression.summary_input import section_prompt
from memory.config import MemoryConfig
from memory.messages import Message, ToolCall
from memory.tokens import count_text

from .test_cleanup import cleanup, conserved
from .test_summary import Sleeps

MAY_8 = datetime(2023, 5, 8, 9, 30, tzinfo=UTC)

#: One fact per turn, each said on its own day, inside ordinary chatter.
FACTS = [
    "By the way, my sister Ana lives in Lisbon.",
    "I'm allergic to peanuts, so no satay recipes please.",
    "Our team standup is at 9:30 every weekday.",
    "I prefer short answers with bullet points.",
    "My laptop is a ThinkPad X1 Carbon from 2021.",
    "We adopted a cat called Miso last month.",
    "The quarterly report is due on 14 June.",
    "My favourite editor is Helix.",
]
DAYS = ["8 May 2023", "9 May 2023", "10 May 2023", "11 May 2023", "12 May 2023", "13 May 2023", "14 May 2023",
        "15 May 2023"]
FILLER = "Tell me more about {topic}. Explain how it works in practice."


def dated_conversation(*, tail_turns: int = 6, facts: list[str] = FACTS) -> list[Message]:
    """8 turns with one planted fact each (one day apart, from 8 May 2023), a tool chain in
    some, then ``tail_turns`` turns of plain chatter that the cleanup keeps."""
    out: list[Message] = []
    for i, fact in enumerate(facts):
        when = MAY_8 + timedelta(days=i)
        topic = f"topic {i}"
        out.append(Message(role="user", content=f"{FILLER.format(topic=topic)} {fact}", created_at=when))
        if i % 3 == 0:
            call = ToolCall(f"call_{i}", "web_search", f'{{"q": "{topic}"}}')
            out.append(Message(role="assistant", content=None, tool_calls=(call,), reasoning_content=f"Look up {topic}.",
                               created_at=when + timedelta(seconds=5)))
            out.append(Message(role="tool", content=f"results about {topic} " + "data " * 40, tool_call_id=f"call_{i}",
                               name="web_search", created_at=when + timedelta(seconds=8)))
        out.append(Message(role="assistant", content=f"Here is how {topic} works. " + "detail " * 60,
                           reasoning_content=f"Answer about {topic}.", created_at=when + timedelta(seconds=10)))
    for j in range(tail_turns):
        when = MAY_8 + timedelta(days=20, hours=j)
        out.append(Message(role="user", content=f"What about later topic {j}? " + "more " * 40, created_at=when))
        out.append(Message(role="assistant", content=f"Later answer {j}. " + "words " * 60, created_at=when))
    return out


CONFIG = MemoryConfig(context_window=16384, compression_threshold=6000, keep_tokens=700)


class SmallModel:
    """Writes only some sections, the way small models were seen to; answers every follow-up
    with ``follow_up`` (or raises it). Records every prompt."""

    def __init__(self, first: str, follow_up: str | Exception = "I'm sorry, I can't help with that.") -> None:
        self.first, self.follow_up = first, follow_up
        self.prompts: list[list[dict[str, str]]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.prompts.append(messages)
        if len(self.prompts) == 1:
            return self.first
        if isinstance(self.follow_up, Exception):
            raise self.follow_up
        return self.follow_up


PARTIAL = "**Goal**: learn about several topics\n**Decisions**:\n- explain each topic in practice"


def down(messages: list[dict[str, str]]) -> str:
    raise RuntimeError("Error code: 503 - upstream down")


def run_cleanup(bundle, session, catalog, summarizer):  # type: ignore[no-untyped-def]
    messages = bundle.messages.append(session, dated_conversation())
    result = cleanup(bundle, session, catalog, summarizer=summarizer, config=CONFIG, force=True)
    assert result.committed, result.reason
    assert result.through_seq >= messages[len(dated_conversation(tail_turns=0)) - 1].seq  # every fact turn evicted
    conserved(bundle, session, catalog, [m.id for m in messages])
    return result, bundle.messages.read(session)[0].content


# -- fidelity: every planted fact, on both paths -----------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(lambda: SmallModel(PARTIAL), id="a small model writing two sections"),
        pytest.param(lambda: SmallModel(PARTIAL, RuntimeError("timed out")), id="follow-ups failing"),
        pytest.param(
            lambda: SmallModel("\n".join(f"## {name}\n- The user has a sister in Lisbon." if name == "Facts learned"
                                         else f"## {name}\n- noted" for name in SECTIONS)),
            id="all sections, most facts missing",
        ),
        pytest.param(lambda: down, id="the fallback"),
    ],
)
def test_every_fact_planted_across_eight_turns_is_in_the_summary_with_its_date(
    bundle, session, catalog, model
) -> None:
    summarizer = model()
    result, summary = run_cleanup(bundle, session, catalog, summarizer)
    assert result.fallback_summary == (summarizer is down)
    for fact, day in zip(FACTS, DAYS, strict=True):
        assert fact in summary, fact
        assert f'On {day} the user said: "{fact}"' in summary or (
            # the model said it already (its own words): then it is not repeated
            fact == FACTS[0] and "sister in Lisbon" in summary
        ), fact
    assert "Tell me more about" not in parse_sections(summary.split("\n\n", 1)[1])["Facts learned"]  # requests
    assert re.match(r"\[compact_summary\] Earlier history from 8 May 2023 to \d+ May 2023, seq 1–", summary)
    assert count_text(summary.split("\n\n", 1)[1]) <= CONFIG.summary_budget
    if summarizer is not down:
        # The summarizer's input shows each message's date.
        transcript = summarizer.prompts[0][1]["content"]
        for day in DAYS:
            assert f"user · {day} 09:30:" in transcript


def test_facts_survive_the_next_cleanup_even_when_the_model_drops_them(bundle, session, catalog) -> None:
    run_cleanup(bundle, session, catalog, SmallModel(PARTIAL))
    later = [replace(m, created_at=MAY_8 + timedelta(days=40)) for m in dated_conversation(tail_turns=8)[-16:]]
    bundle.messages.append(session, later)
    # The next model writes every section but keeps none of the earlier facts.
    forgetful = SmallModel("\n".join(f"## {name}\n- later things" for name in SECTIONS))
    result = cleanup(bundle, session, catalog, summarizer=forgetful, config=CONFIG, force=True)
    assert result.committed and not result.fallback_summary
    summary = bundle.messages.read(session)[0].content
    assert all(fact in summary for fact in FACTS)
    assert "<previous_summary>" in forgetful.prompts[0][1]["content"]


def test_the_pruned_section_shows_the_day_of_every_message(bundle, session, catalog) -> None:
    from tests.memory.assembly.helpers import ctx

    run_cleanup(bundle, session, catalog, SmallModel(PARTIAL))
    text = PrunedProvider(catalog=catalog).provide(ctx(bundle, session, config=CONFIG)).text
    dates = re.findall(r'date="([^"]+)"', text)
    assert dates and all(re.fullmatch(r"\d{1,2} [A-Z][a-z]{2} \d{4}", d) for d in dates)
    assert set(DAYS) <= set(dates)  # every day a fact was told (given where the day changes)


# -- partial answers, asked for one section at a time ----------------------------------------


def compose(model, history, **options):  # type: ignore[no-untyped-def]
    return asyncio.run(
        compose_summary(
            history=history, summarizer=model, options=SummaryOptions(**options), cleanup_at=MAY_8 + timedelta(days=30),
            sleep=Sleeps(),
        )
    )


def stored(messages: list[Message]) -> list[Message]:
    return [replace(m, seq=i) for i, m in enumerate(messages, start=1)]


def test_each_missing_section_is_asked_for_alone_and_the_rest_built_from_the_messages() -> None:
    history = stored(dated_conversation(tail_turns=0))
    answers = iter([PARTIAL, "- The user likes practical explanations.", RuntimeError("Error code: 500")])

    def model(messages):  # type: ignore[no-untyped-def]
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    prompts: list[list[dict[str, str]]] = []
    outcome = compose(lambda m: prompts.append(m) or model(m), history)
    assert not outcome.fallback and outcome.calls == 3  # no retry of a follow-up, no more after a failure
    # The follow-up repeats the first conversation (a server's prompt cache reuses it).
    assert prompts[1] == section_prompt(prompts[0], PARTIAL, "Facts learned", max_tokens=1024)
    assert 'only the "Open tasks" section' in prompts[2][-1]["content"]
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert list(sections) == list(SECTIONS)
    assert sections["Goal"] == "learn about several topics"
    assert sections["Facts learned"].startswith("- The user likes practical explanations.")
    assert all(fact in sections["Facts learned"] for fact in FACTS)
    assert "- seq " in sections["Reasoning trail"] and "web_search ×3" in sections["Tool results that matter"]


class Chatty:
    """Answers the template with chatter (as SmolLM2-135M did), then each question with ``replies``."""

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)
        self.prompts: list[list[dict[str, str]]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.prompts.append(messages)
        if len(self.prompts) == 1:
            return "I'm glad to hear that you've enjoyed exploring these topics! Let me know if you need more."
        reply = self.replies[min(len(self.prompts) - 2, len(self.replies) - 1)]
        if isinstance(reply, Exception):
            raise reply
        return reply


def test_a_model_that_ignores_the_template_is_asked_one_short_question_per_section() -> None:
    from memory.compression.summary_input import single_section_prompt

    history = stored(dated_conversation(tail_turns=0))
    model = Chatty("- On 8 May 2023 the user asked about topic 0.")
    outcome = compose(model, history)
    assert not outcome.fallback and outcome.calls == 1 + len(SECTIONS) and outcome.model_sections == SECTIONS
    assert model.prompts[1] == single_section_prompt(model.prompts[0], "Goal", max_tokens=1024)
    # Every question starts with the same system message and material: a prompt cache reuses it.
    material = model.prompts[0][1]["content"].removesuffix("\n\nNow fill in the template.")
    assert all(p[0] == model.prompts[1][0] and p[1]["content"].startswith(material) for p in model.prompts[1:])
    assert [p[1]["content"].rsplit("Write the ", 1)[1].split('"')[1] for p in model.prompts[1:]] == list(SECTIONS)
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert sections["Goal"] == "- On 8 May 2023 the user asked about topic 0."
    assert all(fact in sections["Facts learned"] for fact in FACTS)  # the facts it did not say, added


def test_questions_stop_at_two_useless_replies_in_a_row_and_what_was_written_is_kept() -> None:
    history = stored(dated_conversation(tail_turns=0))
    echo = "[3] user · 8 May 2023 09:30: Tell me more"
    model = Chatty("- learn the topics", echo, "- explain in practice", echo)  # the last reply repeats
    outcome = compose(model, history)
    # Goal, a useless reply (one is forgiven), Facts learned, then two useless ones: stop.
    assert not outcome.fallback and outcome.calls == 1 + 5 and outcome.model_sections == ("Goal", "Facts learned")
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert "[3] user" not in outcome.content and "- seq " in sections["Reasoning trail"]


class Capped(Chatty):
    """Chatty behind a model adapter that sends a completion cap and takes a lower one per call."""

    def __init__(self, cap: int, *replies: str | Exception) -> None:
        super().__init__(*replies)
        self.max_tokens = cap
        self.caps: list[int | None] = []

    def __call__(self, messages, max_tokens=None):  # type: ignore[no-untyped-def, override]
        self.caps.append(max_tokens)
        return super().__call__(messages)


def test_a_question_for_one_section_is_capped_at_what_it_is_asked_to_fit() -> None:
    history = stored(dated_conversation(tail_turns=0))
    # A summary of 400 tokens: each section is asked to fit 100, and capped at 200 instead of the
    # adapter's 512 (the whole summary's cap: what a rambling small model writes to the end).
    model = Capped(512, "- On 8 May 2023 the user asked about topic 0.")
    outcome = compose(model, history, max_tokens=400)
    assert outcome.calls == 1 + len(SECTIONS)
    assert model.caps == [None] + [200] * len(SECTIONS)  # the template itself keeps the adapter's cap
    assert "at most 100 tokens" in model.prompts[1][1]["content"]
    # Never above the adapter's own cap; a follow-up for a missing section is capped the same way.
    low = Capped(150, "- On 8 May 2023 the user asked about topic 0.")
    compose(low, history, max_tokens=400)
    assert low.caps == [None] * (1 + len(SECTIONS))
    answers = iter([PARTIAL, "- The user likes practical explanations."] + ["- none"] * len(SECTIONS))

    class Partial(Capped):
        def __call__(self, messages, max_tokens=None):  # type: ignore[no-untyped-def, override]
            self.caps.append(max_tokens)
            return next(answers)

    follow = Partial(512)
    compose(follow, history, max_tokens=400)
    assert follow.caps[0] is None and follow.caps[1:] and set(follow.caps[1:]) == {200}


def test_a_model_that_answers_no_question_usefully_gets_the_fallback() -> None:
    model = Chatty("I'm sorry, I can't help with that.")
    outcome = compose(model, stored(dated_conversation(tail_turns=0)))
    assert outcome.fallback and outcome.calls == 1 + 2 and "no section asked for alone was usable" in outcome.error
    assert all(fact in outcome.content for fact in FACTS)


def test_a_json_answer_is_read_section_by_section() -> None:
    history = stored(dated_conversation(tail_turns=0))
    answer = (
        '{"goal": "learn topics", "decisions": ["explain in practice"], "facts": ["Sister Ana lives in Lisbon"], '
        '"open_tasks": [], "reasoning": "answer each topic", "tool_results": [{"web_search": "results"}]}'
    )
    outcome = compose(lambda m: answer, history)
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert outcome.calls == 1 and not outcome.fallback
    assert sections["Goal"] == "- learn topics" and sections["Open tasks"] == "- none"
    assert sections["Facts learned"].startswith("- Sister Ana lives in Lisbon")
    assert FACTS[1] in sections["Facts learned"]  # the facts the model left out are added


def test_a_model_that_answers_in_its_own_words_for_headings_is_understood() -> None:
    history = stored(dated_conversation(tail_turns=0))
    answer = (
        "Summary:\n1. Goal: learn topics\n2. **Decisions**\n- explain\n### Facts\n- Ana lives in Lisbon\n"
        "Tasks:\n- none\nReasoning:\n- explain each\nTool results:\n- web_search found data"
    )
    outcome = compose(lambda m: answer, history)
    assert outcome.calls == 1 and not outcome.fallback
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert sections["Open tasks"] == "- none" and sections["Tool results that matter"] == "- web_search found data"


# -- cut to the budget: whole items only -------------------------------------------------------

# A line ending on a list number ("Todo list (add): 1."): the item it opened was cut away.
_BARE_NUMBER_END = re.compile(r"(?:^|[\s:])\d{1,3}\.\s*$")


@pytest.mark.parametrize("budget", [120, 200, 320])
def test_a_summary_cut_to_its_budget_never_cuts_an_item_in_half(budget: int) -> None:
    todo = "\n".join(
        f"- Todo list (add): {i}. {'buy milk and bread' if i % 2 else 'call Ana about the Lisbon trip on Friday'}"
        for i in range(1, 30)
    )
    answer = "\n\n".join(
        f"## {name}\n{todo if name == 'Open tasks' else f'- {name.lower()} item one. It has two sentences.'}"
        for name in SECTIONS
    )
    outcome = compose(lambda m: answer, stored([Message(role="user", content="hello there", created_at=MAY_8)]),
                      max_tokens=budget, max_retries=0)
    body = outcome.content.split("\n\n", 1)[1]
    assert count_text(body) <= budget
    original = {name: items(text) for name, text in parse_sections(answer).items()}
    for name, text in parse_sections(body).items():
        for item in items(text):
            if item.startswith("- (… "):
                assert re.fullmatch(r"- \(… \d+ more cut to fit\)", item)
            else:
                assert item in original[name], item  # a whole item of the answer
    assert not any(_BARE_NUMBER_END.search(line) for line in body.splitlines())


def test_the_fallback_cut_to_a_small_budget_never_ends_on_a_list_number() -> None:
    history = stored([
        Message(role="user", content="todo: buy milk", created_at=MAY_8),
        Message(role="assistant", content=None, tool_calls=(ToolCall("c1", "todo", '{"action": "add"}'),),
                created_at=MAY_8),
        Message(role="tool", content="Todo list (add): 1. [ ] buy milk 2. [ ] call Ana 3. [ ] book the flight",
                tool_call_id="c1", name="todo", created_at=MAY_8),
        Message(role="assistant", content="Todo list (add): 1. [ ] buy milk 2. [ ] call Ana. I need to book it.",
                created_at=MAY_8),
    ])
    for budget in (96, 140, 200, 400):
        outcome = compose(down, history, max_tokens=budget, max_retries=0)
        body = outcome.content.split("\n\n", 1)[1]
        assert outcome.fallback and count_text(body) <= budget
        assert not any(_BARE_NUMBER_END.search(line) for line in body.splitlines()), body


def test_the_summarizer_never_waits_on_a_slow_follow_up_loop() -> None:
    # A model that answers nothing usable to every follow-up is asked once per missing section.
    model = SmallModel(PARTIAL, "")
    outcome = compose(model, stored(dated_conversation(tail_turns=0)))
    assert not outcome.fallback and outcome.calls == 1 + (len(SECTIONS) - 2) == len(model.prompts)


def test_no_follow_ups_when_they_are_switched_off() -> None:
    model = SmallModel(PARTIAL)
    outcome = compose(model, stored(dated_conversation(tail_turns=0)), ask_missing_sections=False)
    assert outcome.calls == 1 and all(f"## {name}" in outcome.content for name in SECTIONS)


def test_a_small_model_looping_or_saying_the_question_back_is_not_kept() -> None:
    # Seen from SmolLM2-135M: the same line over and over, and the question said back.
    loop = "\n".join(["- [x] Provide a list of the possible answers."] * 12 + ["- [x] Ask the user."])
    model = Chatty(loop, "This is the Open tasks section. What is still to do?")
    outcome = compose(model, stored(dated_conversation(tail_turns=0)))
    sections = parse_sections(outcome.content.split("\n\n", 1)[1])
    assert outcome.model_sections == ("Goal",) and outcome.calls == 4  # two echoes stopped the questions
    assert sections["Goal"] == "- [x] Provide a list of the possible answers.\n- [x] Ask the user."
    assert "What is still to do" not in outcome.content
