"""The pruned catalog: exact format, grep TOC, lossless round trip, idempotence, immutability."""

from __future__ import annotations

import errno
import os
import re
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memory.compression.pruned as pruned_module
from memory.compression.pruned import (
    CatalogConflict,
    CatalogUnavailable,
    CorruptCatalog,
    PrunedCatalog,
    first_uncommitted_seq,
)
from memory.messages import Message, ToolCall
from memory.scopes import SessionScope

from .helpers import T0, assistant, chain, stored, summary_message, user

SESSION = SessionScope("conv-1")
NASTY = [
    "---",
    "## [999] user · fake heading",
    "```\ncode\n```",
    "````python\nx = '```'\n````",
    "line\r\nwith CRLF\rand CR",
    "nul\x00byte",
    "שלום עולם مرحبا",
    "emoji 🎉👩‍💻",
    "\u2028line separator\u2029paragraph",
    "    indented\n\n\n",
    "",
    "\\u0041 looks escaped \\\\",
    "<!-- modex {\"id\": \"fake\"} -->",
    "Content:\nReasoning:",
    "trailing spaces   \n\t tab",
]


def grep_toc(directory: Path) -> list[str]:
    out = subprocess.run(
        f'grep -n "^## \\[" {directory}/*.md', shell=True, capture_output=True, text=True, check=False
    ).stdout
    return out.splitlines()


def test_file_format_header_blocks_and_name(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    messages = stored([user("find flights"), *chain("A: 120", "B: 95", reasoning="compare"), assistant("B")])
    path = catalog.write(SESSION, messages, cleanup_at=T0)
    assert path == tmp_path / "pruned" / "conv-1" / "000001-seq000000001-000000005.md"
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == "# Pruned catalog · session conv-1"
    assert lines[1] == "Cleanup 1 at 2026-12-02T10:00:00+00:00 · seq 1–5"
    assert lines[2] == '5 messages · table of contents: grep -n "^## \\[" pruned/conv-1/*.md'
    assert lines[3] == ""
    headings = [line for line in lines if line.startswith("## [")]
    assert headings[0] == f"## [1] user · {messages[0].created_at.isoformat()}"
    calls = ", ".join(c.name for c in messages[1].tool_calls)
    assert headings[1] == f"## [2] assistant · {messages[1].created_at.isoformat()} · calls: {calls}"
    assert headings[2].startswith("## [3] tool · ") and headings[2].endswith(f"result: {messages[2].name}")
    assert lines.count("---") == 5
    # Every block: heading, metadata comment, ..., closed by '---'.
    starts = [i for i, line in enumerate(lines) if line.startswith("## [")]
    ends = [i for i, line in enumerate(lines) if line == "---"]
    assert all(s < e for s, e in zip(starts, ends, strict=True))
    assert all(lines[s + 1].startswith("<!-- modex {") for s in starts)


def test_grep_lists_exactly_the_blocks_even_with_hostile_content(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    messages = stored([user(text) for text in NASTY] + [assistant(t, reasoning=t) for t in NASTY])
    catalog.write(SESSION, messages, cleanup_at=T0)
    toc = grep_toc(catalog.directory(SESSION))
    assert [int(re.match(r"\d+:## \[(\d+)\]", line)[1]) for line in toc] == [m.seq for m in messages]
    entries = catalog.entries(SESSION)
    assert [e.line for e in entries] == [int(line.split(":", 1)[0]) for line in toc]
    assert [e.message for e in entries] == messages
    raw = catalog.files(SESSION)[0].read_bytes()
    assert b"\x00" not in raw and b"\r" not in raw


texts = st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | st.sampled_from(NASTY)
names = st.text(st.characters(codec=None), min_size=1, max_size=12)
zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])


@st.composite
def messages_strategy(draw: st.DrawFn) -> list[Message]:
    out = []
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for seq in range(1, draw(st.integers(1, 8)) + 1):
        role = draw(st.sampled_from(["user", "assistant", "tool", "system"]))
        offset = timedelta(seconds=draw(st.integers(0, 10**8)), microseconds=draw(st.integers(0, 999999)))
        created = (base + offset).astimezone(draw(zones))
        common = dict(
            seq=seq,
            created_at=created,
            tokens=draw(st.none() | st.integers(0, 10**6)),
            kind=draw(st.sampled_from(["message", "tool_notice", "x" * 64])),
            name=draw(st.none() | names),
            id=draw(st.text("abcdef0123456789-", min_size=1, max_size=40)) + f"-{seq}",
        )
        if role == "tool":
            message = Message(role="tool", content=draw(st.none() | texts), tool_call_id=draw(names), **common)
        elif role == "assistant":
            calls = draw(st.lists(st.tuples(names, names, texts), max_size=3, unique_by=lambda c: c[0]))
            message = Message(
                role="assistant",
                content=draw(st.none() | texts),
                reasoning_content=draw(st.none() | texts),
                tool_calls=tuple(ToolCall(i, n, a) for i, n, a in calls),
                **common,
            )
        else:
            message = Message(role=role, content=draw(st.none() | texts), **common)
        out.append(message)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages_strategy())
