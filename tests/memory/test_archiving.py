"""Conversation archiving on every backend: each message archived exactly once, whatever happens.

Conversation archiving and cleanup share one archive cursor per session; a crash at any step,
a stale holder, a concurrent worker or a second trigger never archives a message twice, never
half, and never changes the live conversation.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from memory import archiving
from memory.archiving import (
    ARCHIVE_CURSOR,
    ArchivingStatus,
    archive_conversation,
    archive_messages,
    digest,
    document_id_for,
    span_text,
    title_for,
)
from memory.compression.cleanup import run_cleanup
from memory.compression.pruned import PrunedCatalog
from memory.config import MemoryConfig
from memory.hooks import MemoryHookDispatcher
from memory.locks import acquire_lease
from memory.messages import Message, ToolCall
from memory.retrieval.embeddings import WordLlamaEmbedder, decode
from memory.scopes import AgentScope, CompositeScope, SessionScope, UserScope
from memory.stores.base import ArchiveDocument, FencedOut

S = SessionScope("talk")
ARCHIVE = CompositeScope(AgentScope("default"), UserScope("7"))
DAY = datetime(2023, 5, 8, 9, 0, tzinfo=UTC)


def said(role: str, text: str, minutes: int, **kw) -> Message:
    return Message(role=role, content=text, created_at=DAY + timedelta(minutes=minutes), **kw)


def chat(n: int, *, start: int = 0) -> list[Message]:
    out = []
    for i in range(start, start + n):
        out.append(said("user", f"Question {i}: tell me about topic number {i} please.", 2 * i))
        out.append(said("assistant", f"Answer {i}: here is what I know about topic {i}.", 2 * i + 1))
    return out


def archived_ids(bundle) -> list[str]:
    return [m.id for d in bundle.archive.list(ARCHIVE) for m in d.messages]


def archive(bundle, **kw):
    return archive_conversation(bundle=bundle, session=S, archive_scope=ARCHIVE, **kw)


def test_a_conversation_is_archived_once_and_left_as_it_is(bundle):
    appended = bundle.messages.append(S, chat(3))
    head = bundle.messages.head(S)
    first = archive(bundle)
    assert first.status is ArchivingStatus.ARCHIVED and first.messages == 6
    assert bundle.messages.head(S) == head and bundle.messages.read(S) == appended  # untouched
    assert archived_ids(bundle) == [m.id for m in appended]
    assert bundle.cursors.get(S, ARCHIVE_CURSOR) == appended[-1].seq
    assert archive(bundle).status is ArchivingStatus.UP_TO_DATE
    [document] = bundle.archive.list(ARCHIVE)
    assert document.id == document_id_for(S, appended[0].seq)
    assert document.title == "Question 0: tell me about topic number 0 please."
    assert document.metadata["source"] == "conversation"
    assert (document.metadata["first_at"], document.metadata["last_at"]) == (
        appended[0].created_at.isoformat(), appended[-1].created_at.isoformat())
    assert document.summary.startswith("On 8 May 2023 (6 messages):")
    # More talk later: only the new messages go in, in a document of their own.
    more = bundle.messages.append(S, chat(2, start=3))
    assert archive(bundle).messages == 4
    assert archived_ids(bundle) == [m.id for m in appended + more]


def test_cleanup_and_conversation_archiving_share_the_cursor(bundle, tmp_path):
    config = MemoryConfig(context_window=4096, compression_threshold=300, keep_tokens=80, archive_enabled=True)
    appended = bundle.messages.append(S, chat(4))
    archive(bundle)  # everything so far, while it is all still live
    appended += bundle.messages.append(S, chat(6, start=4))

    async def summarizer(_prompt):
        return "\n".join(f"## {h}\n- x" for h in ("Goal", "Decisions", "Facts learned", "Open tasks",
                                                  "Reasoning trail", "Tool results that matter"))

    catalog = PrunedCatalog(tmp_path / "pruned")
    result = run_cleanup(bundle=bundle, session=S, config=config, summarizer=summarizer, catalog=catalog,
                         hooks=MemoryHookDispatcher(), archive_scope=ARCHIVE)
    assert result.committed and result.through_seq > appended[7].seq
    archive(bundle)  # and the rest, live or not
    ids = archived_ids(bundle)
    assert sorted(ids) == sorted(m.id for m in appended) and len(ids) == len(set(ids))  # each exactly once
    sources = [d.metadata["source"] for d in bundle.archive.list(ARCHIVE)]
    assert sources[0] == "conversation" and "cleanup" in sources


class Kill(Exception):
    pass


@pytest.mark.parametrize("step", ["put", "put_vectors", "cursor"])
def test_a_kill_at_any_step_leaves_each_message_archived_once(bundle, monkeypatch, step):
    appended = bundle.messages.append(S, chat(3))
    stores = {"put": bundle.archive, "put_vectors": bundle.archive, "cursor": bundle.cursors}
    method = "set" if step == "cursor" else step
    real = getattr(type(stores[step]), method)

    def killed(self, *args, **kwargs):
        if step == "put":
            real(self, *args, **kwargs)  # the document lands, then the worker dies
        raise Kill(step)

    monkeypatch.setattr(type(stores[step]), method, killed)
    with pytest.raises(Kill):
        archive(bundle, embedder=WordLlamaEmbedder())
    monkeypatch.setattr(type(stores[step]), method, real)
    # The lease of the dead worker was released by its finally; a killed process's would expire.
    more = bundle.messages.append(S, chat(1, start=3))
    assert archive(bundle, embedder=WordLlamaEmbedder()).status is ArchivingStatus.ARCHIVED
    ids = archived_ids(bundle)
    assert ids == [m.id for m in appended + more]
    assert bundle.cursors.get(S, ARCHIVE_CURSOR) == more[-1].seq


def test_a_stale_holder_archives_nothing(bundle):
    bundle.messages.append(S, chat(2))
    stale = acquire_lease(kv=bundle.kv, scope=S, name="cleanup", ttl=10, holder="A",
                          clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    acquire_lease(kv=bundle.kv, scope=S, name="cleanup", ttl=10, holder="B",
                  clock=lambda: datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    with pytest.raises(FencedOut):
        archive_messages(bundle=bundle, session=S, archive_scope=ARCHIVE, messages=bundle.messages.read(S),
                         source="conversation", fence=stale.fence)
    assert bundle.archive.list(ARCHIVE) == [] and bundle.cursors.get(S, ARCHIVE_CURSOR) is None


def test_a_busy_session_is_left_to_the_next_trigger(bundle):
    bundle.messages.append(S, chat(2))
    acquire_lease(kv=bundle.kv, scope=S, name="cleanup", ttl=60, holder="a cleanup")
    assert archive(bundle).status is ArchivingStatus.BUSY
    assert bundle.archive.list(ARCHIVE) == []


def test_a_conversation_archived_through_its_end_is_up_to_date_without_taking_the_lease(bundle):
    bundle.messages.append(S, chat(2))
    assert archive(bundle).status is ArchivingStatus.ARCHIVED
    acquire_lease(kv=bundle.kv, scope=S, name="cleanup", ttl=60, holder="a cleanup")
    assert archive(bundle).status is ArchivingStatus.UP_TO_DATE  # read, not locked: nothing to wait for
    bundle.messages.append(S, chat(1, start=2))
    assert archive(bundle).status is ArchivingStatus.BUSY  # something new: only under the lease


def test_only_a_quiet_conversation_is_archived_when_idleness_is_asked(bundle):
    appended = bundle.messages.append(S, chat(1))
    recent = archive(bundle, idle_for=timedelta(minutes=30), now=lambda: appended[-1].created_at + timedelta(minutes=5))
    assert recent.status is ArchivingStatus.NOT_IDLE and bundle.archive.list(ARCHIVE) == []
    quiet = archive(bundle, idle_for=timedelta(minutes=30), now=lambda: appended[-1].created_at + timedelta(hours=1))
    assert quiet.status is ArchivingStatus.ARCHIVED


def test_a_tool_chain_still_open_waits_for_its_results(bundle):
    call = ToolCall(id="c1", name="todo", arguments_json="{}")
    bundle.messages.append(S, [said("user", "Add milk to my list.", 0),
                               Message(role="assistant", content=None, tool_calls=(call,), created_at=DAY)])
    archive(bundle)
    assert [m.content for m in bundle.archive.list(ARCHIVE)[0].messages] == ["Add milk to my list."]
    bundle.messages.append(S, [Message(role="tool", content="added", tool_call_id="c1", name="todo", created_at=DAY),
                               said("assistant", "Done.", 1)])
    archive(bundle)
    kinds = [(m.role, bool(m.tool_calls)) for m in bundle.archive.list(ARCHIVE)[1].messages]
    assert kinds == [("assistant", True), ("tool", False), ("assistant", False)]  # the chain whole


def test_sessions_archived_before_the_cursor_existed_are_not_archived_again(bundle):
    appended = bundle.messages.append(S, chat(3))
    # A cleanup of an earlier version archived the first four messages without a cursor.
    bundle.archive.put(ARCHIVE, ArchiveDocument(session=S.key(), summary="old", messages=tuple(appended[:4]),
                                                metadata={"source": "cleanup", "through_seq": appended[3].seq}))
    archive(bundle)
    ids = archived_ids(bundle)
    assert sorted(ids) == sorted(m.id for m in appended) and len(ids) == len(set(ids))


def test_concurrent_workers_archive_each_message_once(threaded_bundle):
    bundle = threaded_bundle
    appended = bundle.messages.append(S, chat(10))
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(archive(bundle).status)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert archived_ids(bundle) == [m.id for m in appended]
    assert ArchivingStatus.ARCHIVED in results


def test_vectors_are_stored_beside_the_messages(bundle):
    bundle.messages.append(S, chat(2))
    embedder = WordLlamaEmbedder()
    archive(bundle, embedder=embedder)
    [document] = bundle.archive.list(ARCHIVE)
    model, data = bundle.archive.vectors(ARCHIVE)[document.id]
    vectors = decode(data, embedder.dimensions)
    assert model == embedder.model and vectors.shape == (4, embedder.dimensions)
    assert all(abs(float((row * row).sum()) - 1) < 1e-2 for row in vectors)


def test_titles_digests_and_dates_read_like_a_person_wrote_them():
    assert span_text(DAY, DAY + timedelta(hours=3)) == "8 May 2023"
    assert span_text(DAY, DAY + timedelta(days=1)) == "8–9 May 2023"
    assert span_text(DAY, DAY + timedelta(days=30)) == "8 May – 7 June 2023"
    assert span_text(DAY, DAY + timedelta(days=300)) == "8 May 2023 – 3 March 2024"
    messages = [said("user", "Hi!", 0), said("user", "I adopted a greyhound called Pepper last week. She is shy.", 1),
                said("assistant", "Congratulations on Pepper!", 2)]
    assert title_for(messages) == "I adopted a greyhound called Pepper last week."
    text = digest(messages)
    assert text.splitlines()[0] == "On 8 May 2023 (3 messages):" and "greyhound called Pepper" in text
    long = [said("user", f"Point {i} " + "detail " * 30, i) for i in range(40)]
    cut = digest(long, budget=120)
    lines = cut.splitlines()
    assert lines[-1].startswith("- … and ") and lines[-1].endswith(" more messages")
    # Each shown message is cut at a word, and marked: "detail…", never "deta".
    assert len(lines) > 2 and all(line.endswith("detail…") for line in lines[1:-1])
    assert archiving.count_text(cut) <= 120
