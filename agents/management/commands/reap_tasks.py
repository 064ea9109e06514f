"""manage.py reap_tasks: queue again (once) the background tasks a dead worker left running."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agents.task_reaper import reap_stale_tasks


class Command(BaseCommand):
    help = (
        "Tasks left RUNNING longer than --stale-after seconds (their worker died) are queued again, "
        "once; a task whose worker died twice is marked failed. See agents/task_reaper.py."
    )

    def add_arguments(self, parser):
        parser.add_argument("--stale-after", type=float, default=None,
                            help="seconds a task may run (default MODEX_TASK_STALE_AFTER)")
        parser.add_argument("--every", type=float, default=None,
                            help="keep running, reaping every this many seconds (default: once, then exit)")

    def handle(self, *args, stale_after=None, every=None, **options):
        if stale_after is not None and stale_after < 0:
            raise CommandError("--stale-after must be at least 0 seconds")
        if every is not None and every <= 0:
            raise CommandError("--every must be more than 0 seconds")
        limit = float(settings.MODEX_TASK_STALE_AFTER) if stale_after is None else stale_after
        while True:
            reaped = reap_stale_tasks(stale_after=limit)
            for task_id in reaped.requeued:
                self.stdout.write(f"requeued {task_id}")
            for task_id in reaped.failed:
                self.stdout.write(f"failed {task_id}")
            self.stdout.flush()
            if every is None:
                return
            time.sleep(every)
