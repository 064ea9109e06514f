"""Settings for the test suite: the real settings, on a throwaway workspace.

With MODEX_TEST_POSTGRES_URL set (``postgres://user@host:port/db``, as .ci/run exports), a
second database alias ``pg`` points at that server: the store fixtures add a ``postgres``
backend on it and the scale-out tests share it between processes. pytest-django creates its
test database only when a test asks for it.
"""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("DJANGO_SECRET_KEY", "modex-test-secret-key-not-for-production-use-000")
os.environ.setdefault("MODEX_WORKSPACE", tempfile.mkdtemp(prefix="modex-test-ws-"))
# The test client speaks plain HTTP: without this, DEBUG off would redirect every request to
# HTTPS. Production's secure defaults are tested in a subprocess (tests/web/test_deploy.py).
os.environ.setdefault("DJANGO_SECURE", "false")

from modex_web.env import database_config  # noqa: E402
from modex_web.settings import *  # noqa: E402,F401,F403
from modex_web.settings import DATABASES, MODEX_WORKSPACE, STATIC_ROOT, TASK_QUEUES  # noqa: E402

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# Background tasks are recorded, not run, so no test depends on a worker's timing; tests of
# background work run them deterministically with agents.tasks.arun_recorded_tasks().
TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend", "QUEUES": TASK_QUEUES}}
MODEX_TASKS_BACKEND = "dummy"

Path(STATIC_ROOT).mkdir(parents=True, exist_ok=True)  # WhiteNoise warns about a missing one

MODEX_TEST_POSTGRES_URL = os.environ.get("MODEX_TEST_POSTGRES_URL", "").strip() or None
MODEX_TEST_REDIS_URL = os.environ.get("MODEX_TEST_REDIS_URL", "").strip() or None
if MODEX_TEST_POSTGRES_URL:
    DATABASES = {**DATABASES, "pg": database_config(url=MODEX_TEST_POSTGRES_URL, workspace=MODEX_WORKSPACE)}
    # Tests open and close connections from many threads; a pooled, long-lived one would
    # outlive the flush between transactional tests.
    DATABASES["pg"]["CONN_MAX_AGE"] = 0
