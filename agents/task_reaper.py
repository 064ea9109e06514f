"""Re-running background tasks whose worker died (django-tasks-db has no such mechanism).

``manage.py db_worker`` marks a task RUNNING when it claims it and SUCCESSFUL or FAILED when it
ends. A worker killed in between (SIGKILL, OOM, a lost host) leaves the task RUNNING for good:
the experience review of that run is lost, a consolidation waits for the next trigger.

``reap_stale_tasks`` finds tasks RUNNING for longer than ``stale_after`` seconds (by default
``MODEX_TASK_STALE_AFTER``: one and a half times the tasks' lease ttl, so the dead worker's
consolidation or review lease has run out and the re-run is not BUSY) and puts each back in the
queue once: a task claimed once is made READY again; a task whose second run died too is marked
FAILED, saying so, and never run a third time. Each reset is one conditional update (status and
start time as read), so a worker finishing the task meanwhile, or another reaper, wins cleanly.

A re-run changes nothing twice: the Dream Engine's cursor compare-and-set and lease make a
repeated consolidation apply each archive document once, and a review is recorded per run and
never written twice. A worker that was only slow (not dead) may still finish after the reset;
the same guards make the two runs safe.

``manage.py reap_tasks`` runs it once, or every ``--every`` seconds (``make run`` and ``make
serve`` start it beside the task worker).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.tasks import TaskResultStatus
from django.utils import timezone

logger = logging.getLogger("agents.task_reaper")

#: Runs a task may have in all: the first, and one re-run after its worker died.
MAX_RUNS = 2


@dataclass(frozen=True, slots=True)
class Reaped:
    """What one reaping pass did: ids put back in the queue, ids given up on."""

    requeued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


def reap_stale_tasks(*, stale_after: float | None = None, now: datetime | None = None) -> Reaped:
    """Requeue (once) or fail tasks left RUNNING by a dead worker; see the module docstring."""
    from django_tasks_db.models import DBTaskResult

    if stale_after is None:
        stale_after = float(settings.MODEX_TASK_STALE_AFTER)
    if stale_after < 0:
        raise ValueError(f"stale_after must be at least 0 seconds, got {stale_after}")
    cutoff = (now or timezone.now()) - timedelta(seconds=stale_after)
    requeued: list[str] = []
    failed: list[str] = []
    stale = DBTaskResult.objects.filter(status=TaskResultStatus.RUNNING, started_at__lte=cutoff)
    for row in stale.only("id", "started_at", "worker_ids", "task_path"):
        same = DBTaskResult.objects.filter(pk=row.pk, status=TaskResultStatus.RUNNING, started_at=row.started_at)
        runs = len(row.worker_ids or [])
        if runs < MAX_RUNS:
            changed = same.update(status=TaskResultStatus.READY, started_at=None)
        else:
            changed = same.update(
                status=TaskResultStatus.FAILED,
                finished_at=timezone.now(),
                exception_class_path="agents.task_reaper.WorkerDied",
                traceback=(
                    f"the worker running this task died {runs} times (workers {', '.join(row.worker_ids)}); "
                    "it is not run again. Enqueue it anew once the cause is fixed."
                ),
            )
        if not changed:
            continue  # finished or reaped by someone else meanwhile
        if runs < MAX_RUNS:
            logger.warning("task %s (%s) was left running by a dead worker; queued again", row.pk, row.task_path)
            requeued.append(str(row.pk))
        else:
            logger.error("task %s (%s) lost its worker %d times; marked failed", row.pk, row.task_path, runs)
            failed.append(str(row.pk))
    return Reaped(requeued=tuple(requeued), failed=tuple(failed))


class WorkerDied(Exception):
    """The exception a reaped task is failed with (its worker died on every run)."""
