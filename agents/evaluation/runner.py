"""Running the recall benchmark (``arun``): every (repeat, history, configuration) through the
pipeline (``agents.evaluation.pipeline``), resumable.

Results are appended to ``answers.jsonl`` in the run directory as each question finishes, and
the markdown and JSON reports are rewritten from it at most every ``REPORT_EVERY`` seconds and
when the run stops, whatever stops it; an interrupted run resumes from the answers (the read-in workspaces are kept until the run completes). Each repeat reads the
histories in again and asks every question again (a model that samples answers differently;
the offline model the same). When full context does not fit the window, its questions are
recorded as skipped, not as wrong. An endpoint outage (``EndpointFailed``) stops the run
without recording the failed answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.evaluation.configs import TRANSIENT, EvalConfig
from agents.evaluation.data import History, Question
from agents.evaluation.judges import Verdict, ajudge
from agents.evaluation.pipeline import REPLY_RESERVE, EndpointFailed, RunSetup, ask, history_tokens, ingest
from agents.evaluation.report import write_report
from agents.llm import ModelError

__all__ = ["EndpointFailed", "EvalSetupMismatch", "Progress", "RunSetup", "arun"]

READY_MARK = "ingested.json"
ANSWERS = "answers.jsonl"
REPORT_EVERY = 5.0  # seconds between rewrites of the report while a run goes on


class EvalSetupMismatch(Exception):
    """The run directory holds results of another setup (dataset, model, budget, mapping)."""


@dataclass
class Progress:
    done: int
    total: int
    config: str
    question: Question | None
    row: dict[str, Any] | None
    phase: str = "answer"  # "ingest" while a history is read in, "answer" after a question


class AnswerLog:
    """``answers.jsonl``: a header line naming the setup, then one line per finished question,
    per history read in, and per invocation (its wall time)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, setup: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], float]:
        """Rows, ingest stats and wall seconds so far; raises EvalSetupMismatch for another setup."""
        if not self.path.exists():
            return [], {}, 0.0
        rows, ingests, wall = [], {}, 0.0
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            # A line cut off by the interruption: drop it (that question runs again), so the
            # next record starts on a line of its own.
            raw = raw[: raw.rfind(b"\n") + 1]
            with self.path.open("r+b") as f:
                f.truncate(len(raw))
        for line in raw.decode("utf-8").splitlines():
            record = json.loads(line)
            kind = record.get("type")
            if kind == "setup" and record["setup"] != setup:
                found = record["setup"]
                raise EvalSetupMismatch(
                    f"{self.path} holds results of another setup ({found['model']}, {found['dataset']['label']}, "
                    f"{found.get('mapping')}); pass --fresh to start over or --workdir to keep both"
                )
            if kind == "answer":
                rows.append(record["row"])
            elif kind == "ingest":
                ingests[f"{record.get('repeat', 1)}/{record['history']}/{record['config']}"] = record["stats"]
            elif kind == "wall":
                wall += record["wall_s"]
        return rows, ingests, wall

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())


