"""``manage.py memory_eval``: the recall benchmark (``agents.evaluation``).

    manage.py memory_eval            offline model, size small (CI); with OPENAI_BASE_URL: that model, size full
    manage.py memory_eval --size medium --configs session_pruned,archive_core
    manage.py memory_eval --judge    also ask the configured model for a CORRECT/WRONG verdict
    manage.py memory_eval --fresh    forget earlier results of this setup and start over

Results: ``benchmarks/results/memory_eval-<size>-<model>.md`` and ``.json`` (``--out``), rewritten
after every question. Answers are appended to ``<workdir>/answers.jsonl`` as they finish; the
default run directory is ``<MODEX_WORKSPACE>/memory_eval/<size>-<model>-<setup hash>``, so an
interrupted run resumes where it stopped when started again with the same options.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.evaluation.configs import CONFIG_NAMES, Budget, configs_named
from agents.evaluation.dataset import DEFAULT_SEED, SIZES, generate
from agents.evaluation.runner import EndpointFailed, EvalSetupMismatch, Progress, RunSetup, arun
from agents.llm import OfflineChatModel, model_from_settings
from memory.config import InvalidMemoryConfig

REPO = Path(__file__).resolve().parents[3]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")[:60] or "model"


class Command(BaseCommand):
    help = "Measure whether the memory layers make the agent remember: accuracy, tokens, calls, time per kind."

    def add_arguments(self, parser: CommandParser) -> None:
        add = parser.add_argument
        add("--size", choices=sorted(SIZES), help="dataset size (default: small offline, full with an endpoint)")
        add("--seed", type=int, default=DEFAULT_SEED, help=f"dataset seed (default {DEFAULT_SEED})")
        add("--configs", help=f"comma-separated configurations (default: all of {', '.join(CONFIG_NAMES)})")
        add("--out", type=Path, help="results path without extension (default: see the module doc)")
        add("--workdir", type=Path, help="workspaces and answers (default: see the module doc)")
        add("--fresh", action="store_true", help="discard earlier results of this run directory")
        add("--keep-workdir", action="store_true", help="keep the ingested workspaces after a complete run")
        add("--judge", action="store_true", help="also grade each answer with the OPENAI_BASE_URL model")
        add("--judge-model", help="the judge's model name (default: OPENAI_MODEL)")
        add("--context-window", type=int, default=Budget.context_window, help="the model's window in tokens")
        add("--threshold", type=int, default=Budget.threshold, help="session tokens that trigger a cleanup")
        add("--keep", type=int, default=Budget.keep, help="tokens of recent history a cleanup keeps")
        add("--limit", type=int, help="stop after this many new answers (resume later)")
        add("--parallel", type=int, default=1, help="(user, configuration) pairs run at once (for endpoints)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            model = model_from_settings()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        offline = isinstance(model, OfflineChatModel)
        size = options["size"] or ("small" if offline else "full")
        try:
            names = [c.strip() for c in (options["configs"] or "").split(",") if c.strip()]
            configs = configs_named(names or None)
            budget = Budget(
                context_window=options["context_window"], threshold=options["threshold"], keep=options["keep"]
            )
            for config in configs:
                budget.memory_config(config)
        except (ValueError, InvalidMemoryConfig) as exc:
            raise CommandError(str(exc)) from None
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        if options["parallel"] < 1:
            raise CommandError("--parallel must be at least 1")
        judge = self._judge(options) if options["judge"] else None
        name = f"{size}-{slug(model.name)}"
        out = options["out"] or REPO / "benchmarks" / "results" / f"memory_eval-{name}"
        dataset = generate(size=size, seed=options["seed"])
        setup = RunSetup(dataset=dataset, model=model, configs=configs, budget=budget, offline=offline)
        workdir = options["workdir"] or Path(settings.MODEX_WORKSPACE) / "memory_eval" / f"{name}-{setup.key()}"
        self.stdout.write(
            f"memory_eval: {model.describe()}\n  dataset {size} (seed {options['seed']}): "
            f"{len(dataset.users)} user(s), "
            f"{len(dataset.questions)} questions x {len(configs)} configuration(s); run directory {workdir}"
        )
        bar = ProgressBar(self.stderr)
        try:
            report = async_to_sync(arun)(
                setup=setup,
                workdir=workdir,
                out=out,
                judge=judge,
                fresh=options["fresh"],
                keep_workdir=options["keep_workdir"],
                limit=options["limit"],
                parallel=options["parallel"],
                progress=bar,
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
        self.stdout.write(self.style.SUCCESS(f"{state}: {out.with_suffix('.md')} and {out.with_suffix('.json')}"))

    def _judge(self, options: dict[str, Any]) -> Any:
        try:
            judge = model_from_settings(model=options["judge_model"])
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        if isinstance(judge, OfflineChatModel):
            raise CommandError("--judge needs an OpenAI-compatible endpoint: set OPENAI_BASE_URL and OPENAI_MODEL")
        return judge

    @staticmethod
    def _summary(report: dict[str, Any]) -> list[str]:
        lines = []
        for s in report["summary"]:
            if s["kind"] != "all":
                continue
            if not s["answered"]:
                lines.append(f"  {s['label']:<28} skipped: {s['skip_reason']}")
                continue
            lines.append(
                f"  {s['label']:<28} {100 * s['accuracy']:5.1f}% of {s['answered']}, "
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
            mark = "skipped" if "skipped" in row else ("right" if row.get("correct") else "wrong")
            what = f"{p.config} {p.question.id} {p.question.kind}: {mark}"
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
