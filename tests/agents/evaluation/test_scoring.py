"""Scoring without a judge, per dataset kind."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.evaluation.data import Question
from agents.evaluation.scoring import dates_in, match_score, says_unknown, score_answer

WHEN = datetime(2023, 6, 1, tzinfo=UTC)


def q(category="user_fact", answer="B-14", stale=None, accepted=()):
    return Question("u0.q01", "u0", category, "What is my parking spot?", answer, (), WHEN, stale=stale, accepted=accepted)


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
def test_a_code_matches_normalized(answer, right):
    assert match_score(q(), answer) is right


def test_words_match_as_a_run_not_inside_other_words():
    assert match_score(q(answer="teal"), "Your favourite colour is Teal!")
    assert not match_score(q(answer="teal"), "You said you would steal it.")
    assert match_score(q(answer="Doctor Okafor"), "That is doctor  okafor.")
    assert not match_score(q(answer="Doctor Okafor"), "Okafor, a doctor")
    assert match_score(q(answer="pasta machine", accepted=("pasta maker",)), "She wants a pasta maker.")


def test_an_update_needs_the_new_value_and_not_the_old_one():
    question = q(category="update", answer="Kia Niro", stale="Fiat Panda")
    assert match_score(question, "You drive a Kia Niro now.")
    assert not match_score(question, "A Fiat Panda.")
    assert not match_score(question, "It was a Fiat Panda, then a Kia Niro.")  # naming both does not say which holds


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ("On 13 May 2023.", True),
        ("May 13th, 2023", True),
        ("It was 2023-05-13.", True),
        ("Saturday the 13th of May", True),  # no year: the day and month are enough
        ("On 14 May 2023.", False),
        ("13 May 2022", False),
        ("Last Saturday.", False),  # relative to what?
    ],
)
def test_a_temporal_answer_matches_by_the_day_it_names(answer, right):
    assert match_score(q(category="temporal", answer="13 May 2023"), answer) is right


def test_dates_are_read_in_the_usual_forms():
    assert dates_in("between 3 March and April 5th, 2023, or 2023-06-01") == [
        (None, 3, 3), (2023, 4, 5), (2023, 6, 1)
    ]


@pytest.mark.parametrize(
    "answer",
    ["I don't know your blood type yet.", "You haven't told me that.", "I have no record of it.", "I’m not sure.",
     "That is not mentioned in our conversations.", "No information available."],
)
def test_an_abstention_is_recognized(answer):
    assert says_unknown(answer)
    assert match_score(q(category="abstention", answer=None), answer)


def test_a_guess_is_not_an_abstention():
    assert not match_score(q(category="abstention", answer=None), "Your blood type is O negative.")


def test_each_dataset_kind_scores_its_own_way():
    locomo = Question("c.q1", "c", "single-hop", "Where is Lena's wedding?", "Porto", ("D2:4",), WHEN)
    assert score_answer("locomo", locomo, "Porto.") == 1.0
    assert score_answer("locomo", locomo, "In Porto.") == pytest.approx(2 / 3)  # F1: "in" is an extra word
    assert score_answer("locomo", locomo, "Lisbon, I think") == 0.0
    adversarial = Question("c.q2", "c", "adversarial", "What is Felix's dog called?", None, ("D4:6",), WHEN)
    assert score_answer("locomo", adversarial, "That was not mentioned.") == 1.0
    assert score_answer("locomo", adversarial, "Pepper") == 0.0
    lme = Question("x", "x", "knowledge-update", "What is my 5k best?", "24:10", (), WHEN)
    assert score_answer("longmemeval", lme, "Your best is 24:10 now.") == 1.0
    assert score_answer("longmemeval", lme, "25:30") == 0.0
    with pytest.raises(ValueError, match="no scoring"):
        score_answer("other", lme, "x")
