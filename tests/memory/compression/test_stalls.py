"""A cleanup that stalls past its lease, while another takes over, changes nothing when it wakes.

The fault tests beside this module (test_faults.py, test_fault_steps.py) kill or break a cleanup;
here one only *pauses*: a slow summarizer, a stopped process, a long GC pause. Holder A is held
at one point of its run (inside the summarizer, before each step, between reading its intent
and deleting it), its lease runs out (its expiry is moved into the past, as the clock would),
holder B takes the session over and either finishes or dies after archiving a cut of its own,
more messages arrive, and only then does A go on. Whatever A writes after waking must be
refused by its fence. A last cleanup settles the session. Every backend (the ``bundle``
fixture): each message is then exactly once in the session or the catalog, and in the archive.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync

import memory.compression.cleanup as cleanup_module
import memory.compression.pruned as pruned_module
import memory.compression.steps as steps_module
from memory.compression.cleanup import INTENT_KEY, LEASE_NAME, CleanupFailed, CleanupStatus, arun_cleanup
from memory.compression.pruned import first_uncommitted_seq
from memory.hooks import MemoryHookDispatcher, MemoryHookPoint
from memory.locks import lease_key
from memory.messages import utcnow

from .helpers import RecordingSummarizer, no_sleep
from .test_cleanup import ARCHIVE, cleanup, conserved, conversation
from .test_faults import ARCHIVE_CONFIG, STEPS, Crash, archived_ids

#: Where holder A is held: inside its summarizer call, before each step, and inside
#: clear_intent between reading the intent and deleting it (the gap a KV version cannot guard).
POINTS = ["inside the summarizer", *(f"before {step}" for step in STEPS), "inside clear_intent"]
#: What holder B does: finish, or die right after archiving a cut it planned itself.
B_FATES = ["finishes", "dies after archiving its own cut"]

_holder: contextvars.ContextVar[str] = contextvars.ContextVar("holder", default="")


class Stall:
    """Holds holder A at its point until released; ``reached`` says A got there."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.released = asyncio.Event()

    async def here(self) -> None:
        if _holder.get() == "A" and not self.reached.is_set():
            self.reached.set()
            await self.released.wait()


def expire_lease(bundle, session) -> None:  # type: ignore[no-untyped-def]
    """Move the cleanup lease's expiry into the past, as the clock would while its holder stalls."""
    item = bundle.kv.get(session, lease_key(LEASE_NAME))
    data = json.loads(item.value)
    data["expires_at"] = (utcnow() - timedelta(seconds=1)).isoformat()
    bundle.kv.put(session, lease_key(LEASE_NAME), json.dumps(data), expected_version=item.version)


