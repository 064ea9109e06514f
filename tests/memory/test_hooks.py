"""Memory hooks: the five points, their events, ordering, sync/async handlers, failure isolation."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
from datetime import UTC, datetime

import pytest

from memory.hooks import (
    EVENT_TYPES,
    REORIENTATION_KEY,
    TODO_KEY,
    CleanupFinished,
    CleanupTriggered,
    ConsolidationFinished,
    ContextAssembled,
    CoreMemoryUpdated,
    MemoryHookDispatcher,
    MemoryHookPoint,
    SectionAccount,
    TodoReorientationHook,
    take_reorientation,
)
from memory.scopes import SessionScope, UserScope
from memory.stores.base import KVItem, KVStore, VersionConflict

SESSION = SessionScope("s1")


def finished(**overrides: object) -> CleanupFinished:
    values: dict[str, object] = dict(
        session=SESSION,
        evicted_count=10,
        kept_count=4,
        tokens_before=1000,
        tokens_after=300,
        catalog_path=None,
        archive_document_id=None,
        fallback_summary=False,
        through_seq=10,
    )
    values.update(overrides)
    return CleanupFinished(**values)  # type: ignore[arg-type]


def test_exactly_the_five_points_each_with_a_docstring() -> None:
    assert [p.name for p in MemoryHookPoint] == [
        "CLEANUP_TRIGGERED",
        "CLEANUP_FINISHED",
        "CONTEXT_ASSEMBLED",
        "CORE_MEMORY_UPDATED",
        "CONSOLIDATION_FINISHED",
    ]
    docs = [p.__doc__ for p in MemoryHookPoint]
    assert all(doc and "\n" not in doc.strip() for doc in docs)
    assert len(set(docs)) == 5
    assert set(EVENT_TYPES) == set(MemoryHookPoint)


def test_events_are_frozen() -> None:
    events = [
        CleanupTriggered(SESSION, 100, 80),
        finished(),
        ContextAssembled(SESSION, (SectionAccount("core", 10, 3),), 10, 1000, 750),
        CoreMemoryUpdated(UserScope("42"), "USER.md", 3, "agent"),
        ConsolidationFinished(UserScope("42"), "incremental", 2, 1),
    ]
    for event in events:
        assert dataclasses.is_dataclass(event)
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.__setattr__(dataclasses.fields(event)[0].name, None)
    assert {type(e) for e in events} == set(EVENT_TYPES.values())


def test_handlers_run_in_registration_order_sync_and_async() -> None:
    hooks = MemoryHookDispatcher()
    calls: list[str] = []

    def first(event: CleanupTriggered) -> None:
        calls.append("first")

    async def second(event: CleanupTriggered) -> None:
        await asyncio.sleep(0)
        calls.append("second")

    class Third:
        async def __call__(self, event: CleanupTriggered) -> None:
            calls.append("third")

    hooks.register(MemoryHookPoint.CLEANUP_TRIGGERED, first)
    hooks.register(MemoryHookPoint.CLEANUP_TRIGGERED, second)
    hooks.register(MemoryHookPoint.CLEANUP_TRIGGERED, Third())
    hooks.register(MemoryHookPoint.CLEANUP_FINISHED, lambda e: calls.append("other point"))

    assert hooks.dispatch(MemoryHookPoint.CLEANUP_TRIGGERED, CleanupTriggered(SESSION, 1, 2)) == []
    assert calls == ["first", "second", "third"]
    calls.clear()
    assert asyncio.run(hooks.adispatch(MemoryHookPoint.CLEANUP_TRIGGERED, CleanupTriggered(SESSION, 1, 2))) == []
    assert calls == ["first", "second", "third"]


def test_sync_dispatch_of_an_async_handler_inside_a_running_loop() -> None:
    hooks = MemoryHookDispatcher()
    seen: list[str] = []

    async def handler(event: CleanupTriggered) -> None:
        seen.append(threading.current_thread().name)

    hooks.register(MemoryHookPoint.CLEANUP_TRIGGERED, handler)

    async def caller() -> None:
        hooks.dispatch(MemoryHookPoint.CLEANUP_TRIGGERED, CleanupTriggered(SESSION, 1, 2))

    asyncio.run(caller())
    assert seen == ["memory-hook"]  # ran to completion, on a loop of its own


def test_failing_handler_is_logged_and_the_rest_still_run(caplog: pytest.LogCaptureFixture) -> None:
    hooks = MemoryHookDispatcher()
    calls: list[str] = []

    def broken(event: object) -> None:
        raise RuntimeError("boom")

    async def broken_async(event: object) -> None:
        raise ValueError("async boom")

    hooks.register(MemoryHookPoint.CLEANUP_FINISHED, broken)
    hooks.register(MemoryHookPoint.CLEANUP_FINISHED, broken_async)
    hooks.register(MemoryHookPoint.CLEANUP_FINISHED, lambda e: calls.append("after"))
    with caplog.at_level(logging.ERROR, logger="memory.hooks"):
        failures = hooks.dispatch(MemoryHookPoint.CLEANUP_FINISHED, finished())
        afailures = asyncio.run(hooks.adispatch(MemoryHookPoint.CLEANUP_FINISHED, finished()))
    assert calls == ["after", "after"]
    assert [type(f.error) for f in failures] == [RuntimeError, ValueError]
    assert [type(f.error) for f in afailures] == [RuntimeError, ValueError]
    records = [r for r in caplog.records if r.name == "memory.hooks"]
    assert len(records) == 4 and all(r.exc_info for r in records)
    assert "broken" in records[0].getMessage()


def test_async_handler_timeout_counts_as_a_failure() -> None:
    hooks = MemoryHookDispatcher(handler_timeout=0.01)

    async def slow(event: object) -> None:
        await asyncio.sleep(5)

    hooks.register(MemoryHookPoint.CLEANUP_TRIGGERED, slow)
    failures = asyncio.run(hooks.adispatch(MemoryHookPoint.CLEANUP_TRIGGERED, CleanupTriggered(SESSION, 1, 2)))
    assert len(failures) == 1 and isinstance(failures[0].error, TimeoutError)


def test_wrong_event_type_is_a_caller_bug() -> None:
    hooks = MemoryHookDispatcher()
    with pytest.raises(TypeError, match="CLEANUP_FINISHED carries CleanupFinished"):
        hooks.dispatch(MemoryHookPoint.CLEANUP_FINISHED, CleanupTriggered(SESSION, 1, 2))
    with pytest.raises(TypeError):
        hooks.register("cleanup_finished", print)  # type: ignore[arg-type]


def test_unregister_and_add() -> None:
    hooks = MemoryHookDispatcher()
    handler = hooks.register(MemoryHookPoint.CONTEXT_ASSEMBLED, lambda e: None)
    assert hooks.unregister(MemoryHookPoint.CONTEXT_ASSEMBLED, handler)
    assert not hooks.unregister(MemoryHookPoint.CONTEXT_ASSEMBLED, handler)
    todo = hooks.add(TodoReorientationHook(kv=MemoryKV()))
    assert hooks.handlers(MemoryHookPoint.CLEANUP_FINISHED) == (todo,)


# -- TodoReorientationHook --------------------------------------------------------------------


class MemoryKV(KVStore):
    """A minimal in-memory KVStore for hook tests (the real ones are tested elsewhere)."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], KVItem] = {}

    def get(self, scope, key):  # type: ignore[no-untyped-def]
        return self.items.get((scope.key(), key))

    def put(self, scope, key, value, *, expected_version=None):  # type: ignore[no-untyped-def]
        current = self.items.get((scope.key(), key))
        version = current.version if current else 0
        if expected_version is not None and expected_version != version:
            raise VersionConflict("conflict", expected=expected_version, actual=version)
        item = KVItem(scope, key, value, version + 1, datetime.now(UTC))
        self.items[(scope.key(), key)] = item
        return item

    def delete(self, scope, key, *, expected_version=None):  # type: ignore[no-untyped-def]
        current = self.items.get((scope.key(), key))
        if expected_version is not None and (current.version if current else 0) != expected_version:
            raise VersionConflict("conflict", expected=expected_version, actual=current and current.version)
        return self.items.pop((scope.key(), key), None) is not None

    def list(self, scope, *, prefix=""):  # type: ignore[no-untyped-def]
        found = [i for (s, k), i in self.items.items() if s == scope.key() and k.startswith(prefix)]
        return sorted(found, key=lambda i: i.key)

    def commit(self, writes, *, cursor=None, fence=None):  # type: ignore[no-untyped-def]
        raise NotImplementedError("the hook tests never commit")


