"""A background task whose worker is SIGKILLed mid-task is run again, once, and changes nothing twice.

The real task worker (``manage.py db_worker``) runs a queued consolidation in a child process; its
model is gated, so the worker is certainly halfway through (the consolidation lease taken, the
model called) when the test SIGKILLs it. The task is left RUNNING. The reaper
(agents/task_reaper.py) queues it again once the dead worker's lease has run out; a second worker
finishes it; the core memory is written once. A consolidation queued again finds nothing to do.
A task whose worker died on both runs is marked failed and not run a third time.
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.tasks import TaskResultStatus, task_backends
from django.utils import timezone

from agents.runtime.tools.history_tools import archive_scope_for
from agents.task_reaper import MAX_RUNS, reap_stale_tasks
from memory.config import MemoryConfig
from memory.core_memory import CORE_FILES, CoreMemory
from memory.dream import DREAM_CONSUMER
from memory.messages import Message
from memory.stores.base import ArchiveDocument

LEASE_TTL = 2.0  # the children's MODEX_TASK_LEASE_TTL: short, so the dead worker's lease runs out soon


@pytest.fixture
def db_tasks():
    """Tasks queued by this process go to the database queue (the test settings record them only)."""
    from django_tasks_db.backend import DatabaseBackend

    original = task_backends["default"]
    task_backends["default"] = DatabaseBackend("default", {"BACKEND": "django_tasks_db.DatabaseBackend",
                                                           "QUEUES": settings.TASK_QUEUES})
    yield
    task_backends["default"] = original


def dream_writes(core: CoreMemory) -> dict[str, list]:
    return {file: [c for c in core.history(file=file) if c.source == "dream"] for file in CORE_FILES}


@pytest.mark.slow
def test_a_consolidation_whose_worker_was_killed_is_run_again_once(shared, tmp_path, db_tasks):
    if shared.backend != "sqlite":
        pytest.skip("the task queue lives in the default (SQLite) database")
    from django_tasks_db.models import DBTaskResult

    from agents.tasks import enqueue_consolidation

    scope = archive_scope_for(agent="default", user_id="7")
    bundle = shared.bundle
    docs = [bundle.archive.put(scope, ArchiveDocument(session="session:lt", title="facts", summary=text,
                                                      messages=(Message(role="user", content=text),)))
            for text in ("My name is Sam and I live in Lisbon.", "I prefer green tea in the morning.")]
    queued = enqueue_consolidation(agent="default", user="7")
    env = {"MODEX_TASKS_BACKEND": "db", "MODEX_TASK_LEASE_TTL": str(LEASE_TTL)}

    first = shared.spawn("db_worker", {"gate": str(tmp_path / "never")}, **env)
    first.wait_for("at", "in_model", timeout=120)
    first.kill()
    row = DBTaskResult.objects.get(id=queued.id)
    assert row.status == TaskResultStatus.RUNNING and len(row.worker_ids) == 1
    assert reap_stale_tasks(stale_after=3600).requeued == ()  # not stale yet: left alone

    time.sleep(LEASE_TTL + 0.5)  # the dead worker's consolidation lease runs out
    reaped = reap_stale_tasks(stale_after=0)
    assert reaped.requeued == (str(queued.id),) and reaped.failed == ()
    assert DBTaskResult.objects.get(id=queued.id).status == TaskResultStatus.READY
    assert reap_stale_tasks(stale_after=0).requeued == ()  # queued once, not twice

    second = shared.spawn("db_worker", {}, **env)
    assert second.result(timeout=180)["done"] == "drained", second.stderr
    row = DBTaskResult.objects.get(id=queued.id)
    assert row.status == TaskResultStatus.SUCCESSFUL, row.traceback
    assert row.return_value["status"] == "consolidated" and len(row.worker_ids) == 2
    assert bundle.cursors.get(scope, DREAM_CONSUMER) == docs[-1].seq

    core = CoreMemory(kv=bundle.kv, config=MemoryConfig(archive_enabled=True, core_enabled=True),
                      agent="default", user="7")
    writes = dream_writes(core)
    assert any(writes.values()) and all(len(w) <= 1 for w in writes.values()), writes
    assert "Sam" in core.read(file="USER.md").text

    # Run again: nothing new to consolidate, nothing written twice.
    again = enqueue_consolidation(agent="default", user="7")
    assert shared.spawn("db_worker", {}, **env).result(timeout=180)["done"] == "drained"
    assert DBTaskResult.objects.get(id=again.id).return_value["status"] == "up_to_date"
    assert dream_writes(core) == writes
    assert reap_stale_tasks(stale_after=0) == type(reaped)()


@pytest.mark.django_db(transaction=True)
def test_a_task_whose_worker_died_on_every_run_is_failed_not_run_a_third_time():
    from django_tasks_db.models import DBTaskResult

    started = timezone.now() - timezone.timedelta(hours=1)
    row = DBTaskResult.objects.create(
        status=TaskResultStatus.RUNNING, started_at=started, worker_ids=[f"w{i}" for i in range(MAX_RUNS)],
        task_path="agents.tasks.consolidate_core_memory", args_kwargs={"args": [], "kwargs": {}},
        queue_name="default", backend_name="default",
    )
    reaped = reap_stale_tasks(stale_after=60)
    assert reaped.failed == (str(row.pk),) and reaped.requeued == ()
    row.refresh_from_db()
    assert row.status == TaskResultStatus.FAILED and row.finished_at is not None
    assert row.exception_class_path == "agents.task_reaper.WorkerDied" and "not run again" in row.traceback
    assert reap_stale_tasks(stale_after=0).failed == ()


def test_a_negative_stale_after_is_refused():
    with pytest.raises(ValueError, match="at least 0"):
        reap_stale_tasks(stale_after=-1)


@pytest.mark.django_db(transaction=True)
def test_the_reap_tasks_command_reports_what_it_requeued_and_refuses_bad_options():
    import io

    from django.core.management import CommandError, call_command
    from django_tasks_db.models import DBTaskResult

    row = DBTaskResult.objects.create(
        status=TaskResultStatus.RUNNING, started_at=timezone.now() - timezone.timedelta(hours=1), worker_ids=["w0"],
        task_path="agents.tasks.consolidate_core_memory", args_kwargs={"args": [], "kwargs": {}},
        queue_name="default", backend_name="default",
    )
    out = io.StringIO()
    call_command("reap_tasks", "--stale-after", "60", stdout=out)
    assert out.getvalue() == f"requeued {row.pk}\n"
    assert DBTaskResult.objects.get(pk=row.pk).status == TaskResultStatus.READY
    with pytest.raises(CommandError, match="--every"):
        call_command("reap_tasks", "--every", "0")