def install_stall(monkeypatch: pytest.MonkeyPatch, point: str, stall: Stall, hooks: MemoryHookDispatcher) -> Any:
    """Put ``stall`` at ``point`` of holder A's run; returns A's summarizer."""
    model = RecordingSummarizer()

    async def summarizer(prompt):  # type: ignore[no-untyped-def]
        if point == "inside the summarizer":
            await stall.here()
        return model(prompt)

    step = point.removeprefix("before ")
    if step == "choose":  # a plain function: A is held just before it, by the hook that precedes it
        async def held_before_choosing(event):  # type: ignore[no-untyped-def]
            await stall.here()

        hooks.register(MemoryHookPoint.CLEANUP_TRIGGERED, held_before_choosing)
    elif point.startswith("before "):
        original = getattr(steps_module, step)

        async def held(**kwargs):  # type: ignore[no-untyped-def]
            await stall.here()
            return await original(**kwargs)

        monkeypatch.setattr(steps_module, step, held)
    elif point == "inside clear_intent":
        original_io = steps_module.io

        async def io(fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            if getattr(fn, "__name__", "") == "delete" and INTENT_KEY in args:
                await stall.here()
            return await original_io(fn, *args, **kwargs)

        monkeypatch.setattr(steps_module, "io", io)
    return summarizer


def b_dies_after_archiving_its_own_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    saved: list[str] = []
    original_save, original_archive = steps_module.save_intent, steps_module.write_archive

    async def save_intent(*, run, intent):  # type: ignore[no-untyped-def]
        await original_save(run=run, intent=intent)
        if _holder.get() == "B":
            saved.append(intent.summary_id)

    async def write_archive(*, run, intent, history):  # type: ignore[no-untyped-def]
        result = await original_archive(run=run, intent=intent, history=history)
        if _holder.get() == "B" and intent.summary_id in saved:
            raise Crash("B died after archiving its own cut")
        return result

    monkeypatch.setattr(steps_module, "save_intent", save_intent)
    monkeypatch.setattr(steps_module, "write_archive", write_archive)


def settle(bundle, session, catalog) -> None:  # type: ignore[no-untyped-def]
    """The next cleanups, until the session is under its threshold and no intent is left."""
    for _ in range(4):
        result = cleanup(bundle, session, catalog, config=ARCHIVE_CONFIG, archive_scope=ARCHIVE)
        assert result.status in (CleanupStatus.COMMITTED, CleanupStatus.SKIPPED), result.reason
        if result.status is CleanupStatus.SKIPPED and bundle.kv.get(session, INTENT_KEY) is None:
            return
    pytest.fail("the session did not settle")


def exactly_once(bundle, session, catalog, ids: list[str]) -> None:  # type: ignore[no-untyped-def]
    conserved(bundle, session, catalog, ids)  # session + catalog: each message once, in order
    live = bundle.messages.read(session)
    committed = [e.message.id for e in catalog.entries(session, before_seq=first_uncommitted_seq(live))]
    archived = archived_ids(bundle)
    assert len(archived) == len(set(archived)), "a message is archived twice"
    assert archived == committed, "the archive and the catalog disagree"


@pytest.mark.parametrize("b_fate", B_FATES)
@pytest.mark.parametrize("point", POINTS)
def test_a_cleanup_stalled_past_its_lease_changes_nothing_when_it_wakes(
    bundle, session, catalog, monkeypatch, point: str, b_fate: str
) -> None:
    ids = [m.id for m in bundle.messages.append(session, conversation(12))]
    hooks_a = MemoryHookDispatcher()
    stall = Stall()
    summarizer_a = install_stall(monkeypatch, point, stall, hooks_a)
    if b_fate != "finishes":
        b_dies_after_archiving_its_own_cut(monkeypatch)

    def run(summarizer: Any, hooks: MemoryHookDispatcher):  # type: ignore[no-untyped-def]
        return arun_cleanup(
            bundle=bundle, session=session, config=ARCHIVE_CONFIG, summarizer=summarizer, catalog=catalog,
            hooks=hooks, archive_scope=ARCHIVE, sleep=no_sleep,
        )

    async def scenario() -> tuple[Any, Any]:
        token = _holder.set("A")
        a = asyncio.create_task(run(summarizer_a, hooks_a))
        _holder.reset(token)
        reached = asyncio.create_task(stall.reached.wait())
        await asyncio.wait([a, reached], return_when=asyncio.FIRST_COMPLETED)
        if a.done():  # A never came to its point (e.g. it committed before clear_intent's gap)
            reached.cancel()
            return a.result(), None
        await cleanup_module.io(expire_lease, bundle, session)
        ids.extend(m.id for m in await cleanup_module.io(bundle.messages.append, session, conversation(6)))
        token = _holder.set("B")
        try:
            b: Any = await run(RecordingSummarizer(), MemoryHookDispatcher())
        except CleanupFailed as failure:
            assert isinstance(failure.__cause__, Crash)
            b = failure
        finally:
            _holder.reset(token)
        ids.extend(m.id for m in await cleanup_module.io(bundle.messages.append, session, conversation(4)))
        stall.released.set()
        return await a, b

    result_a, result_b = async_to_sync(scenario)()
    assert result_b is not None, f"A never reached {point}"
    if isinstance(result_b, CleanupFailed):
        assert b_fate != "finishes"
    else:
        assert result_b.committed, result_b.reason
    # A changed nothing after waking: it either stopped ("taken over"), or had committed its cut
    # before it stalled and left the rest to B.
    if result_a.status is CleanupStatus.ABORTED:
        assert "taken over" in result_a.reason or "lease" in result_a.reason, result_a.reason
    else:
        assert result_a.committed and point in ("before clear_intent", "before finished", "inside clear_intent")
    monkeypatch.undo()
    settle(bundle, session, catalog)
    assert bundle.kv.get(session, INTENT_KEY) is None
    exactly_once(bundle, session, catalog, ids)


def test_a_takeover_waits_for_a_catalog_write_under_way(threaded_bundle, tmp_path, monkeypatch) -> None:
    """A stalls inside the catalog write, after reading what is catalogued and before creating its
    file; B cannot take the lease over until A's file is written (the fence holds the lease still
    for that step). A then stalls again before archiving, B takes over and finishes A's cut
    (finding A's blocks catalogued), and A wakes to find its commit refused: nothing twice.
    Real threads, each with its own database connection, on every backend."""
    from memory.compression.pruned import PrunedCatalog
    from memory.scopes import SessionScope

    bundle = threaded_bundle
    session = SessionScope("stalled-catalog")
    catalog = PrunedCatalog(tmp_path / "pruned")
    ids = [m.id for m in bundle.messages.append(session, conversation(12))]
    inside, release, order = threading.Event(), threading.Event(), []
    real_render = pruned_module.render_file

    def render_file(**kwargs: Any) -> str:
        if _holder.get() == "A" and not inside.is_set():
            inside.set()
            release.wait(30)
        return real_render(**kwargs)

    monkeypatch.setattr(pruned_module, "render_file", render_file)
    b_done = threading.Event()
    real_archive = steps_module.write_archive

    async def write_archive(**kwargs: Any) -> Any:
        if _holder.get() == "A":
            b_done.wait(30)  # A stalls again, past its lease, while B takes over and finishes
        return await real_archive(**kwargs)

    monkeypatch.setattr(steps_module, "write_archive", write_archive)
    results: dict[str, Any] = {}

    def holder(name: str) -> None:
        from django.db import connection

        _holder.set(name)  # carried into the cleanup's event loop and back to its store calls
        try:
            if name == "B":
                expire_lease(bundle, session)
                order.append("B took over")
            results[name] = cleanup(bundle, session, catalog, config=ARCHIVE_CONFIG, archive_scope=ARCHIVE)
        except BaseException as exc:  # reported below
            results[name] = exc
        finally:
            if name == "B":
                b_done.set()
            connection.close()

    a = threading.Thread(target=holder, args=("A",))
    a.start()
    assert inside.wait(30), results.get("A")
    b = threading.Thread(target=holder, args=("B",))
    b.start()
    b.join(1.0)  # B is blocked on the lease, which A's catalog step holds still
    order.append("A released")
    release.set()
    a.join(60)
    b.join(60)
    assert order == ["A released", "B took over"], results
    assert results["B"].committed and results["B"].resumed, results["B"]
    assert results["A"].status is CleanupStatus.ABORTED and "taken over" in results["A"].reason
    settle(bundle, session, catalog)
    exactly_once(bundle, session, catalog, ids)
