"""The model-call gate: one per endpoint, chat first, background memory work when chat is idle.
A model is seen through it with ``agents.runtime.gated.calls`` (the calls themselves live there).

A small local model server (llama.cpp with one slot, Ollama, LM Studio) answers one request at a
time and queues the rest. Without a gate, the Dream Engine's, the reviewer's and the
summarizer's requests queue on the server in front of a user's turn, and each request's timeout
counts the time it spent queued. The gate keeps model calls of one endpoint within its
concurrency (``MODEX_MODEL_CONCURRENCY``; auto: llama.cpp's ``total_slots``, else 1 for a server
on this machine or a private network, no gate at all for a remote one; a llama.cpp server's
slot count is shown, not used: parallel slots on a CPU share its cores, so a background request
beside a turn would slow the turn down), in two classes:

* **chat** (foreground): the calls of a user's turn, including a cleanup inside that turn
  (its compact summary belongs to the turn). A turn holds a *turn mark* from its start to its
  end, tool calls included, so background work does not slip in between its model calls, and
  for ``after_turn`` seconds more (``MODEX_BACKGROUND_AFTER_TURN``): a user who answers within
  that time finds the model free and its prompt cache intact. Each of the turn's calls waits for
  a free slot and never for background work. A user typing in the chat page holds a mark too
  (``mark_typing``: the page signals while they type, the mark runs out ``TYPING_HOLD`` seconds
  after the last signal, and the turn's own mark takes its place when the message is sent), so a
  background call gives the model up while the message is written, not when it arrives: the cut
  costs the turn nothing then (llama-server stops reading a prompt only at its next batch,
  0.1-0.7 s for a small model on a CPU).
* **background**: the Dream Engine, the experience reviewer (and a cleanup in the reviewer's own
  run), anything that reads a view made with ``BACKGROUND``. A background call starts only
  while the active turns and the background calls running leave a slot for every turn; while it
  runs it watches for turns, and when one arrives that would have to wait, it closes its stream
  (llama-server frees the slot at once), gives the slot up, waits for the turns to end and asks
  again from the start. Its events are delivered once the call has finished, so a restart never
  repeats text; it gives up after ``MODEX_BACKGROUND_MAX_WAIT`` seconds of waiting with
  ``ModelUnavailable`` (the Dream Engine and the reviewer then retry later with their backoff).

**Urgent** background work (the cleanup ahead of need, which the next turn waits on) comes
before the rest: while it holds an *urgent mark* (``hold_urgent``, from its first model call to
its commit, so no other call slips in between its calls and takes the prompt cache of the
background slot), other background calls do not start, and one running gives its slot up to it
as to a turn (and asks again later; with several slots, every one running gives way).

A background call may name a ``stop_when`` check, asked whenever it cannot run (it waits for a
slot, or chat preempted it): when
it says so the call stops for good (``GaveWay``) instead of waiting (the cleanup ahead of need
gives its session back to a turn that must clean up itself).

On a llama.cpp server with two slots or more, background calls are pinned to its last slot
(``id_slot``): one request at a time still, but the chat's cached prompt stays in its own slot, and
a turn after background work does not have to process its whole context again (llama-server
otherwise picks a slot by prompt similarity, and a reviewer's prompt that quotes the chat can take
the chat's slot). Run ``llama-server -np 2 -c <2 x window>`` for that.

Timeouts count from the request: a call's ``OPENAI_TIMEOUT`` starts when it is sent, after its
wait at the gate, and the server is never handed more requests than it runs at once, so none
of them waits in the server's own queue either.

Why the KV store: the chat runs in the daphne workers and the background work in the task
worker (``manage.py db_worker``), separate processes, possibly on several hosts; an in-process
lock or semaphore would see only its own process. Every process of a deployment shares the
memory stores, and the KVStore's compare-and-set gives leases that hold across processes and
hosts (``memory.locks``). A slot, a turn mark and a queued background call are each a lease in
the global scope (``lease.gate.<endpoint>.slot.N``, ``.turn.ID``, ``.queued.ID``), renewed while
held, so a process that dies holding one blocks nothing for longer than ``HOLD_TTL``. Waiting is
polling (``POLL``; background ``BACKGROUND_POLL``), plus an in-process wake-up when a slot is
given back, so a turn in the same process goes on at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import time
import uuid
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from agents.runtime.leases import KeptLease
from memory.locks import LeaseBusy, acquire_lease, lease_key
from memory.scopes import GlobalScope, Scope
from memory.stores.base import ConcurrentChange, KVStore
from memory.threads import run_blocking

logger = logging.getLogger("agents.runtime.gate")

FOREGROUND = "chat"
BACKGROUND = "background"
HOLD_TTL = 30.0  # seconds a slot, turn mark or queue entry outlives a holder that stopped renewing it
TYPING_HOLD = 6.0  # seconds a user's typing mark holds after the chat page's latest signal
POLL = 0.05  # how often a waiting chat call looks for a free slot (and a background call checks for turns)
BACKGROUND_POLL = 0.5  # how often a waiting background call looks again
_SCOPE = GlobalScope()


@dataclass(frozen=True, slots=True)
class GateState:
    """What the gate of one endpoint holds now: for the pages and the benchmarks."""

    endpoint: str
    limit: int
    turns: int = 0
    running: tuple[tuple[str, str], ...] = ()  # (priority, label) of the calls holding a slot
    queued: tuple[str, ...] = ()  # labels of the background calls waiting

    @property
    def background_running(self) -> int:
        return sum(priority == BACKGROUND for priority, _ in self.running)

    def describe_queued(self) -> str:
        """E.g. "2 queued (dream, review)", "" when nothing waits."""
        if not self.queued:
            return ""
        return f"{len(self.queued)} queued ({', '.join(sorted(set(self.queued)))})"


@dataclass
class GateStats:
    """Counters of this process (the smoke test and the benchmarks read them)."""

    chat_calls: int = 0
    chat_waited: float = 0.0  # seconds chat calls spent at the gate, in all
    chat_max_wait: float = 0.0
    background_calls: int = 0
    preempted: int = 0  # background calls that gave their slot up to a turn
    yielded_to_urgent: int = 0  # background calls that gave their slot up to urgent background work
    gave_up: int = 0
    waits: deque[float] = field(default_factory=lambda: deque(maxlen=1000))  # the latest chat waits


def _is_local(host: str) -> bool:
    if host in ("localhost", "") or host.endswith(".local") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def endpoint_id(model: Any) -> str | None:
    """A short stable id of ``model``'s endpoint (None for a model without one, e.g. offline)."""
    base_url = getattr(model, "base_url", None)
    if not base_url or getattr(model, "is_offline", False):
        return None
    return hashlib.sha1(f"{base_url}|{model.name}".encode()).hexdigest()[:12]


