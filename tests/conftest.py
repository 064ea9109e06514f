"""Fixtures every test package can use: store bundles per backend, the user cast, a workspace.

``bundle`` is parametrized over every backend in memory.stores.registry.BACKENDS, so a test
that takes it runs once per backend and must not know which one it has. SQL bundles run inside
the test's transaction (``django_db``); ``threaded_bundle`` commits for real
(``django_db(transaction=True)``), for tests whose threads open their own connections.

The database marks ride on the parameters: pytest-django sets up the test database only for
tests it can see need it, and a ``getfixturevalue("db")`` inside a fixture is not seen.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.stores.base import MemoryStoreBundle
from memory.stores.registry import BACKENDS, open_bundle

BACKEND_NAMES = tuple(BACKENDS)
#: Backends that keep their data in the Django database (the rest keep it under ``root``).
SQL_BACKENDS = frozenset({"sqlite"})


def _params(*, transactional: bool) -> list:
    mark = pytest.mark.django_db(transaction=transactional)
    return [pytest.param(name, marks=mark) if name in SQL_BACKENDS else name for name in BACKEND_NAMES]


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """Where file-backed bundles keep their data (nothing else writes here)."""
    return tmp_path / "memory"


@pytest.fixture(params=_params(transactional=False))
def bundle(request: pytest.FixtureRequest, store_root: Path) -> MemoryStoreBundle:
    """A fresh, empty MemoryStoreBundle of each backend in turn."""
    return open_bundle(request.param, root=store_root)


@pytest.fixture(params=_params(transactional=True))
def threaded_bundle(request: pytest.FixtureRequest, store_root: Path) -> MemoryStoreBundle:
    """Like ``bundle``, with data committed for real so other threads' connections see it."""
    return open_bundle(request.param, root=store_root)


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
