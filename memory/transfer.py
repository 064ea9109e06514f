"""Export memory to a folder of plain files, and import it into any backend.

Switching ``persistence.backend`` migrates nothing by itself; this is how data moves. Only the
store interfaces and the pruned catalog are used, so every backend exports and imports alike.

Layout of an export folder::

    manifest.json                 format, version, when, from which backend, the scopes
    scopes/<scope path parts>/    one folder per scope (the file backend's naming)
        scope.json                the scope key and its session head as exported
        messages.jsonl            one Message record per line, seq order, "deleted": true if so
        kv/<key>                  each KV value as a plain file (SOUL.md opens as markdown)
        kv.json                   {key: {"version", "updated_at"}}
        cursors.json              {consumer: position}
        archive/<seq>-<id>.json   one archive document per file
        pruned/*.md               a session's pruned catalog files, byte for byte

Import keeps every field: message ids, seqs (a session that starts at seq 241 after cleanups
starts at 241 again), tokens and times; KV values and versions; cursor positions; archive
documents with their seqs (gaps left by deleted documents are kept, so cursors stay valid).
It refuses, before writing anything, to import into a scope that already holds data, unless
``replace`` (which clears those scopes first; seqs can then only be kept where the target never
used them). A crash part-way leaves a partial import: run it again with ``replace``.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memory.compression.pruned import PrunedCatalog
from memory.compression.pruned_format import parse_file
from memory.messages import Message, utcnow
from memory.scopes import InvalidScopeId, Scope, SessionScope
from memory.stores.base import MUST_NOT_EXIST, ArchiveDocument, MemoryStoreBundle
from memory.stores.codec import document_from_record, document_to_record

FORMAT = "modex-memory-export"
VERSION = 1
#: KV versions are rebuilt by rewriting the value; beyond this many writes a version is capped.
MAX_VERSION_REPLAY = 1000
_CHUNK = 1000
_PLACEHOLDER_KIND = "import_placeholder"


class TransferError(Exception):
    """An export or import that cannot go ahead; nothing was written. The message says why."""


class TargetNotEmpty(TransferError):
    """Import into scopes that already hold data, without ``replace``."""


@dataclass
class TransferReport:
    """What an export or import did, scope by scope, and anything it could not keep exactly."""

    scopes: list[str] = field(default_factory=list)
    messages: int = 0
    kv_items: int = 0
    cursors: int = 0
    documents: int = 0
    catalog_files: int = 0
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.scopes)} scope(s): {self.messages} messages, {self.kv_items} KV items, "
                f"{self.cursors} cursors, {self.documents} archive documents, {self.catalog_files} catalog files")


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _json(data: object) -> bytes:
    return (json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode("utf-8", "surrogatepass")


def _read_json(path: Path) -> object:
    return json.loads(path.read_bytes().decode("utf-8", "surrogatepass"))


# -- export -----------------------------------------------------------------------------------


def export_scopes(
    *, bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, scopes: Iterable[Scope], out: Path
) -> TransferReport:
    """Write every store's data of ``scopes`` (and sessions' pruned catalogs) under ``out``.

    ``out`` must not exist or be empty (TransferError otherwise). Scopes without data are
    written too (with empty files), so an import recreates exactly what was asked for.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TransferError(f"{out} is not an empty folder; export into a new one")
    report = TransferReport()
    entries = []
    for scope in dict.fromkeys(scopes):
        folder = Path("scopes", *scope.path_parts())
        _export_scope(bundle, catalog, scope, out / folder, report)
        entries.append({"key": scope.key(), "dir": folder.as_posix()})
        report.scopes.append(scope.key())
    manifest = {"format": FORMAT, "version": VERSION, "exported_at": utcnow().isoformat(),
                "backend": bundle.backend, "scopes": entries}
    _write(out / "manifest.json", _json(manifest))
    return report