def test_todo_reorientation_writes_a_note_once() -> None:
    kv = MemoryKV()
    todos = [
        {"content": "read the spec", "status": "completed"},
        {"content": "write the parser", "status": "in_progress"},
        "ship it",
    ]
    kv.put(SESSION, TODO_KEY, json.dumps(todos))
    hooks = MemoryHookDispatcher()
    hooks.add(TodoReorientationHook(kv=kv))
    assert hooks.dispatch(MemoryHookPoint.CLEANUP_FINISHED, finished(evicted_count=7, through_seq=42)) == []
    note = json.loads(kv.get(SESSION, REORIENTATION_KEY).value)
    assert note["through_seq"] == 42
    text = note["text"]
    assert "7 earlier messages" in text
    assert "- [x] read the spec" in text
    assert "- [ ] write the parser (in_progress)" in text
    assert "- [ ] ship it (pending)" in text
    assert take_reorientation(kv=kv, session=SESSION) == text
    assert take_reorientation(kv=kv, session=SESSION) is None


def test_todo_reorientation_without_a_todo_list_does_nothing() -> None:
    kv = MemoryKV()
    TodoReorientationHook(kv=kv)(finished())
    assert kv.get(SESSION, REORIENTATION_KEY) is None
    kv.put(SESSION, TODO_KEY, "[]")
    TodoReorientationHook(kv=kv)(finished())
    assert kv.get(SESSION, REORIENTATION_KEY) is None


def test_todo_reorientation_tolerates_a_free_text_list() -> None:
    kv = MemoryKV()
    kv.put(SESSION, TODO_KEY, "1. do a\n2. do b")
    TodoReorientationHook(kv=kv)(finished())
    assert "1. do a" in json.loads(kv.get(SESSION, REORIENTATION_KEY).value)["text"]


def test_todo_reorientation_failure_never_breaks_dispatch(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenKV(MemoryKV):
        def get(self, scope, key):  # type: ignore[no-untyped-def]
            raise OSError("disk gone")

    hooks = MemoryHookDispatcher()
    hooks.add(TodoReorientationHook(kv=BrokenKV()))
    with caplog.at_level(logging.ERROR, logger="memory.hooks"):
        failures = hooks.dispatch(MemoryHookPoint.CLEANUP_FINISHED, finished())
    assert len(failures) == 1 and "TodoReorientationHook" in failures[0].handler