async def arun(
    *,
    setup: RunSetup,
    workdir: Path,
    out: Path,
    judge: Any | None = None,
    fresh: bool = False,
    keep_workdir: bool = False,
    limit: int | None = None,
    parallel: int = 1,
    repeats: int = 1,
    progress: Callable[[Progress], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the benchmark; returns the report (also written to ``out``.md/.json).

    ``limit`` stops after that many newly answered questions (the run can be resumed).
    ``parallel`` runs that many (history, configuration) pairs at once, each reading its history
    in and then asking its questions in order: for endpoints that serve several requests at once.
    ``repeats`` runs everything that many times (repeat 1, 2, ...).
    """
    if parallel < 1 or repeats < 1:
        raise ValueError("parallel and repeats must be at least 1")
    if fresh and workdir.exists():
        shutil.rmtree(workdir)
    run = _Run(setup=setup, workdir=workdir, out=out, judge=judge, limit=limit, repeats=repeats, progress=progress)
    gate = asyncio.Semaphore(parallel)

    async def one(repeat: int, config: EvalConfig, history: History) -> None:
        async with gate:
            await run.pair(repeat, config, history)

    started = time.perf_counter()
    try:
        for repeat in range(1, repeats + 1):
            async with asyncio.TaskGroup() as group:  # a failure in one pair cancels the others
                for config in setup.configs:
                    for history in setup.dataset.histories:
                        group.create_task(one(repeat, config, history))
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None  # the first failure; the others are its cancellations
    finally:
        spent = time.perf_counter() - started
        run.wall += spent
        run.log.append({"type": "wall", "wall_s": round(spent, 3)})
        report = run.write()
    if report["complete"] and not keep_workdir:
        for repeat in range(1, repeats + 1):
            shutil.rmtree(workdir / f"r{repeat}", ignore_errors=True)
    return report


class _Run:
    """The state of one run: the answer log, the rows so far, what is left to do."""

    def __init__(self, *, setup: RunSetup, workdir: Path, out: Path, judge: Any, limit: int | None, repeats: int,
                 progress: Any) -> None:
        self.setup, self.workdir, self.out, self.judge = setup, workdir, out, judge
        self.limit, self.repeats, self.progress = limit, repeats, progress
        self.described = setup.describe()
        self.log = AnswerLog(workdir / ANSWERS)
        self.rows, self.ingests, self.wall = self.log.load(self.described)
        if not self.log.path.exists():
            self.log.append({"type": "setup", "setup": self.described})
        self.done = {(r.get("repeat", 1), r["config"], r["question"]) for r in self.rows}
        self.total = len(setup.configs) * len(setup.dataset.questions) * repeats
        self.started = 0  # questions started in this invocation (``limit`` counts these)
        self.written = 0.0  # when the report was last written (time.monotonic)

    def write(self) -> dict[str, Any]:
        self.written = time.monotonic()
        complete = len({(r.get("repeat", 1), r["config"], r["question"]) for r in self.rows}) >= self.total
        return write_report(
            out=self.out, setup=self.described, rows=self.rows, ingests=self.ingests, complete=complete,
            repeats=self.repeats, wall_s=self.wall,
        )

    def _may_start(self) -> bool:
        if self.limit is not None and self.started >= self.limit:
            return False
        self.started += 1
        return True

    def _record(self, row: dict[str, Any], question: Question | None = None) -> None:
        self.log.append({"type": "answer", "row": row})
        self.rows.append(row)
        if time.monotonic() - self.written >= REPORT_EVERY:
            self.write()
        if self.progress and question is not None:
            self.progress(Progress(len(self.rows), self.total, row["config"], question, row))

    async def pair(self, repeat: int, config: EvalConfig, history: History) -> None:
        setup = self.setup
        pending = [q for q in history.questions if (repeat, config.name, q.id) not in self.done]
        if not pending or (self.limit is not None and self.started >= self.limit):
            return
        if not config.cleanup:
            needed = history_tokens(history) + REPLY_RESERVE
            if needed > setup.budget.context_window:
                reason = (
                    f"the history ({needed} tokens with the reply reserve) does not fit the "
                    f"{setup.budget.context_window}-token window"
                )
                for question in pending:
                    self._record(_skipped(question, config, repeat, reason), question)
                return
        snapshot = self.workdir / f"r{repeat}" / "ingested" / history.id / config.name
        if not (snapshot / READY_MARK).exists():
            if snapshot.exists():
                shutil.rmtree(snapshot)  # a read-in cut short: start it again
            if self.progress:
                self.progress(Progress(len(self.rows), self.total, config.name, None, None, phase="ingest"))
            stats = await ingest(history=history, config=config, setup=setup, workspace=snapshot)
            (snapshot / READY_MARK).write_text(json.dumps(stats), encoding="utf-8")
            record = {"type": "ingest", "repeat": repeat, "history": history.id, "config": config.name, "stats": stats}
            self.log.append(record)
            self.ingests[f"{repeat}/{history.id}/{config.name}"] = stats
        scratch = self.workdir / f"r{repeat}" / "scratch" / history.id / config.name
        for question in pending:
            if not self._may_start():
                return
            row = await ask(
                question=question, history=history, config=config, setup=setup, snapshot=snapshot, scratch=scratch
            )
            row["repeat"] = repeat
            if self.judge is not None and row["error"] is None:
                try:
                    verdict = await ajudge(model=self.judge, kind=setup.dataset.kind, question=question, answer=row["answer"])
                except TRANSIENT as exc:
                    raise EndpointFailed(f"the judge's endpoint failed on {question.id}: {exc}") from exc
                except ModelError as exc:  # e.g. the judge model refused: no verdict, the run goes on
                    verdict = Verdict(None, f"the judge failed: {exc}")
                row["judge"], row["judge_raw"] = verdict.correct, verdict.raw[:200]
            self._record(row, question)


def _skipped(question: Question, config: EvalConfig, repeat: int, reason: str) -> dict[str, Any]:
    return {
        "config": config.name,
        "question": question.id,
        "history": question.history,
        "category": question.category,
        "text": question.text,
        "expected": question.answer,
        "stale": question.stale,
        "repeat": repeat,
        "skipped": reason,
    }
