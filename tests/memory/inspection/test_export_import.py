"""Export → import round trips between backends keep every field; import refuses to overwrite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memory.compression.pruned import PrunedCatalog
from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall
from memory.scopes import AgentScope, CompositeScope, GlobalScope, Scope, SessionScope, UserScope
from memory.stores.base import ArchiveDocument, MemoryStoreBundle
from memory.stores.registry import open_bundle
from memory.transfer import TargetNotEmpty, TransferError, every_scope, export_scopes, import_export
from tests.agents.inspection.support import seed

SESSION = SessionScope("s-main")
CLEARED = SessionScope("s-cleared")
COMPOSITE = CompositeScope(AgentScope("default"), UserScope("7"))
T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def turn(i: int) -> list[Message]:
    call = ToolCall(id=f"c{i}", name="search", arguments_json=json.dumps({"q": f"topic {i}", "n": i}))
    at = T0 + timedelta(minutes=i)
    return [
        Message(role="user", content=f"question {i} ünïcode ✓ \x00 nul", created_at=at),
        Message(role="assistant", content=None, reasoning_content=f"think {i}\nline two", tool_calls=(call,), created_at=at),
        Message(role="tool", content=f"result {i}", tool_call_id=f"c{i}", name="search", created_at=at, tokens=7),
        Message(role="assistant", content=f"answer {i} <b>bold</b>", kind="message", created_at=at),
    ]


def populate(bundle: MemoryStoreBundle, catalog: PrunedCatalog) -> None:
    """A bit of everything, including the awkward cases: a pruned session (starts at a high seq
    with a compact summary), soft-deleted messages, a cleared session, KV versions > 1, archive
    seq gaps."""
    stored = bundle.messages.append(SESSION, [m for i in range(6) for m in turn(i)])
    catalog.write(SESSION, stored[:12])
    summary = Message(role="user", kind=KIND_COMPACT_SUMMARY, content="summary of 0-2", created_at=T0)
    head = bundle.messages.head(SESSION)
    bundle.messages.prune(SESSION, through_seq=12, summary=summary, expected_version=head.version)
    bundle.messages.soft_delete(SESSION, [stored[14].id])
    bundle.messages.append(CLEARED, turn(10))
    bundle.messages.clear(CLEARED)
    bundle.messages.append(CLEARED, turn(11))
    for scope in (UserScope("7"), COMPOSITE, AgentScope("default"), GlobalScope()):
        bundle.kv.put(scope, "notes.md", f"# notes of {scope}\n")
    for version in range(3):
        bundle.kv.put(COMPOSITE, "MEMORY.md", f"- fact v{version}\n")
    bundle.kv.put(SESSION, "todo.json", '[{"content": "x"}]')
    bundle.cursors.set(COMPOSITE, "dream", 3)
    bundle.cursors.set(GlobalScope(), "other", 0)
    docs = [bundle.archive.put(COMPOSITE, ArchiveDocument(
        session=SESSION.key(), summary=f"doc {i}", messages=tuple(stored[i * 4 : i * 4 + 4]), title=f"t{i}",
        metadata={"cleanup": i, "nested": {"a": [1, 2]}}, created_at=T0 + timedelta(hours=i))) for i in range(4)]
    bundle.archive.delete(COMPOSITE, docs[1].id)  # a gap at seq 2


SCOPES: list[Scope] = [SESSION, CLEARED, UserScope("7"), COMPOSITE, AgentScope("default"), GlobalScope()]


def snapshot(bundle: MemoryStoreBundle, catalog: PrunedCatalog) -> dict:
    out = {}
    for scope in SCOPES:
        out[scope.key()] = {
            "messages": bundle.messages.read(scope, include_deleted=True),
            "live": [m.id for m in bundle.messages.read(scope)],
            "kv": [(i.key, i.value, i.version) for i in bundle.kv.list(scope)],
            "cursors": bundle.cursors.list(scope),
            "archive": bundle.archive.list(scope),
            "catalog": [(p.name, p.read_bytes()) for p in catalog.files(scope)] if isinstance(scope, SessionScope) else [],
        }
    return out


def side(tmp_path: Path, backend: str, name: str) -> tuple[MemoryStoreBundle, PrunedCatalog]:
    return open_bundle(backend, root=tmp_path / name / "memory"), PrunedCatalog(tmp_path / name / "pruned")


@pytest.mark.django_db
@pytest.mark.parametrize("source_backend,target_backend", [("file", "sqlite"), ("sqlite", "file"), ("file", "file")])
def test_round_trip_keeps_every_field(tmp_path, source_backend, target_backend):
    source, source_catalog = side(tmp_path, source_backend, "a")
    populate(source, source_catalog)
    before = snapshot(source, source_catalog)
    assert before[SESSION.key()]["messages"][0].seq == 12 and before[SESSION.key()]["messages"][0].is_compact_summary
    assert [d.seq for d in before[COMPOSITE.key()]["archive"]] == [1, 3, 4]

    export_scopes(bundle=source, catalog=source_catalog, scopes=every_scope(bundle=source, catalog=source_catalog),
                  out=tmp_path / "export")
    target, target_catalog = side(tmp_path, target_backend, "b")
    report = import_export(bundle=target, catalog=target_catalog, source=tmp_path / "export", scopes=None)
    assert report.warnings == []
    after = snapshot(target, target_catalog)
    assert after == before
    assert target.messages.head(SESSION).count == source.messages.head(SESSION).count
    assert target.messages.head(SESSION).tokens == source.messages.head(SESSION).tokens


@pytest.mark.django_db
def test_the_export_is_plain_files(tmp_path):
    source, catalog = side(tmp_path, "file", "a")
    populate(source, catalog)
    export_scopes(bundle=source, catalog=catalog, scopes=[SESSION, COMPOSITE], out=tmp_path / "out")
    folder = tmp_path / "out" / "scopes" / "session" / "s-main"
    lines = (folder / "messages.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == KIND_COMPACT_SUMMARY
    assert any(json.loads(line)["deleted"] for line in lines)
    assert (folder / "kv" / "todo.json").read_text() == '[{"content": "x"}]'
    assert (folder / "pruned").is_dir() and list((folder / "pruned").glob("*.md"))
    comp = tmp_path / "out" / "scopes" / "composite" / "agent.default+user.7"
    assert (comp / "kv" / "MEMORY.md").read_text() == "- fact v2\n"
    assert json.loads((comp / "kv.json").read_text())["MEMORY.md"]["version"] == 3
    assert json.loads((comp / "cursors.json").read_text()) == {"dream": 3}
    assert sorted(p.name[:10] for p in (comp / "archive").glob("*.json")) == ["0000000001", "0000000003", "0000000004"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["format"] == "modex-memory-export" and manifest["backend"] == "file"
    with pytest.raises(TransferError, match="not an empty folder"):
        export_scopes(bundle=source, catalog=catalog, scopes=[SESSION], out=tmp_path / "out")


@pytest.mark.django_db
@pytest.mark.parametrize("target_backend", ["file", "sqlite"])
def test_import_refuses_a_non_empty_target_unless_replace(tmp_path, target_backend):
    source, source_catalog = side(tmp_path, "file", "a")
    populate(source, source_catalog)
    export_scopes(bundle=source, catalog=source_catalog, scopes=SCOPES, out=tmp_path / "export")
    target, target_catalog = side(tmp_path, target_backend, "b")
    target.messages.append(SESSION, [Message(role="user", content="already here")])
    target.kv.put(UserScope("7"), "USER.md", "mine")
    with pytest.raises(TargetNotEmpty) as info:
        import_export(bundle=target, catalog=target_catalog, source=tmp_path / "export", scopes=None)
    assert "session:s-main has messages" in str(info.value) and "user:7 has KV items" in str(info.value)
    assert "--replace" in str(info.value)
    assert [m.content for m in target.messages.read(SESSION)] == ["already here"]  # nothing written anywhere
    assert target.kv.list(COMPOSITE) == [] and target.archive.list(COMPOSITE) == []

    report = import_export(bundle=target, catalog=target_catalog, source=tmp_path / "export", scopes=None, replace=True)
    assert target.kv.get(UserScope("7"), "USER.md") is None
    assert [m.id for m in target.messages.read(SESSION, include_deleted=True)] == [
        m.id for m in source.messages.read(SESSION, include_deleted=True)]
    # the replaced session had used seq 1 only: the imported seqs start at 12, so they are kept
    assert report.warnings == []
    assert snapshot(target, target_catalog)[COMPOSITE.key()] == snapshot(source, source_catalog)[COMPOSITE.key()]


@pytest.mark.django_db
def test_import_rejects_what_is_not_an_export(tmp_path):
    target, catalog = side(tmp_path, "file", "b")
    (tmp_path / "junk").mkdir()
    with pytest.raises(TransferError, match="no manifest.json"):
        import_export(bundle=target, catalog=catalog, source=tmp_path / "junk", scopes=None)
    (tmp_path / "junk" / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(TransferError, match="not a Modex memory export"):
        import_export(bundle=target, catalog=catalog, source=tmp_path / "junk", scopes=None)
    (tmp_path / "junk" / "manifest.json").write_text(
        '{"format": "modex-memory-export", "version": 1, "scopes": [{"key": "user:1", "dir": "../../etc"}]}')
    with pytest.raises(TransferError, match="outside the export"):
        import_export(bundle=target, catalog=catalog, source=tmp_path / "junk", scopes=None)


def test_commands_move_memory_between_backends(services, owner, tmp_path):
    """The commands on the configured services: export a user, import into the other backend."""
    seeded = seed(services, owner)
    out = tmp_path / "user-export"
    call_command("memory_export", "--user", str(owner.pk), "--out", str(out))
    keys = [s["key"] for s in json.loads((out / "manifest.json").read_text())["scopes"]]
    assert f"user:{owner.pk}" in keys and seeded.session.key() in keys and seeded.archive_scope.key() in keys
    other = "sqlite" if services.bundle.backend == "file" else "file"
    call_command("memory_import", "--from", str(out), "--backend", other, "--every-scope")
    target = open_bundle(other, root=Path(services.workspace) / "memory")
    assert target.messages.read(seeded.session, include_deleted=True) == services.bundle.messages.read(
        seeded.session, include_deleted=True)
    assert target.archive.list(seeded.archive_scope) == services.bundle.archive.list(seeded.archive_scope)
    with pytest.raises(CommandError, match="refusing to import"):
        call_command("memory_import", "--from", str(out), "--backend", other, "--every-scope")
    with pytest.raises(CommandError, match="say what to export"):
        call_command("memory_export", "--out", str(tmp_path / "nothing"))
    with pytest.raises(CommandError, match="not allowed|unknown scope kind|no kind"):
        call_command("memory_export", "--scope", "bogus", "--out", str(tmp_path / "bad"))