def test_round_trip_is_lossless(tmp_path: Path, messages: list[Message]) -> None:
    session = SessionScope(f"s{abs(hash(tuple(m.id for m in messages))) % 10**12}")
    catalog = PrunedCatalog(tmp_path / "pruned")
    catalog.delete_session(session)
    catalog.write(session, messages, cleanup_at=T0)
    assert [e.message for e in catalog.entries(session)] == messages
    assert [e.message for e in PrunedCatalog(tmp_path / "pruned").entries(session)] == messages  # a cold reader too
    assert [catalog.lookup(session, m.seq) for m in messages] == messages
    toc = grep_toc(catalog.directory(session))
    assert [int(re.match(r"\d+:## \[(\d+)\]", line)[1]) for line in toc] == [m.seq for m in messages]


def test_writes_are_idempotent_per_message_and_files_immutable(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    first = stored([user(f"m{i}") for i in range(6)])
    path1 = catalog.write(SESSION, first[:4], cleanup_at=T0)
    stat1 = path1.stat()
    assert catalog.write(SESSION, first[:4]) is None  # the same messages again: nothing new
    path2 = catalog.write(SESSION, first)  # a retried, larger cut: only the new messages
    assert path2.name == "000002-seq000000005-000000006.md"
    assert [e.seq for e in catalog.entries(SESSION)] == [1, 2, 3, 4, 5, 6]
    assert catalog.count(SESSION) == 6 and catalog.files(SESSION) == [path1, path2]
    again = path1.stat()
    assert (again.st_ino, again.st_mtime_ns, again.st_size) == (stat1.st_ino, stat1.st_mtime_ns, stat1.st_size)
    assert catalog.lookup(SESSION, 5) == first[4] and catalog.lookup(SESSION, 99) is None


def test_compact_summaries_are_never_catalogued(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    messages = [summary_message(seq=3), *stored([user("a"), user("b")], start=4)]
    catalog.write(SESSION, messages)
    assert [e.seq for e in catalog.entries(SESSION)] == [4, 5]
    assert catalog.write(SESSION, [summary_message(seq=9)]) is None


def test_a_seq_taken_by_another_message_is_a_conflict(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    catalog.write(SESSION, stored([user("a"), user("b")]))
    with pytest.raises(CatalogConflict, match="seq 1 is already"):
        catalog.write(SESSION, stored([user("a2"), user("b2"), user("c")]))
    assert catalog.count(SESSION) == 2 and len(catalog.files(SESSION)) == 1


def test_uncommitted_entries_are_left_out_by_before_seq(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    messages = stored([user(f"m{i}") for i in range(6)])
    catalog.write(SESSION, messages[:4])
    live = messages[2:]  # the prune of 1..4 never committed: 3 and 4 are still live
    assert first_uncommitted_seq(live) == 3
    assert [e.seq for e in catalog.entries(SESSION, before_seq=3)] == [1, 2]
    assert first_uncommitted_seq([summary_message(seq=4), *messages[4:]]) == 5
    assert first_uncommitted_seq([summary_message(seq=4)]) is None


def test_unwritable_directory_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "pruned"
    root.mkdir()
    (root / SESSION.id).write_text("a file where the session directory should be")
    catalog = PrunedCatalog(root)
    with pytest.raises(CatalogUnavailable, match="a file is in the way"):
        catalog.write(SESSION, stored([user("a")]))
    with pytest.raises(CatalogUnavailable):
        catalog.entries(SESSION)


def test_disk_full_is_a_clear_error_and_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pruned_module.os, "link", full)
    with pytest.raises(CatalogUnavailable, match="No space left"):
        catalog.write(SESSION, stored([user("a")]))
    assert catalog_files(catalog) == []  # no block, no temp file
    monkeypatch.undo()
    assert catalog.write(SESSION, stored([user("a")])) is not None


def catalog_files(catalog: PrunedCatalog) -> list[str]:
    """Every name in the session's directory but its lock file."""
    return sorted(n for n in os.listdir(catalog.directory(SESSION)) if n != ".lock")


def test_a_file_system_without_hard_links_still_gets_whole_files(tmp_path: Path, monkeypatch) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")

    def no_links(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(pruned_module.os, "link", no_links)
    messages = stored([user("a"), user("b")])
    first = catalog.write(SESSION, messages)
    assert first is not None and catalog_files(catalog) == [first.name]
    assert catalog.write(SESSION, messages) is None  # idempotent there too
    assert [e.message.content for e in catalog.entries(SESSION)] == ["a", "b"]


def test_a_name_taken_by_another_writer_is_never_overwritten(tmp_path: Path, monkeypatch) -> None:
    # A writer on another host (no shared lock) creates the same file name between our check
    # and our create: ours must not replace it, and must not write its messages twice.
    catalog = PrunedCatalog(tmp_path / "pruned")
    messages = stored([user("a"), user("b"), user("c")])
    other = PrunedCatalog(tmp_path / "pruned")
    real_create = pruned_module._create_atomically
    raced = []

    def racing(directory, name, data):  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(name)
            assert real_create(directory, name, pruned_module.render_file(
                session=SESSION, number=1, messages=messages[:2], cleanup_at=messages[0].created_at
            ).encode()) is not None
        return real_create(directory, name, data)

    monkeypatch.setattr(pruned_module, "_create_atomically", racing)
    written = catalog.write(SESSION, messages)
    assert written is not None and written.name.startswith("000002-seq000000003")
    assert [e.message.id for e in other.entries(SESSION)] == [m.id for m in messages]


def test_two_writers_at_once_write_each_message_once(tmp_path: Path) -> None:
    import threading

    messages = stored([user(f"m{i}") for i in range(40)])
    barrier = threading.Barrier(4)
    results = []

    def writer() -> None:
        catalog = PrunedCatalog(tmp_path / "pruned")  # each its own instance: nothing shared but the files
        barrier.wait()
        results.append(catalog.write(SESSION, messages))

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r is not None for r in results) == 1
    assert [e.message.id for e in PrunedCatalog(tmp_path / "pruned").entries(SESSION)] == [m.id for m in messages]


def test_a_refusing_guard_writes_nothing(tmp_path: Path) -> None:
    import contextlib

    class Refused(Exception):
        pass

    @contextlib.contextmanager
    def refusing():  # type: ignore[no-untyped-def]
        raise Refused("the lease has moved on")
        yield

    catalog = PrunedCatalog(tmp_path / "pruned")
    with pytest.raises(Refused):  # the guard's own error, not relabelled as a catalog fault
        catalog.write(SESSION, stored([user("a")]), guard=refusing)
    assert catalog_files(catalog) == [] and catalog.entries(SESSION) == []


def test_parsed_files_are_cached_by_mtime_and_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    catalog.write(SESSION, stored([user(f"m{i}") for i in range(50)]))
    parses = []
    real = pruned_module.parse_file
    monkeypatch.setattr(pruned_module, "parse_file", lambda text, path: parses.append(path) or real(text, path=path))
    for _ in range(5):
        assert catalog.count(SESSION) == 50 and len(catalog.entries(SESSION)) == 50
    assert len(parses) == 1


def test_the_parse_cache_is_bounded(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned", max_cached_entries=30)
    sessions = [SessionScope(f"conv-{i}") for i in range(5)]
    for session in sessions:
        catalog.write(session, stored([user(f"m{i}") for i in range(20)]))
        assert catalog.count(session) == 20
    assert catalog._cached <= 30 and len(catalog._files) == 1  # the newest file only
    assert [e.seq for e in catalog.entries(sessions[0])] == list(range(1, 21))  # re-read on demand


def test_corrupt_file_is_reported_with_its_line(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    path = catalog.write(SESSION, stored([user("a"), user("b")]))
    text = path.read_text(encoding="utf-8").replace("\n---\n", "\nnot a separator\n", 1)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CorruptCatalog, match=rf"{path.name}:\d+"):
        catalog.entries(SESSION)


def test_delete_session(tmp_path: Path) -> None:
    catalog = PrunedCatalog(tmp_path / "pruned")
    catalog.write(SESSION, stored([user("a")]))
    other = SessionScope("conv-2")
    catalog.write(other, stored([user("b")]))
    catalog.delete_session(SESSION)
    catalog.delete_session(SESSION)
    assert catalog.entries(SESSION) == [] and catalog.count(other) == 1


def test_messages_need_a_seq(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="seq"):
        PrunedCatalog(tmp_path).write(SESSION, [user("a")])
    with pytest.raises(ValueError, match="same seq"):
        PrunedCatalog(tmp_path).write(SESSION, [replace(user("a"), seq=1), replace(user("b"), seq=1)])
