"""LoCoMo's answer score, against cases worked out by hand."""

from __future__ import annotations

import pytest

from agents.evaluation.f1 import locomo_f1, multi_answer_f1, normalize, stems, token_f1


def test_normalization_drops_commas_punctuation_articles_and_and():
    assert normalize("The Dog, and a Cat!") == "dog cat"
    assert normalize("  Mrs. O'Kafor  ") == "mrs okafor"
    assert stems("She painted the rivers") == ["she", "paint", "river"]


def test_token_f1_by_hand():
    # answer: [paint, sunris] (2), reference: [she, paint, sunris, lake] (4): 2 shared
    # precision 2/2, recall 2/4 -> F1 = 2 * 1 * 0.5 / 1.5 = 2/3
    assert token_f1("Painting sunrises", "She paints the sunrise, a lake") == pytest.approx(2 / 3)
    assert token_f1("7 May 2023", "7 May 2023") == 1.0
    assert token_f1("May 7th 2023", "7 May 2023") == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))  # 7th != 7
    assert token_f1("no idea", "Porto") == 0.0
    assert token_f1("", "Porto") == 0.0
    # repeated words count once each side (multiset intersection): [porto, porto] vs [porto]
    assert token_f1("Porto Porto", "Porto") == pytest.approx(2 * 0.5 * 1 / 1.5)


def test_category_1_splits_on_commas_and_averages_over_the_reference_parts():
    # reference parts: "painting" and "running"; answer parts: "running" and "swimming"
    # painting -> best 0 ; running -> best 1 ; mean 0.5
    assert multi_answer_f1("running, swimming", "painting, running") == 0.5
    assert locomo_f1(category=1, answer="Sea Biscuit, Ava", reference="Sea Biscuit, Ava") == 1.0
    # one answer part, two reference parts: "sea biscuit by ava" against each:
    # [sea, biscuit, by, ava] vs [sea, biscuit]: p 2/4, r 1 -> 2/3 ; vs [ava]: p 1/4, r 1 -> 0.4
    assert locomo_f1(category=1, answer="Sea Biscuit by Ava", reference="Sea Biscuit, Ava") == pytest.approx((2 / 3 + 0.4) / 2)


def test_category_3_scores_against_the_reference_before_its_first_semicolon():
    reference = "Likely yes; he built his own boat and earned a sailing certificate"
    assert locomo_f1(category=3, answer="Likely yes", reference=reference) == 1.0
    assert locomo_f1(category=3, answer="yes", reference=reference) == pytest.approx(2 * 1 * 0.5 / 1.5)


@pytest.mark.parametrize("category", [2, 4])
def test_categories_2_and_4_are_plain_f1(category):
    assert locomo_f1(category=category, answer="the 19th of March", reference="19 March 2023") == pytest.approx(
        token_f1("the 19th of March", "19 March 2023")
    )


def test_category_5_has_no_f1():
    with pytest.raises(ValueError, match="category 5"):
        locomo_f1(category=5, answer="x", reference="y")
