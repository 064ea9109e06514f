"""KVStore conformance: versions, compare-and-set, delete, list. Runs against every backend."""

from __future__ import annotations

from datetime import datetime

import pytest

from memory.scopes import AgentScope
from memory.stores.base import MUST_NOT_EXIST, InvalidKey, KVItem, VersionConflict

from .helpers import big_text

A = AgentScope("default")


def test_missing_key(bundle):
    assert bundle.kv.get(A, "SOUL.md") is None
    assert bundle.kv.get_value(A, "SOUL.md") is None
    assert bundle.kv.get_value(A, "SOUL.md", "fallback") == "fallback"
    assert bundle.kv.list(A) == []


def test_put_get_and_versions(bundle):
    first = bundle.kv.put(A, "SOUL.md", "# Soul\nI am helpful.\n")
    assert isinstance(first, KVItem)
    assert (first.scope, first.key, first.value, first.version) == (A, "SOUL.md", "# Soul\nI am helpful.\n", 1)
    assert isinstance(first.updated_at, datetime) and first.updated_at.tzinfo is not None
    assert bundle.kv.get(A, "SOUL.md") == first
    second = bundle.kv.put(A, "SOUL.md", "# Soul\nv2")
    assert second.version == 2 and second.updated_at >= first.updated_at
    assert bundle.kv.get(A, "SOUL.md") == second
    assert bundle.kv.get_value(A, "SOUL.md") == "# Soul\nv2"


@pytest.mark.parametrize(
    "value",
    ["", "\n", "line\r\nwindows\r\n", "tab\tand trailing space ", "unicode é 中 🚀 مرحبا", big_text(200_000),
     "x" * 70_000],
)
def test_values_round_trip_exactly(bundle, value):
    bundle.kv.put(A, "note.txt", value)
    assert bundle.kv.get(A, "note.txt").value == value


@pytest.mark.parametrize(("value", "error"), [
    ("nul\x00byte", ValueError), ("lone \ud800", ValueError), (b"bytes", TypeError), (None, TypeError), (42, TypeError),
])
def test_bad_values_are_rejected(bundle, value, error):
    with pytest.raises(error):
        bundle.kv.put(A, "note.txt", value)
    assert bundle.kv.get(A, "note.txt") is None


def test_compare_and_set(bundle):
    item = bundle.kv.put(A, "MEMORY.md", "facts", expected_version=MUST_NOT_EXIST)
    assert item.version == 1
    item = bundle.kv.put(A, "MEMORY.md", "more facts", expected_version=1)
    assert item.version == 2
    with pytest.raises(VersionConflict) as caught:
        bundle.kv.put(A, "MEMORY.md", "lost update", expected_version=1)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    with pytest.raises(VersionConflict) as caught:
        bundle.kv.put(A, "MEMORY.md", "must not exist", expected_version=MUST_NOT_EXIST)
    assert (caught.value.expected, caught.value.actual) == (0, 2)
    assert bundle.kv.get(A, "MEMORY.md") == item


def test_compare_and_set_on_a_missing_key(bundle):
    with pytest.raises(VersionConflict) as caught:
        bundle.kv.put(A, "USER.md", "x", expected_version=3)
    assert (caught.value.expected, caught.value.actual) == (3, 0)
    assert bundle.kv.get(A, "USER.md") is None


@pytest.mark.parametrize("expected", [-1, "1", 1.0])
def test_bad_expected_version(bundle, expected):
    with pytest.raises((TypeError, ValueError)):
        bundle.kv.put(A, "k", "v", expected_version=expected)
    assert bundle.kv.get(A, "k") is None


def test_delete(bundle):
    assert bundle.kv.delete(A, "todo.json") is False
    bundle.kv.put(A, "todo.json", "[]")
    assert bundle.kv.delete(A, "todo.json") is True
    assert bundle.kv.get(A, "todo.json") is None
    assert bundle.kv.delete(A, "todo.json") is False
    # A key written again after a delete starts over.
    assert bundle.kv.put(A, "todo.json", "[1]").version == 1


def test_delete_with_compare_and_set(bundle):
    bundle.kv.put(A, "todo.json", "[]")
    item = bundle.kv.put(A, "todo.json", "[1]")
    with pytest.raises(VersionConflict) as caught:
        bundle.kv.delete(A, "todo.json", expected_version=1)
    assert caught.value.actual == 2
    assert bundle.kv.get(A, "todo.json") == item
    with pytest.raises(VersionConflict):
        bundle.kv.delete(A, "todo.json", expected_version=MUST_NOT_EXIST)
    assert bundle.kv.delete(A, "todo.json", expected_version=2) is True
    assert bundle.kv.delete(A, "todo.json", expected_version=MUST_NOT_EXIST) is False
    with pytest.raises(VersionConflict):
        bundle.kv.delete(A, "todo.json", expected_version=2)


def test_list_by_prefix_sorted_by_key(bundle):
    for key in ("USER.md", "SOUL.md", "todo.json", "SOUL.md.history", "MEMORY.md", "a-lower"):
        bundle.kv.put(A, key, f"value of {key}")
    assert [i.key for i in bundle.kv.list(A)] == ["MEMORY.md", "SOUL.md", "SOUL.md.history", "USER.md", "a-lower",
                                                   "todo.json"]
    soul = bundle.kv.list(A, prefix="SOUL")
    assert [(i.key, i.value, i.version) for i in soul] == [
        ("SOUL.md", "value of SOUL.md", 1), ("SOUL.md.history", "value of SOUL.md.history", 1)]
    assert bundle.kv.list(A, prefix="soul") == [], "prefixes are case-sensitive"
    assert bundle.kv.list(A, prefix="SOUL.md.") == [bundle.kv.get(A, "SOUL.md.history")]
    assert bundle.kv.list(A, prefix="%") == [] and bundle.kv.list(A, prefix="_") == []
    assert bundle.kv.list(A, prefix="zzz") == []


def test_list_reflects_deletes(bundle):
    bundle.kv.put(A, "a", "1")
    bundle.kv.put(A, "b", "2")
    bundle.kv.delete(A, "a")
    assert [i.key for i in bundle.kv.list(A)] == ["b"]


@pytest.mark.parametrize("key", ["../SOUL.md", "a/b", "", ".hidden", "x" * 129, None, 3])
def test_invalid_keys(bundle, key):
    with pytest.raises(InvalidKey):
        bundle.kv.get(A, key)
    with pytest.raises(InvalidKey):
        bundle.kv.put(A, key, "v")
    with pytest.raises(InvalidKey):
        bundle.kv.delete(A, key)
    assert isinstance(InvalidKey("x"), ValueError)
