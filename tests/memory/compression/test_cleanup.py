"""The cleanup pipeline on every backend: commit, skip, idempotence, archive, hooks, leases."""

from __future__ import annotations

import asyncio
import re
import subprocess

from asgiref.sync import sync_to_async

from memory.archiving import ARCHIVE_CURSOR, document_id_for
from memory.compression.cleanup import (
    INTENT_KEY,
    LEASE_NAME,
    CleanupStatus,
    arun_cleanup,
    derived_id,
    run_cleanup,
)
from memory.compression.pruned import PrunedCatalog, first_uncommitted_seq
from memory.compression.summary import SUMMARY_PREFIX
from memory.config import MemoryConfig
from memory.hooks import CleanupFinished, CleanupTriggered, MemoryHookDispatcher, MemoryHookPoint
from memory.locks import acquire_lease
from memory.messages import KIND_COMPACT_SUMMARY, Message
from memory.scopes import SessionScope, UserScope
from memory.stores.base import MemoryStoreBundle
from memory.transcript import validate_transcript

from .conftest import HookRecorder
from .helpers import RecordingSummarizer, assistant, chain, no_sleep, user

CONFIG = MemoryConfig(context_window=4096, compression_threshold=1000, keep_tokens=300)
ARCHIVE = UserScope("42")


def conversation(turns: int, *, words: int = 30) -> list[Message]:
    out: list[Message] = []
    for i in range(turns):
        out.append(user(f"question {i} " + "word " * words + "?"))  # asks: states no fact the summary must keep
        out += chain(f"result {i} " + "data " * words, reasoning=f"reason-{i}: I should look this up")
        out.append(assistant(f"answer {i} " + "text " * words, reasoning=f"because-{i}"))
    return out


def cleanup(bundle, session, catalog, hooks=None, summarizer=None, config=CONFIG, **kw):  # type: ignore[no-untyped-def]
    return run_cleanup(
        bundle=bundle,
        session=session,
        config=config,
        summarizer=summarizer or RecordingSummarizer(),
        catalog=catalog,
        hooks=hooks or MemoryHookDispatcher(),
        sleep=no_sleep,
        **kw,
    )


def conserved(bundle: MemoryStoreBundle, session: SessionScope, catalog: PrunedCatalog, appended: list[str]) -> None:
    """Every appended message is in the committed catalog or the live session, once, in order."""
    live = bundle.messages.read(session)
    validate_transcript(live)
    committed = catalog.entries(session, before_seq=first_uncommitted_seq(live))
    all_ids = [e.message.id for e in catalog.entries(session)]
    assert len(all_ids) == len(set(all_ids)), "a message is catalogued twice"
    ids = [e.message.id for e in committed] + [m.id for m in live if not m.is_compact_summary]
    assert ids == appended
    assert sum(m.is_compact_summary for m in live) <= 1 and all(
        m.is_compact_summary for m in live[:1] if m.kind == KIND_COMPACT_SUMMARY
    )


def test_under_threshold_is_skipped(bundle, session, catalog, hooks, recorder: HookRecorder) -> None:
    bundle.messages.append(session, conversation(1))
    result = cleanup(bundle, session, catalog, hooks)
    assert result.status is CleanupStatus.SKIPPED and "within the threshold" in result.reason
    assert recorder.events == [] and catalog.count(session) == 0


def test_cleanup_commits_summary_and_tail(bundle, session, catalog, hooks, recorder: HookRecorder) -> None:
    appended = bundle.messages.append(session, conversation(12))
    before = bundle.messages.head(session)
    assert before.tokens > CONFIG.threshold
    model = RecordingSummarizer()
    result = cleanup(bundle, session, catalog, hooks, model)
    assert result.committed and result.under_threshold and not result.fallback_summary
    live = bundle.messages.read(session)
    summary = live[0]
    assert summary.role == "user" and summary.kind == KIND_COMPACT_SUMMARY
    assert summary.content.startswith(SUMMARY_PREFIX) and summary.seq == result.through_seq
    assert summary.id == result.summary_id == derived_id("summary", session=session, through_seq=result.through_seq)
    kept = live[1:]
    assert sum(m.tokens for m in kept) <= CONFIG.keep and kept[0].role != "tool"
    assert [e.seq for e in catalog.entries(session)] == list(range(1, result.through_seq + 1))
    assert result.evicted_count == result.through_seq and result.kept_count == len(kept)
    assert result.tokens_after == bundle.messages.head(session).tokens <= CONFIG.threshold
    conserved(bundle, session, catalog, [m.id for m in appended])
    # Every evicted reasoning went to the summarizer beside its content.
    seen = model.seen_text()
    assert all(m.reasoning_content in seen for m in appended[: result.through_seq] if m.reasoning_content)
    triggered = recorder.of(MemoryHookPoint.CLEANUP_TRIGGERED)
    finished = recorder.of(MemoryHookPoint.CLEANUP_FINISHED)
    assert triggered == [CleanupTriggered(session=session, tokens=before.tokens, threshold=1000, forced=False)]
    assert len(finished) == 1
    event = finished[0]
    assert isinstance(event, CleanupFinished)
    assert (event.evicted_count, event.kept_count, event.tokens_before, event.tokens_after) == (
        result.evicted_count,
        result.kept_count,
        before.tokens,
        result.tokens_after,
    )
    assert event.catalog_path == result.catalog_path and event.catalog_path.exists()
    assert event.archive_document_id is None and event.fallback_summary is False
    assert [p for p, _ in recorder.events] == [MemoryHookPoint.CLEANUP_TRIGGERED, MemoryHookPoint.CLEANUP_FINISHED]


