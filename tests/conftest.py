"""Fixtures every test package can use: store bundles per backend, the user cast, a workspace.

``bundle`` is parametrized over every backend in memory.stores.registry.BACKENDS, so a test
that takes it runs once per backend and must not know which one it has. SQL bundles run inside
the test's transaction (``django_db``); ``threaded_bundle`` commits for real
(``django_db(transaction=True)``), for tests whose threads open their own connections.

One more parameter, ``postgres``, runs the SQL adapters on a real PostgreSQL server (the
``pg`` database alias of modex_web/settings_test.py) when MODEX_TEST_POSTGRES_URL is set, as
.ci/run does; without it those cases are deselected, and the summary says so and why.

The database marks ride on the parameters: pytest-django sets up the test database only for
tests it can see need it, and a ``getfixturevalue("db")`` inside a fixture is not seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from asgiref.sync import SyncToAsync
from django.conf import settings
from django.db import connections

from memory.stores.base import MemoryStoreBundle
from memory.threads import close_connections
from memory.stores.registry import BACKENDS, open_bundle

#: The PostgreSQL case: the registry's SQL backend ("sqlite") opened on the ``pg`` alias.
POSTGRES = "postgres"
POSTGRES_ALIAS = "pg"
POSTGRES_SKIP = "MODEX_TEST_POSTGRES_URL is not set: no PostgreSQL server to run against (.ci/run starts one)"
BACKEND_NAMES = (*BACKENDS, POSTGRES)
#: Backends that keep their data in the Django database (the rest keep it under ``root``).
SQL_BACKENDS = frozenset({"sqlite", POSTGRES})
_POSTGRES_DESELECTED = pytest.StashKey[int]()


def postgres_configured() -> bool:
    """Whether settings_test configured the ``pg`` alias (MODEX_TEST_POSTGRES_URL is set)."""
    return POSTGRES_ALIAS in settings.DATABASES


def _params(*, transactional: bool) -> list:
    params = []
    for name in BACKEND_NAMES:
        if name == POSTGRES:
            # Without the alias, no database mark: pytest-django must not try to set it up.
            marks = [pytest.mark.django_db(transaction=transactional, databases=["default", POSTGRES_ALIAS])] if (
                postgres_configured()) else []
            params.append(pytest.param(name, marks=marks))
        elif name in SQL_BACKENDS:
            params.append(pytest.param(name, marks=pytest.mark.django_db(transaction=transactional)))
        else:
            params.append(name)
    return params


def _open(name: str, root: Path) -> Iterator[MemoryStoreBundle]:
    if name != POSTGRES:
        yield open_bundle(name, root=root)
        return
    if not postgres_configured():
        pytest.skip(POSTGRES_SKIP)
    yield open_bundle("sqlite", root=root, using=POSTGRES_ALIAS)
    # Async code reaches the stores through the store threads (memory.threads) and asgiref's
    # thread-sensitive thread (database_sync_to_async), whose connections outlive the test; an
    # open one would keep the test database from being dropped.
    close_connections()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """Where file-backed bundles keep their data (nothing else writes here)."""
    return tmp_path / "memory"


@pytest.fixture(params=_params(transactional=False))
def bundle(request: pytest.FixtureRequest, store_root: Path) -> Iterator[MemoryStoreBundle]:
    """A fresh, empty MemoryStoreBundle of each backend in turn."""
    yield from _open(request.param, store_root)


@pytest.fixture(params=_params(transactional=True))
def threaded_bundle(request: pytest.FixtureRequest, store_root: Path) -> Iterator[MemoryStoreBundle]:
    """Like ``bundle``, with data committed for real so other threads' connections see it."""
    yield from _open(request.param, store_root)


@pytest.fixture
def workspace(tmp_path: Path, settings) -> Path:
    """A private MODEX_WORKSPACE for the test (settings point at it)."""
    path = tmp_path / "workspace"
    path.mkdir()
    settings.MODEX_WORKSPACE = path
    return path


# -- the cast ---------------------------------------------------------------------------------
# An owner (their conversations, their memory), a colleague (a second ordinary user, e.g. in the
# same tenant or chat) and an outsider (no relation to anything: must see nothing).


@pytest.fixture
def owner(db, django_user_model):
    return django_user_model.objects.create_user(username="owner", email="owner@example.test", password="owner-pw-1")


@pytest.fixture
def colleague(db, django_user_model):
    return django_user_model.objects.create_user(
        username="colleague", email="colleague@example.test", password="colleague-pw-1"
    )


@pytest.fixture
def outsider(db, django_user_model):
    return django_user_model.objects.create_user(
        username="outsider", email="outsider@example.test", password="outsider-pw-1"
    )


# -- PostgreSQL cases without a server ---------------------------------------------------------
# Deselected rather than skipped one by one: a skip is reported per test, and a developer
# without PostgreSQL would read two hundred identical lines. The summary says once why.


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if postgres_configured():
        return
    dropped = [item for item in items if POSTGRES in getattr(getattr(item, "callspec", None), "params", {}).values()]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in set(dropped)]
        config.stash[_POSTGRES_DESELECTED] = len(dropped)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    count = config.stash.get(_POSTGRES_DESELECTED, 0)
    if count:
        terminalreporter.write_line(f"{count} PostgreSQL cases deselected: {POSTGRES_SKIP}", yellow=True)


@pytest.fixture
def fake_openai():
    """The project's fake OpenAI-compatible server (tests/fakes/openai_server.py), over real HTTP."""
    from tests.fakes.openai_server import start_fake_server

    server = start_fake_server()
    yield server
    server.stop()
