"""Fixtures for the scale-out tests: a database several real processes share, and those processes.

``shared`` is parametrized over the databases a deployment can use: ``sqlite`` (the test
database file, WAL) and ``postgres`` (the ``pg`` alias: a real server, when
MODEX_TEST_POSTGRES_URL is set; skipped otherwise). Its data is committed for real
(``transaction=True``) so that worker processes see it, and the test process reads the outcome
through the same SQL adapters (``shared.bundle``) and the same workspace (pruned catalogs).

Workers are ``python -m tests.scaleout.worker`` processes (see that module) with the production
settings module and DATABASE_URL set to the shared database. Every wait is bounded; every
process a test starts is killed at its end.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connections

from memory.compression.pruned import PrunedCatalog
from memory.stores.base import MemoryStoreBundle
from memory.stores.registry import open_bundle
from tests.conftest import POSTGRES_ALIAS, POSTGRES_SKIP, postgres_configured

REPO = Path(__file__).resolve().parents[2]
SECRET = "modex-scaleout-test-secret-key-not-for-production-0123456789"
REDIS_SKIP = "MODEX_TEST_REDIS_URL is not set: no Redis server to run against (.ci/run starts one)"

#: The declaration every worker boots: an agent with long-term memory, the experience
#: supplement, a tiny compression threshold (cleanups happen within a few turns), a subagent.
BOT_YML = """\
persistence:
  backend: sqlite
model:
  provider: offline
  name: modex-offline
  context_window: 4096
agents:
  default:
    description: Scale-out test agent.
    instructions: You are the scale-out test agent.
    tools: [todo, pruned_lookup, subagent]
    tool_supplements: [experience]
    memory:
      archive_enabled: true
      core_enabled: true
      compression_threshold: 700
      keep_tokens: 250
    subagents:
      helper:
        description: Does one sub-task.
        instructions: You are the helper.
        tools: []
"""

DATABASES = [
    pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True)),
    pytest.param(
        "postgres",
        marks=[pytest.mark.django_db(transaction=True, databases=["default", POSTGRES_ALIAS])]
        if postgres_configured()
        else [pytest.mark.skip(reason=POSTGRES_SKIP)],
    ),
]


def database_url(alias: str) -> str:
    """DATABASE_URL for the test database behind ``alias`` (already set up by pytest-django)."""
    config = connections[alias].settings_dict
    if config["ENGINE"].endswith("sqlite3"):
        return "sqlite:///" + str(Path(config["NAME"]).resolve())
    credentials = quote(config["USER"] or "", safe="")
    if config["PASSWORD"]:
        credentials += ":" + quote(config["PASSWORD"], safe="")
    host = config["HOST"] or "127.0.0.1"
    port = f":{config['PORT']}" if config["PORT"] else ""
    return f"postgres://{credentials}{'@' if credentials else ''}{host}{port}/{quote(config['NAME'], safe='')}"


def child_environment(**extra: str) -> dict[str, str]:
    """The environment of a process started by a test: production settings, nothing inherited
    from the test process's own Django configuration."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "MODEX_", "OPENAI_")) and k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="modex_web.settings",
        DJANGO_SECRET_KEY=SECRET,
        DJANGO_SECURE="false",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        MODEX_PERSISTENCE_BACKEND="sqlite",
        MODEX_TASKS_BACKEND="dummy",
        MODEX_LOG_LEVEL="WARNING",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class Worker:
    """A started process whose stdout is read line by line (JSON markers) in a thread."""

    def __init__(self, args: list[str], *, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._stderr = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=self._stderr)
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []  # every line read so far, in order
        self._cursor = 0  # lines before it were passed over by wait_for
        self._ended = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.process.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                self.lines.put({"noise": raw.decode(errors="replace").rstrip()})
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        self._stderr.flush()
        return self.log.read_text(errors="replace")

    def wait_for(self, key: str, value: Any = None, *, timeout: float = 60.0) -> dict[str, Any]:
        """The next line with ``key`` (equal to ``value`` if given) after the last one waited
        for; fails if the process exits first or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            while self._cursor < len(self.seen):
                line = self.seen[self._cursor]
                self._cursor += 1
                if key in line and (value is None or line[key] == value):
                    return line
            if self._ended:
                self.process.wait(timeout=10)
                raise AssertionError(f"worker {self.pid} exited ({self.process.returncode}) before {key}={value!r}; "
                                     f"saw {self.seen[-5:]}; stderr: {self.stderr()[-3000:]}")
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"worker {self.pid}: no {key}={value!r} within {timeout} s; "
                                     f"saw {self.seen[-5:]}; stderr: {self.stderr()[-2000:]}") from None
            if line is None:
                self._ended = True
            else:
                self.seen.append(line)

    def result(self, *, timeout: float = 120.0) -> dict[str, Any]:
        """The ``done`` line, once the process has exited with status 0."""
        line = self.wait_for("done", timeout=timeout)
        assert self.process.wait(timeout=30) == 0, self.stderr()[-3000:]
        return line

    def markers(self, key: str = "at", value: Any = None) -> list[dict[str, Any]]:
        """Every line seen so far (and any still queued) with ``key`` (= ``value``)."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                self._ended = True
            else:
                self.seen.append(line)
        return [line for line in self.seen if key in line and (value is None or line[key] == value)]

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to tidy anything up."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill()
        self._stderr.close()


@dataclass
class Shared:
    """One database and one workspace that the test and its worker processes share."""

    backend: str
    alias: str
    workspace: Path
    scopes_file: Path
    logs: Path
    env: dict[str, str] = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)

    @property
    def bundle(self) -> MemoryStoreBundle:
        return open_bundle("sqlite", root=self.workspace / "memory", using=self.alias)

    @property
    def catalog(self) -> PrunedCatalog:
        return PrunedCatalog(self.workspace / "pruned")

    def child_env(self, **extra: str) -> dict[str, str]:
        return child_environment(
            DATABASE_URL=database_url(self.alias),
            MODEX_WORKSPACE=str(self.workspace),
            MODEX_SCOPES_FILE=str(self.scopes_file),
            **{**self.env, **extra},
        )

    def spawn(self, job: str, args: dict[str, Any] | None = None, **env: str) -> Worker:
        """Start ``python -m tests.scaleout.worker job args``."""
        log = self.logs / f"{job}-{len(self.workers)}.log"
        worker = Worker([sys.executable, "-m", "tests.scaleout.worker", job, json.dumps(args or {})],
                        env=self.child_env(**env), log=log)
        self.workers.append(worker)
        return worker

    def start_together(self, workers: list[Worker], go: Path, *, timeout: float = 90.0) -> None:
        """Wait until every worker is ready (booted, waiting for ``go``), then release them at once."""
        for worker in workers:
            worker.wait_for("at", "ready", timeout=timeout)
        go.touch()


@pytest.fixture(params=DATABASES)
def shared(request: pytest.FixtureRequest, tmp_path: Path):
    alias = POSTGRES_ALIAS if request.param == "postgres" else "default"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    scopes = tmp_path / "bot.yml"
    scopes.write_text(BOT_YML)
    logs = tmp_path / "logs"
    logs.mkdir()
    state = Shared(backend=request.param, alias=alias, workspace=workspace, scopes_file=scopes, logs=logs)
    yield state
    for worker in state.workers:
        worker.stop()


@pytest.fixture
def redis_url() -> str:
    """A real Redis server's URL (MODEX_TEST_REDIS_URL), or the test is skipped."""
    url = settings.MODEX_TEST_REDIS_URL
    if not url:
        pytest.skip(REDIS_SKIP)
    return url