def _export_scope(bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, scope: Scope, folder: Path,
                  report: TransferReport) -> None:
    head = bundle.messages.head(scope)
    every = bundle.messages.read(scope, include_deleted=True)
    live = {m.id for m in bundle.messages.read(scope)}
    lines = [json.dumps({**m.to_record(), "deleted": m.id not in live}, ensure_ascii=False) for m in every]
    _write(folder / "messages.jsonl", ("".join(line + "\n" for line in lines)).encode("utf-8", "surrogatepass"))
    report.messages += len(every)
    items = bundle.kv.list(scope)
    for item in items:
        _write(folder / "kv" / item.key, item.value.encode("utf-8", "surrogatepass"))
    _write(folder / "kv.json", _json({i.key: {"version": i.version, "updated_at": i.updated_at.isoformat()} for i in items}))
    report.kv_items += len(items)
    positions = bundle.cursors.list(scope)
    _write(folder / "cursors.json", _json(positions))
    report.cursors += len(positions)
    (folder / "archive").mkdir(parents=True, exist_ok=True)
    for document in bundle.archive.list(scope):
        _write(folder / "archive" / f"{document.seq:010d}-{document.id}.json", _json(document_to_record(document)))
        report.documents += 1
    if catalog is not None and isinstance(scope, SessionScope):
        for path in catalog.files(scope):
            _write(folder / "pruned" / path.name, path.read_bytes())
            report.catalog_files += 1
    head_json = {"version": head.version, "last_seq": head.last_seq, "count": head.count, "tokens": head.tokens}
    _write(folder / "scope.json", _json({"key": scope.key(), "head": head_json}))


# -- import -----------------------------------------------------------------------------------


@dataclass
class _ScopeData:
    scope: Scope
    folder: Path
    messages: list[tuple[Message, bool]]
    kv: dict[str, tuple[str, int]]
    cursors: dict[str, int]
    documents: list[ArchiveDocument]
    catalog_files: list[Path]


