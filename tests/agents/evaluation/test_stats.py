"""Intervals over repeats and the paired bootstrap behind "beyond noise"."""

from __future__ import annotations

import pytest

from agents.evaluation.stats import config_pairs, differences, mean_interval, paired_bootstrap, per_question, t_quantile


def test_the_t_interval_by_hand():
    # values 0.4, 0.5, 0.6: mean 0.5, sd 0.1, n 3, t(2) = 4.303 -> half width 4.303 * 0.1 / sqrt(3)
    mean, low, high = mean_interval([0.4, 0.5, 0.6])
    assert mean == pytest.approx(0.5) and high - mean == pytest.approx(4.303 * 0.1 / 3 ** 0.5)
    assert mean_interval([0.7]) == (0.7, None, None)
    assert mean_interval([0.3, 0.3, 0.3])[1:] == (0.3, 0.3)  # a deterministic model: no width
    assert t_quantile(1) == 12.706 and t_quantile(22) == 2.086 and t_quantile(500) == 1.96


def test_identical_runs_are_never_beyond_noise():
    result = paired_bootstrap([1, 0, 1, 0], [1, 0, 1, 0])
    assert result["difference"] == 0 and (result["low"], result["high"]) == (0, 0) and not result["beyond_noise"]


def test_a_consistent_gain_is_beyond_noise_and_one_lucky_question_is_not():
    a = [0.0] * 40
    assert paired_bootstrap(a, [1.0] * 30 + [0.0] * 10)["beyond_noise"]
    lucky = paired_bootstrap(a, [1.0] + [0.0] * 39)
    assert lucky["difference"] == pytest.approx(1 / 40) and lucky["low"] == 0 and not lucky["beyond_noise"]
    assert paired_bootstrap(a, [1.0] * 30 + [0.0] * 10) == paired_bootstrap(a, [1.0] * 30 + [0.0] * 10)  # seeded
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 0.0])


def row(config, question, category, value, repeat=1, **extra):
    return {"config": config, "question": question, "category": category, "in_context": value, "reachable": value,
            "score": value, "judge": None, "repeat": repeat, **extra}


def test_questions_are_paired_across_configurations_with_repeats_averaged():
    rows = [row("a", f"q{i}", "x" if i < 20 else "y", 0.0) for i in range(30)]
    rows += [row("b", f"q{i}", "x" if i < 20 else "y", 1.0 if i < 20 else 0.0) for i in range(30)]
    rows += [row("b", "q25", "y", 1.0, repeat=2), row("b", "q26", "y", 0.0, skipped="does not fit")]
    assert per_question(rows, "score")[("b", "q25")] == ("y", 0.5)
    found = differences(rows, rows, pairs=config_pairs(["a", "b"]), categories=["x", "y"], headline=["x", "y"])
    by = {(d["metric"], d["category"]): d for d in found}
    assert by[("score", "x")]["beyond_noise"] and by[("score", "x")]["difference"] == 1.0
    assert not by[("score", "y")]["beyond_noise"] and by[("score", "y")]["n"] == 10
    assert by[("score", "all")]["n"] == 30 and by[("in_context", "all")]["mean_b"] == pytest.approx(20.5 / 30)
    assert not any(d["metric"] == "judge" for d in found)  # nothing judged: nothing compared
