from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory.scopes import (
    AgentScope,
    ChannelScope,
    ChatScope,
    CompositeScope,
    GlobalScope,
    InvalidScopeId,
    Scope,
    SessionScope,
    TenantScope,
    UserScope,
)

SIMPLE = [SessionScope, UserScope, TenantScope, AgentScope, ChannelScope, ChatScope]
HOSTILE = ["..", ".", "../x", "a/b", "a\\b", "%2e%2e", "a\x00b", "x" * 300, "", " a", "a b", "é", "-a", "_a", ":", "a+b"]


@pytest.mark.parametrize("cls", SIMPLE)
@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_ids_are_rejected(cls, bad):
    with pytest.raises(InvalidScopeId):
        cls(bad)


def test_non_string_ids_are_rejected():
    with pytest.raises(InvalidScopeId, match="must be a string"):
        UserScope(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "scope",
    [
        SessionScope("abc"),
        UserScope("42"),
        TenantScope("acme.eu"),
        AgentScope("default"),
        ChannelScope("web"),
        ChatScope("room_1"),
        GlobalScope(),
        CompositeScope(AgentScope("default"), UserScope("42")),
        CompositeScope(UserScope("42"), AgentScope("default"), TenantScope("t")),
    ],
)
def test_keys_parse_back(scope):
    assert Scope.parse(scope.key()) == scope
    assert hash(Scope.parse(scope.key())) == hash(scope)


def test_composite_keys_are_canonical():
    a = CompositeScope(AgentScope("default"), UserScope("42"))
    b = CompositeScope(UserScope("42"), AgentScope("default"))
    assert a == b and a.key() == b.key() == "composite:agent:default+user:42"
    assert CompositeScope(a, TenantScope("t")) == CompositeScope(TenantScope("t"), UserScope("42"), AgentScope("default"))


@pytest.mark.parametrize(
    "key", ["", "user", "user:", "user:../x", "robot:1", "composite:user:1", "composite:", "composite:global+user:1", "Global"]
)
def test_bad_keys_are_rejected(key):
    with pytest.raises(InvalidScopeId):
        Scope.parse(key)


def test_composite_needs_two_parts_and_no_global():
    with pytest.raises(InvalidScopeId):
        CompositeScope(UserScope("1"))
    with pytest.raises(InvalidScopeId):
        CompositeScope(UserScope("1"), GlobalScope())


def test_long_composite_names_stay_within_name_max(tmp_path):
    scope = CompositeScope(AgentScope("a" * 128), UserScope("u" * 128), TenantScope("t" * 128))
    name = scope.path_parts()[-1]
    assert len(name.encode()) <= 255
    assert scope.directory(tmp_path).parent == tmp_path / "composite"


ids = st.text(min_size=0, max_size=140)


@settings(max_examples=500)
@given(st.sampled_from(SIMPLE), ids)
def test_any_id_either_raises_or_maps_inside_the_root(cls, value):
    root = Path("/srv/modex-root")
    try:
        scope = cls(value)
    except InvalidScopeId:
        return
    directory = scope.directory(root)
    assert root in directory.parents
    assert ".." not in directory.relative_to(root).parts


legal_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
simple_scopes = st.builds(lambda cls, i: cls(i), st.sampled_from(SIMPLE), legal_ids)
scopes = st.one_of(
    simple_scopes,
    st.just(GlobalScope()),
    st.lists(simple_scopes, min_size=2, max_size=3, unique_by=lambda s: s.key()).map(lambda p: CompositeScope(*p)),
)


@settings(max_examples=500)
@given(scopes, scopes)
def test_distinct_scopes_never_share_a_directory(a, b):
    root = Path("/srv/modex-root")
    assert (a == b) == (a.directory(root) == b.directory(root))
    assert (a == b) == (a.key() == b.key())
