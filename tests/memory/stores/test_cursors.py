"""CursorStore conformance. Runs against every backend."""

from __future__ import annotations

import pytest

from memory.scopes import AgentScope, CompositeScope, UserScope
from memory.stores.base import ConcurrentChange, InvalidKey

SCOPE = CompositeScope(AgentScope("default"), UserScope("42"))


def test_unset_cursor(bundle):
    assert bundle.cursors.get(SCOPE, "dream") is None
    assert bundle.cursors.list(SCOPE) == {}


def test_set_get_overwrite(bundle):
    bundle.cursors.set(SCOPE, "dream", 3)
    assert bundle.cursors.get(SCOPE, "dream") == 3
    bundle.cursors.set(SCOPE, "dream", 1)  # unconditional: may move back (a full re-run)
    assert bundle.cursors.get(SCOPE, "dream") == 1
    bundle.cursors.set(SCOPE, "dream", 0)
    assert bundle.cursors.get(SCOPE, "dream") == 0


def test_expected_position(bundle):
    bundle.cursors.set(SCOPE, "dream", 5, expected=None)
    with pytest.raises(ConcurrentChange):
        bundle.cursors.set(SCOPE, "dream", 6, expected=None)
    with pytest.raises(ConcurrentChange):
        bundle.cursors.set(SCOPE, "dream", 9, expected=4)
    assert bundle.cursors.get(SCOPE, "dream") == 5
    bundle.cursors.set(SCOPE, "dream", 9, expected=5)
    assert bundle.cursors.get(SCOPE, "dream") == 9


def test_expected_on_an_unset_cursor(bundle):
    with pytest.raises(ConcurrentChange):
        bundle.cursors.set(SCOPE, "dream", 1, expected=0)
    assert bundle.cursors.get(SCOPE, "dream") is None


def test_list_all_consumers(bundle):
    bundle.cursors.set(SCOPE, "dream", 4)
    bundle.cursors.set(SCOPE, "audit", 7)
    bundle.cursors.set(UserScope("42"), "dream", 1)
    assert bundle.cursors.list(SCOPE) == {"audit": 7, "dream": 4}
    assert bundle.cursors.list(UserScope("42")) == {"dream": 1}


@pytest.mark.parametrize("position", [-1, "3", 1.5, None, True])
def test_bad_positions(bundle, position):
    with pytest.raises((TypeError, ValueError)):
        bundle.cursors.set(SCOPE, "dream", position)
    assert bundle.cursors.get(SCOPE, "dream") is None


@pytest.mark.parametrize("name", ["../dream", "a/b", "", "x" * 200, ".lock"])
def test_bad_consumer_names(bundle, name):
    with pytest.raises(InvalidKey):
        bundle.cursors.set(SCOPE, name, 1)
    with pytest.raises(InvalidKey):
        bundle.cursors.get(SCOPE, name)
