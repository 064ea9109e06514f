"""memory.threads.run_blocking: the store work of different conversations runs side by side,
the work of one conversation stays in order. Real threads, real stores (every backend)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from memory.scopes import SessionScope
from memory.threads import STORE_THREADS, close_connections, run_blocking

from .helpers import user

REQUEST = contextvars.ContextVar("request", default="none")


async def test_calls_of_different_callers_run_side_by_side():
    # Each call waits until the other has started: on one shared thread (the old
    # sync_to_async(thread_sensitive=True)) the first would wait alone and the barrier break.
    meet = threading.Barrier(2, timeout=20)

    def blocking(name: str) -> tuple[str, str]:
        meet.wait()
        return name, threading.current_thread().name

    (a, thread_a), (b, thread_b) = await asyncio.gather(run_blocking(blocking, "a"), run_blocking(blocking, "b"))
    assert (a, b) == ("a", "b")
    assert thread_a != thread_b
    assert thread_a.startswith("modex-store") and thread_b.startswith("modex-store")


async def test_context_variables_and_errors_cross_the_thread():
    REQUEST.set("turn-7")

    def read_var() -> str:
        return REQUEST.get()

    def fail() -> None:
        raise ValueError("store said no")

    assert await run_blocking(read_var) == "turn-7"
    with pytest.raises(ValueError, match="store said no"):
        await run_blocking(fail)


async def test_conversations_append_at_once_and_each_keeps_its_order(threaded_bundle):
    # More conversations than store threads, each appending one message after the other as a
    # turn does (awaiting each append): nothing is lost, each session's seqs are 1..n in order.
    sessions = [SessionScope(f"chat-{i}") for i in range(STORE_THREADS + 4)]
    per_session = 6

    async def turn(session: SessionScope) -> None:
        for i in range(per_session):
            await run_blocking(threaded_bundle.messages.append, session, [user(f"{session.key()} m{i}")])

    await asyncio.gather(*(turn(s) for s in sessions))
    for session in sessions:
        messages = await run_blocking(threaded_bundle.messages.read, session)
        assert [m.seq for m in messages] == list(range(1, per_session + 1))
        assert [m.content for m in messages] == [f"{session.key()} m{i}" for i in range(per_session)]


def test_a_synchronous_caller_keeps_the_work_on_its_own_thread():
    # Driven through async_to_sync (a task, a management command, a test inside a transaction),
    # store calls go back to the caller's thread: its connection and transaction are the ones
    # the work must see.
    from asgiref.sync import async_to_sync

    async def drive() -> str:
        return await run_blocking(lambda: threading.current_thread().name)

    assert async_to_sync(drive)() == threading.current_thread().name


async def on_every_store_thread(fn) -> dict[str, object]:
    """``fn()`` once on each store thread (all of them held at a barrier until each has one)."""
    meet = threading.Barrier(STORE_THREADS, timeout=20)

    def task():
        meet.wait()
        return threading.current_thread().name, fn()

    return dict(await asyncio.gather(*(run_blocking(task) for _ in range(STORE_THREADS))))


@pytest.mark.django_db(transaction=True)
async def test_close_connections_closes_the_connection_of_every_store_thread():
    """What lets a test run drop its PostgreSQL database: no store thread keeps a session open."""
    from django.db import connections

    def connect() -> bool:
        connections["default"].ensure_connection()
        return connections["default"].connection is not None

    opened = await on_every_store_thread(connect)
    assert len(opened) == STORE_THREADS and all(opened.values())
    await asyncio.to_thread(close_connections)
    closed = await on_every_store_thread(lambda: connections["default"].connection is None)
    assert closed.keys() == opened.keys() and all(closed.values())
