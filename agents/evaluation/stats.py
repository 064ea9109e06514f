"""How sure a figure is.

* ``mean_interval``: the mean of per-repeat figures with a 95% Student-t interval (``--repeats N``:
  what a model that samples changes from one run to the next; the deterministic offline model
  gives the same figure every time, an interval of zero width);
* ``paired_bootstrap``: the difference of two configurations, or of two runs, on the same
  questions (``--compare A.json B.json`` and the report's "differences" table): the questions
  are resampled with replacement (``RESAMPLES`` times, fixed seed) and the 95% percentile
  interval of the mean difference is reported. A difference is **beyond noise** when that
  interval does not contain 0. This measures how much the figure depends on which questions
  were asked, so it is meaningful for the offline model too. Questions of one history are not
  independent; the interval treats them as if they were, so it is on the narrow side.
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

RESAMPLES = 2000
SEED = 1234
METRICS = ("in_context", "reachable", "score", "judge")

# Two-sided 95% quantiles of Student's t by degrees of freedom.
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
    20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}


def t_quantile(df: int) -> float:
    if df < 1:
        raise ValueError("at least two values are needed for an interval")
    known = [k for k in _T975 if k <= df]
    return _T975[max(known)] if df <= 120 else 1.960


def mean_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """(mean, low, high): a 95% t interval of the mean; no interval for fewer than two values."""
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = t_quantile(len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return mean, mean - half, mean + half


def paired_bootstrap(a: Sequence[float], b: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """The mean of ``b - a`` over paired values, with a 95% percentile bootstrap interval."""
    if len(a) != len(b):
        raise ValueError("paired values must have the same length")
    if not a:
        raise ValueError("no paired values")
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    mean = statistics.fmean(diffs)
    r = random.Random(seed)
    n = len(diffs)
    means = sorted(statistics.fmean(r.choices(diffs, k=n)) for _ in range(resamples))
    low, high = means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples))]
    return {
        "n": n,
        "mean_a": statistics.fmean(a),
        "mean_b": statistics.fmean(b),
        "difference": mean,
        "low": low,
        "high": high,
        "beyond_noise": low > 0 or high < 0,
    }


def _value(row: dict[str, Any], metric: str) -> float | None:
    value = row.get(metric)
    if value is None or "skipped" in row or (metric == "score" and row.get("error")):
        return None
    return float(value)


def per_question(rows: Sequence[dict[str, Any]], metric: str) -> dict[tuple[str, str], tuple[str, float]]:
    """(config, question) -> (category, mean of ``metric`` over the repeats that have it)."""
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    category: dict[tuple[str, str], str] = {}
    for row in rows:
        value = _value(row, metric)
        if value is not None:
            values[(row["config"], row["question"])].append(value)
            category[(row["config"], row["question"])] = row["category"]
    return {key: (category[key], statistics.fmean(v)) for key, v in values.items()}


def differences(
    a_rows: Sequence[dict[str, Any]],
    b_rows: Sequence[dict[str, Any]],
    *,
    pairs: Sequence[tuple[str, str]],
    categories: Sequence[str],
    headline: Sequence[str],
) -> list[dict[str, Any]]:
    """For each (config of A, config of B) in ``pairs``, each category and "all" (the headline
    categories) and each metric: the paired bootstrap of B - A over the questions both have."""
    out = []
    for metric in METRICS:
        a_values, b_values = per_question(a_rows, metric), per_question(b_rows, metric)
        for config_a, config_b in pairs:
            for category in (*categories, "all"):
                keep = headline if category == "all" else (category,)
                shared = sorted(
                    q for (c, q), (cat, _) in a_values.items()
                    if c == config_a and cat in keep and (config_b, q) in b_values
                )
                if not shared:
                    continue
                result = paired_bootstrap(
                    [a_values[(config_a, q)][1] for q in shared], [b_values[(config_b, q)][1] for q in shared]
                )
                out.append({"metric": metric, "a": config_a, "b": config_b, "category": category, **result})
    return out


def config_pairs(configs: Sequence[str]) -> list[tuple[str, str]]:
    """Each configuration against the next one in the run's order."""
    return list(zip(configs, configs[1:]))
