"""Scope isolation and hostile ids, for every store of every backend."""

from __future__ import annotations

import pytest

from memory.scopes import (
    AgentScope,
    ChatScope,
    CompositeScope,
    GlobalScope,
    InvalidScopeId,
    Scope,
    SessionScope,
    TenantScope,
    UserScope,
)
from memory.stores.base import ArchiveDocument, InvalidKey

from .helpers import HOSTILE_IDS, files_under, user

DISTINCT = [
    SessionScope("a"), SessionScope("A"), SessionScope("b"), UserScope("a"), AgentScope("a"), ChatScope("a"),
    TenantScope("a"), GlobalScope(), CompositeScope(AgentScope("a"), UserScope("a")),
    CompositeScope(AgentScope("a"), UserScope("b")), CompositeScope(UserScope("a"), UserScope("b")),
    CompositeScope(AgentScope("a"), UserScope("a"), ChatScope("a")),
    CompositeScope(*(UserScope(f"{i:03d}" + "x" * 120) for i in range(8))),  # a very long key
    CompositeScope(*(UserScope(f"{i:03d}" + "x" * 120) for i in range(9))),
]


def _write_everything(bundle, scope: Scope, tag: str) -> None:
    bundle.messages.append(scope, [user(f"message of {tag}")])
    bundle.kv.put(scope, "SOUL.md", f"soul of {tag}")
    bundle.cursors.set(scope, "dream", len(tag))
    bundle.archive.put(scope, ArchiveDocument(session="session:x", summary=f"zebra archive of {tag}", id="doc-1"))


def test_distinct_scopes_never_mix(bundle):
    for index, scope in enumerate(DISTINCT):
        _write_everything(bundle, scope, f"t{index}" + "+" * index)
    for index, scope in enumerate(DISTINCT):
        tag = f"t{index}" + "+" * index
        assert [m.content for m in bundle.messages.read(scope)] == [f"message of {tag}"], scope
        assert bundle.messages.head(scope).count == 1
        assert bundle.kv.get_value(scope, "SOUL.md") == f"soul of {tag}"
        assert [i.key for i in bundle.kv.list(scope)] == ["SOUL.md"]
        assert bundle.cursors.list(scope) == {"dream": len(tag)}
        assert [d.summary for d in bundle.archive.list(scope)] == [f"zebra archive of {tag}"]
        assert [h.document.summary for h in bundle.archive.search(scope, "zebra")] == [f"zebra archive of {tag}"]


def test_mutations_stay_in_their_scope(bundle):
    a, b = SessionScope("a"), SessionScope("b")
    _write_everything(bundle, a, "a")
    _write_everything(bundle, b, "b")
    message = bundle.messages.read(a)[0]
    assert bundle.messages.soft_delete(b, [message.id]) == 0
    bundle.messages.clear(b)
    bundle.kv.delete(b, "SOUL.md")
    bundle.archive.delete(b, "doc-1")
    assert bundle.messages.read(a) == [message]
    assert bundle.kv.get_value(a, "SOUL.md") == "soul of a"
    assert bundle.archive.get(a, "doc-1") is not None
    # The same message id may live in two sessions.
    bundle.messages.append(b, [message])
    assert bundle.messages.read(b)[0].id == message.id


def test_composite_scopes_are_order_independent(bundle):
    agent, person = AgentScope("default"), UserScope("42")
    bundle.kv.put(CompositeScope(agent, person), "MEMORY.md", "likes tea")
    assert bundle.kv.get_value(CompositeScope(person, agent), "MEMORY.md") == "likes tea"
    assert bundle.kv.get(agent, "MEMORY.md") is None
    assert bundle.kv.get(person, "MEMORY.md") is None
    bundle.messages.append(CompositeScope(person, agent), [user("shared")])
    assert bundle.messages.head(CompositeScope(agent, person)).count == 1


@pytest.mark.parametrize("bad", HOSTILE_IDS)
def test_hostile_scope_ids_are_rejected_before_any_write(bundle, store_root, tmp_path, bad):
    before = files_under(tmp_path)
    for kind in (SessionScope, UserScope, AgentScope, TenantScope, ChatScope):
        with pytest.raises(InvalidScopeId):
            kind(bad)
        with pytest.raises(InvalidScopeId):
            Scope.parse(f"{kind.kind}:{bad}")
    with pytest.raises(InvalidScopeId):
        Scope.parse(f"composite:agent:a+user:{bad}")
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("bad", HOSTILE_IDS)
def test_hostile_keys_are_rejected_before_any_write(bundle, tmp_path, bad):
    scope = SessionScope("victim")
    before = files_under(tmp_path)
    calls = [
        lambda: bundle.kv.put(scope, bad, "x"),
        lambda: bundle.kv.get(scope, bad),
        lambda: bundle.kv.delete(scope, bad),
        lambda: bundle.cursors.set(scope, bad, 1),
        lambda: bundle.cursors.get(scope, bad),
        lambda: bundle.archive.put(scope, ArchiveDocument(session="s", summary="x", id=bad)),
        lambda: bundle.archive.get(scope, bad),
        lambda: bundle.archive.delete(scope, bad),
    ]
    for call in calls:
        with pytest.raises(InvalidKey):
            call()
    assert files_under(tmp_path) == before, "a rejected id must not create any file"
    assert bundle.kv.list(scope) == [] and bundle.cursors.list(scope) == {} and bundle.archive.list(scope) == []


def test_reads_of_unknown_scopes_write_nothing(bundle, tmp_path):
    before = files_under(tmp_path)
    scope = UserScope("nobody")
    assert bundle.messages.read(scope) == [] and bundle.messages.head(scope).count == 0
    assert bundle.messages.soft_delete(scope, ["x"]) == 0
    bundle.messages.clear(scope)
    assert bundle.kv.get(scope, "SOUL.md") is None and bundle.kv.list(scope) == []
    assert bundle.kv.delete(scope, "SOUL.md") is False
    assert bundle.cursors.get(scope, "dream") is None and bundle.cursors.list(scope) == {}
    assert bundle.archive.list(scope) == [] and bundle.archive.search(scope, "anything") == []
    assert bundle.archive.get(scope, "doc") is None and bundle.archive.delete(scope, "doc") is False
    assert files_under(tmp_path) == before


def test_scopes_are_type_checked(bundle):
    with pytest.raises(TypeError):
        bundle.messages.read("session:a")
    with pytest.raises(TypeError):
        bundle.kv.put("user:42", "SOUL.md", "x")
