"""The SQL backend: four ``Sql*Store`` adapters over the Django models in memory/models.py.

Runs on SQLite (the bot default, ``state.db``) and PostgreSQL. Adapters take and return frozen
values, never model instances. Every mutation is one ``transaction.atomic()``. Versions are
guarded by conditional ``UPDATE ... WHERE version = <read version>``, which holds across
processes on both databases; on PostgreSQL the head row is also locked (``SELECT ... FOR
UPDATE``) so concurrent appends queue instead of retrying, and on SQLite the project's
``transaction_mode = IMMEDIATE`` takes the write lock at BEGIN.

Appending costs a constant number of statements whatever the session length (lock the head,
check ids, insert, update the head); a tail read is one indexed ``ORDER BY seq DESC LIMIT N``.
Those statements, the hot path, are plain parameterized SQL built once per database from the
models' metadata: compiling ORM queries cost several times more than running them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from memory.messages import Message
from memory.models import PrunedMessageId, SessionHead, StoredMessage
from memory.scopes import Scope
from memory.stores.base import (
    ConcurrentChange,
    DuplicateMessage,
    Fence,
    InvalidPrune,
    MemoryStoreBundle,
    MessageStore,
    PruneResult,
)
from memory.stores.base import SessionHead as HeadValue
from memory.stores.codec import (
    check_batch,
    check_fence,
    check_ids,
    check_prune_arguments,
    check_window,
    dumps,
    messages_from_texts,
)
from memory.stores.sql_archive import SqlArchiveStore
from memory.stores.sql_common import (
    RACE_ATTEMPTS,
    Raced,
    check_fence_in_transaction,
    chunks,
    database_errors,
    execute,
    scope_key,
)
from memory.stores.sql_kv import SqlCursorStore, SqlKVStore
from memory.tokens import with_tokens

BACKEND_NAME = "sqlite"
_MESSAGE_COLUMNS = ("scope_key", "seq", "message_id", "role", "kind", "deleted", "tokens", "created_at", "data")
_HEAD_COLUMNS = ("id", "version", "last_seq", "count", "tokens", "pruned")
_NEW_HEAD_COLUMNS = ("scope_key", "version", "last_seq", "count", "tokens", "pruned", "updated_at")
# Rows per multi-row INSERT: 9 parameters each stays far below every database's limit.
_INSERT_ROWS = 200


@dataclass(slots=True)
class _Head:
    """A session head row as read inside the writing transaction."""

    pk: int
    version: int
    last_seq: int
    count: int
    tokens: int
    pruned: int


class _Statements:
    """The hot-path SQL for one database, with names taken from the models."""

    def __init__(self, using: str) -> None:
        connection = connections[using]
        q = connection.ops.quote_name
        head, msg, pruned = (m._meta for m in (SessionHead, StoredMessage, PrunedMessageId))

        def col(meta, name: str) -> str:
            return q(meta.get_field(name).column)

        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        self.select_head = (
            f"SELECT {', '.join(col(head, c) for c in _HEAD_COLUMNS)} FROM {q(head.db_table)} "
            f"WHERE {col(head, 'scope_key')} = %s"
        )
        self.lock_head = self.select_head + lock
        self.update_head = (
            f"UPDATE {q(head.db_table)} SET {col(head, 'version')} = %s, {col(head, 'last_seq')} = %s, "
            f"{col(head, 'count')} = %s, {col(head, 'tokens')} = %s, {col(head, 'pruned')} = %s, "
            f"{col(head, 'updated_at')} = %s WHERE {col(head, 'id')} = %s AND {col(head, 'version')} = %s"
        )
        self.insert = (
            f"INSERT INTO {q(msg.db_table)} ({', '.join(col(msg, c) for c in _MESSAGE_COLUMNS)}) VALUES "
        )
        self.row = "(" + ", ".join(["%s"] * len(_MESSAGE_COLUMNS)) + ")"
        self.used = (f"SELECT {col(msg, 'message_id')} FROM {q(msg.db_table)} "
                     f"WHERE {col(msg, 'scope_key')} = %s AND {col(msg, 'message_id')} IN ")
        self.used_pruned = (f"SELECT {col(pruned, 'message_id')} FROM {q(pruned.db_table)} "
                            f"WHERE {col(pruned, 'scope_key')} = %s AND {col(pruned, 'message_id')} IN ")
        # Claiming the seqs of an append in one statement: the head's totals move by the batch's
        # and the new values come back (RETURNING from UPDATE and INSERT: SQLite >= 3.35, PostgreSQL).
        self.claim = (
            f"UPDATE {q(head.db_table)} SET {col(head, 'version')} = {col(head, 'version')} + 1, "
            f"{col(head, 'last_seq')} = {col(head, 'last_seq')} + %s, {col(head, 'count')} = {col(head, 'count')} + %s, "
            f"{col(head, 'tokens')} = {col(head, 'tokens')} + %s, {col(head, 'updated_at')} = %s "
            f"WHERE {col(head, 'scope_key')} = %s RETURNING {', '.join(col(head, c) for c in _HEAD_COLUMNS)}"
            if connection.features.can_return_rows_from_update else None
        )
        # A session's first append makes its head with the batch's totals in place: one INSERT
        # instead of a missed claim, a create and the claim again.
        self.create_head = (
            f"INSERT INTO {q(head.db_table)} ({', '.join(col(head, c) for c in _NEW_HEAD_COLUMNS)}) "
            f"VALUES ({', '.join(['%s'] * len(_NEW_HEAD_COLUMNS))}) "
            f"RETURNING {', '.join(col(head, c) for c in _HEAD_COLUMNS)}"
        )
        if not connection.features.can_return_columns_from_insert:
            self.claim = None  # the short path needs RETURNING from both statements
        self.window = f"SELECT {col(msg, 'data')} FROM {q(msg.db_table)} WHERE {col(msg, 'scope_key')} = %s"
        self.live = f" AND {col(msg, 'deleted')} = %s"
        self.after = f" AND {col(msg, 'seq')} > %s"
        self.ascending = f" ORDER BY {col(msg, 'seq')}"
        self.newest = f" ORDER BY {col(msg, 'seq')} DESC LIMIT %s"


@lru_cache(maxsize=16)
def _statements(using: str, vendor: str) -> _Statements:
    return _Statements(using)


def _message_params(key: str, message: Message, using: str) -> list[object]:
    return [key, message.seq, message.id, message.role, message.kind, False, message.tokens or 0,
            _when(message.created_at, using), dumps(message.to_record())]


def _when(value, using: str) -> object:
    # Connections are per thread: take this thread's, as the ORM would.
    return connections[using].ops.adapt_datetimefield_value(value)


def _message(data: str) -> Message:
    return Message.from_stored(json.loads(data))


class SqlMessageStore(MessageStore):
    def __init__(self, using: str = "default") -> None:
        self.using = using

    @property
    def _sql(self) -> _Statements:
        return _statements(self.using, connections[self.using].vendor)

    def _execute(self, sql: str, params: Sequence[object]) -> list[tuple]:
        return execute(self.using, sql, params)

    def _lock_head(self, key: str, *, create: bool) -> _Head | None:
        rows = self._execute(self._sql.lock_head, [key])
        if rows:
            return _Head(*rows[0])
        if not create:
            return None
        # A concurrent creator makes this raise IntegrityError; the caller retries.
        row = SessionHead.objects.using(self.using).create(scope_key=key)
        return _Head(row.pk, 0, 0, 0, 0, 0)

    def _advance(self, head: _Head, *, last_seq: int | None = None, count: int, tokens: int,
                 pruned: int | None = None) -> int:
        """Write the head's new totals and version, if the version is still the one read."""
        version = head.version + 1
        params = [version, head.last_seq if last_seq is None else last_seq, count, tokens,
                  head.pruned if pruned is None else pruned, _when(timezone.now(), self.using), head.pk, head.version]
        with connections[self.using].cursor() as cursor:
            cursor.execute(self._sql.update_head, params)
            if cursor.rowcount != 1:
                raise Raced
        return version

    # -- append and reads ----------------------------------------------------------------------

    @database_errors
    def append(self, scope: Scope, messages: Sequence[Message], *, fence: Fence | None = None) -> list[Message]:
        batch = check_batch(messages)
        fence = check_fence(fence)
        key = scope_key(scope)
        if not batch:
            return []
        counted = [with_tokens(m) for m in batch]  # outside the transaction: counting can be slow
        ids = [m.id for m in counted]
        for attempt in range(RACE_ATTEMPTS):
            try:
                with transaction.atomic(using=self.using):
                    check_fence_in_transaction(fence, self.using, f"an append to {scope}")
                    if self._sql.claim is not None:
                        stored = self._append_claiming(scope, key, counted)
                    else:
                        stored = self._append_checked(scope, key, counted)
                return stored
            except (Raced, IntegrityError):
                # The unique (scope, message id) constraint or a concurrent writer: say which.
                self._reject_used(scope, key, ids, pruned=True)
                if attempt == RACE_ATTEMPTS - 1:
                    raise ConcurrentChange(f"{scope} kept changing during the append; retry") from None
        raise AssertionError("unreachable")

    def _append_claiming(self, scope: Scope, key: str, counted: list[Message]) -> list[Message]:
        """The short path, as few statements as an append can take: claim the seqs (one UPDATE ...
        RETURNING, which also takes the head's row lock) and insert. A live or deleted message
        with one of the ids fails the insert on the unique constraint (the caller then names the
        ids); ids of pruned messages are looked up only in sessions that were ever pruned."""
        tokens = sum(m.tokens or 0 for m in counted)
        now = _when(timezone.now(), self.using)
        rows = self._execute(self._sql.claim, [len(counted), len(counted), tokens, now, key])
        if not rows:  # the session's first append (a concurrent first one fails it on the unique key)
            rows = self._execute(self._sql.create_head, [key, 1, len(counted), len(counted), tokens, 0, now])
        head = _Head(*rows[0])
        if head.pruned:
            self._reject_used(scope, key, [m.id for m in counted], pruned=True, live=False)
        first = head.last_seq - len(counted)
        stored = [replace(m, seq=first + i) for i, m in enumerate(counted, 1)]
        self._insert(key, stored)
        return stored

    def _append_checked(self, scope: Scope, key: str, counted: list[Message]) -> list[Message]:
        """The portable path: lock the head, check the ids, insert, advance the head's version."""
        head = self._lock_head(key, create=True)
        self._reject_used(scope, key, [m.id for m in counted], pruned=bool(head.pruned))
        stored = [replace(m, seq=head.last_seq + i) for i, m in enumerate(counted, 1)]
        self._insert(key, stored)
        self._advance(head, last_seq=stored[-1].seq, count=head.count + len(stored),
                      tokens=head.tokens + sum(m.tokens or 0 for m in stored))
        return stored

    def _insert(self, key: str, stored: list[Message]) -> None:
        for part in chunks(stored, _INSERT_ROWS):
            params = [p for m in part for p in _message_params(key, m, self.using)]
            self._execute(self._sql.insert + ", ".join([self._sql.row] * len(part)), params)

    def _reject_used(self, scope: Scope, key: str, ids: list[str], *, pruned: bool, live: bool = True) -> None:
        """Raise DuplicateMessage if any id is used by a message of the session (live or deleted
        when ``live``, pruned when ``pruned``)."""
        used: list[str] = []
        for part in chunks(ids):
            marks = "(" + ", ".join(["%s"] * len(part)) + ")"
            if live:
                used += [row[0] for row in self._execute(self._sql.used + marks, [key, *part])]
            if pruned:
                used += [row[0] for row in self._execute(self._sql.used_pruned + marks, [key, *part])]
        if used:
            raise DuplicateMessage(f"message id(s) {', '.join(map(repr, used[:5]))} already exist in {scope}")

    @database_errors
    def read(self, scope: Scope, *, after_seq: int | None = None, last: int | None = None,
             include_deleted: bool = False) -> list[Message]:
        check_window(after_seq, last)
        if last == 0:
            return []
        sql, params = self._sql.window, [scope_key(scope)]
        if not include_deleted:
            sql, params = sql + self._sql.live, [*params, False]
        if after_seq is not None:
            sql, params = sql + self._sql.after, [*params, after_seq]
        if last is None:
            return messages_from_texts([row[0] for row in self._execute(sql + self._sql.ascending, params)])
        newest = self._execute(sql + self._sql.newest, [*params, last])
        return messages_from_texts([row[0] for row in reversed(newest)])

    @database_errors
    def head(self, scope: Scope) -> HeadValue:
        rows = self._execute(self._sql.select_head, [scope_key(scope)])
        if not rows:
            return HeadValue(scope, 0, 0, 0, 0)
        head = _Head(*rows[0])
        return HeadValue(scope, head.version, head.last_seq, head.count, head.tokens)

    # -- prune, soft delete, clear (rarer: the ORM is fine here) -------------------------------

    @database_errors
    def prune(self, scope: Scope, *, through_seq: int, summary: Message | None, expected_version: int,
              fence: Fence | None = None) -> PruneResult:
        key = scope_key(scope)
        check_prune_arguments(scope, through_seq, summary, expected_version)
        fence = check_fence(fence)
        stored_summary = replace(with_tokens(summary), seq=through_seq) if summary is not None else None
        try:
            with transaction.atomic(using=self.using):
                check_fence_in_transaction(fence, self.using, f"a prune of {scope}")
                head = self._lock_head(key, create=False)
                current = head.version if head else 0
                if current != expected_version:
                    raise ConcurrentChange(
                        f"{scope} changed since it was read (version {current}, expected {expected_version}); "
                        "re-read and retry"
                    )
                if head is None:
                    raise InvalidPrune(f"{scope} has no live message with seq {through_seq}")
                return self._prune_locked(scope, key, head, through_seq, stored_summary)
        except Raced:
            raise ConcurrentChange(f"{scope} changed during the prune; re-read and retry") from None

    def _prune_locked(self, scope: Scope, key: str, head: _Head, through_seq: int,
                      summary: Message | None) -> PruneResult:
        messages = StoredMessage.objects.using(self.using).filter(scope_key=key)
        if not messages.filter(seq=through_seq, deleted=False).exists():
            raise InvalidPrune(f"seq {through_seq} is not a live message of {scope} (deleted or already pruned)")
        if summary is not None and (
            messages.filter(message_id=summary.id).exists()
            or PrunedMessageId.objects.using(self.using).filter(scope_key=key, message_id=summary.id).exists()
        ):
            raise InvalidPrune(f"the summary's id {summary.id!r} is already used in {scope}")
        removed = list(messages.filter(seq__lte=through_seq).order_by("seq")
                       .values_list("message_id", "seq", "deleted", "tokens", "data"))
        now = timezone.now()
        PrunedMessageId.objects.using(self.using).bulk_create(
            [PrunedMessageId(scope_key=key, message_id=mid, seq=seq, pruned_at=now) for mid, seq, *_ in removed]
        )
        messages.filter(seq__lte=through_seq).delete()
        live = [row for row in removed if not row[2]]
        count = head.count - len(live)
        tokens = head.tokens - sum(row[3] for row in live)
        if summary is not None:
            self._execute(self._sql.insert + self._sql.row, _message_params(key, summary, self.using))
            count, tokens = count + 1, tokens + (summary.tokens or 0)
        version = self._advance(head, count=count, tokens=tokens, pruned=head.pruned + len(removed))
        return PruneResult(
            head=HeadValue(scope, version, head.last_seq, count, tokens),
            evicted=tuple(_message(row[4]) for row in live),
            summary=summary,
        )

    @database_errors
    def soft_delete(self, scope: Scope, ids: Sequence[str]) -> int:
        wanted = check_ids(ids)
        key = scope_key(scope)
        if not wanted:
            return 0
        for _ in range(RACE_ATTEMPTS):
            try:
                with transaction.atomic(using=self.using):
                    head = self._lock_head(key, create=False)
                    if head is None:
                        return 0
                    rows = []
                    for part in chunks(wanted):
                        rows += StoredMessage.objects.using(self.using).filter(
                            scope_key=key, message_id__in=part, deleted=False).values_list("pk", "tokens")
                    if not rows:
                        return 0
                    for part in chunks([pk for pk, _ in rows]):
                        StoredMessage.objects.using(self.using).filter(pk__in=part).update(deleted=True)
                    self._advance(head, count=head.count - len(rows), tokens=head.tokens - sum(t for _, t in rows))
                    return len(rows)
            except Raced:
                continue
        raise ConcurrentChange(f"{scope} kept changing during the soft delete; retry")

    @database_errors
    def clear(self, scope: Scope) -> None:
        key = scope_key(scope)
        for _ in range(RACE_ATTEMPTS):
            try:
                with transaction.atomic(using=self.using):
                    head = self._lock_head(key, create=False)
                    if head is None:
                        return
                    removed, _ = StoredMessage.objects.using(self.using).filter(scope_key=key).delete()
                    pruned, _ = PrunedMessageId.objects.using(self.using).filter(scope_key=key).delete()
                    if removed or pruned:
                        # The head row stays: version and last_seq keep counting (see base.py).
                        self._advance(head, count=0, tokens=0, pruned=0)
                    return
            except Raced:
                continue
        raise ConcurrentChange(f"{scope} kept changing during the clear; retry")


def open_bundle(*, root: Path | None = None, using: str = "default") -> MemoryStoreBundle:
    """Registry entry point (``root`` is the file backend's argument, ignored here)."""
    return MemoryStoreBundle(
        backend=BACKEND_NAME, messages=SqlMessageStore(using), kv=SqlKVStore(using),
        cursors=SqlCursorStore(using), archive=SqlArchiveStore(using),
    )


__all__ = ["SqlArchiveStore", "SqlCursorStore", "SqlKVStore", "SqlMessageStore", "open_bundle", "scope_key"]
