"""The SQL backend's own promises: FTS5 on SQLite, constant-cost appends, atomic prunes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.models import ArchiveEntry, ArchiveListing, PrunedMessageId, SessionHead, StoredMessage
from memory.scopes import CompositeScope, SessionScope, UserScope
from memory.stores import sql_archive
from memory.stores.base import ArchiveDocument, DuplicateMessage, KVItem
from memory.stores.base import SessionHead as HeadValue
from memory.stores.sql import (
    SqlArchiveStore,
    SqlCursorStore,
    SqlKVStore,
    SqlMessageStore,
    open_bundle,
    scope_key,
)

from .helpers import conversation, summary, user
from .test_archive import FILLER

pytestmark = pytest.mark.django_db
S = SessionScope("abc")


@pytest.fixture
def messages() -> SqlMessageStore:
    return SqlMessageStore()


def fts_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {sql_archive.FTS_TABLE}")
        return cursor.fetchone()[0]


def test_bundle_is_the_four_adapters():
    bundle = open_bundle()
    assert bundle.backend == "sqlite"
    assert [type(s) for s in (bundle.messages, bundle.kv, bundle.cursors, bundle.archive)] == [
        SqlMessageStore, SqlKVStore, SqlCursorStore, SqlArchiveStore]
    assert SqlMessageStore(using="other").using == "other"


def test_the_fts5_table_exists_and_is_used():
    assert connection.vendor == "sqlite"
    assert sql_archive.fts_available("default")
    store = SqlArchiveStore()
    stored = store.put(S, ArchiveDocument(session="session:abc", summary=f"kubernetes. {FILLER}"))
    assert fts_rows() == 1

    with CaptureQueriesContext(connection) as queries:
        assert [h.document.id for h in store.search(S, "kubernetes")] == [stored.id]
    statements = " ".join(q["sql"] for q in queries.captured_queries)
    assert "MATCH" in statements and "LIKE" not in statements.upper()
    store.delete(S, stored.id)
    assert fts_rows() == 0


def test_hostile_text_reaches_fts5_only_as_quoted_words():
    assert sql_archive.textsearch.fts_match_expression(["near", "or"]) == '"near" OR "or"'
    store = SqlArchiveStore()
    store.put(S, ArchiveDocument(session="s", summary=f"NEAR the OR gate. {FILLER}"))
    assert len(store.search(S, 'NEAR( "OR" * -x ^y body:z')) == 1


@pytest.mark.parametrize("fts", [True, False])
def test_both_search_paths_rank_alike(fts):
    store = SqlArchiveStore(fts=fts)
    once = store.put(S, ArchiveDocument(session="s", summary=f"postgres. {FILLER}"))
    store.put(S, ArchiveDocument(session="s", summary=FILLER))
    thrice = store.put(S, ArchiveDocument(session="s", summary=f"postgres postgres postgres. {FILLER}"))
    store.put(UserScope("other"), ArchiveDocument(session="s", summary="postgres " * 20))
    hits = store.search(S, "Postgres!")
    assert [h.document.id for h in hits] == [thrice.id, once.id]
    assert hits[0].score > hits[1].score > 0
    assert store.search(S, "post") == [], "substrings are not words"


def test_the_fts_index_is_kept_even_when_searching_without_it():
    SqlArchiveStore(fts=False).put(S, ArchiveDocument(session="s", summary="indexed anyway"))
    assert fts_rows() == 1


def test_message_data_is_json_text_without_raw_nul(messages):
    messages.append(S, [user("nul \x00 byte")])
    row = StoredMessage.objects.get()
    assert "\x00" not in row.data
    assert json.loads(row.data)["content"] == "nul \x00 byte"
    assert (row.scope_key, row.seq, row.role, row.kind) == ("session:abc", 1, "user", "message")


def test_values_are_frozen_dataclasses_not_models(messages):
    messages.append(S, [user()])
    assert type(messages.head(S)) is HeadValue
    assert type(SqlKVStore().put(S, "k", "v")) is KVItem
    assert not isinstance(messages.read(S)[0], StoredMessage)


def test_append_costs_the_same_whatever_the_session_length(messages):
    short, long = SessionScope("short"), SessionScope("long")
    messages.append(short, conversation(2))
    messages.append(long, conversation(2))
    for _ in range(20):
        messages.append(long, conversation(50))
    counts = []
    for scope in (short, long):
        with CaptureQueriesContext(connection) as queries:
            messages.append(scope, [user("one more")])
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 8, counts


def test_a_sessions_first_append_makes_its_head_in_one_more_statement(messages):
    fresh = SessionScope("fresh")
    with CaptureQueriesContext(connection) as first:
        messages.append(fresh, conversation(2))
    with CaptureQueriesContext(connection) as later:
        messages.append(fresh, [user("one more")])
    assert len(first) == len(later) + 1, [q["sql"] for q in first]  # the INSERT of the head
    head = messages.head(fresh)
    assert (head.version, head.last_seq, head.count) == (2, 3, 3)
    assert head.tokens == sum(m.tokens for m in messages.read(fresh))


def test_tail_read_is_one_indexed_query(messages):
    messages.append(S, conversation(300))
    with CaptureQueriesContext(connection) as queries:
        assert len(messages.read(S, last=5)) == 5
    assert len(queries) == 1
    sql = queries[0]["sql"]
    assert "LIMIT 5" in sql
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
    assert "TEMP B-TREE" not in plan, f"the tail must come from the index order: {plan}"


def test_a_failed_prune_rolls_back_everything(messages, monkeypatch):
    stored = messages.append(S, conversation(6))
    before = messages.read(S), messages.head(S)

    def fail(*args, **kwargs):
        raise RuntimeError("disk full at the last step")

    monkeypatch.setattr(SqlMessageStore, "_advance", fail)
    with pytest.raises(RuntimeError):
        messages.prune(S, through_seq=4, summary=summary(), expected_version=before[1].version)
    monkeypatch.undo()
    assert (messages.read(S), messages.head(S)) == before
    assert PrunedMessageId.objects.count() == 0
    assert StoredMessage.objects.count() == len(stored)


def test_pruned_ids_are_remembered_until_clear(messages):
    messages.append(S, conversation(5))
    messages.prune(S, through_seq=3, summary=summary(), expected_version=messages.head(S).version)
    assert PrunedMessageId.objects.filter(scope_key="session:abc").count() == 3
    assert SessionHead.objects.get(scope_key="session:abc").pruned == 3
    messages.clear(S)
    assert PrunedMessageId.objects.count() == 0 and StoredMessage.objects.count() == 0
    assert SessionHead.objects.get(scope_key="session:abc").count == 0


def test_long_scope_keys_are_digested_not_truncated(messages):
    parts = [UserScope(f"{i:03d}" + "y" * 120) for i in range(6)]
    wide, wider = CompositeScope(*parts[:5]), CompositeScope(*parts)
    assert scope_key(wide).startswith("sha256-") and scope_key(wide) != scope_key(wider)
    messages.append(wide, [user("five")])
    messages.append(wider, [user("six")])
    assert [m.content for m in messages.read(wide)] == ["five"]
    assert [m.content for m in messages.read(wider)] == ["six"]


def test_archive_columns_hold_text_without_nul():
    SqlArchiveStore().put(S, ArchiveDocument(session="session:abc", summary="sum\x00mary", title="ti\x00tle"))
    row = ArchiveEntry.objects.get()
    assert (row.title, row.summary) == ("title", "summary")
    assert json.loads(row.data)["summary"] == "sum\x00mary"
    assert SqlArchiveStore().get(S, row.doc_id).summary == "sum\x00mary"


def test_a_row_changed_under_the_store_is_read_as_it_is_now(messages):
    stored = messages.append(S, [user("before")])[0]
    assert messages.read(S, last=1)[0].content == "before"  # decoded once, kept by its text
    record = {**stored.to_record(), "content": "after"}
    StoredMessage.objects.filter(scope_key=scope_key(S), seq=stored.seq).update(data=json.dumps(record))
    assert messages.read(S, last=1)[0].content == "after"
    StoredMessage.objects.filter(scope_key=scope_key(S), seq=stored.seq).update(data='{"role": "user", "cont')
    with pytest.raises(ValueError):  # a damaged row fails loudly, never as an old value
        messages.read(S, last=1)


def test_kv_get_returns_what_put_stored():
    kv = SqlKVStore()
    put = kv.put(UserScope("7"), "MEMORY.md", "- a fact ✓")
    assert kv.get(UserScope("7"), "MEMORY.md") == put
    assert kv.get(UserScope("7"), "missing") is None


@pytest.mark.parametrize("claiming", [True, False], ids=["update-returning", "portable"])
def test_both_append_paths_keep_seqs_totals_and_reject_used_ids(messages, monkeypatch, claiming):
    if not claiming:  # a database without UPDATE ... RETURNING takes the checked path
        monkeypatch.setattr(messages._sql, "claim", None)
    first = messages.append(S, conversation(3))
    assert [m.seq for m in first] == [1, 2, 3]
    head = messages.head(S)
    pruned = messages.prune(S, through_seq=2, summary=None, expected_version=head.version)
    more = messages.append(S, [user("after the prune")])
    assert more[0].seq == 4
    for used in (first[2], first[0]):  # live, then pruned
        with pytest.raises(DuplicateMessage):
            messages.append(S, [user("fresh"), replace(used, seq=None)])
    head = messages.head(S)
    assert (head.count, head.last_seq, head.version) == (2, 4, pruned.head.version + 1)
    assert head.tokens == sum(m.tokens for m in messages.read(S))


def test_listing_summaries_reads_the_listing_rows_not_the_whole_documents():
    """Each document's head (its JSON before the messages) has a row of its own, so listing
    summaries every turn never loads a document's messages: with ``data`` made unreadable, the
    listing is unchanged, while ``get`` (which does need the messages) fails loudly."""
    store = SqlArchiveStore()
    doc = store.put(S, ArchiveDocument(session="session:abc", summary="the plan", title="t",
                                       messages=tuple(conversation(40)), metadata={"messages": [1]}))
    row = ArchiveEntry.objects.get()
    head = ArchiveListing.objects.get(entry=row).head
    assert json.loads(head + "}")["summary"] == "the plan"
    assert row.data.startswith(head) and row.data[len(head):].startswith(',"messages":[')
    ArchiveEntry.objects.filter(pk=row.pk).update(data="{not json")
    assert store.list_summaries(S) == [replace(doc, messages=())]
    with pytest.raises(ValueError):
        store.get(S, doc.id)
    assert store.delete(S, doc.id) and not ArchiveListing.objects.exists(), "the listing row goes with its document"


def test_a_document_without_a_usable_listing_is_listed_from_its_data():
    store = SqlArchiveStore()
    doc = store.put(S, ArchiveDocument(session="session:abc", summary="older", messages=tuple(conversation(4))))
    ArchiveListing.objects.filter(entry__doc_id=doc.id).update(head='{"id": "x"')
    assert store.list_summaries(S) == [replace(doc, messages=())]
    ArchiveListing.objects.filter(entry__doc_id=doc.id).delete()
    assert store.list_summaries(S) == [replace(doc, messages=())]


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_documents_stored_before_it_their_listing():
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate([("memory", "0002_archive_fts")])
    try:
        old = executor.loader.project_state([("memory", "0002_archive_fts")]).apps.get_model("memory", "ArchiveEntry")
        heads = {}
        for seq in range(1, 121):  # more than one batch of the backfill
            head = (f'{{"id":"d{seq}","seq":{seq},"session":"s","title":"","summary":"kept {seq}",'
                    '"created_at":"2026-01-01T00:00:00+00:00","metadata":{}')
            heads[f"d{seq}"] = head
            old.objects.create(scope_key=scope_key(S), seq=seq, doc_id=f"d{seq}", data=head + ',"messages":[]}',
                               created_at="2026-01-01T00:00:00Z")
        executor = MigrationExecutor(connection)
        executor.migrate([("memory", "0003_archive_listing")])
        assert dict(ArchiveListing.objects.values_list("entry__doc_id", "head")) == heads
        assert [d.summary for d in SqlArchiveStore().list_summaries(S, limit=2, newest_first=True)] == [
            "kept 120", "kept 119"]
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
