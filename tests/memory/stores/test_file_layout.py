"""The file backend's own promises: layout people can read, cheap tails, crash safety."""

from __future__ import annotations

import builtins
import json
import os
import stat
from pathlib import Path

import pytest

from memory.messages import Message
from memory.scopes import AgentScope, InvalidScopeId, SessionScope
from memory.stores import file_format, file_session
from memory.stores.base import ArchiveDocument, StorageUnavailable
from memory.stores.file import DefaultScopedStorage

from .helpers import conversation, summary, tool_chain, user

S = SessionScope("abc")


@pytest.fixture
def storage(tmp_path) -> DefaultScopedStorage:
    return DefaultScopedStorage(tmp_path / "memory")


def session_dir(storage: DefaultScopedStorage) -> Path:
    return storage.root / "session" / "abc" / "messages"


def head_json(storage: DefaultScopedStorage) -> dict:
    """The committed head: the valid slot with the higher version."""
    slots = [json.loads(p.read_text()) for p in session_dir(storage).glob("head.*.json")]
    return max(slots, key=lambda head: head["version"])


def test_bundle_exposes_the_four_stores(storage):
    bundle = storage.bundle()
    assert bundle.backend == "file"
    assert (bundle.messages, bundle.kv, bundle.cursors, bundle.archive) == (
        storage.messages, storage.kv, storage.cursors, storage.archive)


def test_messages_are_json_lines_people_can_read(storage):
    stored = storage.messages.append(S, tool_chain())
    head = head_json(storage)
    assert (head["count"], head["last_seq"], head["scope"]) == (5, 5, "session:abc")
    segment = session_dir(storage) / head["open"]["file"]
    lines = segment.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [m.to_record() for m in stored]
    assert "naïve café" in segment.read_text(encoding="utf-8"), "non-ASCII stays readable"


def test_kv_values_are_plain_files(storage):
    storage.kv.put(AgentScope("default"), "SOUL.md", "# Soul\n\nI am **Modex**.\n")
    kv = storage.root / "agent" / "default" / "kv"
    assert (kv / "SOUL.md").read_bytes() == b"# Soul\n\nI am **Modex**.\n"
    meta = json.loads((kv / ".SOUL.md.meta.json").read_text())
    assert meta["version"] == 1 and len(meta["sha256"]) == 64


def test_archive_and_cursors_are_json_with_a_markdown_view(storage):
    document = storage.archive.put(S, ArchiveDocument(session="session:abc", summary="We fixed the build.",
                                                      title="Build", messages=tuple(tool_chain())))
    archive = storage.root / "session" / "abc" / "archive"
    data = json.loads((archive / f"0000000001-{document.id}.json").read_text())
    assert data["summary"] == "We fixed the build." and data["seq"] == 1
    markdown = (archive / f"0000000001-{document.id}.md").read_text()
    assert markdown.startswith("# Build (#1)") and "We fixed the build." in markdown
    storage.cursors.set(S, "dream", 1)
    assert json.loads((storage.root / "session" / "abc" / "cursors" / "dream.json").read_text())["position"] == 1


def test_files_are_private(storage):
    storage.messages.append(S, [user()])
    storage.kv.put(S, "k", "v")
    for path in (session_dir(storage) / "head.0.json", storage.root / "session" / "abc" / "kv" / "k"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    assert stat.S_IMODE(session_dir(storage).stat().st_mode) & 0o077 == 0


# -- cost: which files are opened -------------------------------------------------------------


@pytest.fixture
def opened(monkeypatch):
    """Names of the files opened (builtins.open and os.open) while the fixture is recording."""
    names: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *args, **kwargs):
        names.append(os.path.basename(os.fspath(file)))
        return real_open(file, *args, **kwargs)

    def spy_os_open(path, *args, **kwargs):
        names.append(os.path.basename(os.fspath(path)))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    return names