def _expiry(value: str) -> tuple[str, datetime | None]:
    try:
        data = json.loads(value)
        return str(data["holder"]), datetime.fromisoformat(data["expires_at"])
    except (ValueError, KeyError, TypeError):
        return "", None


def _typing_name(endpoint: str, session: Scope) -> str:
    """The lease of a conversation's typing mark (its id hashed: the gate's keys are global)."""
    return f"gate.{endpoint}.turn.typing-{hashlib.sha1(session.key().encode()).hexdigest()[:16]}"


class ModelGate:
    """The gates of every endpoint, over one KV store shared by every process of a deployment.

    ``concurrency``: 0 for auto (see the module docstring), else the number of calls in flight
    per endpoint. ``background_max_wait``: seconds a background call waits at most.
    """

    def __init__(self, *, kv: KVStore, concurrency: int = 0, background_max_wait: float = 300.0,
                 after_turn: float = 0.0, poll: float = POLL, background_poll: float = BACKGROUND_POLL,
                 hold_ttl: float = HOLD_TTL) -> None:
        self.kv = kv
        self.concurrency = concurrency
        self.after_turn = after_turn
        self.background_max_wait = background_max_wait
        self.poll, self.background_poll, self.hold_ttl = poll, background_poll, hold_ttl
        self.stats = GateStats()
        # Set when this process gives a slot back, per event loop (an Event belongs to one loop).
        self._released: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
            weakref.WeakKeyDictionary()
        )

    # -- which endpoints, how many at once ----------------------------------------------------

    def limit(self, model: Any) -> int | None:
        """Calls in flight at once for ``model``'s endpoint; None: not gated."""
        if endpoint_id(model) is None:
            return None
        if self.concurrency:
            return self.concurrency
        return 1 if _is_local(urlsplit(model.base_url).hostname or "") else None

    # -- the state ------------------------------------------------------------------------------

    def _read(self, endpoint: str) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
        """Live entries ``(kind, index or id, holder)`` and expired ones ``(kind, key, version)``."""
        prefix = f"lease.gate.{endpoint}."
        now = datetime.now(UTC)
        live, expired = [], []
        for item in self.kv.list(_SCOPE, prefix=prefix):
            kind, _, rest = item.key[len(prefix):].partition(".")
            holder, expires_at = _expiry(item.value)
            if expires_at is not None and expires_at > now:
                live.append((kind, rest, holder))
            else:
                expired.append((kind, item.key, str(item.version)))
        for _kind, key, version in expired:  # left by a dead holder: tidy up, losing races is fine
            with contextlib.suppress(ConcurrentChange):
                self.kv.delete(_SCOPE, key, expected_version=int(version))
        return live, expired

    def state(self, model: Any) -> GateState | None:
        """The gate of ``model``'s endpoint now (None when it is not gated). Synchronous."""
        limit, endpoint = self.limit(model), endpoint_id(model)
        if limit is None or endpoint is None:
            return None
        live, _ = self._read(endpoint)
        running = tuple((h.split("|")[0], h.split("|")[1] if "|" in h else "") for k, _, h in live if k == "slot")
        return GateState(
            endpoint=endpoint,
            limit=limit,
            turns=sum(k == "turn" for k, _, _ in live),
            running=running,
            queued=tuple(h.split("|")[1] if "|" in h else "" for k, _, h in live if k == "queued"),
        )

    # -- turn marks ---------------------------------------------------------------------------

    def mark_turn(self, model: Any, *, session: Scope | None = None) -> Any:
        """Take a turn mark for ``model``'s endpoint (synchronous: the runtime takes it in its
        turn's first store trip); returns the lease, or None when the endpoint is not gated.
        Keep it with ``keep`` and give it back with ``KeptLease.end``. The typing mark of
        ``session`` (the turn's conversation), if any, is dropped once this one is taken."""
        endpoint = endpoint_id(model)
        if endpoint is None or self.limit(model) is None:
            return None
        mark = uuid.uuid4().hex[:16]
        lease = acquire_lease(kv=self.kv, scope=_SCOPE, name=f"gate.{endpoint}.turn.{mark}", ttl=self.hold_ttl,
                              holder=f"turn|{mark}")
        if session is not None:
            key = lease_key(_typing_name(endpoint, session))
            try:
                current = self.kv.get(_SCOPE, key)
                if current is not None:
                    self.kv.delete(_SCOPE, key, expected_version=current.version)
            except ConcurrentChange:  # signalled again meanwhile: it runs out by itself
                pass
            except Exception:  # the turn goes on with its mark; the typing mark runs out by itself
                logger.warning("could not drop the typing mark of %s", session.key(), exc_info=True)
        return lease

    def mark_typing(self, model: Any, *, session: Scope, hold: float = TYPING_HOLD) -> bool:
        """The user of ``session`` is typing a message to ``model``: a turn mark that holds for
        ``hold`` seconds from now (a later signal extends it) and then runs out by itself, unless
        the turn's own mark replaces it first (``mark_turn``). False when the endpoint is not
        gated. Synchronous: one store write."""
        endpoint = endpoint_id(model)
        if endpoint is None or self.limit(model) is None:
            return False
        name = _typing_name(endpoint, session)
        with contextlib.suppress(LeaseBusy):  # another signal of the same conversation holds it now
            acquire_lease(kv=self.kv, scope=_SCOPE, name=name, ttl=hold, holder=f"turn|{name.rpartition('.')[2]}")
        return True

    @contextlib.asynccontextmanager
    async def hold_urgent(self, model: Any, *, label: str) -> AsyncIterator[None]:
        """An urgent mark for ``model``'s endpoint while the block runs (nothing when it is not
        gated): other background work waits, and gives the model up (see the module docstring).
        The block's own calls must be made ``urgent``."""
        endpoint = endpoint_id(model)
        if endpoint is None or self.limit(model) is None:
            yield
            return
        lease = await run_blocking(acquire_lease, kv=self.kv, scope=_SCOPE,
                                   name=f"gate.{endpoint}.urgent.{uuid.uuid4().hex[:16]}", ttl=self.hold_ttl,
                                   holder=f"urgent|{label}")
        kept = self.keep(lease, name=f"gate-urgent-{label}")
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(kept.end())
            self._slot_given_back()

    def keep(self, lease: Any, *, name: str) -> KeptLease:
        """Renew ``lease`` (a turn mark, a slot, a queue entry) until ``end()``."""
        return KeptLease(kv=self.kv, lease=lease, ttl=self.hold_ttl, name=name)

    async def end_turn(self, kept: KeptLease) -> None:
        """The turn is over: its mark stays ``after_turn`` seconds more, then runs out."""
        await kept.end(linger=self.after_turn)

    # -- slots ----------------------------------------------------------------------------------

    def _try_slot(self, endpoint: str, limit: int, priority: str, label: str, urgent: bool = False) -> Any:
        """A slot lease if the gate admits a call of ``priority`` now, else None (a background
        call that is not ``urgent`` also waits while an urgent one does)."""
        live, _ = self._read(endpoint)
        held = {index for kind, index, _ in live if kind == "slot"}
        if priority == BACKGROUND:
            turns = sum(kind == "turn" for kind, _, _ in live)
            background = sum(kind == "slot" and holder.startswith(BACKGROUND) for kind, _, holder in live)
            if turns + background >= limit or (not urgent and _urgent_waiting(live)):
                return None
        for index in range(limit):
            if str(index) in held:
                continue
            try:
                return acquire_lease(kv=self.kv, scope=_SCOPE, name=f"gate.{endpoint}.slot.{index}",
                                     ttl=self.hold_ttl, holder=f"{priority}|{label}|{uuid.uuid4().hex[:12]}")
            except LeaseBusy:
                continue
        return None

    def _must_yield(self, endpoint: str, limit: int, urgent: bool = False) -> str | None:
        """Whom a running background call gives its slot up to, if it must: ``FOREGROUND`` (the
        turns need more than is left), ``URGENT`` (a call that is not urgent, while urgent
        background work holds its mark and no slot is free), else None."""
        live, _ = self._read(endpoint)
        turns = sum(kind == "turn" for kind, _, _ in live)
        background = sum(kind == "slot" and holder.startswith(BACKGROUND) for kind, _, holder in live)
        if turns > 0 and turns + background > limit:
            return FOREGROUND
        if not urgent and turns + background >= limit and _urgent_waiting(live):
            return URGENT
        return None

    async def _wait_slot(self, model: Any, priority: str, label: str, deadline: float | None,
                         stop_when: Callable[[], bool] | None = None, urgent: bool = False) -> Any:
        """A slot; None at ``deadline``; ``_STOPPED`` when ``stop_when`` says so while waiting."""
        endpoint, limit = endpoint_id(model), self.limit(model)
        pause = self.poll if priority == FOREGROUND else self.background_poll
        while True:
            slot = await run_blocking(self._try_slot, endpoint, limit, priority, label, urgent)
            if slot is not None:
                return slot
            if deadline is not None and time.monotonic() >= deadline:
                return None
            if stop_when is not None and await run_blocking(stop_when):
                return _STOPPED
            wake = self._wake()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), pause)

    def _wake(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        event = self._released.get(loop)
        if event is None or event.is_set():
            event = self._released[loop] = asyncio.Event()
        return event

    def _slot_given_back(self) -> None:
        event = self._released.get(asyncio.get_running_loop())
        if event is not None:
            event.set()  # waiters on other loops (threads, processes) see it at their next poll


_STOPPED = object()  # ``_wait_slot``: the caller's ``stop_when`` said stop
URGENT = "urgent"  # the kind of an urgent mark's lease (``hold_urgent``)


def _urgent_waiting(live: list[tuple[str, str, str]]) -> bool:
    """Whether urgent background work holds its mark now."""
    return any(kind == URGENT for kind, _, _ in live)
