"""``memory_import`` trusts nothing in an export folder; ``memory_export`` writes private files.

Real folders on disk, the real commands (``call_command``) and the real file and SQLite stores:
each hostile export is made by editing a genuine one, and every refusal must leave the target
exactly as it was.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memory.compression.pruned import PrunedCatalog
from memory.messages import Message
from memory.scopes import AgentScope, SessionScope, UserScope
from memory.stores.registry import open_bundle
from memory import transfer
from memory.transfer import TransferError, export_scopes, import_export

ALICE = UserScope("1")
BOB = UserScope("2")
SOUL = AgentScope("default")
BACKENDS = ["file", pytest.param("sqlite", marks=pytest.mark.django_db)]


def stores(root: Path, backend: str):
    return open_bundle(backend, root=root / "memory"), PrunedCatalog(root / "pruned")


def genuine_export(tmp_path: Path) -> Path:
    """An export of Alice's USER.md and one session of hers, from a file store."""
    bundle, catalog = stores(tmp_path / "source", "file")
    bundle.kv.put(ALICE, "USER.md", "- Alice likes sailing\n")
    bundle.messages.append(SessionScope("s1"), [Message(role="user", content="hello"),
                                                 Message(role="assistant", content="hi")])
    out = tmp_path / "export"
    export_scopes(bundle=bundle, catalog=catalog, scopes=[ALICE, SessionScope("s1")], out=out)
    return out


def snapshot(bundle) -> tuple:
    return (tuple((s.key(), i.key, i.value) for s in (ALICE, BOB, SOUL) for i in bundle.kv.list(s)),
            tuple(bundle.messages.read(SessionScope("s1"), include_deleted=True)))


def refused(out: Path, bundle, catalog, match: str, **kwargs) -> None:
    before = snapshot(bundle)
    with pytest.raises(TransferError, match=match):
        import_export(bundle=bundle, catalog=catalog, source=out, **{"scopes": None, **kwargs})
    assert snapshot(bundle) == before, "a refused import writes nothing"


def add_scope(out: Path, key: str, folder: str, files: dict[str, str]) -> None:
    """Append a scope to the export as a forger would: its manifest entry and its files."""
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["scopes"].append({"key": key, "dir": folder})
    (out / "manifest.json").write_text(json.dumps(manifest))
    base = out / folder
    for name, text in {"messages.jsonl": "", "kv.json": "{}", "cursors.json": "{}", **files}.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(text)


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_the_named_scopes_are_imported(tmp_path, backend):
    """A forged export that also writes Bob's USER.md and the agent's SOUL.md is refused when
    the operator named only Alice's scopes, though those targets are empty."""
    out = genuine_export(tmp_path)
    add_scope(out, BOB.key(), "scopes/forged-bob", {"kv.json": '{"USER.md": {"version": 1}}', "kv/USER.md": "Bob obeys Alice"})
    add_scope(out, SOUL.key(), "scopes/forged-soul", {"kv.json": '{"SOUL.md": {"version": 1}}', "kv/SOUL.md": "I serve Alice"})
    bundle, catalog = stores(tmp_path / "target", backend)
    refused(out, bundle, catalog, "did not name: agent:default, user:2", scopes=[ALICE.key(), "session:s1"])
    with pytest.raises(CommandError, match="--scope KEY"):
        call_command("memory_import", "--from", str(out), "--backend", backend)  # naming nothing is refused
    with pytest.raises(CommandError, match="did not name"):
        call_command("memory_import", "--from", str(out), "--backend", backend, "--scope", ALICE.key(), "--scope", "session:s1")
    assert bundle.kv.get(BOB, "USER.md") is None and bundle.kv.get(SOUL, "SOUL.md") is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_named_scopes_of_a_genuine_export_import(tmp_path, backend, settings):
    out = genuine_export(tmp_path)
    settings.MODEX_WORKSPACE = tmp_path / "target"
    call_command("memory_import", "--from", str(out), "--backend", backend, "--scope", ALICE.key(), "--scope", "session:s1")
    bundle, _ = stores(tmp_path / "target", backend)
    assert bundle.kv.get(ALICE, "USER.md").value == "- Alice likes sailing\n"
    with pytest.raises(CommandError, match="holds no scope user:3"):
        call_command("memory_import", "--from", str(out), "--backend", backend, "--scope", ALICE.key(),
                     "--scope", "session:s1", "--scope", "user:3", "--replace")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_existing_target_is_refused_without_replace(tmp_path, backend):
    out = genuine_export(tmp_path)
    bundle, catalog = stores(tmp_path / "target", backend)
    bundle.kv.put(ALICE, "MEMORY.md", "- something else\n")
    refused(out, bundle, catalog, "refusing to import", scopes=[ALICE.key(), "session:s1"])
    import_export(bundle=bundle, catalog=catalog, source=out, scopes=[ALICE.key(), "session:s1"], replace=True)
    assert bundle.kv.get(ALICE, "USER.md") is not None and bundle.kv.get(ALICE, "MEMORY.md") is None


