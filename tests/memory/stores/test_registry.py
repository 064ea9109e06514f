"""memory.stores.registry: backend names to bundles."""

from __future__ import annotations

from importlib import import_module

import pytest

from memory.scopes import SessionScope
from memory.stores.base import MemoryStoreBundle, StoreError
from memory.stores.registry import BACKENDS, UnknownBackend, open_bundle

from .helpers import user


def test_known_backends():
    assert set(BACKENDS) == {"file", "sqlite"}
    for module in BACKENDS.values():
        assert callable(import_module(module).open_bundle)


@pytest.mark.parametrize("name", ["postgres", "", "FILE", "Sqlite", None, 3])
def test_unknown_backend_names_the_valid_ones(name):
    with pytest.raises(UnknownBackend) as caught:
        open_bundle(name)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, StoreError)
    assert "file" in str(caught.value) and "sqlite" in str(caught.value)


def test_file_backend_defaults_to_the_workspace(workspace):
    bundle = open_bundle("file")
    assert isinstance(bundle, MemoryStoreBundle) and bundle.backend == "file"
    bundle.messages.append(SessionScope("x"), [user()])
    assert (workspace / "memory" / "session" / "x" / "messages" / "head.1.json").is_file()


def test_file_backend_takes_a_root(tmp_path):
    open_bundle("file", root=tmp_path / "elsewhere").kv.put(SessionScope("x"), "k", "v")
    assert (tmp_path / "elsewhere" / "session" / "x" / "kv" / "k").read_text() == "v"


@pytest.mark.django_db
def test_sqlite_backend_uses_the_alias():
    bundle = open_bundle("sqlite", using="default")
    assert bundle.backend == "sqlite" and bundle.messages.using == "default"
    bundle.messages.append(SessionScope("x"), [user("db")])
    assert [m.content for m in bundle.messages.read(SessionScope("x"))] == ["db"]
