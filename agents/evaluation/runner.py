"""Running the recall benchmark (``arun``): every (user, configuration) pair through the
pipeline (``agents.evaluation.pipeline``), resumable.

Results are appended to ``answers.jsonl`` in the run directory as each question finishes, and
the markdown and JSON tables are rewritten after each one; an interrupted run resumes from
there (the ingested workspaces are kept until the run completes). When full context does not
fit the window, its questions are recorded as skipped, not as wrong. An endpoint outage
(``EndpointFailed``) stops the run without recording the failed answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.evaluation.configs import TRANSIENT, EvalConfig
from agents.evaluation.dataset import Question, UserHistory
from agents.evaluation.pipeline import REPLY_RESERVE, EndpointFailed, RunSetup, ask, history_tokens, ingest
from agents.evaluation.report import write_report
from agents.evaluation.scoring import Verdict, ajudge
from agents.llm import ModelError

__all__ = ["EndpointFailed", "EvalSetupMismatch", "Progress", "RunSetup", "arun"]

READY_MARK = "ingested.json"
ANSWERS = "answers.jsonl"


class EvalSetupMismatch(Exception):
    """The run directory holds results of another setup (dataset, model, budget)."""


@dataclass
class Progress:
    done: int
    total: int
    config: str
    question: Question | None
    row: dict[str, Any] | None
    phase: str = "answer"  # "ingest" while a history is read in, "answer" after a question


# -- the run -------------------------------------------------------------------------------------


class AnswerLog:
    """``answers.jsonl``: a header line naming the setup, then one line per finished question."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self, setup: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """Rows and ingest stats written so far; raises EvalSetupMismatch for another setup."""
        if not self.path.exists():
            return [], {}
        rows, ingests = [], {}
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            # A line cut off by the interruption: drop it (that question runs again), so the
            # next record starts on a line of its own.
            raw = raw[: raw.rfind(b"\n") + 1]
            with self.path.open("r+b") as f:
                f.truncate(len(raw))
        for line in raw.decode("utf-8").splitlines():
            record = json.loads(line)
            if record.get("type") == "setup" and record["setup"] != setup:
                raise EvalSetupMismatch(
                    f"{self.path} holds results of another setup ({record['setup']['model']}, "
                    f"{record['setup']['dataset']['size']}); pass --fresh to start over or --workdir to keep both"
                )
            if record.get("type") == "answer":
                rows.append(record["row"])
            elif record.get("type") == "ingest":
                ingests[f"{record['user']}/{record['config']}"] = record["stats"]
        return rows, ingests

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
    progress: Callable[[Progress], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the benchmark; returns the report (also written to ``out``.md/.json).

    ``limit`` stops after that many newly answered questions (the run can be resumed).
    ``parallel`` runs that many (user, configuration) pairs at once, each reading its history in
    and then asking its questions in order: for endpoints that serve several requests at once.
    """
    if parallel < 1:
        raise ValueError("parallel must be at least 1")
    if fresh and workdir.exists():
        shutil.rmtree(workdir)
    run = _Run(setup=setup, workdir=workdir, out=out, judge=judge, limit=limit, progress=progress)
    gate = asyncio.Semaphore(parallel)

    async def one(config: EvalConfig, history: UserHistory) -> None:
        async with gate:
            await run.pair(config, history)

    try:
        async with asyncio.TaskGroup() as group:  # a failure in one pair cancels the others
            for config in setup.configs:
                for history in setup.dataset.users:
                    group.create_task(one(config, history))
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None  # the first failure; the others are its cancellations
    complete = len({(r["config"], r["question"]) for r in run.rows}) == run.total
    report = write_report(out=out, setup=run.described, rows=run.rows, ingests=run.ingests, complete=complete)
    if complete and not keep_workdir:
        shutil.rmtree(workdir / "ingested", ignore_errors=True)
    return report


class _Run:
    """The state of one run: the answer log, the rows so far, what is left to do."""

    def __init__(self, *, setup: RunSetup, workdir: Path, out: Path, judge: Any, limit: int | None, progress: Any):
        self.setup, self.workdir, self.out, self.judge = setup, workdir, out, judge
        self.limit, self.progress = limit, progress
        self.described = setup.describe()
        self.log = AnswerLog(workdir / ANSWERS)
        self.rows, self.ingests = self.log.load(self.described)
        if not self.log.path.exists():
            self.log.append({"type": "setup", "setup": self.described})
        self.done = {(r["config"], r["question"]) for r in self.rows}
        self.total = len(setup.configs) * len(setup.dataset.questions)
        self.started = 0  # questions started in this run (``limit`` counts these)

    def _may_start(self) -> bool:
        if self.limit is not None and self.started >= self.limit:
            return False
        self.started += 1
        return True

    def _record(self, row: dict[str, Any], question: Question | None = None) -> None:
        self.log.append({"type": "answer", "row": row})
        self.rows.append(row)
        write_report(out=self.out, setup=self.described, rows=self.rows, ingests=self.ingests, complete=False)
        if self.progress and question is not None:
            self.progress(Progress(len(self.rows), self.total, row["config"], question, row))

    async def pair(self, config: EvalConfig, history: UserHistory) -> None:
        setup = self.setup
        pending = [q for q in history.questions if (config.name, q.id) not in self.done]
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
                    self._record(_skipped(question, config, reason), question)
                return
        snapshot = self.workdir / "ingested" / history.user / config.name
        if not (snapshot / READY_MARK).exists():
            if snapshot.exists():
                shutil.rmtree(snapshot)  # an ingest cut short: start it again
            if self.progress:
                self.progress(Progress(len(self.rows), self.total, config.name, None, None, phase="ingest"))
            stats = await ingest(history=history, config=config, setup=setup, workspace=snapshot)
            (snapshot / READY_MARK).write_text(json.dumps(stats), encoding="utf-8")
            self.log.append({"type": "ingest", "user": history.user, "config": config.name, "stats": stats})
            self.ingests[f"{history.user}/{config.name}"] = stats
        scratch = self.workdir / "scratch" / history.user / config.name
        for question in pending:
            if not self._may_start():
                return
            row = await ask(question=question, config=config, setup=setup, snapshot=snapshot, scratch=scratch)
            if self.judge is not None and row["error"] is None:
                try:
                    verdict = await ajudge(model=self.judge, question=question, answer=row["answer"])
                except TRANSIENT as exc:
                    raise EndpointFailed(f"the judge's endpoint failed on {question.id}: {exc}") from exc
                except ModelError as exc:  # e.g. the judge model refused: no verdict, the run goes on
                    verdict = Verdict(None, f"the judge failed: {exc}")
                row["judge_correct"], row["judge_raw"] = verdict.correct, verdict.raw[:200]
            self._record(row, question)


def _skipped(question: Question, config: EvalConfig, reason: str) -> dict[str, Any]:
    return {
        "config": config.name,
        "question": question.id,
        "user": question.user,
        "kind": question.kind,
        "text": question.text,
        "expected": question.expected,
        "stale": question.stale,
        "skipped": reason,
    }
