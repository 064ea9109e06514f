"""Properties of ids, scopes and storage paths, for any input hypothesis can think of."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
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
from memory.stores import textsearch
from memory.stores.base import InvalidKey, validate_key
from memory.stores.codec import dumps

ROOT = Path("/srv/modex-property-root/memory")  # never created: directory() only computes paths
SIMPLE = (SessionScope, UserScope, TenantScope, AgentScope, ChannelScope, ChatScope)

# Mostly near-legal strings (where the bugs live), plus anything at all.
legalish = st.text(alphabet="aA0._-/\\%:+ \x00é", min_size=0, max_size=12)
any_text = st.one_of(legalish, st.text(max_size=300))
legal_id = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)

simple_scopes = st.builds(lambda cls, i: cls(i), st.sampled_from(SIMPLE), legal_id)
scopes = st.one_of(
    simple_scopes,
    st.just(GlobalScope()),
    st.lists(simple_scopes, min_size=2, max_size=4, unique_by=lambda s: s.key())
    .map(lambda parts: CompositeScope(*parts)),
)

fast = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(st.sampled_from(SIMPLE), any_text)
def test_any_id_is_rejected_or_stays_inside_the_root(cls, value):
    try:
        scope = cls(value)
    except InvalidScopeId:
        return
    directory = scope.directory(ROOT)
    assert ROOT in directory.parents
    assert directory.relative_to(ROOT).parts == scope.path_parts()
    assert all(part not in ("", ".", "..") and "/" not in part and "\x00" not in part for part in scope.path_parts())


@fast
@given(any_text)
def test_any_key_string_parses_or_is_rejected(key):
    try:
        scope = Scope.parse(key)
    except InvalidScopeId:
        return
    assert scope.key() == key
    assert ROOT in scope.directory(ROOT).parents


@fast
@given(scopes, scopes)
def test_distinct_scopes_never_share_a_directory(a, b):
    if a == b:
        assert a.directory(ROOT) == b.directory(ROOT) and a.key() == b.key()
    else:
        assert a.directory(ROOT) != b.directory(ROOT)
        assert a.key() != b.key()


@fast
@given(scopes)
def test_keys_round_trip(scope):
    assert Scope.parse(scope.key()) == scope


@fast
@given(st.lists(simple_scopes, min_size=2, max_size=5, unique_by=lambda s: s.key()), st.randoms())
def test_composite_order_never_matters(parts, rng):
    shuffled = list(parts)
    rng.shuffle(shuffled)
    assert CompositeScope(*parts) == CompositeScope(*shuffled)
    assert CompositeScope(*parts).directory(ROOT) == CompositeScope(*shuffled).directory(ROOT)


@fast
@given(any_text)
def test_kv_keys_are_rejected_or_safe_file_names(key):
    try:
        validate_key(key)
    except InvalidKey:
        return
    assert key not in (".", "..") and not key.startswith(".")  # sidecars and temp files start with '.'
    assert "/" not in key and "\x00" not in key and 0 < len(key) <= 128
    with tempfile.TemporaryDirectory() as tmp:
        assert (Path(tmp) / key).resolve().parent == Path(tmp).resolve()


@fast
@given(st.text(max_size=200))
def test_stored_json_round_trips_any_text(text):
    encoded = dumps({"content": text})
    encoded.encode("utf-8")  # always storable as UTF-8 text
    assert "\x00" not in encoded and "\n" not in encoded  # one JSON line, no raw NUL
    assert json.loads(encoded)["content"] == text


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=100))
def test_query_terms_are_words_only(query):
    for term in textsearch.query_terms(query):
        assert term and all(ch.isalnum() for ch in term)
    assert textsearch.fts_match_expression(textsearch.query_terms(query)).count('"') % 2 == 0
