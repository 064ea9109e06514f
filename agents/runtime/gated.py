"""A model seen through the gate (``agents.runtime.gate``): its ``stream`` waits for a slot with
one priority, and a background call gives the model up to chat or to urgent work and asks again,
or stops for good (``GaveWay``) when its ``stop_when`` says so. ``calls`` makes them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents.llm import ModelUnavailable
from agents.runtime.gate import _SCOPE, _STOPPED, BACKGROUND, FOREGROUND, URGENT, ModelGate, endpoint_id
from agents.runtime.leases import KeptLease
from memory.compression.summary_calls import SummarizerWithdrawn
from memory.locks import acquire_lease
from memory.threads import run_blocking

logger = logging.getLogger("agents.runtime.gate")  # the gate's own log: one place to read


def calls(gate: ModelGate, model: Any, *, priority: str = FOREGROUND, label: str = "",
          stop_when: Callable[[], bool] | None = None, urgent: bool = False) -> Any:
    """``model`` as seen through ``gate`` with ``priority`` (``model`` itself when ungated).
    ``stop_when`` (background; called on a store thread): asked whenever the call cannot run
    (waiting for a slot, or preempted by chat); when it says so the call stops for good with
    ``GaveWay`` instead of waiting for chat (the cleanup ahead of need, once its session is far
    over its threshold and a turn must clean up itself). ``urgent`` (background): the call comes
    before other background work, which gives its slot up to it while the caller holds the
    gate's urgent mark (``ModelGate.hold_urgent``: the cleanup ahead of need)."""
    if endpoint_id(model) is None:
        return model
    return GatedModel(model, gate=gate, priority=priority, label=label or priority, stop_when=stop_when,
                      urgent=urgent)


class GaveWay(ModelUnavailable, SummarizerWithdrawn):
    """A background call with ``stop_when`` stopped for good instead of waiting for chat; a
    cleanup that made it ends with nothing written (``SummarizerWithdrawn``)."""


class GatedModel:
    """A ChatModel whose ``stream`` goes through the gate with one priority; everything else
    (``name``, ``context_window``, ``capabilities``, ``discover`` ...) is the model's own."""

    def __init__(self, model: Any, *, gate: ModelGate, priority: str, label: str,
                 stop_when: Callable[[], bool] | None = None, urgent: bool = False) -> None:
        self.inner, self.gate, self.priority, self.label = model, gate, priority, label
        self.stop_when, self.urgent = stop_when, urgent

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def describe(self) -> str:
        return self.inner.describe()

    async def stream(self, **request: Any) -> AsyncIterator[Any]:
        """``ChatModel.stream`` after the gate admitted the call (see the module docstring)."""
        discover = getattr(self.inner, "discover", None)
        if discover is not None:
            await discover()  # the auto concurrency may come from the server's slot count
        if self.gate.limit(self.inner) is None:
            async with contextlib.aclosing(self.inner.stream(**request)) as events:
                async for event in events:
                    yield event
            return
        capabilities = getattr(self.inner, "capabilities", None)
        slots = getattr(capabilities, "slots", None) or 0
        if slots >= 2 and getattr(capabilities, "server", "") == "llama.cpp":
            # Background work in the last slot; with two, the chat in the first (with more, the
            # server picks the chat's slot by its cached prompt among the others' too).
            if self.priority == BACKGROUND:
                request = {**request, "slot": slots - 1}
            elif slots == 2:
                request = {**request, "slot": 0}
        if self.priority == FOREGROUND:
            async with contextlib.aclosing(self._foreground(request)) as events:
                async for event in events:
                    yield event
            return
        for event in await self._background(request):
            yield event

    async def _foreground(self, request: dict[str, Any]) -> AsyncIterator[Any]:
        started = time.monotonic()
        slot = await self.gate._wait_slot(self.inner, FOREGROUND, self.label, None)
        waited = time.monotonic() - started
        stats = self.gate.stats
        stats.chat_calls += 1
        stats.chat_waited += waited
        stats.chat_max_wait = max(stats.chat_max_wait, waited)
        stats.waits.append(waited)
        kept = self.gate.keep(slot, name=f"gate-slot-{self.label}")
        try:
            async with contextlib.aclosing(self.inner.stream(**request)) as events:
                async for event in events:
                    yield event
        finally:
            await asyncio.shield(self._end(kept))

    async def _end(self, kept: KeptLease) -> None:
        with contextlib.suppress(Exception):
            await kept.end()
        self.gate._slot_given_back()

    def _gave_way(self) -> GaveWay:
        logger.info("a background %s call gave the model up to chat and stops", self.label)
        return GaveWay(f"the {self.label} gave the model {self.inner.describe()} up to chat and stopped")

    async def _background(self, request: dict[str, Any]) -> list[Any]:
        gate, endpoint = self.gate, endpoint_id(self.inner)
        # The longest wait counts the time spent waiting for a slot, over every round: a call that
        # ran a while before chat preempted it waits as long again as one that never ran.
        waited = 0.0
        while True:
            queued = await run_blocking(
                acquire_lease, kv=gate.kv, scope=_SCOPE, name=f"gate.{endpoint}.queued.{uuid.uuid4().hex[:16]}",
                ttl=gate.hold_ttl, holder=f"queued|{self.label}",
            )
            waiting = gate.keep(queued, name=f"gate-queued-{self.label}")
            began = time.monotonic()
            try:
                slot = await gate._wait_slot(self.inner, BACKGROUND, self.label,
                                             began + max(0.0, gate.background_max_wait - waited),
                                             stop_when=self.stop_when, urgent=self.urgent)
            finally:
                waited += time.monotonic() - began
                await asyncio.shield(self._end(waiting))
            if slot is _STOPPED:
                raise self._gave_way()
            if slot is None:
                gate.stats.gave_up += 1
                raise ModelUnavailable(
                    f"the model {self.inner.describe()} stayed busy with chat for {gate.background_max_wait:g}s; "
                    f"the {self.label} waits for a quieter moment (MODEX_BACKGROUND_MAX_WAIT)"
                )
            kept = gate.keep(slot, name=f"gate-slot-{self.label}")
            try:
                events, to = await self._run_unless_preempted(request, endpoint)
            finally:
                await asyncio.shield(self._end(kept))
            if events is not None:
                gate.stats.background_calls += 1
                return events
            if to == URGENT:
                gate.stats.yielded_to_urgent += 1
                logger.info("a background %s call gave the model up to urgent memory work (a cleanup ahead); it asks "
                            "again later", self.label)
                continue
            gate.stats.preempted += 1
            if self.stop_when is not None and await run_blocking(self.stop_when):
                raise self._gave_way()
            logger.info("a background %s call gave the model up to chat (a turn, or a user typing); it asks again later",
                        self.label)

    async def _run_unless_preempted(self, request: dict[str, Any], endpoint: str) -> tuple[list[Any] | None, str]:
        """The call's events, or None and whom it gave way to (``_must_yield``) when a turn or
        urgent work arrived first (the stream is closed then)."""
        gate, limit = self.gate, self.gate.limit(self.inner)

        async def drain() -> list[Any]:
            async with contextlib.aclosing(self.inner.stream(**request)) as events:
                return [event async for event in events]

        call = asyncio.ensure_future(drain())
        try:
            while not call.done():
                done, _ = await asyncio.wait({call}, timeout=gate.poll)
                if done:
                    break
                to = await run_blocking(gate._must_yield, endpoint, limit, self.urgent)
                if to is not None:
                    call.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await call
                    return None, to
            return call.result(), ""
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await call