def _segments(storage) -> list[str]:
    return sorted(n for n in os.listdir(session_dir(storage)) if n.startswith("seg-"))


def test_tail_read_opens_only_the_newest_segments(tmp_path, opened):
    storage = DefaultScopedStorage(tmp_path / "memory", durable=False)
    for _ in range(8):
        storage.messages.append(S, conversation(125))
    segments = _segments(storage)
    assert len(segments) >= 4
    head = head_json(storage)
    opened.clear()
    assert len(storage.messages.read(S, last=5)) == 5
    assert set(opened) == {*file_format.HEAD_SLOTS, head["open"]["file"]}, "a short tail reads the head and one segment"
    opened.clear()
    storage.messages.read(S, last=file_format.SEGMENT_LINES + 10)
    touched = {name for name in opened if name.startswith("seg-")}
    assert len(touched) == 2 and segments[0] not in touched
    assert not any(name.startswith("sealed-") for name in opened), "the head names the newest sealed segments"
    # 1000 messages: open 769-1000, the head's two recent sealed segments 257-768, the index 1-256.
    opened.clear()
    assert len(storage.messages.read(S, last=744)) == 744
    assert not any(name.startswith("sealed-") for name in opened) and segments[0] not in opened
    opened.clear()
    assert len(storage.messages.read(S, last=745)) == 745
    assert any(name.startswith("sealed-") for name in opened) and segments[0] in opened
    opened.clear()
    storage.messages.read(S, after_seq=990)
    assert {name for name in opened if name.startswith("seg-")} == {head["open"]["file"]}


def test_append_does_not_reread_the_session(tmp_path, opened):
    storage = DefaultScopedStorage(tmp_path / "memory", durable=False)
    for _ in range(4):
        storage.messages.append(S, conversation(200))
    old = set(_segments(storage)) - {head_json(storage)["open"]["file"]}
    opened.clear()
    storage.messages.append(S, [user("one more")])
    assert not old & set(opened), "an append must not open sealed segments"
    assert all(opened.count(slot) <= 2 for slot in file_format.HEAD_SLOTS)


# -- crashes ----------------------------------------------------------------------------------


class Crash(Exception):
    pass


def _state(root: Path):
    """What a freshly started process sees (no caches)."""
    store = DefaultScopedStorage(root).messages
    head = store.head(S)
    return [(m.seq, m.id, m.content) for m in store.read(S, include_deleted=True)], head.count, head.tokens


def _crash_at(monkeypatch, step: int) -> list[int]:
    """Make the ``step``-th file operation of the next call raise (before or after acting)."""
    counter = [0]
    targets = [(file_session.fsio, name) for name in ("write_new", "atomic_write", "fsync_dir", "unlink_quietly")]
    targets.append((file_session, "write_head"))
    for module, name in targets:
        real = getattr(module, name)

        def wrapped(*args, _real=real, **kwargs):
            counter[0] += 1
            if counter[0] == step:
                raise Crash("before")
            result = _real(*args, **kwargs)
            counter[0] += 1
            if counter[0] == step:
                raise Crash("after")
            return result

        monkeypatch.setattr(module, name, wrapped)
    return counter


def test_a_crash_anywhere_in_prune_leaves_old_or_new_state(tmp_path):
    outcomes = set()
    for step in range(1, 200):
        root = tmp_path / f"run{step}"
        storage = DefaultScopedStorage(root)
        stored = []
        for size in (300, 300, 30):
            stored += storage.messages.append(S, conversation(size, prefix=str(len(stored))))
        storage.messages.soft_delete(S, [stored[400].id, stored[620].id])
        old = _state(root)
        the_summary = summary()
        with pytest.MonkeyPatch.context() as patch:
            counter = _crash_at(patch, step)
            try:
                storage.messages.prune(S, through_seq=450, summary=the_summary,
                                       expected_version=storage.messages.head(S).version)
                crashed = False
            except (Crash, StorageUnavailable):
                crashed = True
        now = _state(root)
        if now == old:
            outcomes.add("old")
        else:
            assert [row[1] for row in now[0]] == [the_summary.id] + [m.id for m in stored[450:]], step
            outcomes.add("new")
        # The store keeps working after the crash, from a fresh process.
        fresh = DefaultScopedStorage(root).messages
        fresh.append(S, [user("after the crash")])
        assert fresh.read(S, last=1)[0].content == "after the crash"
        if not crashed:
            assert counter[0] < step
            break
    assert outcomes == {"old", "new"}, "the simulation must hit both sides of the commit point"
    assert step > 5