def test_a_second_cleanup_without_new_messages_changes_nothing(bundle, session, catalog) -> None:
    bundle.messages.append(session, conversation(12))
    assert cleanup(bundle, session, catalog).committed
    live, files, head = bundle.messages.read(session), catalog.files(session), bundle.messages.head(session)
    model = RecordingSummarizer()
    assert cleanup(bundle, session, catalog, summarizer=model).status is CleanupStatus.SKIPPED
    forced = cleanup(bundle, session, catalog, summarizer=model, force=True)
    assert forced.status is CleanupStatus.NOTHING_TO_EVICT and model.calls == 0
    assert bundle.messages.read(session) == live and catalog.files(session) == files
    assert bundle.messages.head(session).version == head.version


def test_the_previous_summary_is_merged_into_the_next(bundle, session, catalog) -> None:
    appended = bundle.messages.append(session, conversation(12))
    cleanup(bundle, session, catalog)
    first_summary = bundle.messages.read(session)[0]
    appended += bundle.messages.append(session, conversation(12))
    model = RecordingSummarizer()
    result = cleanup(bundle, session, catalog, summarizer=model)
    assert result.committed
    body = first_summary.content.removeprefix(SUMMARY_PREFIX).strip()
    assert body in model.seen_text() and "<previous_summary>" in model.seen_text()
    live = bundle.messages.read(session)
    assert [m.is_compact_summary for m in live].count(True) == 1 and live[0].id != first_summary.id
    conserved(bundle, session, catalog, [m.id for m in appended])
    assert catalog.lookup(session, first_summary.seq).id != first_summary.id  # the summary is not catalogued


