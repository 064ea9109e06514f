"""The runs on disk, for the results page (``/evaluation/``): read-only.

Every ``*.json`` in ``MODEX_EVAL_RESULTS`` (results committed on purpose) and in its ``runs/``
folder (what ``make eval`` writes, git-ignored) that is a recall benchmark report. A file that
cannot be read, or a report of an older format, is listed with the reason instead of drawn.
Files that are not memory_eval reports at all (``make bench``'s ``latest.json``) are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.evaluation import charts
from agents.evaluation.report import FORMAT
from agents.evaluation.report_text import duration, num, score_format

MAX_BYTES = 50 * 1024 * 1024  # a report larger than this is not loaded into the page


@dataclass
class Run:
    path: Path
    name: str
    report: dict[str, Any] | None = None
    problem: str | None = None
    charts: list[tuple[str, str, str]] = field(default_factory=list)  # (name, title, svg)
    facts: list[tuple[str, str]] = field(default_factory=list)
    tiers: list[dict[str, Any]] = field(default_factory=list)
    configs: list[str] = field(default_factory=list)
    title: str = ""

    @property
    def sort_key(self) -> str:
        return (self.report or {}).get("generated_at", "")


def find_runs(root: Path) -> tuple[list[Run], list[Run]]:
    """(runs to draw, newest first; files listed but not drawn, with the reason). A run kept in
    ``root`` and still in ``runs/`` (the same file name and date) is drawn once."""
    drawn, skipped = [], []
    seen: set[tuple[str, str]] = set()
    for folder, label in ((root, ""), (root / "runs", "runs/")):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            run = _read(path, label + path.name)
            if run is None:
                continue
            if run.problem is None:
                key = (path.name, run.sort_key)
                if key in seen:
                    continue
                seen.add(key)
            (drawn if run.problem is None else skipped).append(run)
    drawn.sort(key=lambda r: r.sort_key, reverse=True)
    return drawn, skipped


def _read(path: Path, name: str) -> Run | None:
    try:
        if path.stat().st_size > MAX_BYTES:
            return Run(path, name, problem=f"larger than {MAX_BYTES // 1024 // 1024} MB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return Run(path, name, problem=f"cannot be read ({exc})")
    except json.JSONDecodeError as exc:
        return Run(path, name, problem=f"not valid JSON ({exc.msg}, line {exc.lineno})")
    if not isinstance(data, dict):
        return None
    found = data.get("format")
    if found != FORMAT:
        if found is None and not path.name.startswith("memory_eval"):
            return None  # another tool's results
        return Run(path, name, problem=f"format {found or 'of an earlier version'}, not {FORMAT}: run it again to draw it")
    try:
        return _shape(Run(path, name, report=data))
    except (KeyError, TypeError, ValueError) as exc:
        return Run(path, name, problem=f"incomplete report ({type(exc).__name__}: {exc})")


def _shape(run: Run) -> Run:
    report = run.report
    setup, data = report["setup"], report["setup"]["dataset"]
    summary = report["summary"]
    configs = setup["configs"]
    labels = {s["config"]: s["label"] for s in summary}
    names = [labels.get(c, c) for c in configs]
    by = {(s["config"], s["category"]): s for s in summary}
    run.configs = names
    budget = setup["budget"]
    run.facts = [
        ("Dataset", f"{data['label']} · {data['histories']} histories, {data['sessions']} sessions, "
                    f"{data['questions']} questions"),
        ("Model", setup["model"] + (" (offline)" if setup["offline"] else "")),
        ("Mapping", setup["mapping"]),
        ("Budgets", f"window {budget['context_window']:,} · cleanup at {budget['threshold']:,} · keeps {budget['keep']:,}"
                    + (f" · archive {budget['archive']:,}" if "archive" in budget else "")),
        ("Date", report["generated_at"]),
        ("Run time", duration(report.get("wall_s", 0.0)) + (f" · {report['repeats']} repeats" if report["repeats"] > 1 else "")),
    ]
    if not report["complete"]:
        run.facts.append(("State", f"incomplete: {report['answered']} of {report['expected']} answers"))
    run.title = f"{data['label']} · {setup['mapping']}"
    categories = [*data["categories"], "all"]

    def draw(name: str, title: str, **options: Any) -> None:
        run.charts.append((name, title, charts.bars(title=title, **options)))

    everything = [by.get((c, "all")) for c in configs]
    draw(
        "recall",
        "Evidence recall, headline categories: in context and reachable",
        series=("in context", "reachable"),
        groups=[charts.Group(n, (s and s["in_context"], s and s["reachable"])) for n, s in zip(names, everything)],
        maximum=1.0,
    )
    draw(
        "in_context",
        "Evidence in context, per category",
        series=names,
        groups=[charts.Group(c, tuple((by.get((k, c)) or {}).get("in_context") for k in configs)) for c in categories],
        maximum=1.0,
    )
    score_name = report["score_name"].split(" (")[0]
    fmt = score_format(data["kind"])
    draw(
        "score",
        f"Score per category: {score_name}",
        series=names,
        groups=[charts.Group(c, tuple((by.get((k, c)) or {}).get("score") for k in configs)) for c in categories],
        maximum=1.0,
        fmt=fmt,
    )
    if any(s["judged"] for s in summary):
        draw(
            "judge",
            "Judged correct, per category",
            series=names,
            groups=[charts.Group(c, tuple((by.get((k, c)) or {}).get("judge") for k in configs)) for c in categories],
            maximum=1.0,
        )
    draw(
        "tokens",
        "Tokens sent per answer",
        series=("tokens",),
        groups=[charts.Group(n, ((s or {}).get("tokens_sent"),)) for n, s in zip(names, everything)],
        fmt=lambda v: num(v),
    )
    run.tiers = [
        {"tier": tier, "values": [f"{100 * (s or {}).get('tiers', {}).get(tier, 0.0):.0f}%" for s in everything]}
        for tier in _tiers_present(everything)
    ]
    return run


def _tiers_present(entries: list[dict[str, Any] | None]) -> list[str]:
    from agents.evaluation.evidence import TIERS

    return [t for t in TIERS if any(e and e.get("tiers", {}).get(t) for e in entries)]
