"""The SQL backend's ArchiveStore: documents as rows, found by the database's full-text index.

Finding and ranking are separate. The database's own index finds the scope's documents that
hold any query word: on SQLite the FTS5 table ``memory_archive_fts`` (migration 0002, rowid =
``ArchiveEntry.id``, kept in sync inside the same transaction as the row it indexes), on
PostgreSQL the generated ``tsvector`` column ``search`` with its GIN index (migration 0004);
elsewhere, or on a SQLite built without FTS5, ``LIKE`` over the folded words. Ranking is always
Okapi BM25 in Python (memory/stores/textsearch.py) with statistics taken from the caller's own
scope: the scope's document count and average length, and each word's document frequency among
the scope's documents (exact, since the candidates are every document of the scope holding a
query word). FTS5's ``bm25()`` is not used: it counts the whole table, so a score would move
when another user archived a word.

The query never reaches the database as typed: it is reduced to words, each sent as a quoted
string (FTS5) or a quoted lexeme (tsquery), so ``"``, ``*``, ``OR``, ``&`` or ``NEAR(`` in user
text are only text.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import reduce
from operator import or_

from django.db import IntegrityError, connections, transaction
from django.db.models import Avg, Count, F, Q

from memory.models import SCOPE_KEY_LENGTH, ArchiveEntry, ArchiveHead, ArchiveListing, ArchiveVectors
from memory.scopes import Scope
from memory.stores import textsearch
from memory.stores.base import (
    ArchiveDocument,
    ArchiveHit,
    ArchiveState,
    ArchiveStore,
    ConcurrentChange,
    Fence,
)
from memory.stores.codec import (
    SUMMARY_HEADS,
    check_document_id,
    check_fence,
    check_int,
    document_from_record,
    document_to_record,
    dumps,
    summary_from_head,
)
from memory.stores.sql_common import (
    RACE_ATTEMPTS,
    Raced,
    check_fence_in_transaction,
    column_text,
    database_errors,
    execute,
    scope_key,
)

FTS_TABLE = "memory_archive_fts"
_MESSAGES_KEY = ',"messages":['


def record_head(data: str) -> str:
    """The listing head of a document stored as ``data`` (``ArchiveListing.head``): the text
    before its "messages" list, which ``memory.stores.codec.summary_from_head`` decodes, or ""
    if there is none."""
    at = data.find(_MESSAGES_KEY)
    return data[:at] if at >= 0 else ""


_fts_present: dict[tuple[str, str], bool] = {}


def fts_available(using: str) -> bool:
    """Whether the database behind ``using`` has the FTS5 table (checked once per database)."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return False
    marker = (using, str(connection.settings_dict["NAME"]))
    if marker not in _fts_present:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM sqlite_master WHERE name = %s", [FTS_TABLE])
            _fts_present[marker] = cursor.fetchone() is not None
    return _fts_present[marker]


