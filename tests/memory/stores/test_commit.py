"""KVStore.commit: several keys in several scopes and a cursor move, all or nothing, on every backend.

Every test takes ``bundle`` (file, SQLite, PostgreSQL when configured) and runs unchanged; the
file backend's crash recovery (its journal) is tested in test_file_layout.py.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from memory.locks import acquire_lease
from memory.scopes import AgentScope, CompositeScope, SessionScope, UserScope
from memory.stores.base import (
    MUST_NOT_EXIST,
    ConcurrentChange,
    CursorMove,
    FencedOut,
    KVWrite,
    VersionConflict,
)

AGENT = AgentScope("default")
USER = UserScope("42")
BOTH = CompositeScope(AGENT, USER)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float):
    return lambda: T0 + timedelta(seconds=seconds)


def snapshot(bundle) -> dict:
    return {
        "user": {i.key: (i.value, i.version) for i in bundle.kv.list(USER)},
        "both": {i.key: (i.value, i.version) for i in bundle.kv.list(BOTH) if not i.key.startswith("lease.")},
        "agent": {i.key: (i.value, i.version) for i in bundle.kv.list(AGENT)},
        "cursor": bundle.cursors.get(BOTH, "dream"),
    }


def test_writes_in_several_scopes_and_the_cursor_land_together(bundle):
    bundle.kv.put(USER, "USER.md", "Lives in Lisbon\n")
    items = bundle.kv.commit(
        [
            KVWrite(USER, "USER.md", "Lives in Porto\n", expected_version=1),
            KVWrite(USER, "USER.md.history", "v2\n", expected_version=MUST_NOT_EXIST),
            KVWrite(BOTH, "MEMORY.md", "Decided: ship\n"),
            KVWrite(AGENT, "proposal.a", "{}", expected_version=MUST_NOT_EXIST),
        ],
        cursor=CursorMove(BOTH, "dream", 3, expected=None),
    )
    assert [(i.scope, i.key, i.value, i.version) for i in items] == [
        (USER, "USER.md", "Lives in Porto\n", 2),
        (USER, "USER.md.history", "v2\n", 1),
        (BOTH, "MEMORY.md", "Decided: ship\n", 1),
        (AGENT, "proposal.a", "{}", 1),
    ]
    assert bundle.kv.get(USER, "USER.md").value == "Lives in Porto\n" and bundle.kv.get(USER, "USER.md").version == 2
    assert bundle.kv.get_value(BOTH, "MEMORY.md") == "Decided: ship\n"
    assert bundle.cursors.get(BOTH, "dream") == 3
    # the next commit builds on the versions the first returned
    bundle.kv.commit([KVWrite(USER, "USER.md", "Lives in Braga\n", expected_version=2)],
                     cursor=CursorMove(BOTH, "dream", 5, expected=3))
    assert bundle.kv.get(USER, "USER.md").version == 3 and bundle.cursors.get(BOTH, "dream") == 5


@pytest.mark.parametrize("late", ["version", "must_not_exist", "cursor"])
def test_one_failed_check_writes_nothing_at_all(bundle, late):
    bundle.kv.put(USER, "USER.md", "old\n")
    bundle.kv.put(BOTH, "MEMORY.md", "kept\n")
    bundle.cursors.set(BOTH, "dream", 2)
    before = snapshot(bundle)
    writes = [KVWrite(USER, "USER.md", "new\n", expected_version=1), KVWrite(AGENT, "proposal.a", "{}")]
    cursor = CursorMove(BOTH, "dream", 9, expected=2)
    if late == "version":
        writes.append(KVWrite(BOTH, "MEMORY.md", "lost\n", expected_version=7))
        error = VersionConflict
    elif late == "must_not_exist":
        writes.append(KVWrite(BOTH, "MEMORY.md", "lost\n", expected_version=MUST_NOT_EXIST))
        error = VersionConflict
    else:
        cursor = CursorMove(BOTH, "dream", 9, expected=1)
        error = ConcurrentChange
    with pytest.raises(error) as raised:
        bundle.kv.commit(writes, cursor=cursor)
    if late != "cursor":
        assert raised.value.expected in (7, 0) and raised.value.actual == 1
    assert snapshot(bundle) == before


def test_a_stale_fence_refuses_the_whole_commit_and_a_live_one_admits_it(bundle):
    a = acquire_lease(kv=bundle.kv, scope=BOTH, name="dream", ttl=10, holder="A", clock=at(0))
    b = acquire_lease(kv=bundle.kv, scope=BOTH, name="dream", ttl=10, holder="B", clock=at(20))
    before = snapshot(bundle)
    writes = [KVWrite(USER, "USER.md", "stale\n"), KVWrite(AGENT, "proposal.a", "{}")]
    with pytest.raises(FencedOut, match="taken over by another worker"):
        bundle.kv.commit(writes, cursor=CursorMove(BOTH, "dream", 4), fence=a.fence)
    with pytest.raises(FencedOut):  # the fence is checked before the versions
        bundle.kv.commit([KVWrite(USER, "USER.md", "x\n", expected_version=5)], fence=a.fence)
    assert snapshot(bundle) == before
    # the lease lives in the composite scope; the writes go to others: that is the point
    bundle.kv.commit(writes, cursor=CursorMove(BOTH, "dream", 4), fence=b.fence)
    assert bundle.kv.get_value(USER, "USER.md") == "stale\n" and bundle.cursors.get(BOTH, "dream") == 4
    nowhere = acquire_lease(kv=bundle.kv, scope=SessionScope("s"), name="x", ttl=10, holder="C")
    bundle.kv.delete(SessionScope("s"), "lease.x")
    with pytest.raises(FencedOut):
        bundle.kv.commit([KVWrite(USER, "USER.md", "after release\n")], fence=nowhere.fence)
    assert bundle.kv.get_value(USER, "USER.md") == "stale\n"


def test_deletes_and_their_checks(bundle):
    bundle.kv.put(AGENT, "proposal.a", "{}")
    bundle.kv.put(AGENT, "proposal.b", "{}")
    items = bundle.kv.commit([
        KVWrite(AGENT, "proposal.a", None, expected_version=1),
        KVWrite(AGENT, "proposal.b", None),
        KVWrite(AGENT, "proposal.never", None),  # a missing key: nothing to do, no error
    ])
    assert items == [None, None, None]
    assert bundle.kv.list(AGENT) == []
    bundle.kv.put(AGENT, "proposal.c", "{}")
    with pytest.raises(VersionConflict):  # "must not exist" holds for deletes too
        bundle.kv.commit([KVWrite(AGENT, "proposal.c", None, expected_version=MUST_NOT_EXIST)])
    assert bundle.kv.get_value(AGENT, "proposal.c") == "{}"
    assert bundle.kv.commit([]) == []


def test_bad_arguments_are_refused_before_anything_is_read(bundle):
    lease = acquire_lease(kv=bundle.kv, scope=BOTH, name="dream", ttl=10)
    cases = [
        ([KVWrite(USER, "USER.md", "a"), KVWrite(USER, "USER.md", "b")], {}, ValueError),
        ([KVWrite(USER, "../x", "a")], {}, ValueError),
        ([KVWrite(USER, "USER.md", "nul \x00")], {}, ValueError),
        ([KVWrite(USER, "USER.md", 3)], {}, TypeError),
        ([KVWrite(BOTH, "lease.dream", "mine")], {"fence": lease.fence}, ValueError),
        ("USER.md", {}, TypeError),
        ([("user:42", "USER.md", "x")], {}, TypeError),
        ([], {"cursor": CursorMove(BOTH, "dream", -1)}, ValueError),
        ([], {"cursor": (BOTH, "dream", 1)}, TypeError),
    ]
    for writes, options, error in cases:
        with pytest.raises(error):
            bundle.kv.commit(writes, **options)
    assert bundle.kv.list(USER) == [] and bundle.cursors.get(BOTH, "dream") is None


def test_concurrent_commits_never_interleave(threaded_bundle):
    """Each commit moves two keys and the cursor together by compare-and-set; racing threads
    retry on conflicts, and at the end the three agree: no commit was half applied."""
    bundle = threaded_bundle
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            done = 0
            while done < n:
                a, b = bundle.kv.get(USER, "count"), bundle.kv.get(BOTH, "count")
                va, vb = (a.version if a else 0), (b.version if b else 0)
                cursor = bundle.cursors.get(BOTH, "dream")
                value = str(int(a.value) + 1 if a else 1)
                try:
                    bundle.kv.commit(
                        [KVWrite(USER, "count", value, expected_version=va),
                         KVWrite(BOTH, "count", value, expected_version=vb)],
                        cursor=CursorMove(BOTH, "dream", int(value), expected=cursor),
                    )
                except ConcurrentChange:
                    continue
                done += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()  # each thread has its own database connection

    threads = [threading.Thread(target=worker, args=(15,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert bundle.kv.get_value(USER, "count") == bundle.kv.get_value(BOTH, "count") == "45"
    assert bundle.cursors.get(BOTH, "dream") == 45
