"""The judge: prompts of Modex's own per dataset kind, sent at temperature 0 to an
OpenAI-compatible endpoint (the fake server), and the verdict read back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.evaluation.data import Question
from agents.evaluation.judges import ajudge, judge_prompt, parse_verdict
from agents.llm.openai import OpenAIChatModel
from tests.fakes.openai_server import FAKE_API_KEY, Reply, start_fake_server

WHEN = datetime(2023, 6, 1, tzinfo=UTC)


def question(category, answer, note=None):
    return Question("q1", "h", category, "When did Lena get engaged?", answer, (), WHEN, note=note)


def test_verdicts_are_read_from_the_last_word_said():
    assert parse_verdict("CORRECT").correct is True
    assert parse_verdict("wrong.").correct is False
    assert parse_verdict("Not correct: WRONG").correct is False
    assert parse_verdict("INCORRECT").correct is False
    assert parse_verdict("maybe").correct is None
    assert parse_verdict("Yes.", yes_no=True).correct is True
    assert parse_verdict("Thinking... yes, but no.", yes_no=True).correct is False
    assert parse_verdict("yesterday", yes_no=True).correct is None  # a word, not a verdict


def test_the_locomo_prompt_states_its_rules():
    [system, user] = judge_prompt("locomo", question("temporal", "19 March 2023"), "The Sunday before 21 March 2023")
    assert "CORRECT or WRONG" in system["content"] and "same day or period" in system["content"]
    assert "Reference answer: 19 March 2023" in user["content"]
    assert "Answer to grade: The Sunday before 21 March 2023" in user["content"]
    [_, adversarial] = judge_prompt("locomo", question("adversarial", None, note="The conversation does not mention this."), "x")
    assert "Reference answer: The conversation does not mention this." in adversarial["content"]


@pytest.mark.parametrize(
    ("category", "answer", "note", "says"),
    [
        ("temporal-reasoning", "5 days", None, "off by one"),
        ("knowledge-update", "24:10", None, "gives the updated answer"),
        ("single-session-preference", "vegetarian skillet dishes", None, "Rubric: vegetarian skillet dishes"),
        ("multi-session", "3", None, "Correct answer: 3"),
        ("abstention", None, "Only a dog was mentioned.", "Explanation: Only a dog was mentioned."),
    ],
)
def test_longmemeval_has_one_prompt_per_question_type(category, answer, note, says):
    [message] = judge_prompt("longmemeval", question(category, answer, note), "the response")
    assert message["role"] == "user" and says in message["content"]
    assert message["content"].endswith("Answer yes or no only.")


async def test_the_judge_asks_the_endpoint_at_temperature_zero():
    server = start_fake_server()
    model = OpenAIChatModel(base_url=server.url, api_key=FAKE_API_KEY, model="judge-model", timeout=5.0)
    try:
        server.script(Reply(content="CORRECT"), Reply(content="no"))
        locomo = await ajudge(model=model, kind="locomo", question=question("temporal", "19 March 2023"), answer="19/3/2023")
        lme = await ajudge(model=model, kind="longmemeval", question=question("temporal-reasoning", "5 days"), answer="a week")
    finally:
        await model.aclose()
        server.stop()
    assert locomo.correct is True and lme.correct is False and lme.raw == "no"
    first, second = (r.json for r in server.chat_requests)
    assert first["temperature"] == 0 and second["temperature"] == 0
    assert first["model"] == "judge-model" and "Answer to grade: 19/3/2023" in first["messages"][-1]["content"]
    assert "Response: a week" in second["messages"][-1]["content"]
