"""Helpers shared by the SQL adapters (memory/stores/sql.py, memory/stores/sql_archive.py)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connections

from memory.models import SCOPE_KEY_LENGTH, KVEntry
from memory.scopes import Scope
from memory.stores.base import Fence, StorageUnavailable
from memory.stores.codec import check_scope
from memory.text import storable

#: Conditional updates that lose a race (possible only without row locks) are retried this often.
RACE_ATTEMPTS = 5
_IN_CHUNK = 500

T = TypeVar("T")


class Raced(Exception):
    """Internal: a conditional update matched no row because another writer got there first."""


def scope_key(scope: Scope) -> str:
    """The ``scope_key`` column value: the scope's key, or a digest if it is too long to index."""
    key = check_scope(scope).key()
    if len(key) <= SCOPE_KEY_LENGTH:
        return key
    # Real keys start with a kind and ':' (or are 'global'), so a digest can never equal one.
    return "sha256-" + hashlib.sha256(key.encode()).hexdigest()


def database_errors(func: Callable[..., T]) -> Callable[..., T]:
    """Turn driver failures (locked or vanished database, disk full) into StorageUnavailable."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError) as exc:
            raise StorageUnavailable(f"the database failed: {exc}") from exc

    return wrapper


def execute(using: str, sql: str, params: Sequence[object]) -> list[tuple]:
    """Run one parameterized statement (``%s`` placeholders) on ``using``; its rows, if any.

    On SQLite it goes straight to the driver: Django's cursor wrappers (placeholder rewriting by
    regex, async-safety and debug checks on every call) cost as much as a hot-path statement.
    Driver errors still become Django's (``wrap_database_errors``) and the statement runs in the
    connection's current transaction. Where queries are logged (DEBUG, CaptureQueriesContext)
    it takes Django's cursor, so that every statement is still seen.
    """
    return _run(using, sql, params, lambda cursor: cursor.fetchall() if cursor.description else [])


def execute_rowcount(using: str, sql: str, params: Sequence[object]) -> int:
    """Like ``execute``, for a statement whose result is how many rows it changed."""
    return _run(using, sql, params, lambda cursor: cursor.rowcount)


def _run(using: str, sql: str, params: Sequence[object], result: Callable[[Any], T]) -> T:
    connection = connections[using]
    if connection.vendor != "sqlite" or connection.queries_logged:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return result(cursor)
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = connection.connection.execute(_qmark(sql), params)
        try:
            return result(cursor)
        finally:
            cursor.close()


@functools.lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    """``sql`` with sqlite3's own placeholders (the statements hold no literal ``%``)."""
    return sql.replace("%s", "?")


@functools.lru_cache(maxsize=16)
def _lease_row_sql(using: str, vendor: str) -> str:
    connection = connections[using]
    q, meta = connection.ops.quote_name, KVEntry._meta
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return (f"SELECT {q(meta.get_field('value').column)} FROM {q(meta.db_table)} "
            f"WHERE {q(meta.get_field('scope_key').column)} = %s AND {q(meta.get_field('key').column)} = %s{lock}")


def check_fence_in_transaction(fence: Fence | None, using: str, what: str) -> None:
    """Inside the write's transaction: raise FencedOut unless ``fence``'s lease is still its own.

    The lease row is read FOR UPDATE (where the database has it; SQLite's IMMEDIATE transactions
    serialise writers anyway), so a takeover either committed before this check, and is seen, or
    waits until the write has committed: the write is ordered entirely before the takeover.
    """
    if fence is None:
        return
    rows = execute(using, _lease_row_sql(using, connections[using].vendor), [scope_key(fence.scope), fence.key])
    value = rows[0][0] if rows else None
    if not fence.admits(value):
        raise fence.refused(what)


def chunks(items: Sequence[T], size: int = _IN_CHUNK) -> list[Sequence[T]]:
    """Slices small enough for an ``IN (...)`` list on every database."""
    return [items[i:i + size] for i in range(0, len(items), size)]


def column_text(text: str, limit: int | None = None) -> str:
    """Text for a plain column: without NUL (PostgreSQL rejects it) and lone surrogates (no
    database driver encodes them; ``memory.text.storable``); the JSON keeps the original."""
    text = storable(text.replace("\x00", ""))
    return text if limit is None else text[:limit]