class SqlArchiveStore(ArchiveStore):
    """``fts=None`` searches with FTS5 when the table exists; ``False`` forces the portable search.

    The FTS5 table, when it exists, is kept in sync whatever ``fts`` says.
    """

    def __init__(self, using: str = "default", *, fts: bool | None = None) -> None:
        self.using = using
        self._fts = fts

    def _indexed(self) -> bool:
        return fts_available(self.using)

    def _search_with_fts(self) -> bool:
        return self._indexed() if self._fts is None else self._fts

    def _rows(self, scope: Scope):
        return ArchiveEntry.objects.using(self.using).filter(scope_key=scope_key(scope))

    @database_errors
    def put(self, scope: Scope, document: ArchiveDocument, *, fence: Fence | None = None) -> ArchiveDocument:
        record = document_to_record(document)
        fence = check_fence(fence)
        key = scope_key(scope)
        doc_words = textsearch.words(document.search_text())
        for _ in range(RACE_ATTEMPTS):
            try:
                with transaction.atomic(using=self.using):
                    check_fence_in_transaction(fence, self.using, f"an archive put to {scope}")
                    existing = self._rows(scope).filter(doc_id=document.id).values_list("data", flat=True).first()
                    if existing is not None:
                        return document_from_record(json.loads(existing))
                    record["seq"] = self._next_seq(key)
                    data = dumps(record)
                    entry = ArchiveEntry(
                        scope_key=key, seq=record["seq"], doc_id=document.id,
                        session=column_text(document.session, SCOPE_KEY_LENGTH), title=column_text(document.title),
                        summary=column_text(document.summary), body=" ".join(doc_words), words=len(doc_words),
                        data=data, created_at=document.created_at,
                    )
                    entry.save(using=self.using, force_insert=True)
                    ArchiveListing(entry=entry, head=record_head(data)).save(using=self.using, force_insert=True)
                    if self._indexed():
                        self._index(entry.pk, entry.body)
                return document_from_record(record)
            except (Raced, IntegrityError):
                continue  # a concurrent put took the seq or the id: look again
        raise ConcurrentChange(f"the archive of {scope} kept changing during the put; retry")

    def _next_seq(self, key: str) -> int:
        heads = ArchiveHead.objects.using(self.using)
        head = heads.select_for_update().filter(scope_key=key).first() or heads.create(scope_key=key)
        if not heads.filter(pk=head.pk, last_seq=head.last_seq).update(
            last_seq=head.last_seq + 1, count=F("count") + 1
        ):
            raise Raced
        return head.last_seq + 1

    def _index(self, rowid: int, body: str) -> None:
        table = connections[self.using].ops.quote_name(FTS_TABLE)
        with connections[self.using].cursor() as cursor:
            # A stale row can exist if ids were reused (e.g. after a flush that skipped this table).
            cursor.execute(f"DELETE FROM {table} WHERE rowid = %s", [rowid])
            cursor.execute(f"INSERT INTO {table} (rowid, body) VALUES (%s, %s)", [rowid, body])

    @database_errors
    def get(self, scope: Scope, document_id: str) -> ArchiveDocument | None:
        document_id = check_document_id(document_id)
        data = self._rows(scope).filter(doc_id=document_id).values_list("data", flat=True).first()
        return None if data is None else document_from_record(json.loads(data))

    @database_errors
    def list(self, scope: Scope, *, after_seq: int | None = None, limit: int | None = None,
             newest_first: bool = False) -> list[ArchiveDocument]:
        rows = self._rows(scope)
        if after_seq is not None:
            rows = rows.filter(seq__gt=check_int(after_seq, "after_seq"))
        rows = rows.order_by("-seq" if newest_first else "seq").values_list("data", flat=True)
        if limit is not None:
            rows = rows[: check_int(limit, "limit", minimum=0)]
        return [document_from_record(json.loads(data)) for data in rows]

    @database_errors
    def list_summaries(self, scope: Scope, *, after_seq: int | None = None, limit: int | None = None,
                       newest_first: bool = False, session: str | None = None) -> list[ArchiveDocument]:
        # Only each document's head is read (its JSON before the "messages" list, always the
        # last key, see document_to_record), from a table of its own (ArchiveListing): cutting
        # ``data`` in SQL still made the database load every listed document whole, messages
        # and all, every turn. Plain SQL: compiling the ORM query cost more than running it.
        connection = connections[self.using]
        q = connection.ops.quote_name
        meta, listing = ArchiveEntry._meta, ArchiveListing._meta
        pk, seq, key, of_session = (f"e.{q(meta.get_field(name).column)}" for name in ("id", "seq", "scope_key", "session"))
        head, entry = (f"l.{q(listing.get_field(name).column)}" for name in ("head", "entry"))
        sql = (f"SELECT {pk}, {head} FROM {q(meta.db_table)} e LEFT JOIN {q(listing.db_table)} l ON {entry} = {pk} "
               f"WHERE {key} = %s")
        params: list[object] = [scope_key(scope)]
        if after_seq is not None:
            sql += f" AND {seq} > %s"
            params.append(check_int(after_seq, "after_seq"))
        if session is not None:
            sql += f" AND {of_session} = %s"
            params.append(column_text(str(session), SCOPE_KEY_LENGTH))  # as put() stored it
        sql += f" ORDER BY {seq} DESC" if newest_first else f" ORDER BY {seq}"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(check_int(limit, "limit", minimum=0))
        found = execute(self.using, sql, params)
        # Decoded once per head text: the summary is a function of that text alone. The
        # documents are shared between calls and threads: read them, never change them.
        heads = [head for _, head in found]
        documents = SUMMARY_HEADS.decode(heads, lambda todo: [summary_from_head(head) for head in todo])
        missing = [pk for (pk, _), document in zip(found, documents, strict=True) if document is None]
        if missing:  # a head that did not decode as one (not written by document_to_record)
            data = dict(ArchiveEntry.objects.using(self.using).filter(pk__in=missing).values_list("pk", "data"))
            documents = [
                document if document is not None else replace(document_from_record(json.loads(data[pk])), messages=())
                for (pk, _), document in zip(found, documents, strict=True)
            ]
        if session is not None:  # the column is cut at its length; the document says the whole key
            documents = [document for document in documents if document.session == session]
        return documents

    @database_errors
    def search(self, scope: Scope, query: str, *, limit: int = 10) -> list[ArchiveHit]:
        terms = textsearch.query_terms(query)
        check_int(limit, "limit")
        if not terms or limit <= 0:
            return []
        key = scope_key(scope)
        rows = ArchiveEntry.objects.using(self.using).filter(scope_key=key)
        stats = rows.aggregate(n=Count("pk"), avg=Avg("words"))
        ranked = textsearch.bm25(
            terms, self._candidates(key, terms), total_docs=stats["n"], average_length=float(stats["avg"] or 0)
        )[:limit]
        data = dict(rows.filter(pk__in=[scored.key for scored in ranked]).values_list("pk", "data"))
        hits = []
        for scored in ranked:
            if scored.key in data:
                document = document_from_record(json.loads(data[scored.key]))
                hits.append(ArchiveHit(document, scored.score, textsearch.snippet(document.search_text(), terms)))
        return hits

    def _candidates(self, key: str, terms: list[str]) -> list[tuple[int, list[str]]]:
        """(pk, words) of every document of the scope holding at least one of ``terms``, newest
        first (BM25's sort is stable: equal scores keep this order, so the newest wins ties)."""
        connection = connections[self.using]
        q = connection.ops.quote_name
        entries = q(ArchiveEntry._meta.db_table)
        if self._search_with_fts():
            fts = q(FTS_TABLE)
            sql = (f"SELECT e.id, e.body FROM {fts} JOIN {entries} e ON e.id = {fts}.rowid "
                   f"WHERE {fts} MATCH %s AND e.scope_key = %s ORDER BY e.seq DESC")
            params: list[object] = [textsearch.fts_match_expression(terms), key]
        elif connection.vendor == "postgresql" and self._fts is not False:
            sql = (f"SELECT e.id, e.body FROM {entries} e WHERE e.scope_key = %s "
                   "AND e.search @@ to_tsquery('simple', %s) ORDER BY e.seq DESC")
            params = [key, textsearch.tsquery_expression(terms)]
        else:
            # body holds folded words, so a plain (case-sensitive on PostgreSQL) LIKE finds every
            # document holding a term; BM25 then discards mere substring matches.
            found = (ArchiveEntry.objects.using(self.using).filter(scope_key=key)
                     .filter(reduce(or_, (Q(body__contains=t) for t in terms))).order_by("-seq"))
            return [(pk, body.split()) for pk, body in found.values_list("pk", "body")]
        return [(pk, body.split()) for pk, body in execute(self.using, sql, params)]

    @database_errors
    def archive_state(self, scope: Scope) -> ArchiveState:
        q = connections[self.using].ops.quote_name
        found = execute(
            self.using,
            f"SELECT {q('last_seq')}, {q('count')} FROM {q(ArchiveHead._meta.db_table)} WHERE {q('scope_key')} = %s",
            [scope_key(scope)],
        )
        return ArchiveState(last_seq=int(found[0][0]), count=int(found[0][1])) if found else ArchiveState(0, 0)

    @database_errors
    def put_vectors(self, scope: Scope, document_id: str, *, model: str, vectors: bytes) -> bool:
        document_id = check_document_id(document_id)
        if not isinstance(model, str) or not model or len(model) > 200:
            raise ValueError("a vector model name is non-empty text of at most 200 characters")
        if not isinstance(vectors, bytes | bytearray | memoryview):
            raise TypeError("vectors must be bytes")
        with transaction.atomic(using=self.using):
            pk = self._rows(scope).filter(doc_id=document_id).values_list("pk", flat=True).first()
            if pk is None:
                return False
            ArchiveVectors.objects.using(self.using).update_or_create(
                entry_id=pk, defaults={"model": model, "data": bytes(vectors)}
            )
            return True

    @database_errors
    def vectors(self, scope: Scope, *, after_seq: int | None = None) -> dict[str, tuple[str, bytes]]:
        rows = ArchiveVectors.objects.using(self.using).filter(entry__scope_key=scope_key(scope))
        if after_seq is not None:
            rows = rows.filter(entry__seq__gt=check_int(after_seq, "after_seq"))
        return {doc_id: (model, bytes(data)) for doc_id, model, data in rows.values_list("entry__doc_id", "model", "data")}

    @database_errors
    def delete(self, scope: Scope, document_id: str) -> bool:
        document_id = check_document_id(document_id)
        with transaction.atomic(using=self.using):
            pk = self._rows(scope).filter(doc_id=document_id).values_list("pk", flat=True).first()
            if pk is None:
                return False
            ArchiveEntry.objects.using(self.using).filter(pk=pk).delete()
            ArchiveHead.objects.using(self.using).filter(scope_key=scope_key(scope)).update(count=F("count") - 1)
            if self._indexed():
                table = connections[self.using].ops.quote_name(FTS_TABLE)
                with connections[self.using].cursor() as cursor:
                    cursor.execute(f"DELETE FROM {table} WHERE rowid = %s", [pk])
            return True
