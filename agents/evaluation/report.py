"""The recall benchmark's report: per configuration and category, as JSON and markdown.

The JSON (``FORMAT``) is what the results page (``/evaluation/``) and ``--compare`` read:
``setup``, ``summary`` (one entry per configuration and category, plus ``all`` over the
dataset's headline categories), ``differences`` (each configuration against the next, paired
bootstrap), ``ingest`` (what reading the histories in cost) and ``answers`` (every row).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.evaluation.configs import CONFIGS
from agents.evaluation.evidence import TIERS
from agents.evaluation.scoring import SCORE_NAMES
from agents.evaluation.stats import config_pairs, differences, mean_interval

FORMAT = "modex-memory-eval/2"
LABELS = {c.name: c.label for c in CONFIGS}
ALL = "all"
OFFLINE_NOTE = " (the built-in offline model: deterministic, no language understanding)"


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _mean(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _interval(rows: list[dict[str, Any]], value: Callable[[dict[str, Any]], float | None], repeats: int) -> list | None:
    """The 95% interval of the per-repeat means of ``value`` (None with one repeat)."""
    if repeats < 2:
        return None
    means = [_mean(value(r) for r in rows if r.get("repeat", 1) == n) for n in range(1, repeats + 1)]
    means = [m for m in means if m is not None]
    if len(means) < 2:
        return None
    _, low, high = mean_interval(means)
    return [low, high]


def _field(name: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda row: None if row.get(name) is None else float(row[name])


def summarize(rows: list[dict[str, Any]], setup: dict[str, Any], repeats: int = 1) -> list[dict[str, Any]]:
    """One entry per configuration and category (and ``all``), in table order."""
    data = setup["dataset"]
    out = []
    for config in setup["configs"]:
        for category in (*data["categories"], ALL):
            keep = data["headline"] if category == ALL else (category,)
            group = [r for r in rows if r["config"] == config and r["category"] in keep]
            if not group:
                continue
            answered = [r for r in group if "skipped" not in r]
            with_evidence = [r for r in answered if r.get("in_context") is not None]
            judged = [r for r in answered if r.get("judge") is not None]
            walls = [r["wall_s"] for r in answered]
            tiers = {
                tier: statistics.fmean(r["tiers"].get(tier, 0.0) for r in with_evidence)
                for tier in TIERS if with_evidence and any(tier in r["tiers"] for r in with_evidence)
            }
            out.append(
                {
                    "config": config,
                    "label": LABELS.get(config, config),
                    "category": category,
                    "questions": len({r["question"] for r in group}),
                    "answered": len(answered),
                    "skipped": len(group) - len(answered),
                    "skip_reason": next((r["skipped"] for r in group if "skipped" in r), None),
                    "evidence_questions": len(with_evidence),
                    "in_context": _mean(r["in_context"] for r in with_evidence),
                    "in_context_ci": _interval(with_evidence, _field("in_context"), repeats),
                    "reachable": _mean(r["reachable"] for r in with_evidence),
                    "reachable_ci": _interval(with_evidence, _field("reachable"), repeats),
                    "tiers": tiers,
                    "score": _mean(r["score"] for r in answered),
                    "score_ci": _interval(answered, _field("score"), repeats),
                    "judge": _mean(float(r["judge"]) for r in judged),
                    "judge_ci": _interval(judged, _field("judge"), repeats),
                    "judged": len(judged),
                    "errors": sum(1 for r in answered if r.get("error")),
                    "tokens_sent": _mean(r["tokens_sent"] for r in answered),
                    "context_tokens": _mean(r.get("context_tokens") for r in answered),
                    "model_calls": _mean(r["model_calls"] for r in answered),
                    "wall_s_p50": _p(walls, 0.5),
                    "wall_s_p95": _p(walls, 0.95),
                }
            )
    return out


def _ingest_totals(ingests: dict[str, dict[str, Any]], configs: list[str], repeats: int) -> dict[str, dict[str, Any]]:
    """Per configuration, summed over histories and averaged over repeats."""
    totals: dict[str, dict[str, Any]] = {}
    for key, stats in ingests.items():
        config = key.rsplit("/", 1)[1]
        into = totals.setdefault(config, {"histories": 0})
        into["histories"] += 1
        for name, value in stats.items():
            into[name] = into.get(name, 0) + value
    done = {c: totals[c] for c in configs if c in totals}
    for entry in done.values():
        for name, value in list(entry.items()):
            entry[name] = round(value / repeats, 3)
    return done


def build_report(
    *, setup: dict[str, Any], rows: list[dict[str, Any]], ingests: dict[str, dict[str, Any]], complete: bool,
    repeats: int = 1, wall_s: float = 0.0,
) -> dict[str, Any]:
    data = setup["dataset"]
    configs = setup["configs"]
    return {
        "format": FORMAT,
        "setup": setup,
        "repeats": repeats,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_s": round(wall_s, 1),
        "complete": complete,
        "answered": len(rows),
        "expected": len(configs) * data["questions"] * repeats,
        "score_name": SCORE_NAMES[data["kind"]],
        "summary": summarize(rows, setup, repeats),
        "differences": differences(
            rows, rows, pairs=config_pairs(configs), categories=(), headline=data["headline"]
        ) if complete else [],
        "ingest": _ingest_totals(ingests, configs, repeats),
        "answers": rows,
    }


def render_markdown(report: dict[str, Any]) -> str:
    from agents.evaluation.report_text import markdown

    return markdown(report)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(
    *, out: Path, setup: dict[str, Any], rows: list[dict[str, Any]], ingests: dict[str, dict[str, Any]], complete: bool,
    repeats: int = 1, wall_s: float = 0.0,
) -> dict[str, Any]:
    """Write ``out``.md and ``out``.json (atomically) and return the report."""
    report = build_report(setup=setup, rows=rows, ingests=ingests, complete=complete, repeats=repeats, wall_s=wall_s)
    _write(out.with_suffix(".json"), json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    _write(out.with_suffix(".md"), render_markdown(report))
    return report