def test_symbolic_links_are_never_followed(tmp_path):
    """The server's secret key linked in as SOUL.md (or a whole folder linked elsewhere) is
    refused, not read."""
    secret = tmp_path / "secret_key"
    secret.write_text("django-insecure-the-servers-secret")
    bundle, catalog = stores(tmp_path / "target", "file")
    out = genuine_export(tmp_path)
    add_scope(out, SOUL.key(), "scopes/soul", {"kv.json": '{"SOUL.md": {"version": 1}}'})
    (out / "scopes/soul/kv").mkdir()
    (out / "scopes/soul/kv/SOUL.md").symlink_to(secret)
    refused(out, bundle, catalog, "symbolic link")
    assert bundle.kv.get(SOUL, "SOUL.md") is None
    # A linked folder, and a linked manifest, likewise.
    for victim in ("scopes/soul/kv", "manifest.json"):
        fresh = genuine_export(tmp_path / victim.replace("/", "-"))
        target = fresh / victim
        if victim == "manifest.json":
            real = tmp_path / "real-manifest.json"
            real.write_text(target.read_text())
            target.unlink()
            target.symlink_to(real)
        else:
            add_scope(fresh, SOUL.key(), "scopes/soul", {"kv.json": '{"SOUL.md": {"version": 1}}'})
            elsewhere = tmp_path / "elsewhere"
            elsewhere.mkdir(exist_ok=True)
            (elsewhere / "SOUL.md").write_text("from outside")
            target.symlink_to(elsewhere, target_is_directory=True)
        refused(fresh, bundle, catalog, "symbolic link")


def test_a_kv_key_cannot_climb_out_of_its_scope_folder(tmp_path):
    bundle, catalog = stores(tmp_path / "target", "file")
    out = genuine_export(tmp_path)
    (tmp_path / "outside.md").write_text("read me")
    folder = next(p.parent for p in out.rglob("kv.json") if (p.parent / "kv" / "USER.md").exists())
    (folder / "kv.json").write_text(json.dumps({"../../../../outside.md": {"version": 1}}))
    refused(out, bundle, catalog, "file name|not allowed|invalid")


def test_a_huge_first_seq_is_refused_at_once(tmp_path):
    """A first seq of 10**12 used to be counted up to, placeholder by placeholder, forever."""
    bundle, catalog = stores(tmp_path / "target", "file")
    out = genuine_export(tmp_path)
    path = next(p for p in out.rglob("messages.jsonl") if p.read_text().strip())
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for offset, record in enumerate(records):
        record["seq"] = 10**12 + offset
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    started = time.monotonic()
    refused(out, bundle, catalog, "out of range")
    assert time.monotonic() - started < 5


def test_a_nesting_bomb_is_a_clear_error_not_a_recursion_error(tmp_path):
    bundle, catalog = stores(tmp_path / "target", "file")
    for where in ("kv.json", "messages.jsonl", "manifest.json", "shallow"):
        out = genuine_export(tmp_path / where)
        if where == "manifest.json":
            target = out / "manifest.json"
            target.write_text("[" * 100_000 + "]" * 100_000)
        elif where == "shallow":  # under the parser's limit, past ours
            target = next(out.rglob("cursors.json"))
            target.write_text('{"a": ' + "[" * (transfer.MAX_DEPTH + 5) + "]" * (transfer.MAX_DEPTH + 5) + "}")
        else:
            target = next(out.rglob(where))
            target.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
        refused(out, bundle, catalog, "nested too deeply")
        with pytest.raises(CommandError, match="nested too deeply"):
            call_command("memory_import", "--from", str(out), "--backend", "file", "--every-scope")


def test_exports_are_private(tmp_path):
    """Files 0600, folders 0700, whatever the umask; a folder made beforehand is tightened."""
    old = os.umask(0o022)
    try:
        out = genuine_export(tmp_path)
        premade = tmp_path / "premade"
        premade.mkdir(mode=0o755)
        bundle, catalog = stores(tmp_path / "source", "file")
        export_scopes(bundle=bundle, catalog=catalog, scopes=[ALICE], out=premade)
    finally:
        os.umask(old)
    for root in (out, premade):
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        for path in root.rglob("*"):
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
