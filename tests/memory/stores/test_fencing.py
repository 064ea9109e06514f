"""Fenced writes, on every backend: a holder whose lease was taken over cannot land a write.

Every test takes ``bundle`` (file, SQLite, PostgreSQL when configured) and runs unchanged.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async

from memory.compression.cleanup import CleanupStatus, run_cleanup
from memory.compression.pruned import PrunedCatalog
from memory.config import MemoryConfig
from memory.hooks import MemoryHookDispatcher
from memory.locks import acquire_lease, release_lease, renew_lease
from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import Fence, FencedOut

S = SessionScope("fenced")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float):
    return lambda: T0 + timedelta(seconds=seconds)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def takeover(bundle, *, scope=S, name="turn"):
    """A takes the lease for 10 s; at 20 s B takes it over (A's has expired)."""
    a = acquire_lease(kv=bundle.kv, scope=scope, name=name, ttl=10, holder="A", clock=at(0))
    b = acquire_lease(kv=bundle.kv, scope=scope, name=name, ttl=10, holder="B", clock=at(20))
    return a, b


def test_a_takeover_fences_out_the_old_holders_appends(bundle):
    a = acquire_lease(kv=bundle.kv, scope=S, name="turn", ttl=10, holder="A", clock=at(0))
    bundle.messages.append(S, [user("a1")], fence=a.fence)
    a = renew_lease(kv=bundle.kv, lease=a, ttl=10, clock=at(5))  # a renewal keeps the fence
    bundle.messages.append(S, [user("a2")], fence=a.fence)
    b = acquire_lease(kv=bundle.kv, scope=S, name="turn", ttl=10, holder="B", clock=at(30))
    assert (a.generation, b.generation) == (1, 2)
    bundle.messages.append(S, [user("b1")], fence=b.fence)
    before = bundle.messages.head(S)
    with pytest.raises(FencedOut, match="taken over by another worker; nothing was written"):
        bundle.messages.append(S, [user("a3 (stale)")], fence=a.fence)
    assert bundle.messages.head(S) == before
    assert [m.content for m in bundle.messages.read(S)] == ["a1", "a2", "b1"]


def test_a_released_or_missing_lease_admits_no_fenced_write(bundle):
    a = acquire_lease(kv=bundle.kv, scope=S, name="turn", ttl=10, holder="A")
    assert release_lease(kv=bundle.kv, lease=a)
    with pytest.raises(FencedOut):
        bundle.messages.append(S, [user("after release")], fence=a.fence)
    never = Fence(scope=SessionScope("nowhere"), key="lease.turn", holder="A", generation=1)
    with pytest.raises(FencedOut):
        bundle.messages.append(SessionScope("nowhere"), [user("x")], fence=never)
    assert bundle.messages.read(S) == [] and bundle.messages.read(SessionScope("nowhere")) == []
    # the same holder acquiring again is a new lease: the old fence equals it only if it is the same
    again = acquire_lease(kv=bundle.kv, scope=S, name="turn", ttl=10, holder="A2")
    bundle.messages.append(S, [user("ok")], fence=again.fence)


def test_a_stale_prune_is_refused_and_the_session_is_unchanged(bundle):
    a, b = takeover(bundle, name="cleanup")
    bundle.messages.append(S, [user(f"m{i}") for i in range(4)])
    head = bundle.messages.head(S)
    summary = Message(role="user", content="[compact_summary] stale", kind="compact_summary")
    with pytest.raises(FencedOut):
        bundle.messages.prune(S, through_seq=2, summary=summary, expected_version=head.version, fence=a.fence)
    assert bundle.messages.head(S) == head and len(bundle.messages.read(S)) == 4
    result = bundle.messages.prune(S, through_seq=2, summary=summary, expected_version=head.version, fence=b.fence)
    assert [m.content for m in bundle.messages.read(S)] == ["[compact_summary] stale", "m2", "m3"]
    assert len(result.evicted) == 2


def test_a_stale_kv_write_is_refused_and_the_value_kept(bundle):
    a, b = takeover(bundle)
    bundle.kv.put(S, "todo.json", "b's list", fence=b.fence)
    with pytest.raises(FencedOut):
        bundle.kv.put(S, "todo.json", "a's stale list", fence=a.fence)
    assert bundle.kv.get(S, "todo.json").value == "b's list" and bundle.kv.get(S, "todo.json").version == 1
    with pytest.raises(ValueError, match="lease's own scope"):
        bundle.kv.put(SessionScope("other"), "todo.json", "x", fence=b.fence)
    with pytest.raises(TypeError):
        bundle.messages.append(S, [user("x")], fence="not a fence")


def test_a_cleanup_whose_lease_is_taken_over_mid_run_commits_nothing(bundle, tmp_path):
    bundle.messages.append(S, [user(f"message {i} " + "words " * 60) for i in range(12)])
    head = bundle.messages.head(S)

    def intrude():
        item = bundle.kv.get(S, "lease.cleanup")
        bundle.kv.delete(S, "lease.cleanup", expected_version=item.version)
        acquire_lease(kv=bundle.kv, scope=S, name="cleanup", ttl=600, holder="intruder")

    async def summarizer(_prompt):
        # Another worker takes the session's cleanup lease over while the summarizer runs
        # (as if this one had stalled past its ttl; renewal is not due yet, so only the fence
        # stands between this cleanup and a write). Through the pipeline's own store thread.
        await sync_to_async(intrude, thread_sensitive=True)()
        return "\n".join(f"## {h}\n- x" for h in ("Goal", "Decisions", "Facts learned", "Open tasks",
                                                  "Reasoning trail", "Tool results that matter"))

    result = run_cleanup(
        bundle=bundle, session=S, config=MemoryConfig(context_window=4096, compression_threshold=600, keep_tokens=200),
        summarizer=summarizer, catalog=PrunedCatalog(tmp_path / "pruned"), hooks=MemoryHookDispatcher(),
    )
    assert result.status is CleanupStatus.ABORTED and "taken over" in result.reason
    assert bundle.messages.head(S) == head  # nothing committed
    assert bundle.kv.get(S, "cleanup.pending") is None  # not even the intent
    assert "intruder" in bundle.kv.get(S, "lease.cleanup").value  # and the intruder's lease is left alone


def test_a_stale_cursor_move_is_refused_and_the_position_kept(bundle):
    a, b = takeover(bundle, name="dream")
    other = SessionScope("elsewhere")  # the cursor may live in another scope than its lease
    bundle.cursors.set(other, "archive", 4, fence=b.fence)
    with pytest.raises(FencedOut, match="taken over by another worker"):
        bundle.cursors.set(other, "archive", 2, fence=a.fence)
    with pytest.raises(FencedOut):  # the fence is checked before the expected position
        bundle.cursors.set(other, "archive", 9, expected=4, fence=a.fence)
    assert bundle.cursors.get(other, "archive") == 4
    bundle.cursors.set(other, "archive", 9, expected=4, fence=b.fence)
    assert bundle.cursors.get(other, "archive") == 9


def test_a_stale_archive_put_is_refused_and_writes_nothing(bundle):
    from memory.scopes import AgentScope, CompositeScope, UserScope
    from memory.stores.base import ArchiveDocument

    a, b = takeover(bundle, name="cleanup")
    archive = CompositeScope(AgentScope("default"), UserScope("7"))
    stale = ArchiveDocument(session=S.key(), summary="stale", messages=(user("a"),), id="doc-stale")
    with pytest.raises(FencedOut):
        bundle.archive.put(archive, stale, fence=a.fence)
    assert bundle.archive.list(archive) == [] and bundle.archive.get(archive, "doc-stale") is None
    kept = bundle.archive.put(archive, ArchiveDocument(session=S.key(), summary="new", id="doc-new"), fence=b.fence)
    assert kept.seq == 1
    with pytest.raises(FencedOut):  # even the idempotent answer for an existing id is refused
        bundle.archive.put(archive, ArchiveDocument(session=S.key(), summary="x", id="doc-new"), fence=a.fence)
    assert [d.id for d in bundle.archive.list(archive)] == ["doc-new"]


def test_a_stale_kv_delete_is_refused_and_the_item_kept(bundle):
    a, b = takeover(bundle, name="cleanup")
    first = bundle.kv.put(S, "cleanup.pending", "b's intent", fence=b.fence)
    with pytest.raises(FencedOut, match="deleting cleanup.pending"):
        # The version matches: only the fence tells a stale holder from the current one.
        bundle.kv.delete(S, "cleanup.pending", expected_version=first.version, fence=a.fence)
    assert bundle.kv.get(S, "cleanup.pending").value == "b's intent"
    with pytest.raises(ValueError, match="lease's own scope"):
        bundle.kv.delete(SessionScope("other"), "cleanup.pending", fence=b.fence)
    assert bundle.kv.delete(S, "cleanup.pending", expected_version=first.version, fence=b.fence)
    assert bundle.kv.get(S, "cleanup.pending") is None
    assert bundle.kv.delete(S, "cleanup.pending", fence=b.fence) is False  # absent: nothing to refuse
    with pytest.raises(FencedOut):
        bundle.kv.delete(SessionScope("nowhere"), "x", fence=Fence(SessionScope("nowhere"), "lease.cleanup", "A", 1))


def test_a_fenced_block_admits_only_the_current_holder(bundle):
    a, b = takeover(bundle, name="cleanup")
    with bundle.kv.fenced(b.fence, "a write outside the store"):
        pass
    with pytest.raises(FencedOut, match="a late write outside the store refused"):
        with bundle.kv.fenced(a.fence, "a late write outside the store"):
            pytest.fail("the block of a stale holder must not run")
    with bundle.kv.fenced(None, "an unfenced write"):
        pass


def test_a_takeover_waits_until_a_fenced_block_has_ended(threaded_bundle):
    import threading
    import time

    kv = threaded_bundle.kv
    scope = SessionScope("fenced-block")
    a = acquire_lease(kv=kv, scope=scope, name="cleanup", ttl=10, holder="A", clock=at(0))
    inside, order = threading.Event(), []

    def take_over() -> None:
        from django.db import connection

        try:
            inside.wait(10)
            acquire_lease(kv=kv, scope=scope, name="cleanup", ttl=10, holder="B", clock=at(20))
            order.append("takeover")
        finally:
            connection.close()

    thread = threading.Thread(target=take_over)
    thread.start()
    with kv.fenced(a.fence, "the catalog write"):
        inside.set()
        time.sleep(0.5)  # room for a takeover that did not wait to land first
        order.append("write")
    thread.join(30)
    assert order == ["write", "takeover"]
    with pytest.raises(FencedOut):
        with kv.fenced(a.fence, "the catalog write"):
            pass