def test_grep_prints_exactly_the_evicted_seqs(bundle, session, catalog) -> None:
    bundle.messages.append(session, conversation(12))
    first = cleanup(bundle, session, catalog)
    bundle.messages.append(session, conversation(12))
    second = cleanup(bundle, session, catalog)
    directory = catalog.directory(session)
    out = subprocess.run(
        f'grep -n "^## \\[" {directory}/*.md', shell=True, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    seqs = [int(re.search(r":## \[(\d+)\] ", line)[1]) for line in out]
    live_seqs = {m.seq for m in bundle.messages.read(session) if not m.is_compact_summary}
    expected = list(range(1, second.through_seq + 1))
    assert seqs == expected and not live_seqs & set(seqs)
    assert first.through_seq in seqs and len(out) == first.evicted_count + second.evicted_count


def test_archive_gets_one_document_per_cleanup(bundle, session, catalog, hooks, recorder) -> None:
    config = MemoryConfig(context_window=4096, compression_threshold=1000, keep_tokens=300, archive_enabled=True)
    appended = bundle.messages.append(session, conversation(12))
    result = cleanup(bundle, session, catalog, hooks, config=config, archive_scope=ARCHIVE)
    # Named by the session and the first seq it holds: a retried cleanup finds it again.
    assert result.archive_document_id == document_id_for(session, appended[0].seq)
    documents = bundle.archive.list(ARCHIVE)
    assert [d.id for d in documents] == [result.archive_document_id]
    document = documents[0]
    assert document.session == session.key()
    assert [m.id for m in document.messages] == [m.id for m in appended[: result.through_seq]]
    assert document.summary == bundle.messages.read(session)[0].content
    assert recorder.of(MemoryHookPoint.CLEANUP_FINISHED)[0].archive_document_id == document.id
    appended += bundle.messages.append(session, conversation(12))
    cleanup(bundle, session, catalog, hooks, config=config, archive_scope=ARCHIVE)
    archived = [m.id for d in bundle.archive.list(ARCHIVE) for m in d.messages]
    assert archived == [e.message.id for e in catalog.entries(session)]
    assert bundle.cursors.get(session, ARCHIVE_CURSOR) == catalog.entries(session)[-1].message.seq
    assert document.metadata["first_seq"] == 1 and document.metadata["last_seq"] == result.through_seq
    assert document.metadata["first_at"] == appended[0].created_at.isoformat()


def test_archive_off_writes_no_document(bundle, session, catalog) -> None:
    bundle.messages.append(session, conversation(12))
    result = cleanup(bundle, session, catalog, archive_scope=ARCHIVE)  # CONFIG has archive off
    assert result.committed and result.archive_document_id is None and bundle.archive.list(ARCHIVE) == []


def test_a_message_bigger_than_the_window_is_catalogued_whole(bundle, session, catalog) -> None:
    huge = user("START " + "enormous " * 6000 + " END")  # ~6000 tokens > the 4096 window
    appended = bundle.messages.append(session, [*conversation(2), huge])
    assert appended[-1].tokens > CONFIG.context_window
    result = cleanup(bundle, session, catalog)
    assert result.committed and result.oversized_seqs == (appended[-1].seq,)
    assert "exceed the 4096-token window" in result.reason
    assert catalog.lookup(session, appended[-1].seq) == appended[-1]  # whole, byte for byte
    assert result.under_threshold and bundle.messages.head(session).tokens <= CONFIG.threshold
    assert cleanup(bundle, session, catalog).status is CleanupStatus.SKIPPED  # it terminates
    conserved(bundle, session, catalog, [m.id for m in appended])


def test_fallback_summary_when_the_model_is_down(bundle, session, catalog, hooks, recorder) -> None:
    calls = []

    def down(messages):  # type: ignore[no-untyped-def]
        calls.append(1)
        raise RuntimeError("HTTP 503 Service Unavailable")

    appended = bundle.messages.append(session, conversation(12))
    result = cleanup(bundle, session, catalog, hooks, down)
    assert result.committed and result.fallback_summary and len(calls) == 3 == result.summarizer_calls
    assert "503" in result.summary_error
    content = bundle.messages.read(session)[0].content
    assert "Fallback summary (the summarizer failed:" in content and "question 0" in content
    assert recorder.of(MemoryHookPoint.CLEANUP_FINISHED)[0].fallback_summary is True
    conserved(bundle, session, catalog, [m.id for m in appended])


def test_an_append_during_the_summarizer_call_is_kept(bundle, session, catalog) -> None:
    appended = bundle.messages.append(session, conversation(12))
    late = user("a message that arrived while the summarizer was thinking")
    model = RecordingSummarizer()

    async def slow_model(messages):  # type: ignore[no-untyped-def]
        if model.calls == 0:
            await sync_to_async(bundle.messages.append, thread_sensitive=True)(session, [late])
        return model(messages)

    result = cleanup(bundle, session, catalog, summarizer=slow_model)
    assert result.committed and result.commit_attempts == 2
    live = bundle.messages.read(session)
    assert live[-1].id == late.id
    conserved(bundle, session, catalog, [m.id for m in appended] + [late.id])


def test_a_session_that_keeps_changing_aborts_cleanly_and_resumes(bundle, session, catalog, monkeypatch) -> None:
    appended = [m.id for m in bundle.messages.append(session, conversation(12))]
    real_prune = type(bundle.messages).prune
    extra: list[str] = []

    def racing_prune(self, scope, **kw):  # type: ignore[no-untyped-def]
        extra.append(self.append(scope, [user(f"racer {len(extra)}")])[0].id)
        return real_prune(self, scope, **kw)

    monkeypatch.setattr(type(bundle.messages), "prune", racing_prune)
    result = cleanup(bundle, session, catalog)
    assert result.status is CleanupStatus.ABORTED and "3 times" in result.reason
    monkeypatch.undo()
    conserved(bundle, session, catalog, appended + extra)
    model = RecordingSummarizer()
    resumed = cleanup(bundle, session, catalog, summarizer=model)
    assert resumed.committed and resumed.resumed
    conserved(bundle, session, catalog, appended + extra)


def test_a_held_lease_makes_a_second_cleanup_busy(bundle, session, catalog) -> None:
    bundle.messages.append(session, conversation(12))
    acquire_lease(kv=bundle.kv, scope=session, name=LEASE_NAME, ttl=60, holder="other-worker")
    model = RecordingSummarizer()
    result = cleanup(bundle, session, catalog, summarizer=model)
    assert result.status is CleanupStatus.BUSY and "other-worker" in result.reason and model.calls == 0
    assert catalog.count(session) == 0


def test_the_lease_is_released_after_cleanup(bundle, session, catalog) -> None:
    bundle.messages.append(session, conversation(12))
    cleanup(bundle, session, catalog)
    assert bundle.kv.get(session, f"lease.{LEASE_NAME}") is None
    assert bundle.kv.get(session, INTENT_KEY) is None


async def test_async_entry_point(threaded_bundle, session, catalog) -> None:
    # From a running loop (the runtime's case): store calls hop to a worker thread with its own
    # database connection, hence the committed-data bundle.
    bundle = threaded_bundle
    await sync_to_async(bundle.messages.append, thread_sensitive=True)(session, conversation(12))

    async def model(messages):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        return RecordingSummarizer()(messages)

    result = await arun_cleanup(
        bundle=bundle,
        session=session,
        config=CONFIG,
        summarizer=model,
        catalog=catalog,
        hooks=MemoryHookDispatcher(),
        sleep=no_sleep,
    )
    assert result.committed and result.under_threshold
    live = await sync_to_async(bundle.messages.read, thread_sensitive=True)(session)
    assert live[0].is_compact_summary


def test_a_slow_summarizer_renews_the_lease(bundle, session, catalog) -> None:
    bundle.messages.append(session, conversation(12))
    model = RecordingSummarizer()
    seen_versions = []

    def slow(messages):  # type: ignore[no-untyped-def]
        import time

        time.sleep(0.5)
        return model(messages)

    real_put = type(bundle.kv).put

    def spy(self, scope, key, value, **kw):  # type: ignore[no-untyped-def]
        item = real_put(self, scope, key, value, **kw)
        if key == f"lease.{LEASE_NAME}":
            seen_versions.append(item.version)
        return item

    import unittest.mock

    with unittest.mock.patch.object(type(bundle.kv), "put", spy):
        result = cleanup(bundle, session, catalog, summarizer=slow, lease_ttl=0.9)
    assert result.committed and len(seen_versions) >= 2  # acquired, then renewed after the slow call


def test_a_lease_taken_over_during_the_summarizer_aborts_without_writing(bundle, session, catalog) -> None:
    appended = bundle.messages.append(session, conversation(12))

    def stalled(messages):  # type: ignore[no-untyped-def]
        import time

        time.sleep(0.35)  # past the ttl: another worker may now take the lease over
        return RecordingSummarizer()(messages)

    async def model(messages):  # type: ignore[no-untyped-def]
        answer = await sync_to_async(stalled, thread_sensitive=False)(messages)
        await sync_to_async(acquire_lease, thread_sensitive=True)(
            kv=bundle.kv, scope=session, name=LEASE_NAME, ttl=60, holder="intruder"
        )
        return answer

    result = cleanup(bundle, session, catalog, summarizer=model, lease_ttl=0.3)
    assert result.status is CleanupStatus.ABORTED and "taken over" in result.reason
    assert bundle.messages.read(session) == appended and catalog.count(session) == 0
    assert bundle.kv.get(session, INTENT_KEY) is None
    assert "intruder" in bundle.kv.get(session, f"lease.{LEASE_NAME}").value  # not released by us


def test_todo_reorientation_runs_after_a_real_cleanup(bundle, session, catalog) -> None:
    import json

    from memory.hooks import TODO_KEY, TodoReorientationHook, take_reorientation

    bundle.kv.put(session, TODO_KEY, json.dumps([{"content": "book the flight", "status": "pending"}]))
    hooks = MemoryHookDispatcher()
    hooks.add(TodoReorientationHook(kv=bundle.kv))
    bundle.messages.append(session, conversation(12))
    result = cleanup(bundle, session, catalog, hooks)
    note = take_reorientation(kv=bundle.kv, session=session)
    assert result.committed and note and "book the flight" in note and f"{result.evicted_count} earlier" in note


def test_a_failing_hook_never_breaks_the_cleanup(bundle, session, catalog) -> None:
    hooks = MemoryHookDispatcher()

    def broken(event):  # type: ignore[no-untyped-def]
        raise RuntimeError("hook bug")

    hooks.register(MemoryHookPoint.CLEANUP_TRIGGERED, broken)
    hooks.register(MemoryHookPoint.CLEANUP_FINISHED, broken)
    appended = bundle.messages.append(session, conversation(12))
    assert cleanup(bundle, session, catalog, hooks).committed
    conserved(bundle, session, catalog, [m.id for m in appended])
