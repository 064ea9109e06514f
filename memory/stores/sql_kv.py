"""The SQL backend's KVStore and CursorStore (see memory/stores/sql.py for the conventions)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from functools import lru_cache

from django.db import IntegrityError, InterfaceError, OperationalError, connections, transaction
from django.utils import timezone

from memory.models import ConsumerCursor, KVEntry
from memory.scopes import Scope
from memory.stores.base import (
    ConcurrentChange,
    CursorMove,
    CursorStore,
    Fence,
    KVItem,
    KVStore,
    KVWrite,
    StorageUnavailable,
    VersionConflict,
    validate_key,
)
from memory.stores.codec import (
    check_commit,
    check_expected_version,
    check_fence,
    check_int,
    check_kv_value,
    check_prefix,
)
from memory.stores.sql_common import (
    RACE_ATTEMPTS,
    Raced,
    check_fence_in_transaction,
    database_errors,
    execute,
    execute_rowcount,
    scope_key,
)

_UNSET = ...


class _GetStatement:
    """``KVStore.get``'s, ``put``'s, ``delete``'s and ``list``'s statements as plain SQL (built
    once per database from the model): compiling the ORM queries cost several times more than
    running them, and every turn reads three core memory keys, lists the agent's experiences,
    writes its lease and its meter and releases the lease (a queryset's delete() alone cost
    about 1 ms, the experience listing 0.3 ms of a 0.55 ms assembly). ``updated_at`` goes
    through the converters the ORM itself would apply."""

    def __init__(self, using: str) -> None:
        connection = connections[using]
        q = connection.ops.quote_name
        meta = KVEntry._meta

        def col(name: str) -> str:
            return q(meta.get_field(name).column)

        table, where = q(meta.db_table), f"WHERE {col('scope_key')} = %s AND {col('key')} = %s"
        self.sql = f"SELECT {col('value')}, {col('version')}, {col('updated_at')} FROM {table} {where}"
        # put's statements: read the version (row-locked where the database can), then insert or
        # update it conditionally.
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        self.version = f"SELECT {col('version')} FROM {table} {where}{lock}"
        self.insert = (
            f"INSERT INTO {table} ({col('scope_key')}, {col('key')}, {col('value')}, {col('version')}, "
            f"{col('updated_at')}) VALUES (%s, %s, %s, %s, %s)"
        )
        self.update = (
            f"UPDATE {table} SET {col('value')} = %s, {col('version')} = %s, {col('updated_at')} = %s "
            f"{where} AND {col('version')} = %s"
        )
        self.delete = f"DELETE FROM {table} {where}"
        self.list = (
            f"SELECT {col('key')}, {col('value')}, {col('version')}, {col('updated_at')} FROM {table} "
            f"WHERE {col('scope_key')} = %s"
        )
        # SUBSTR compares code points exactly in both databases (LIKE folds case in SQLite).
        self.list_prefix = f"{self.list} AND SUBSTR({col('key')}, 1, %s) = %s"
        self.delete_version = f"{self.delete} AND {col('version')} = %s"
        self.touch = f"UPDATE {table} SET {col('version')} = {col('version')} {where}"
        column = meta.get_field("updated_at").get_col(meta.db_table)
        self.converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        self.column = column

    def updated_at(self, value: object, connection) -> object:
        for converter in self.converters:
            value = converter(value, self.column, connection)
        return value


@lru_cache(maxsize=16)
def _get_statement(using: str, vendor: str) -> _GetStatement:
    return _GetStatement(using)


class SqlKVStore(KVStore):
    def __init__(self, using: str = "default") -> None:
        self.using = using

    def _rows(self, key: str):
        return KVEntry.objects.using(self.using).filter(scope_key=key)

    def _conflict(self, scope: Scope, key: str, name: str, expected: int) -> VersionConflict:
        actual = self._rows(key).filter(key=name).values_list("version", flat=True).first() or 0
        return VersionConflict(f"{name} in {scope} is at version {actual}, not {expected}; re-read it and retry",
                               expected=expected, actual=actual)

    @database_errors
    def get(self, scope: Scope, key: str) -> KVItem | None:
        name = validate_key(key)
        connection = connections[self.using]
        statement = _get_statement(self.using, connection.vendor)
        rows = execute(self.using, statement.sql, [scope_key(scope), name])
        if not rows:
            return None
        value, version, updated_at = rows[0]
        return KVItem(scope=scope, key=name, value=value, version=version,
                      updated_at=statement.updated_at(updated_at, connection))

    @database_errors
    def put(self, scope: Scope, key: str, value: str, *, expected_version: int | None = None,
            fence: Fence | None = None) -> KVItem:
        name = validate_key(key)
        value = check_kv_value(value)
        fence = check_fence(fence, kv_scope=scope, key=name)
        expected = check_expected_version(expected_version)
        skey = scope_key(scope)
        for _ in range(RACE_ATTEMPTS):
            now = timezone.now()
            try:
                with transaction.atomic(using=self.using):
                    check_fence_in_transaction(fence, self.using, f"writing {name} in {scope}")
                    connection = connections[self.using]
                    statement = _get_statement(self.using, connection.vendor)
                    rows = execute(self.using, statement.version, [skey, name])
                    actual = rows[0][0] if rows else 0
                    if expected is not None and expected != actual:
                        raise VersionConflict(
                            f"{name} in {scope} is at version {actual}, not {expected}; re-read it and retry",
                            expected=expected, actual=actual)
                    when = connection.ops.adapt_datetimefield_value(now)
                    if not rows:
                        execute(self.using, statement.insert, [skey, name, value, 1, when])
                    elif not execute_rowcount(self.using, statement.update,
                                              [value, actual + 1, when, skey, name, actual]):
                        raise Raced
                return KVItem(scope=scope, key=name, value=value, version=actual + 1, updated_at=now)
            except (Raced, IntegrityError):
                if expected is not None:
                    raise self._conflict(scope, skey, name, expected) from None
        raise ConcurrentChange(f"{name} in {scope} kept changing; retry")

    @database_errors
    def delete(self, scope: Scope, key: str, *, expected_version: int | None = None,
               fence: Fence | None = None) -> bool:
        name = validate_key(key)
        expected = check_expected_version(expected_version)
        fence = check_fence(fence, kv_scope=scope, key=name)
        if fence is None:
            return self._delete(scope, name, expected)
        with transaction.atomic(using=self.using):
            check_fence_in_transaction(fence, self.using, f"deleting {name} in {scope}")
            return self._delete(scope, name, expected)

    @contextlib.contextmanager
    def fenced(self, fence: Fence | None, what: str) -> Iterator[None]:
        """For a write made outside the database (the pruned catalog's files): hold ``fence``'s
        lease row locked while the write is made, after checking that the lease is still its own
        (else FencedOut). A takeover of the lease waits until the block has ended, so the write
        is ordered entirely before it. The row is updated in place (nothing changes) so that the
        lock is a write lock on SQLite too, whatever its transaction mode."""
        fence = check_fence(fence)
        if fence is None:
            yield
            return
        try:
            with transaction.atomic(using=self.using):
                check_fence_in_transaction(fence, self.using, what)
                statement = _get_statement(self.using, connections[self.using].vendor)
                execute_rowcount(self.using, statement.touch, [scope_key(fence.scope), fence.key])
                yield
        except (OperationalError, InterfaceError) as exc:
            raise StorageUnavailable(f"the database failed: {exc}") from exc

    def _delete(self, scope: Scope, name: str, expected: int | None) -> bool:
        skey = scope_key(scope)
        statement = _get_statement(self.using, connections[self.using].vendor)
        if expected is None:
            return execute_rowcount(self.using, statement.delete, [skey, name]) > 0
        if expected == 0:
            if execute(self.using, statement.version, [skey, name]):
                raise self._conflict(scope, skey, name, expected)
            return False
        if execute_rowcount(self.using, statement.delete_version, [skey, name, expected]):
            return True
        raise self._conflict(scope, skey, name, expected)

    @database_errors
    def commit(self, writes: Sequence[KVWrite], *, cursor: CursorMove | None = None,
               fence: Fence | None = None) -> list[KVItem | None]:
        writes, cursor, fence = check_commit(writes, cursor, fence)
        if not writes and cursor is None:
            return []
        for _ in range(RACE_ATTEMPTS):
            now = timezone.now()
            try:
                with transaction.atomic(using=self.using):
                    check_fence_in_transaction(fence, self.using, f"a commit of {len(writes)} write(s)")
                    return self._commit_locked(writes, cursor, now)
            except (Raced, IntegrityError):
                # Only a race on a row that did not exist (no row lock to wait on) gets here; a
                # conditional write then reports the conflict as put would, the others retry.
                for write in writes:
                    if write.expected_version is not None:
                        raise self._conflict(write.scope, scope_key(write.scope), write.key,
                                             write.expected_version) from None
                if cursor is not None and cursor.expected is not _UNSET:
                    raise ConcurrentChange(f"cursor {cursor.consumer!r} of {cursor.scope} changed meanwhile; "
                                           "re-read and retry") from None
        raise ConcurrentChange("the keys of a commit kept changing; retry")

    def _commit_locked(self, writes: list[KVWrite], cursor: CursorMove | None, now) -> list[KVItem | None]:
        connection = connections[self.using]
        statement = _get_statement(self.using, connection.vendor)
        actuals = []
        for write in writes:  # every check before the first write
            rows = execute(self.using, statement.version, [scope_key(write.scope), write.key])
            actual = rows[0][0] if rows else 0
            if write.expected_version is not None and write.expected_version != actual:
                raise VersionConflict(
                    f"{write.key} in {write.scope} is at version {actual}, not {write.expected_version}; "
                    "re-read it and retry", expected=write.expected_version, actual=actual)
            actuals.append((actual, bool(rows)))
        position = None
        if cursor is not None:
            rows = ConsumerCursor.objects.using(self.using).filter(
                scope_key=scope_key(cursor.scope), consumer=cursor.consumer)
            position = rows.select_for_update().values_list("position", flat=True).first()
            if cursor.expected is not _UNSET and position != cursor.expected:
                raise ConcurrentChange(f"cursor {cursor.consumer!r} of {cursor.scope} is at {position}, "
                                       f"not {cursor.expected}; re-read and retry")
        when = connection.ops.adapt_datetimefield_value(now)
        items: list[KVItem | None] = []
        for write, (actual, exists) in zip(writes, actuals, strict=True):
            skey = scope_key(write.scope)
            if write.value is None:
                if exists and not execute_rowcount(self.using, statement.delete_version, [skey, write.key, actual]):
                    raise Raced
                items.append(None)
                continue
            if not exists:
                execute(self.using, statement.insert, [skey, write.key, write.value, 1, when])
            elif not execute_rowcount(self.using, statement.update,
                                      [write.value, actual + 1, when, skey, write.key, actual]):
                raise Raced
            items.append(KVItem(scope=write.scope, key=write.key, value=write.value, version=actual + 1,
                                updated_at=now))
        if cursor is not None:
            rows = ConsumerCursor.objects.using(self.using).filter(
                scope_key=scope_key(cursor.scope), consumer=cursor.consumer)
            if position is None:
                ConsumerCursor.objects.using(self.using).create(
                    scope_key=scope_key(cursor.scope), consumer=cursor.consumer, position=cursor.position,
                    updated_at=now)
            elif not rows.filter(position=position).update(position=cursor.position, updated_at=now):
                raise Raced
        return items

    @database_errors
    def list(self, scope: Scope, *, prefix: str = "") -> list[KVItem]:
        prefix = check_prefix(prefix)
        connection = connections[self.using]
        statement = _get_statement(self.using, connection.vendor)
        if prefix:
            rows = execute(self.using, statement.list_prefix, [scope_key(scope), len(prefix), prefix])
        else:
            rows = execute(self.using, statement.list, [scope_key(scope)])
        items = [
            KVItem(scope=scope, key=key, value=value, version=version,
                   updated_at=statement.updated_at(updated_at, connection))
            for key, value, version, updated_at in rows
            if key.startswith(prefix)  # the database's word is checked, as before
        ]
        # Sorted in Python: collations differ by database.
        return sorted(items, key=lambda item: item.key)


class SqlCursorStore(CursorStore):
    def __init__(self, using: str = "default") -> None:
        self.using = using

    def _rows(self, scope: Scope):
        return ConsumerCursor.objects.using(self.using).filter(scope_key=scope_key(scope))

    @database_errors
    def get(self, scope: Scope, consumer: str) -> int | None:
        name = validate_key(consumer, what="consumer name")
        return self._rows(scope).filter(consumer=name).values_list("position", flat=True).first()

    @database_errors
    def set(self, scope: Scope, consumer: str, position: int, *, expected: int | None | object = _UNSET,
            fence: Fence | None = None) -> None:
        name = validate_key(consumer, what="consumer name")
        check_int(position, "cursor position", minimum=0)
        if expected is not _UNSET and expected is not None:
            check_int(expected, "expected position")
        fence = check_fence(fence)
        for _ in range(RACE_ATTEMPTS):
            try:
                with transaction.atomic(using=self.using):
                    check_fence_in_transaction(fence, self.using, f"moving cursor {name!r} of {scope}")
                    rows = self._rows(scope).filter(consumer=name)
                    actual = rows.select_for_update().values_list("position", flat=True).first()
                    if expected is not _UNSET and actual != expected:
                        raise ConcurrentChange(
                            f"cursor {name!r} of {scope} is at {actual}, not {expected}; re-read and retry")
                    now = timezone.now()
                    if actual is None:
                        ConsumerCursor.objects.using(self.using).create(
                            scope_key=scope_key(scope), consumer=name, position=position, updated_at=now)
                    elif not rows.filter(position=actual).update(position=position, updated_at=now):
                        raise Raced
                return
            except (Raced, IntegrityError):
                if expected is not _UNSET:
                    raise ConcurrentChange(f"cursor {name!r} of {scope} changed meanwhile; re-read and retry") from None
        raise ConcurrentChange(f"cursor {name!r} of {scope} kept changing; retry")

    @database_errors
    def list(self, scope: Scope) -> dict[str, int]:
        return dict(sorted(self._rows(scope).values_list("consumer", "position")))
