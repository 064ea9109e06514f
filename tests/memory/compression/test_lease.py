"""The cleanup lease (memory/locks.py) over each backend's KV compare-and-set."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from memory.locks import LeaseBusy, LeaseLost, acquire_lease, lease_key, release_lease, renew_lease
from memory.scopes import SessionScope

T = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def at(moment: datetime):  # type: ignore[no-untyped-def]
    return lambda: moment


def test_acquire_busy_release(bundle, session) -> None:
    lease = acquire_lease(kv=bundle.kv, scope=session, name="cleanup", ttl=60, holder="a", clock=at(T))
    assert lease.holder == "a" and lease.expires_at == T + timedelta(seconds=60)
    with pytest.raises(LeaseBusy) as busy:
        acquire_lease(kv=bundle.kv, scope=session, name="cleanup", ttl=60, holder="b", clock=at(T))
    assert busy.value.holder == "a" and busy.value.expires_at == lease.expires_at
    soon = at(T + timedelta(seconds=5))
    again = acquire_lease(kv=bundle.kv, scope=session, name="cleanup", ttl=60, holder="a", clock=soon)
    assert again.version > lease.version  # re-acquiring one's own lease extends it
    assert release_lease(kv=bundle.kv, lease=again)
    assert bundle.kv.get(session, lease_key("cleanup")) is None
    assert acquire_lease(kv=bundle.kv, scope=session, name="cleanup", ttl=60, holder="b", clock=at(T)).holder == "b"


def test_an_expired_lease_is_taken_over_and_the_old_holder_notices(bundle, session) -> None:
    old = acquire_lease(kv=bundle.kv, scope=session, name="cleanup", ttl=10, holder="crashed", clock=at(T))
    later = at(T + timedelta(seconds=11))
    new = acquire_lease(kv=bundle.kv, scope=session, name="cleanup", ttl=10, holder="b", clock=later)
    assert new.holder == "b"
    with pytest.raises(LeaseLost):
        renew_lease(kv=bundle.kv, lease=old, ttl=10, clock=later)
    assert release_lease(kv=bundle.kv, lease=old) is False  # it does not remove b's lease
    assert bundle.kv.get(session, lease_key("cleanup")) is not None
    renewed = renew_lease(kv=bundle.kv, lease=new, ttl=10, clock=later)
    assert renewed.expires_at == T + timedelta(seconds=21)


def test_an_unreadable_lease_never_blocks_forever(bundle, session) -> None:
    bundle.kv.put(session, lease_key("cleanup"), "garbage{")
    assert acquire_lease(kv=bundle.kv, scope=session, name="cleanup", ttl=10, holder="a").holder == "a"


def test_leases_are_per_scope_and_name(bundle) -> None:
    a, b = SessionScope("one"), SessionScope("two")
    acquire_lease(kv=bundle.kv, scope=a, name="cleanup", ttl=60, holder="x")
    acquire_lease(kv=bundle.kv, scope=b, name="cleanup", ttl=60, holder="y")
    acquire_lease(kv=bundle.kv, scope=a, name="other", ttl=60, holder="y")


def test_only_one_of_many_concurrent_acquirers_wins(threaded_bundle) -> None:
    session = SessionScope("contended")
    winners, losers = [], []
    barrier = threading.Barrier(6)

    def worker(n: int) -> None:
        barrier.wait()
        try:
            acquire_lease(kv=threaded_bundle.kv, scope=session, name="cleanup", ttl=60, holder=f"w{n}")
            winners.append(n)
        except LeaseBusy:
            losers.append(n)
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1 and len(losers) == 5
