"""Where async code runs synchronous store work: a pool of threads shared by all conversations.

``sync_to_async(thread_sensitive=True)`` runs every call on one thread per process, so the
database work of all conversations queued behind each other, and a slow append of one chat
delayed the first token of every other. ``run_blocking`` runs the call on one of
``STORE_THREADS`` worker threads instead: calls of different conversations run side by side
(SQLite in WAL mode reads concurrently and queues writers on its own lock; PostgreSQL takes
them all), while the calls of one conversation stay in order because its turn awaits each.

Each worker thread keeps its own Django database connection (connections are per thread), so
there are at most ``STORE_THREADS`` of them per process. The stores are safe across threads:
SQL writes are transactions guarded by versions, the file backend locks a scope for threads
and processes alike (memory.stores.fsio.scope_lock).

Code driven from a synchronous caller (``async_to_sync``: a cleanup run by a task or a test,
perhaps inside that caller's transaction) keeps running its store calls on the caller's own
thread, exactly as ``thread_sensitive=True`` does: that thread's connection and open
transaction are the ones its work must see.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import AsyncToSync, sync_to_async

T = TypeVar("T")

STORE_THREADS = 8

_executor = ThreadPoolExecutor(max_workers=STORE_THREADS, thread_name_prefix="modex-store")


def _sync_caller_waiting() -> bool:
    """Whether this coroutine runs under ``async_to_sync``, its synchronous caller blocked on it
    (the cases in which ``sync_to_async(thread_sensitive=True)`` goes back to that caller's thread)."""
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return True
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return loop in AsyncToSync.loop_thread_executors


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a store thread, awaited (context variables carried over);
    on the caller's thread when a synchronous caller drives this code (see the module doc).

    The store thread's call goes straight to the executor, as ``asyncio.to_thread`` does:
    ``sync_to_async`` costs about twice as much per call (its bookkeeping lets the function call
    ``async_to_sync`` back into this loop, which no store call does), and a turn makes several
    of these calls before its model request. So ``fn`` sees the caller's context variables but
    not what Django keeps in asgiref ``Local`` objects for the caller's thread (the activated
    time zone and language, the URLconf): store work must not depend on them."""
    if _sync_caller_waiting():
        return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor, call)


def close_connections(timeout: float = 30.0) -> None:
    """Close the database connections every store thread holds, from each thread itself (a
    Django connection belongs to the thread that opened it). For the end of a test run or of
    a process: the database is then left without sessions of ours, and can be dropped.

    One task per thread: each waits at a barrier until all have started, so no thread takes two
    and none is missed. Work still running on a thread delays its task, up to ``timeout``."""
    from django.db import connections

    barrier = threading.Barrier(STORE_THREADS, timeout=timeout)

    def close() -> None:
        try:
            barrier.wait()
        finally:
            connections.close_all()

    for future in [_executor.submit(close) for _ in range(STORE_THREADS)]:
        future.result(timeout=timeout)