def test_a_crash_mid_append_leaves_the_session_unchanged(storage, monkeypatch):
    storage.messages.append(S, conversation(3))
    old = _state(storage.root)
    real = file_session.FileMessageStore._append_bytes

    def torn(self, path, committed, data):
        real(self, path, committed, data[: len(data) // 2])  # half a line reaches the disk
        raise Crash("power cut")

    monkeypatch.setattr(file_session.FileMessageStore, "_append_bytes", torn)
    with pytest.raises(Crash):
        storage.messages.append(S, [user("lost"), user("also lost")])
    monkeypatch.undo()
    assert _state(storage.root) == old
    fresh = DefaultScopedStorage(storage.root)
    [kept] = fresh.messages.append(S, [user("kept")])
    assert kept.seq == 4
    assert [m.content for m in fresh.messages.read(S)][-1] == "kept"
    segment = session_dir(storage) / head_json(storage)["open"]["file"]
    assert len(segment.read_text().splitlines()) == 4, "the torn bytes were cut off"


def test_a_crash_before_the_head_commit_of_append(storage, monkeypatch):
    storage.messages.append(S, conversation(2))
    old = _state(storage.root)
    monkeypatch.setattr(file_session.FileMessageStore, "_commit", lambda *a, **k: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        storage.messages.append(S, [user("never committed")])
    monkeypatch.undo()
    assert _state(storage.root) == old
    message = user("retried")
    DefaultScopedStorage(storage.root).messages.append(S, [message])
    assert [m.id for m in storage.messages.read(S)][-1] == message.id


def test_leftover_temp_files_are_harmless(storage):
    storage.messages.append(S, [user("a")])
    (session_dir(storage) / ".sealed.json.deadbeef.tmp").write_text("{garbage")
    storage.messages.append(S, [user("b")])
    assert [m.content for m in storage.messages.read(S)] == ["a", "b"]


def test_a_torn_head_write_falls_back_to_the_previous_commit(storage, monkeypatch):
    storage.messages.append(S, conversation(3))
    old = _state(storage.root)
    real = file_format.head_bytes
    monkeypatch.setattr(file_format, "head_bytes", lambda *a, **k: real(*a, **k)[:57])  # a torn slot
    storage.messages.append(S, [user("torn commit")])
    monkeypatch.undo()
    assert _state(storage.root) == old
    [again] = DefaultScopedStorage(storage.root).messages.append(S, [user("next")])
    assert again.seq == 4 and _state(storage.root)[0][-1][2] == "next"


def test_a_lost_head_is_refused_not_overwritten(storage):
    storage.messages.append(S, conversation(3))
    for slot in file_format.HEAD_SLOTS:
        (session_dir(storage) / slot).unlink()
    with pytest.raises(StorageUnavailable, match="no head"):
        storage.messages.append(S, [user("would overwrite")])
    assert any(n.startswith("seg-") for n in os.listdir(session_dir(storage))), "history must survive"


def test_a_damaged_head_is_reported(storage):
    storage.messages.append(S, [user()])
    for slot in file_format.HEAD_SLOTS:
        (session_dir(storage) / slot).write_text("{not json")
    with pytest.raises(StorageUnavailable, match="damaged"):
        storage.messages.read(S)


def test_one_damaged_slot_is_survivable(storage):
    first = storage.messages.append(S, [user("first commit")])
    storage.messages.append(S, [user("second commit")])
    version = head_json(storage)["version"]
    (session_dir(storage) / file_format.HEAD_SLOTS[version % 2]).write_text("{not json")
    assert storage.messages.read(S) == first, "the other slot holds the commit before"


def test_prune_collects_the_files_it_replaced(storage):
    for _ in range(3):
        storage.messages.append(S, conversation(300))
    before = set(os.listdir(session_dir(storage)))
    storage.messages.prune(S, through_seq=800, summary=summary(), expected_version=storage.messages.head(S).version)
    after = set(os.listdir(session_dir(storage)))
    head = head_json(storage)
    live = {head["open"]["file"], *file_format.HEAD_SLOTS, ".lock", *head["pruned"]["files"]}
    if head["sealed"]:
        live |= {head["sealed"]["file"]} | {s["file"] for s in json.loads(
            (session_dir(storage) / head["sealed"]["file"]).read_text())["segments"]}
    assert after == live
    assert len(before - after) >= 3


# -- KV crash recovery and human edits --------------------------------------------------------


def test_kv_crash_between_value_and_sidecar_rolls_forward(storage, monkeypatch):
    scope = AgentScope("default")
    storage.kv.put(scope, "SOUL.md", "v1")
    monkeypatch.setattr(type(storage.kv), "_write_meta", lambda *a, **k: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        storage.kv.put(scope, "SOUL.md", "v2", expected_version=1)
    monkeypatch.undo()
    item = DefaultScopedStorage(storage.root).kv.get(scope, "SOUL.md")
    assert (item.value, item.version) == ("v2", 2)
    assert storage.kv.put(scope, "SOUL.md", "v3", expected_version=2).version == 3


def test_a_person_editing_a_file_bumps_its_version(storage):
    scope = AgentScope("default")
    item = storage.kv.put(scope, "SOUL.md", "written by the agent")
    (storage.root / "agent" / "default" / "kv" / "SOUL.md").write_text("edited by a person")
    edited = storage.kv.get(scope, "SOUL.md")
    assert (edited.value, edited.version) == ("edited by a person", item.version + 1)
    from memory.stores.base import VersionConflict

    with pytest.raises(VersionConflict):
        storage.kv.put(scope, "SOUL.md", "agent overwrites", expected_version=item.version)
    (storage.root / "agent" / "default" / "kv" / "SOUL.md").write_text("edited again")
    assert storage.kv.get(scope, "SOUL.md").version == item.version + 2


def test_files_dropped_in_by_people_are_listed(storage):
    scope = AgentScope("default")
    storage.kv.put(scope, "SOUL.md", "x")
    kv = storage.root / "agent" / "default" / "kv"
    (kv / "notes.md").write_text("hand written")
    (kv / "not a key.md").write_text("ignored: not a legal key")
    assert [(i.key, i.version) for i in storage.kv.list(scope)] == [("SOUL.md", 1), ("notes.md", 1)]


def test_a_crash_mid_delete_reads_as_deleted(storage):
    scope = AgentScope("default")
    storage.kv.put(scope, "todo.json", "[]")
    (storage.root / "agent" / "default" / "kv" / "todo.json").unlink()  # the sidecar is left behind
    assert storage.kv.get(scope, "todo.json") is None
    assert storage.kv.put(scope, "todo.json", "[1]", expected_version=0).version == 1


# -- the root ---------------------------------------------------------------------------------


def test_a_symlink_out_of_the_root_is_refused(tmp_path):
    root, outside = tmp_path / "memory", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "session").symlink_to(outside, target_is_directory=True)
    storage = DefaultScopedStorage(root)
    with pytest.raises(InvalidScopeId):
        storage.messages.append(S, [user("escape")])
    with pytest.raises(InvalidScopeId):
        storage.kv.put(S, "k", "v")
    assert list(outside.iterdir()) == []


def test_os_errors_become_storage_unavailable(tmp_path):
    blocker = tmp_path / "memory"
    blocker.write_text("a file where the root should be")
    storage = DefaultScopedStorage(blocker)
    with pytest.raises(StorageUnavailable):
        storage.messages.append(S, [user()])
    with pytest.raises(StorageUnavailable):
        storage.kv.put(S, "k", "v")


def test_non_durable_mode_works(tmp_path):
    storage = DefaultScopedStorage(tmp_path / "m", durable=False)
    stored = storage.messages.append(S, [user("fast")])
    assert storage.messages.read(S) == stored


def test_message_codec_round_trip():
    for message in [*tool_chain(), Message(role="user", content="\ud800 \x00 \u2028")]:
        line = file_format.parse_line(file_format.encode_line(message))
        assert line.message() == message and not line.deleted


# -- commit: the journal ------------------------------------------------------------------------


def _crash_after(storage: DefaultScopedStorage, monkeypatch, files: int) -> None:
    """Make the n-th value file the commit writes raise, as a crash there would stop it."""
    from memory.stores import file as file_module

    real = file_module.fsio.atomic_write
    seen = {"n": 0}

    def crashing(path, data, **kwargs):
        if path.name != "cursors" and not path.name.startswith(".") and path.parent.name == "kv":
            seen["n"] += 1
            if seen["n"] > files:
                raise OSError("simulated crash")
        return real(path, data, **kwargs)

    monkeypatch.setattr(file_module.fsio, "atomic_write", crashing)


def test_a_commit_cut_short_is_completed_from_its_journal(storage, monkeypatch):
    from memory.scopes import CompositeScope, UserScope
    from memory.stores.base import CursorMove, KVWrite

    user, both = UserScope("42"), CompositeScope(AgentScope("default"), UserScope("42"))
    storage.kv.put(user, "USER.md", "Lives in Lisbon\n")
    storage.kv.put(both, "MEMORY.md", "changed later\n")
    writes = [KVWrite(user, "USER.md", "Lives in Porto\n", expected_version=1),
              KVWrite(user, "USER.md.history", "h\n"), KVWrite(both, "MEMORY.md", "from the commit\n")]
    _crash_after(storage, monkeypatch, files=1)
    with pytest.raises(StorageUnavailable, match="simulated crash"):
        storage.kv.commit(writes, cursor=CursorMove(both, "dream", 7))
    monkeypatch.undo()
    journals = list((storage.root / ".journal").glob("*.json"))
    assert len(journals) == 1  # the crash left its journal
    assert storage.kv.get_value(user, "USER.md") == "Lives in Porto\n"  # landed before the crash
    assert storage.kv.get(user, "USER.md.history") is None and storage.cursors.get(both, "dream") is None
    # someone changes MEMORY.md after the crash: theirs is newer, recovery leaves it alone
    storage.kv.put(both, "MEMORY.md", "a person's edit\n")

    reopened = DefaultScopedStorage(storage.root)  # the next process opens the root
    assert reopened.kv.get_value(user, "USER.md") == "Lives in Porto\n"
    assert reopened.kv.get(user, "USER.md").version == 2
    assert reopened.kv.get_value(user, "USER.md.history") == "h\n"
    assert reopened.cursors.get(both, "dream") == 7
    assert reopened.kv.get_value(both, "MEMORY.md") == "a person's edit\n"
    assert list((storage.root / ".journal").glob("*.json")) == []
    assert reopened.kv.recover() == 0  # done once


def test_a_commit_that_fails_its_checks_leaves_no_journal(storage):
    from memory.stores.base import KVWrite, VersionConflict

    with pytest.raises(VersionConflict):
        storage.kv.commit([KVWrite(S, "a", "x"), KVWrite(S, "b", "y", expected_version=3)])
    assert storage.kv.list(S) == []
    assert not (storage.root / ".journal").exists() or not list((storage.root / ".journal").iterdir())
