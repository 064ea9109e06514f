"""Leases: mutual exclusion per scope, built on the KVStore's compare-and-set.

A lease is the KV item ``lease.<name>`` in the scope, holding JSON
``{"holder", "generation", "acquired_at", "expires_at"}`` (times ISO-8601 UTC). Acquiring is a conditional put: it
succeeds when the key is absent (``MUST_NOT_EXIST``) or holds an expired lease (CAS on that
item's version). Releasing is a conditional delete on the version the holder wrote. Because
the CAS is the store's, a lease holds across processes and machines wherever the store is
shared (the SQL backend; the file backend on one host). The ``ttl`` bounds how long a crashed
holder can block others; a holder that works longer renews before the lease runs out.

Fencing: a holder that stalls past its ttl (a stopped process, a long GC pause) may wake up
after another took the lease over. ``Lease.fence`` is the token its writes carry (``fence=`` on
``MessageStore.append``/``prune`` and ``KVStore.put``): the store checks, in the same atomic step
as the write, that the lease still names this holder and generation, and refuses the write with
FencedOut otherwise. A takeover of an expired lease bumps the generation; a renewal keeps it.

Clocks: expiry compares wall-clock times, so hosts sharing a lease need roughly synchronised
clocks (seconds, against a ttl of minutes).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from memory.scopes import Scope
from memory.stores.base import MUST_NOT_EXIST, ConcurrentChange, Fence, KVStore, StoreError, validate_key

logger = logging.getLogger("memory.locks")

Clock = Callable[[], datetime]


class LeaseBusy(StoreError):
    """Another holder has the lease and it has not expired; try again later."""

    def __init__(self, message: str, *, holder: str | None, expires_at: datetime | None) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires_at = expires_at


class LeaseLost(StoreError):
    """The lease expired and was taken by another holder (or removed) while we held it."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A held lease: renew or release it with the ``version`` it was written at."""

    scope: Scope
    key: str
    holder: str
    version: int
    expires_at: datetime
    generation: int = 1

    @property
    def fence(self) -> Fence:
        """The fencing token of this lease, for the writes made under it."""
        return Fence(scope=self.scope, key=self.key, holder=self.holder, generation=self.generation)


def default_holder() -> str:
    """A holder id unique to this process and call: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _now() -> datetime:
    return datetime.now(UTC)


def lease_key(name: str) -> str:
    return validate_key(f"lease.{name}", what="lease name")


def _encode(holder: str, generation: int, now: datetime, expires_at: datetime) -> str:
    return json.dumps({"holder": holder, "generation": generation, "acquired_at": now.isoformat(),
                       "expires_at": expires_at.isoformat()})


def _decode(value: str) -> tuple[str | None, datetime | None, int]:
    try:
        data = json.loads(value)
        return str(data["holder"]), datetime.fromisoformat(data["expires_at"]), int(data.get("generation", 0))
    except (ValueError, KeyError, TypeError):
        return None, None, 0  # unreadable: treated as expired, so a damaged lease never blocks forever


def acquire_lease(
    *,
    kv: KVStore,
    scope: Scope,
    name: str,
    ttl: float,
    holder: str | None = None,
    clock: Clock = _now,
) -> Lease:
    """Take the lease ``name`` in ``scope`` for ``ttl`` seconds, or raise LeaseBusy.

    Never waits: a caller that wants to wait retries. Re-acquiring a lease one already holds
    (same ``holder``) extends it.
    """
    holder = holder or default_holder()
    key = lease_key(name)
    for _ in range(3):  # a CAS lost to a concurrent acquirer is re-read, not retried blindly
        now = clock()
        expires_at = now + timedelta(seconds=ttl)
        current = kv.get(scope, key)
        if current is None:
            expected, generation = MUST_NOT_EXIST, 1
        else:
            other, other_expiry, other_generation = _decode(current.value)
            if other != holder and other_expiry is not None and other_expiry > now:
                raise LeaseBusy(
                    f"{scope.key()} {name} is held by {other} until {other_expiry.isoformat()}",
                    holder=other,
                    expires_at=other_expiry,
                )
            if other != holder:
                logger.warning("taking over expired %s lease of %s in %s", name, other, scope.key())
            expected = current.version
            generation = other_generation if other == holder else other_generation + 1
        try:
            item = kv.put(scope, key, _encode(holder, generation, now, expires_at), expected_version=expected)
        except ConcurrentChange:
            continue
        return Lease(scope=scope, key=key, holder=holder, version=item.version, expires_at=expires_at,
                     generation=generation)
    raise LeaseBusy(f"{scope.key()} {name} is contended; try again", holder=None, expires_at=None)


def lease_active(*, kv: KVStore, scope: Scope, name: str, clock: Clock = _now) -> bool:
    """Whether someone holds the lease ``name`` in ``scope`` now (an expired or unreadable one is not held)."""
    current = kv.get(scope, lease_key(name))
    if current is None:
        return False
    _holder, expires_at, _generation = _decode(current.value)
    return expires_at is not None and expires_at > clock()


def renew_lease(*, kv: KVStore, lease: Lease, ttl: float, clock: Clock = _now) -> Lease:
    """Extend a held lease by ``ttl`` from now; raises LeaseLost if it is no longer ours."""
    now = clock()
    expires_at = now + timedelta(seconds=ttl)
    lost = LeaseLost(f"the {lease.key} lease of {lease.scope.key()} was taken over by another holder")
    # By holder and generation, not by version alone: a lease released and taken anew by someone
    # else starts again at version 1, which may be the very version we hold.
    current = kv.get(lease.scope, lease.key)
    if current is None or not lease.fence.admits(current.value):
        raise lost
    try:
        item = kv.put(lease.scope, lease.key, _encode(lease.holder, lease.generation, now, expires_at),
                      expected_version=current.version)
    except ConcurrentChange as exc:
        raise lost from exc
    return replace(lease, version=item.version, expires_at=expires_at)


def release_lease(*, kv: KVStore, lease: Lease) -> bool:
    """Give the lease up; False (and nothing changed) if it had already passed to someone else."""
    current = kv.get(lease.scope, lease.key)
    if current is None or not lease.fence.admits(current.value):  # see renew_lease: versions can repeat
        logger.warning("the %s lease of %s was taken over before release", lease.key, lease.scope.key())
        return False
    try:
        return kv.delete(lease.scope, lease.key, expected_version=current.version)
    except ConcurrentChange:
        logger.warning("the %s lease of %s was taken over before release", lease.key, lease.scope.key())
        return False