def read_export(source: Path) -> list[_ScopeData]:
    """Parse and check a whole export folder (nothing is written); raises TransferError."""
    source = Path(source)
    try:
        manifest = _read_json(source / "manifest.json")
    except FileNotFoundError:
        raise TransferError(f"{source} is not a Modex memory export: it has no manifest.json") from None
    except ValueError as exc:
        raise TransferError(f"{source / 'manifest.json'} is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise TransferError(f"{source} is not a Modex memory export (format {FORMAT!r} expected)")
    if manifest.get("version") != VERSION:
        raise TransferError(f"{source} has export version {manifest.get('version')!r}; this Modex reads {VERSION}")
    data = []
    for entry in manifest.get("scopes", []):
        try:
            scope = Scope.parse(entry["key"])
            folder = (source / entry["dir"]).resolve()
            if source.resolve() not in folder.parents:
                raise TransferError(f"scope folder {entry['dir']!r} lies outside the export")
            data.append(_read_scope(scope, folder))
        except TransferError:
            raise
        except (KeyError, TypeError, ValueError, InvalidScopeId, OSError) as exc:
            raise TransferError(f"{source}: cannot read scope {entry!r}: {exc}") from None
    return data


def _read_scope(scope: Scope, folder: Path) -> _ScopeData:
    messages = []
    raw = (folder / "messages.jsonl").read_bytes().decode("utf-8", "surrogatepass")
    for line in raw.splitlines():
        if line.strip():
            record = json.loads(line)
            messages.append((Message.from_record(record), bool(record.get("deleted"))))
    meta = _read_json(folder / "kv.json")
    kv = {key: ((folder / "kv" / key).read_bytes().decode("utf-8", "surrogatepass"), int(info["version"]))
          for key, info in meta.items()}
    cursors = {str(k): int(v) for k, v in _read_json(folder / "cursors.json").items()}
    documents = [document_from_record(_read_json(p)) for p in sorted((folder / "archive").glob("*.json"))]
    catalog_files = sorted((folder / "pruned").glob("*.md")) if (folder / "pruned").is_dir() else []
    for path in catalog_files:
        parse_file(path.read_bytes().decode("utf-8"), path=path)  # refuse a damaged catalog up front
    messages.sort(key=lambda pair: pair[0].seq or 0)
    documents.sort(key=lambda d: d.seq or 0)
    return _ScopeData(scope, folder, messages, kv, cursors, documents, catalog_files)


def _same_catalog(catalog: PrunedCatalog, data: _ScopeData) -> bool:
    """Whether the target already holds exactly the exported catalog files (the catalog lives
    in the workspace, not in a backend: moving between backends of one workspace finds it)."""
    present = {p.name: p for p in catalog.files(data.scope)}  # type: ignore[arg-type]
    return present.keys() == {p.name for p in data.catalog_files} and all(
        present[p.name].read_bytes() == p.read_bytes() for p in data.catalog_files
    )


def _occupied(bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, data: _ScopeData) -> list[str]:
    scope = data.scope
    what = []
    if bundle.messages.read(scope, last=1, include_deleted=True):
        what.append("messages")
    if bundle.kv.list(scope):
        what.append("KV items")
    if bundle.cursors.list(scope):
        what.append("cursors")
    if bundle.archive.list(scope, limit=1):
        what.append("archive documents")
    if catalog is not None and isinstance(scope, SessionScope) and catalog.files(scope):
        if not _same_catalog(catalog, data):
            what.append("a pruned catalog")
    return what


def import_export(
    *, bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, source: Path, replace: bool = False
) -> TransferReport:
    """Import the export folder ``source`` into ``bundle`` (and ``catalog``).

    Raises TransferError for a folder that is not a valid export and TargetNotEmpty, naming
    every occupied scope, when a scope already holds data and ``replace`` is false; in both
    cases before anything is written.
    """
    data = read_export(source)
    occupied = {d.scope.key(): _occupied(bundle, catalog, d) for d in data}
    occupied = {key: what for key, what in occupied.items() if what}
    if occupied and not replace:
        listing = "; ".join(f"{key} has {', '.join(what)}" for key, what in occupied.items())
        raise TargetNotEmpty(f"refusing to import into scopes that hold data ({listing}); "
                             "pass --replace to clear them first")
    report = TransferReport()
    for scope_data in data:
        if scope_data.scope.key() in occupied:
            _clear(bundle, catalog, scope_data.scope)
        _import_scope(bundle, catalog, scope_data, report)
        report.scopes.append(scope_data.scope.key())
    return report


def _clear(bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, scope: Scope) -> None:
    bundle.messages.clear(scope)
    for item in bundle.kv.list(scope):
        bundle.kv.delete(scope, item.key)
    for document in bundle.archive.list(scope):
        bundle.archive.delete(scope, document.id)
    if catalog is not None and isinstance(scope, SessionScope):
        catalog.delete_session(scope)
    # cursors have no delete: the imported positions overwrite the consumers exported


def _import_scope(bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, data: _ScopeData,
                  report: TransferReport) -> None:
    scope = data.scope
    _import_messages(bundle, data, report)
    for key, (value, version) in sorted(data.kv.items()):
        bundle.kv.put(scope, key, value, expected_version=MUST_NOT_EXIST)
        replays = min(version, MAX_VERSION_REPLAY) - 1
        for _ in range(replays):
            bundle.kv.put(scope, key, value)  # each write bumps the version by one
        if version > MAX_VERSION_REPLAY:
            report.warnings.append(f"{scope}: {key} was at version {version}; imported at {MAX_VERSION_REPLAY}")
        report.kv_items += 1
    for consumer, position in data.cursors.items():
        bundle.cursors.set(scope, consumer, position)
        report.cursors += 1
    _import_archive(bundle, data, report)
    if catalog is not None and isinstance(scope, SessionScope) and data.catalog_files and not _same_catalog(catalog, data):
        directory = catalog.directory(scope)
        directory.mkdir(parents=True, exist_ok=True)
        for path in data.catalog_files:
            temp = directory / f".{path.name}.tmp-import-{uuid.uuid4().hex[:8]}"
            shutil.copyfile(path, temp)
            os.replace(temp, directory / path.name)
            report.catalog_files += 1


def _placeholders(n: int) -> list[Message]:
    return [Message(role="user", content="", kind=_PLACEHOLDER_KIND, tokens=0) for _ in range(n)]


def _import_messages(bundle: MemoryStoreBundle, data: _ScopeData, report: TransferReport) -> None:
    scope, pairs = data.scope, data.messages
    if not pairs:
        return
    store = bundle.messages
    first = pairs[0][0].seq or 1
    gap = first - 1 - store.head(scope).last_seq
    if gap > 0:
        # Seqs are assigned by the store: burn the ones before the first message, then forget
        # them (clear keeps last_seq counting), so every message lands on its own seq again.
        for start in range(0, gap, _CHUNK):
            store.append(scope, _placeholders(min(_CHUNK, gap - start)))
        store.clear(scope)
    stored: list[Message] = []
    messages = [m for m, _ in pairs]
    for start in range(0, len(messages), _CHUNK):
        stored += store.append(scope, messages[start : start + _CHUNK])
    moved = sum(1 for old, new in zip(messages, stored) if old.seq != new.seq)
    if moved:
        report.warnings.append(f"{scope}: {moved} message(s) got new seqs (the target had used theirs)")
    deleted = [m.id for m, was_deleted in pairs if was_deleted]
    if deleted:
        store.soft_delete(scope, deleted)
    report.messages += len(messages)


def _import_archive(bundle: MemoryStoreBundle, data: _ScopeData, report: TransferReport) -> None:
    scope = data.scope
    newest = bundle.archive.list(scope, limit=1, newest_first=True)
    last = (newest[0].seq or 0) if newest else 0
    for document in data.documents:
        wanted = document.seq or 0
        while last + 1 < wanted:  # a document deleted before the export: keep its seq unused
            filler = bundle.archive.put(scope, ArchiveDocument(session="", summary="", id=f"import-gap-{uuid.uuid4().hex}"))
            bundle.archive.delete(scope, filler.id)
            last = filler.seq or last + 1
        stored = bundle.archive.put(scope, document)
        if stored.seq != wanted:
            report.warnings.append(f"{scope}: archive document {document.id} got seq {stored.seq}, not {wanted}")
        last = max(last, stored.seq or 0)
        report.documents += 1


def scope_keys(scopes: Sequence[str]) -> list[Scope]:
    """Parse scope keys given by a person; raises TransferError naming the bad one."""
    out = []
    for key in scopes:
        try:
            out.append(Scope.parse(key))
        except InvalidScopeId as exc:
            raise TransferError(f"--scope {key!r}: {exc}") from None
    return out


def user_scopes(*, bundle: MemoryStoreBundle, user: str, sessions: Iterable[str]) -> list[Scope]:
    """Everything of one user: ``UserScope(user)``, every scope with that user as a part (an
    agent's facts and archive about them), and the given sessions (their conversations)."""
    from memory.inspection import scopes as discovered
    from memory.scopes import UserScope

    found: list[Scope] = [UserScope(user)]
    found += [info.scope for info in discovered(bundle) if info.part("user") == user]
    found += [SessionScope(s) for s in sessions]
    return list(dict.fromkeys(found))


def every_scope(*, bundle: MemoryStoreBundle, catalog: PrunedCatalog | None) -> list[Scope]:
    """Every scope holding data, plus sessions that only have a pruned catalog left."""
    from memory.inspection import scopes as discovered
    from memory.inspection_catalog import catalog_sessions

    found: list[Scope] = [info.scope for info in discovered(bundle)]
    if catalog is not None:
        found += [summary.session for summary in catalog_sessions(catalog)]
    return list(dict.fromkeys(found))
