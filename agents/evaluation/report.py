"""The recall benchmark's tables: per configuration and question kind, markdown and JSON."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.evaluation.configs import CONFIGS
from agents.evaluation.dataset import KINDS

LABELS = {c.name: c.label for c in CONFIGS}
ALL = "all"
OFFLINE_NOTE = " (the built-in offline model: deterministic, no language understanding)"


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.fmean(values) if values else None


def summarize(rows: list[dict[str, Any]], configs: list[str]) -> list[dict[str, Any]]:
    """One entry per configuration and kind (and ``all`` kinds), in table order."""
    out = []
    for config in configs:
        for kind in (*KINDS, ALL):
            group = [r for r in rows if r["config"] == config and (kind == ALL or r["kind"] == kind)]
            if not group:
                continue
            answered = [r for r in group if "skipped" not in r]
            judged = [r for r in answered if r.get("judge_correct") is not None]
            walls = [r["wall_s"] for r in answered]
            out.append(
                {
                    "config": config,
                    "label": LABELS.get(config, config),
                    "kind": kind,
                    "questions": len(group),
                    "answered": len(answered),
                    "skipped": len(group) - len(answered),
                    "skip_reason": next((r["skipped"] for r in group if "skipped" in r), None),
                    "correct": sum(1 for r in answered if r["correct"]),
                    "accuracy": sum(1 for r in answered if r["correct"]) / len(answered) if answered else None,
                    "judge_accuracy": (
                        sum(1 for r in judged if r["judge_correct"]) / len(judged) if judged else None
                    ),
                    "errors": sum(1 for r in answered if r.get("error")),
                    "tokens_sent": _mean(r["tokens_sent"] for r in answered),
                    "model_calls": _mean(r["model_calls"] for r in answered),
                    "wall_s_mean": _mean(walls),
                    "wall_s_p50": _p(walls, 0.5),
                    "wall_s_p95": _p(walls, 0.95),
                }
            )
    return out


def _ingest_totals(ingests: dict[str, dict[str, Any]], configs: list[str]) -> dict[str, dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = {}
    for key, stats in ingests.items():
        config = key.split("/", 1)[1]
        into = totals.setdefault(config, {"users": 0})
        into["users"] += 1
        for name, value in stats.items():
            into[name] = round(into.get(name, 0) + value, 3)
    return {c: totals[c] for c in configs if c in totals}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{1000 * value:,.0f} ms"


def render_markdown(report: dict[str, Any]) -> str:
    setup = report["setup"]
    data = setup["dataset"]
    configs = setup["configs"]
    summary = report["summary"]
    judge = any(s["judge_accuracy"] is not None for s in summary)
    by = {(s["config"], s["kind"]): s for s in summary}
    lines = [
        "# Recall benchmark (`manage.py memory_eval`)",
        "",
        f"Model `{setup['model']}`{OFFLINE_NOTE if setup['offline'] else ''}; dataset `{data['size']}` "
        f"(seed {data['seed']}, fingerprint {data['fingerprint']}): {data['users']} user(s), each with "
        f"{data['sessions_per_user']} sessions ({data['turns_per_user']} turns) and "
        f"{data['questions_per_user']} questions. Window {setup['budget']['context_window']} tokens; "
        f"cleanups at {setup['budget']['threshold']} tokens keeping {setup['budget']['keep']}. "
        f"Generated {report['generated_at']}"
        + ("." if report["complete"] else f"; **incomplete**: {report['answered']} of {report['expected']} answers."),
        "",
        "## Accuracy by kind",
        "",
        "| kind | " + " | ".join(LABELS.get(c, c) for c in configs) + " |",
        "| --- |" + " ---: |" * len(configs),
    ]
    for kind in (*KINDS, ALL):
        cells = []
        for config in configs:
            s = by.get((config, kind))
            if s is None:
                cells.append("–")
            elif not s["answered"]:
                cells.append("does not fit")
            else:
                cells.append(f"{_pct(s['accuracy'])} ({s['correct']}/{s['answered']})")
        lines.append(f"| {'**all**' if kind == ALL else kind} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Per configuration and kind",
        "",
        "| configuration | kind | questions | accuracy |"
        + (" judge |" if judge else "")
        + " tokens sent / answer | model calls / answer | wall p50 | wall p95 |",
        "| --- | --- | ---: | ---: |" + (" ---: |" if judge else "") + " ---: | ---: | ---: | ---: |",
    ]
    for s in summary:
        if not s["answered"]:
            row = f"| {s['label']} | {s['kind']} | {s['questions']} | skipped: {s['skip_reason']} |"
            lines.append(row + (" |" if judge else "") + " | | | |")
            continue
        lines.append(
            f"| {s['label']} | {'**all**' if s['kind'] == ALL else s['kind']} | {s['answered']} "
            f"| {_pct(s['accuracy'])} |"
            + (f" {_pct(s['judge_accuracy'])} |" if judge else "")
            + f" {_num(s['tokens_sent'])} | {_num(s['model_calls'], 2)} |"
            + f" {_ms(s['wall_s_p50'])} | {_ms(s['wall_s_p95'])} |"
        )
    if report["ingest"]:
        lines += [
            "",
            "## Reading the histories in (per configuration, all users)",
            "",
            "| configuration | cleanups | fallback summaries | consolidations | core edits | model calls "
            "| tokens sent | wall |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for config, t in report["ingest"].items():
            lines.append(
                f"| {LABELS.get(config, config)} | {t.get('cleanups', 0)} | {t.get('fallback_summaries', 0)} | "
                f"{t.get('consolidations', 0)} | {t.get('core_edits', 0)} | {t.get('model_calls', 0)} | "
                f"{_num(t.get('prompt_tokens', 0))} | {_num(t.get('wall_s', 0), 1)} s |"
            )
    lines += [
        "",
        "Scoring: normalized match on the planted value (the replaced value must not appear for updated facts; "
        "\"not told\" needs an answer saying it does not know)"
        + ("; judge: the model's CORRECT/WRONG verdict." if judge else ".")
        + " Tokens sent: prompt tokens of every model call of the answering turn. Wall: the whole turn.",
        "",
    ]
    return "\n".join(lines)


def build_report(
    *, setup: dict[str, Any], rows: list[dict[str, Any]], ingests: dict[str, dict[str, Any]], complete: bool
) -> dict[str, Any]:
    configs = setup["configs"]
    expected = len(configs) * setup["dataset"]["users"] * setup["dataset"]["questions_per_user"]
    return {
        "setup": setup,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "complete": complete,
        "answered": len(rows),
        "expected": expected,
        "summary": summarize(rows, configs),
        "ingest": _ingest_totals(ingests, configs),
        "answers": rows,
    }


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(
    *, out: Path, setup: dict[str, Any], rows: list[dict[str, Any]], ingests: dict[str, dict[str, Any]], complete: bool
) -> dict[str, Any]:
    """Write ``out``.md and ``out``.json (atomically) and return the report."""
    report = build_report(setup=setup, rows=rows, ingests=ingests, complete=complete)
    _write(out.with_suffix(".json"), json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    _write(out.with_suffix(".md"), render_markdown(report))
    return report
