"""A lease kept for as long as some work runs: renewed in the background, released at the end."""

from __future__ import annotations

import asyncio
import logging

from memory.locks import Lease, LeaseLost, release_lease, renew_lease
from memory.stores.base import KVStore
from memory.threads import run_blocking

logger = logging.getLogger("agents.runtime.leases")


class KeptLease:
    """``lease``, renewed every third of ``ttl`` until ``end()``. ``lost`` is set if another
    holder took it over meanwhile (this process stalled past the ttl); it is then not renewed."""

    def __init__(self, *, kv: KVStore, lease: Lease, ttl: float, name: str) -> None:
        self.kv, self.ttl = kv, ttl
        self.held = [lease]
        self.lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._keeper = asyncio.create_task(self._keep(), name=name)

    async def _keep(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), self.ttl / 3)
                return
            except TimeoutError:
                pass
            try:
                self.held.append(await run_blocking(renew_lease, kv=self.kv, lease=self.held[-1], ttl=self.ttl))
            except LeaseLost:
                logger.error("the lease %s of %s was taken over while it was held", self.held[-1].key, self.held[-1].scope.key())
                self.lost.set()
                return
            except Exception:  # a store hiccup: the lease still has two thirds of its ttl; retry
                logger.warning("could not renew the lease of %s", self.held[-1].scope.key(), exc_info=True)

    async def end(self, *, linger: float = 0.0) -> None:
        """Stop renewing and release; with ``linger`` (seconds), leave the lease to run out that
        long from now instead (a turn mark that keeps background work waiting a little longer).
        The keeper is stopped, not cancelled: a cancel landing during a renewal would let the
        write finish unseen, and releasing an outdated version would leave the lease behind."""
        self._stop.set()
        await self._keeper
        if linger > 0:
            try:
                await run_blocking(renew_lease, kv=self.kv, lease=self.held[-1], ttl=linger)
                return
            except LeaseLost:
                return
        await run_blocking(release_lease, kv=self.kv, lease=self.held[-1])
