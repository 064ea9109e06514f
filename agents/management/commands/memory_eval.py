"""``manage.py memory_eval``: the recall benchmark (``agents.evaluation``).

    manage.py memory_eval                             the generated dataset, offline model: size small (CI)
    manage.py memory_eval --dataset locomo:PATH       LoCoMo's JSON (e.g. locomo10.json), every conversation
    manage.py memory_eval --dataset longmemeval:PATH  LongMemEval's JSON (S, M or oracle), --histories N for a part
    manage.py memory_eval --mapping single            everything in one conversation (default: per-session)
    manage.py memory_eval --judge --repeats 3         a judge model's verdicts; mean and interval over 3 runs
    manage.py memory_eval --compare A.json B.json     B against A, paired over questions, what is beyond noise

Results: ``<MODEX_EVAL_RESULTS>/runs/memory_eval-<dataset>-<mapping>-<model>-<setup>.md`` and
``.json`` (``--out``), rewritten after every question; the results page (``/evaluation/``) shows
every run there and in ``MODEX_EVAL_RESULTS`` itself. Answers are appended to
``<workdir>/answers.jsonl`` as they finish; the default run directory is
``<MODEX_WORKSPACE>/memory_eval/<name>``, so an interrupted run resumes where it stopped when
started again with the same options.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.evaluation.configs import CONFIG_NAMES, Budget, configs_named
from agents.evaluation.datasets import dataset_slug, load_dataset
from agents.evaluation.generated import DEFAULT_SEED, SIZES
from agents.evaluation.pipeline import MAPPINGS
from agents.evaluation.report_text import comparison, score_format
from agents.evaluation.runner import EndpointFailed, EvalSetupMismatch, Progress, RunSetup, arun
from agents.evaluation.stats import differences
from agents.llm import OfflineChatModel, model_from_settings
from memory.config import InvalidMemoryConfig


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")[:60] or "model"


class Command(BaseCommand):
    help = "Measure whether the memory brings back what was said: evidence recall, answer scores, tokens, time."

    def add_arguments(self, parser: CommandParser) -> None:
        add = parser.add_argument
        add("--dataset", default="generated", help="generated (default), locomo:PATH or longmemeval:PATH")
        add("--size", choices=sorted(SIZES), help="generated dataset size (default: small offline, full with an endpoint)")
        add("--seed", type=int, default=DEFAULT_SEED, help=f"generated dataset seed (default {DEFAULT_SEED})")
        add("--histories", type=int, help="only the first N histories of the dataset")
        add("--mapping", choices=MAPPINGS, default="per-session", help="one conversation per session, or a single one")
        add("--configs", help=f"comma-separated configurations (default: all of {', '.join(CONFIG_NAMES)})")
        add("--out", type=Path, help="results path without extension (default: see the module doc)")
        add("--workdir", type=Path, help="workspaces and answers (default: see the module doc)")
        add("--fresh", action="store_true", help="discard earlier results of this run directory")
        add("--keep-workdir", action="store_true", help="keep the read-in workspaces after a complete run")
        add("--judge", action="store_true", help="also grade each answer with the OPENAI_BASE_URL model")
        add("--judge-model", help="the judge's model name (default: OPENAI_MODEL)")
        add("--context-window", type=int, default=Budget.context_window, help="the model's window in tokens")
        add("--threshold", type=int, default=Budget.threshold, help="session tokens that trigger a cleanup")
        add("--keep", type=int, default=Budget.keep, help="tokens of recent history a cleanup keeps")
        add("--archive-budget", type=int, default=Budget().archive,
            help="the archive section's tokens (smaller: a history long for its budget, as real ones are)")
        add("--limit", type=int, help="stop after this many new answers (resume later)")
        add("--parallel", type=int, default=1, help="(history, configuration) pairs run at once (for endpoints)")
        add("--repeats", type=int, default=1, help="run everything N times: mean and 95%% interval")
        add("--compare", nargs=2, type=Path, metavar=("A.json", "B.json"), help="compare two result files and stop")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["compare"]:
            self._compare(*options["compare"], out=options["out"])
            return
        try:
            model = model_from_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        offline = isinstance(model, OfflineChatModel)
        size = options["size"] or ("small" if offline else "full")
        for name in ("limit", "parallel", "repeats", "histories"):
            if options[name] is not None and options[name] < 1:
                raise CommandError(f"--{name} must be at least 1")
        if options["archive_budget"] < 0:
            raise CommandError("--archive-budget must be at least 0 (tokens of the archive section)")
        try:
            names = [c.strip() for c in (options["configs"] or "").split(",") if c.strip()]
            configs = configs_named(names or None)
            budget = Budget(
                context_window=options["context_window"], threshold=options["threshold"], keep=options["keep"],
                archive=options["archive_budget"],
            )
            for config in configs:
                budget.memory_config(config)
            dataset = load_dataset(options["dataset"], size=size, seed=options["seed"]).limited(options["histories"])
        except (ValueError, InvalidMemoryConfig) as exc:  # a DatasetError is a ValueError
            raise CommandError(str(exc)) from None
        judge = self._judge(options) if options["judge"] else None
        setup = RunSetup(
            dataset=dataset, model=model, configs=configs, budget=budget, offline=offline, mapping=options["mapping"]
        )
        name = f"{dataset_slug(dataset, size=size)}-{options['mapping']}-{slug(model.name)}-{setup.key()}"
        out = options["out"] or Path(settings.MODEX_EVAL_RESULTS) / "runs" / f"memory_eval-{name}"
        workdir = options["workdir"] or Path(settings.MODEX_WORKSPACE) / "memory_eval" / name
        self.stdout.write(
            f"memory_eval: {model.describe()}\n  dataset {dataset.label}: {len(dataset.histories)} history(ies), "
            f"{len(dataset.questions)} questions x {len(configs)} configuration(s) x {options['repeats']} repeat(s), "
            f"mapping {options['mapping']}; run directory {workdir}"
        )
        for note in dataset.notes:
            self.stdout.write(f"  note: {note}")
        bar = ProgressBar(self.stderr)
        try:
            report = async_to_sync(arun)(
                setup=setup, workdir=workdir, out=out, judge=judge, fresh=options["fresh"],
                keep_workdir=options["keep_workdir"], limit=options["limit"], parallel=options["parallel"],
                repeats=options["repeats"], progress=bar,
            )
        except EvalSetupMismatch as exc:
            raise CommandError(str(exc)) from None
        except EndpointFailed as exc:
            raise CommandError(
                f"{exc}. The answers finished so far are kept in {workdir}; run the same command again to resume."
            ) from None
        finally:
            bar.close()
        for line in self._summary(report):
            self.stdout.write(line)
        state = "complete" if report["complete"] else (
            f"incomplete ({report['answered']}/{report['expected']}; run again to resume)"
        )
        self.stdout.write(self.style.SUCCESS(
            f"{state} in {report['wall_s']:.0f} s: {out.with_suffix('.md')} and {out.with_suffix('.json')}"
        ))

    def _judge(self, options: dict[str, Any]) -> Any:
        try:
            judge = model_from_settings(model=options["judge_model"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        if isinstance(judge, OfflineChatModel):
            raise CommandError("--judge needs an OpenAI-compatible endpoint: set OPENAI_BASE_URL and OPENAI_MODEL")
        return judge

    def _compare(self, a_path: Path, b_path: Path, *, out: Path | None) -> None:
        reports = []
        for path in (a_path, b_path):
            try:
                report = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"{path}: cannot be read as a results file ({exc})") from None
            if not isinstance(report, dict) or "answers" not in report or "setup" not in report:
                raise CommandError(f"{path}: not a memory_eval results file (no 'setup' and 'answers')")
            reports.append(report)
        a, b = reports
        shared = [c for c in a["setup"]["configs"] if c in b["setup"]["configs"]]
        data = a["setup"]["dataset"]
        entries = differences(
            a["answers"], b["answers"], pairs=[(c, c) for c in shared], categories=data["categories"],
            headline=data["headline"],
        )
        text = comparison(a, b, entries, (str(a_path), str(b_path)))
        self.stdout.write(text)
        if out is not None:
            out.with_suffix(".md").parent.mkdir(parents=True, exist_ok=True)
            out.with_suffix(".md").write_text(text, encoding="utf-8")

    @staticmethod
    def _summary(report: dict[str, Any]) -> list[str]:
        score = score_format(report["setup"]["dataset"]["kind"])
        lines = []
        for s in report["summary"]:
            if s["category"] != "all":
                continue
            if not s["answered"]:
                lines.append(f"  {s['label']:<28} skipped: {s['skip_reason']}")
                continue
            recall = "no evidence marked"
            if s["in_context"] is not None:
                recall = f"evidence in context {100 * s['in_context']:5.1f}%, reachable {100 * s['reachable']:5.1f}%"
            lines.append(
                f"  {s['label']:<28} {recall}; {report['score_name'].split(' (')[0]} {score(s['score'])}; "
                f"{s['tokens_sent']:,.0f} tokens and {s['model_calls']:.2f} calls per answer"
            )
        return lines


class ProgressBar:
    """One line on a terminal (redrawn), one line per finished question otherwise; writes to a
    management command's OutputWrapper."""

    def __init__(self, stream: Any, width: int = 28) -> None:
        self.stream = stream
        self.width = width
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self.first_done: int | None = None
        self.drawn = False

    def __call__(self, p: Progress) -> None:
        if self.first_done is None:
            self.first_done = p.done
        filled = int(self.width * p.done / max(1, p.total))
        bar = "#" * filled + "-" * (self.width - filled)
        if p.phase == "ingest":
            what = f"{p.config}: reading the history in"
        else:
            row = p.row or {}
            mark = "skipped" if "skipped" in row else f"score {row.get('score', 0):.2f}"
            what = f"{p.config} {p.question.id} {p.question.category}: {mark}"
        new = p.done - self.first_done
        eta = ""
        if new > 0 and p.done < p.total:
            left = (time.monotonic() - self.started) / new * (p.total - p.done)
            eta = f" eta {int(left // 60)}m{int(left % 60):02d}s"
        line = f"[{bar}] {p.done}/{p.total}{eta} {what}"
        if self.tty:
            self.stream.write("\r\033[K" + line, ending="")
            self.drawn = True
        else:
            self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("")
            self.stream.flush()
