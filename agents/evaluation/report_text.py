"""The recall benchmark's report as markdown (``agents.evaluation.report`` builds the data), and
the comparison of two reports (``--compare``)."""

from __future__ import annotations

from typing import Any

from agents.evaluation.evidence import TIERS

ALL = "all"
OFFLINE_NOTE = " (the built-in offline model: deterministic, no language understanding)"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def num(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def ms(value: float | None) -> str:
    return "–" if value is None else f"{1000 * value:,.0f} ms"


def duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def score_format(kind: str):
    """F1 is shown as 0-100 with a decimal (LoCoMo's convention); the rest as percentages."""
    return (lambda v: "–" if v is None else f"{100 * v:.1f}") if kind == "locomo" else pct


def with_ci(entry: dict[str, Any], key: str, fmt=pct) -> str:
    ci = entry.get(f"{key}_ci")
    value = fmt(entry.get(key))
    return value if not ci or ci[0] is None else f"{value} [{fmt(ci[0])}, {fmt(ci[1])}]"


def _label(category: str) -> str:
    return f"**{ALL}**" if category == ALL else category


def markdown(report: dict[str, Any]) -> str:
    setup = report["setup"]
    data = setup["dataset"]
    configs = setup["configs"]
    budget = setup["budget"]
    by = {(s["config"], s["category"]): s for s in report["summary"]}
    labels = {s["config"]: s["label"] for s in report["summary"]}
    head = "| category | " + " | ".join(labels.get(c, c) for c in configs) + " |"
    rule = "| --- |" + " ---: |" * len(configs)
    rows = [*data["categories"], ALL]
    score = score_format(data["kind"])
    lines = [
        "# Recall benchmark (`manage.py memory_eval`)",
        "",
        f"Model `{setup['model']}`{OFFLINE_NOTE if setup['offline'] else ''}. Dataset: {data['label']} "
        f"(fingerprint {data['fingerprint']}): {data['histories']} history(ies), {data['sessions']} sessions, "
        f"{data['turns']} turns, {data['questions']} questions. Mapping `{setup['mapping']}`. Window "
        f"{budget['context_window']} tokens; cleanups at {budget['threshold']} tokens keeping {budget['keep']}"
        + (f"; archive section {budget['archive']} tokens. " if "archive" in budget else ". ")
        + f"{report['repeats']} repeat(s). Generated {report['generated_at']}; run time {duration(report['wall_s'])}"
        + ("." if report["complete"] else f"; **incomplete**: {report['answered']} of {report['expected']} answers."),
        "",
        f"The **all** row covers the headline categories: {', '.join(data['headline'])}.",
    ]
    if data["notes"]:
        lines += ["", "Dataset notes: " + "; ".join(data["notes"]) + "."]
    lines += [
        "",
        "## Evidence recall: in context / reachable",
        "",
        "Share of the evidence turns of each question that were in the first request of the answering turn "
        "(in context), or in it, a later request or a tool output of that turn (reachable); questions with "
        "marked evidence only.",
        "",
        head,
        rule,
    ]
    for category in rows:
        cells = []
        for config in configs:
            s = by.get((config, category))
            if s is None or not s["answered"]:
                cells.append("–" if s is None else "does not fit")
            elif not s["evidence_questions"]:
                cells.append("no evidence")
            else:
                cells.append(f"{with_ci(s, 'in_context')} / {with_ci(s, 'reachable')}")
        lines.append(f"| {_label(category)} | " + " | ".join(cells) + " |")
    lines += ["", "## Where the evidence was (all)", "", "Share of evidence turns each tier held during the answering turn.", "",
              head.replace("| category |", "| tier |"), rule]
    for tier in TIERS:
        cells = [pct((by.get((c, ALL)) or {}).get("tiers", {}).get(tier)) if by.get((c, ALL), {}).get("evidence_questions") else "–"
                 for c in configs]
        if any(cell not in ("–", "0%") for cell in cells):
            lines.append(f"| {tier} | " + " | ".join(cells) + " |")
    judged = any(s["judged"] for s in report["summary"])
    lines += ["", f"## Scores: {report['score_name']}" + (" (judge below)" if judged else ""), "", head, rule]
    for category in rows:
        cells = []
        for config in configs:
            s = by.get((config, category))
            cells.append("–" if s is None else ("does not fit" if not s["answered"] else with_ci(s, "score", score)))
        lines.append(f"| {_label(category)} | " + " | ".join(cells) + " |")
    if judged:
        lines += ["", "## Judge: share judged correct", "", head, rule]
        for category in rows:
            cells = [with_ci(s, "judge") if (s := by.get((c, category))) and s["judged"] else "–" for c in configs]
            lines.append(f"| {_label(category)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Cost per answer (all)",
        "",
        "| configuration | answered | tokens sent | first request | model calls | wall p50 | wall p95 | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for config in configs:
        s = by.get((config, ALL))
        if s is None:
            continue
        if not s["answered"]:
            lines.append(f"| {s['label']} | skipped: {s['skip_reason']} | | | | | | |")
            continue
        lines.append(
            f"| {s['label']} | {s['answered']} | {num(s['tokens_sent'])} | {num(s['context_tokens'])} | "
            f"{num(s['model_calls'], 2)} | {ms(s['wall_s_p50'])} | {ms(s['wall_s_p95'])} | {s['errors']} |"
        )
    if report["differences"]:
        lines += ["", "## Differences between configurations (all)", "", *difference_table(report["differences"], labels)]
    if report["ingest"]:
        lines += [
            "",
            "## Reading the histories in (per configuration, all histories, per repeat)",
            "",
            "| configuration | conversations | cleanups | fallback summaries | consolidations | core edits | model calls "
            "| tokens sent | wall |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for config, t in report["ingest"].items():
            lines.append(
                f"| {labels.get(config, config)} | {num(t.get('conversations', 0))} | {num(t.get('cleanups', 0))} | "
                f"{num(t.get('fallback_summaries', 0))} | {num(t.get('consolidations', 0))} | {num(t.get('core_edits', 0))} | "
                f"{num(t.get('model_calls', 0))} | {num(t.get('prompt_tokens', 0))} | {num(t.get('wall_s', 0), 1)} s |"
            )
    lines += [
        "",
        f"Scoring: {report['score_name']}. Tokens sent: prompt tokens of every model call of the answering turn; "
        "first request: the assembled context of its first call. Intervals: 95% over repeats (Student t). "
        "Differences: paired bootstrap over questions (README, \"Recall benchmark\").",
        "",
    ]
    return "\n".join(lines)


def difference_table(entries: list[dict[str, Any]], labels: dict[str, str] | None = None, *, rows: str = "all") -> list[str]:
    labels = labels or {}
    lines = [
        "| metric | A | B | category | questions | A | B | B - A | 95% interval | beyond noise |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for d in entries:
        if rows == "all" and d["category"] != ALL:
            continue
        lines.append(
            f"| {d['metric']} | {labels.get(d['a'], d['a'])} | {labels.get(d['b'], d['b'])} | {d['category']} | {d['n']} | "
            f"{pct(d['mean_a'])} | {pct(d['mean_b'])} | {100 * d['difference']:+.1f} pts | "
            f"[{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] | {'**yes**' if d['beyond_noise'] else 'no'} |"
        )
    return lines


def comparison(a: dict[str, Any], b: dict[str, Any], entries: list[dict[str, Any]], names: tuple[str, str]) -> str:
    """``--compare``: run B against run A, configuration by configuration."""
    lines = [
        "# Comparing two recall benchmark runs",
        "",
        f"A: {names[0]} ({a['setup']['model']}, {a['setup']['dataset']['label']}, mapping {a['setup']['mapping']}, "
        f"{a['generated_at']})",
        f"B: {names[1]} ({b['setup']['model']}, {b['setup']['dataset']['label']}, mapping {b['setup']['mapping']}, "
        f"{b['generated_at']})",
        "",
        "Paired over the questions both runs answered (per question: the mean over its repeats); B - A with a "
        "95% bootstrap interval; beyond noise when the interval excludes 0.",
        "",
    ]
    if a["setup"]["dataset"]["fingerprint"] != b["setup"]["dataset"]["fingerprint"]:
        lines += ["**The two runs are on different data**: only questions with the same id are paired.", ""]
    if not entries:
        lines.append("No question was answered in both runs under the same configuration.")
    else:
        labels = {s["config"]: s["label"] for s in (*a["summary"], *b["summary"])}
        lines += difference_table(entries, labels, rows="any")
    return "\n".join(lines) + "\n"
