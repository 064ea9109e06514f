"""Scoring without a judge (normalized match on the planted value) and the optional judge."""

from __future__ import annotations

import pytest

from agents.evaluation.dataset import Question
from agents.evaluation.scoring import ajudge, match_score, parse_verdict, says_unknown
from agents.llm.openai import OpenAIChatModel
from tests.fakes.openai_server import FAKE_API_KEY, Reply, start_fake_server


def q(kind="single_fact", expected="B-14", stale=None):
    return Question("u0-q01", "u0", kind, "What is my parking spot?", expected, stale)


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ("Your parking spot is B-14.", True),
        ("It is **b-14**", True),
        ("B14, as far as I remember", True),  # a code matches without its punctuation
        ("b 14", True),
        ("Your parking spot is B-15.", False),
        ("AB-145", False),  # a longer code is another code
        ("spot (B-14).", True),
        ("I do not know.", False),
        ("", False),
    ],
)
def test_a_planted_code_matches_normalized(answer, right):
    assert match_score(q(), answer) is right


def test_words_match_as_a_run_not_inside_other_words():
    question = q(expected="teal")
    assert match_score(question, "Your favourite colour is Teal!")
    assert not match_score(question, "You said you would steal it.")
    assert match_score(q(expected="Doctor Okafor"), "That is doctor  okafor.")
    assert not match_score(q(expected="Doctor Okafor"), "Okafor, a doctor")


def test_an_updated_fact_needs_the_new_value_and_not_the_old_one():
    question = q(kind="updated_fact", expected="9082", stale="4417")
    assert match_score(question, "Your gym locker code is now 9082.")
    assert not match_score(question, "Your gym locker code is 4417.")
    assert not match_score(question, "It was 4417, then 9082.")  # naming both does not say which holds


@pytest.mark.parametrize(
    "answer",
    ["I don't know your blood type yet.", "You haven't told me that.", "I have no record of it.", "I’m not sure."],
)
def test_not_told_wants_the_agent_to_say_it_does_not_know(answer):
    assert says_unknown(answer)
    assert match_score(q(kind="not_told", expected=None), answer)


def test_a_guess_is_not_an_abstention():
    assert not match_score(q(kind="not_told", expected=None), "Your blood type is O negative.")


def test_verdicts_are_read_from_the_last_word_said():
    assert parse_verdict("CORRECT").correct is True
    assert parse_verdict("wrong.").correct is False
    assert parse_verdict("Not correct: WRONG").correct is False
    assert parse_verdict("INCORRECT").correct is False
    assert parse_verdict("maybe").correct is None


async def test_the_judge_asks_the_endpoint_with_the_truth_and_the_answer():
    server = start_fake_server()
    model = OpenAIChatModel(base_url=server.url, api_key=FAKE_API_KEY, model="judge-model", timeout=5.0)
    try:
        server.script(Reply(content="CORRECT"))
        verdict = await ajudge(
            model=model, question=q(kind="updated_fact", expected="9082", stale="4417"), answer="It is 9082 now."
        )
    finally:
        await model.aclose()
        server.stop()
    assert verdict.correct is True
    [request] = server.chat_requests
    prompt = request.json["messages"][-1]["content"]
    assert "Correct answer: 9082 (it was 4417 earlier, then changed)" in prompt
    assert "Assistant's answer: It is 9082 now." in prompt
    assert request.json["model"] == "judge-model"
