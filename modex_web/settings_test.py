"""Settings for the test suite: the real settings, on a throwaway workspace."""

import os
import tempfile

os.environ.setdefault("DJANGO_SECRET_KEY", "modex-test-secret-key-not-for-production-use-000")
os.environ.setdefault("MODEX_WORKSPACE", tempfile.mkdtemp(prefix="modex-test-ws-"))

from modex_web.settings import *  # noqa: E402,F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests

# Background tasks are recorded, not run, so no test depends on a worker's timing; tests of
# background work run them deterministically with agents.tasks.arun_recorded_tasks().
TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
MODEX_TASKS_BACKEND = "dummy"
