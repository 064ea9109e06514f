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

Import checks the whole folder before it writes anything, and trusts nothing in it: it imports
only the scopes the operator names (``scopes``; an export holding any other is refused), follows
no symbolic link (a folder holding one is refused), accepts seqs up to MAX_SEQ and archive seq
gaps up to MAX_ARCHIVE_GAP (a first seq of 10**12 is refused, not counted up to), JSON nested
at most MAX_DEPTH deep, KV keys and file names of the store's own alphabet only. Exports are
written readable by their owner only (files 0600, folders 0700): they hold people's memory.

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
import stat
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memory.compression.pruned import PrunedCatalog
from memory.compression.pruned_format import parse_file
from memory.messages import Message, utcnow
from memory.scopes import InvalidScopeId, Scope, SessionScope
from memory.stores.base import MUST_NOT_EXIST, ArchiveDocument, MemoryStoreBundle, validate_key
from memory.stores.codec import document_from_record, document_to_record

FORMAT = "modex-memory-export"
#: The largest message seq an import accepts: the seqs before a session's first message are
#: burnt one by one (placeholders), so a hostile first seq must not be counted up to.
MAX_SEQ = 1_000_000
#: The largest run of unused archive seqs an import recreates (each costs a write and a delete).
MAX_ARCHIVE_GAP = 100_000
#: How deeply JSON in an export may nest (a message, a tool call's arguments, metadata).
MAX_DEPTH = 64
VERSION = 1
#: KV versions are rebuilt by rewriting the value; beyond this many writes a version is capped.
MAX_VERSION_REPLAY = 1000
_CHUNK = 1000
_PLACEHOLDER_KIND = "import_placeholder"


class TransferError(Exception):
    """An export or import that cannot go ahead; nothing was written. The message says why."""


class TargetNotEmpty(TransferError):
    """Import into scopes that already hold data, without ``replace``."""


class ScopeNotAllowed(TransferError):
    """The export holds scopes the operator did not name (or lacks one they named)."""


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


def _private_dir(path: Path) -> None:
    """``path`` and any missing parents, each created 0700 (whatever the umask)."""
    if path.is_dir():
        return
    _private_dir(path.parent)
    path.mkdir(mode=0o700)
    os.chmod(path, 0o700)


def _write(path: Path, data: bytes) -> None:
    """A new file readable by its owner only (0600 from its creation on, whatever the umask)."""
    _private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb", closefd=False) as handle:
            handle.write(data)
    finally:
        os.close(fd)


def _json(data: object) -> bytes:
    return (json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode("utf-8", "surrogatepass")


def _depth(value: object) -> int:
    """How deeply ``value`` nests lists and objects (iterative: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            items = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in items)
    return deepest


def _loads(text: str, *, where: object) -> object:
    """JSON of an export, refused (TransferError) when malformed or nested past MAX_DEPTH."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TransferError(f"{where}: JSON nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise TransferError(f"{where} is not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise TransferError(f"{where}: JSON nested too deeply (at most {MAX_DEPTH} levels)")
    return value


def _read_bytes(path: Path) -> bytes:
    """A regular file of the export, never through a symbolic link (checked as it is opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise TransferError(f"cannot read {path}: {exc.strerror or exc} (symbolic links are not followed)") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise TransferError(f"{path} is not a regular file")
        return handle.read()


def _read_json(path: Path) -> object:
    return _loads(_read_bytes(path).decode("utf-8", "surrogatepass"), where=path)


def _no_links(source: Path) -> None:
    """Refuse an export folder holding any symbolic link or anything but files and folders."""
    for root, dirs, files in os.walk(source, followlinks=False):
        for name in dirs + files:
            path = Path(root) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise TransferError(f"{path} is a symbolic link; an export holds plain files only")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise TransferError(f"{path} is not a plain file or folder")


# -- export -----------------------------------------------------------------------------------


def export_scopes(
    *, bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, scopes: Iterable[Scope], out: Path
) -> TransferReport:
    """Write every store's data of ``scopes`` (and sessions' pruned catalogs) under ``out``.

    ``out`` must not exist or be empty (TransferError otherwise). Scopes without data are
    written too (with empty files), so an import recreates exactly what was asked for.
    """
    out = Path(out)
    if out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir()))):
        raise TransferError(f"{out} is not an empty folder; export into a new one")
    _private_dir(out)
    os.chmod(out, 0o700)  # an empty folder made beforehand, maybe readable by others
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
    _private_dir(folder / "archive")
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


def read_export(source: Path, *, scopes: Iterable[str] | None = None) -> list[_ScopeData]:
    """Parse and check a whole export folder (nothing is written); raises TransferError.

    ``scopes``: the scope keys the operator allows; an export holding any other scope, or
    lacking one of them, is refused (ScopeNotAllowed). None allows every scope of the export
    (the operator said so: ``--every-scope``)."""
    source = Path(source)
    if not (source / "manifest.json").exists() and not (source / "manifest.json").is_symlink():
        raise TransferError(f"{source} is not a Modex memory export: it has no manifest.json")
    if not source.is_dir():
        raise TransferError(f"{source} is not a folder")
    _no_links(source)
    manifest = _read_json(source / "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise TransferError(f"{source} is not a Modex memory export (format {FORMAT!r} expected)")
    if manifest.get("version") != VERSION:
        raise TransferError(f"{source} has export version {manifest.get('version')!r}; this Modex reads {VERSION}")
    entries = manifest.get("scopes", [])
    if not isinstance(entries, list):
        raise TransferError(f"{source}: the manifest's scopes are not a list")
    keys = []
    for entry in entries:
        try:
            keys.append(Scope.parse(entry["key"]).key())
        except (KeyError, TypeError, ValueError, InvalidScopeId) as exc:
            raise TransferError(f"{source}: cannot read scope {entry!r}: {exc}") from None
    if len(set(keys)) != len(keys):
        raise TransferError(f"{source}: the manifest names a scope twice")
    if scopes is not None:
        allowed = {Scope.parse(k).key() for k in scopes}
        others, missing = sorted(set(keys) - allowed), sorted(allowed - set(keys))
        if others:
            raise ScopeNotAllowed(
                f"the export holds scopes you did not name: {', '.join(others)}. Name each one you mean to "
                "import with --scope (or pass --every-scope after reading its manifest.json); nothing was written")
        if missing:
            raise ScopeNotAllowed(f"the export holds no scope {', '.join(missing)}; nothing was written")
    data = []
    root = source.resolve()
    for entry in entries:
        try:
            scope = Scope.parse(entry["key"])
            folder = (source / entry["dir"]).resolve()
            if root not in folder.parents:
                raise TransferError(f"scope folder {entry['dir']!r} lies outside the export")
            data.append(_read_scope(scope, folder))
        except TransferError:
            raise
        except RecursionError:
            raise TransferError(f"{source}: scope {entry.get('key')!r} is nested too deeply") from None
        except (KeyError, TypeError, ValueError, AttributeError, InvalidScopeId, OSError) as exc:
            raise TransferError(f"{source}: cannot read scope {entry!r}: {exc}") from None
    return data


def _file_in(folder: Path, *parts: str) -> Path:
    """``folder/parts`` for names from the export, each a store key (no separators, no ``..``)."""
    for part in parts:
        validate_key(part, what="file name")
    return folder.joinpath(*parts)


def _read_scope(scope: Scope, folder: Path) -> _ScopeData:
    messages = []
    raw = _read_bytes(folder / "messages.jsonl").decode("utf-8", "surrogatepass")
    for number, line in enumerate(raw.splitlines(), start=1):
        if line.strip():
            record = _loads(line, where=f"{folder / 'messages.jsonl'} line {number}")
            if not isinstance(record, dict):
                raise TransferError(f"{folder / 'messages.jsonl'} line {number} is not a message record")
            message = Message.from_record(record)
            if message.seq is not None and not (isinstance(message.seq, int) and 0 < message.seq <= MAX_SEQ):
                raise TransferError(f"{scope}: message seq {message.seq!r} is out of range (1 to {MAX_SEQ:,})")
            messages.append((message, bool(record.get("deleted"))))
    seqs = [m.seq for m, _ in messages if m.seq is not None]
    if len(set(seqs)) != len(seqs):
        raise TransferError(f"{scope}: two messages share a seq")
    meta = _read_json(folder / "kv.json")
    if not isinstance(meta, dict):
        raise TransferError(f"{folder / 'kv.json'} is not an object")
    kv = {}
    for key, info in meta.items():
        version = int(info["version"])
        if version < 1:
            raise TransferError(f"{scope}: {key} has version {version}")
        kv[key] = (_read_bytes(_file_in(folder, "kv", key)).decode("utf-8", "surrogatepass"), version)
    cursors_raw = _read_json(folder / "cursors.json")
    if not isinstance(cursors_raw, dict):
        raise TransferError(f"{folder / 'cursors.json'} is not an object")
    cursors = {validate_key(str(k), what="cursor name"): int(v) for k, v in cursors_raw.items()}
    archive = folder / "archive"
    documents = [document_from_record(_read_json(p)) for p in sorted(archive.glob("*.json"))] if archive.is_dir() else []
    last = 0
    for document in sorted(documents, key=lambda d: d.seq or 0):
        if document.seq is not None and not (0 < document.seq <= MAX_SEQ and document.seq - last - 1 <= MAX_ARCHIVE_GAP):
            raise TransferError(f"{scope}: archive document seq {document.seq!r} is out of range "
                                f"(1 to {MAX_SEQ:,}, gaps of at most {MAX_ARCHIVE_GAP:,})")
        last = document.seq or last
    catalog_files = sorted((folder / "pruned").glob("*.md")) if (folder / "pruned").is_dir() else []
    for path in catalog_files:
        validate_key(path.name, what="catalog file name")
        parse_file(_read_bytes(path).decode("utf-8"), path=path)  # refuse a damaged catalog up front
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
    *, bundle: MemoryStoreBundle, catalog: PrunedCatalog | None, source: Path, scopes: Iterable[str] | None,
    replace: bool = False,
) -> TransferReport:
    """Import the export folder ``source`` into ``bundle`` (and ``catalog``).

    ``scopes``: the scope keys the operator allows (None: every scope of the export, which
    the operator must have chosen knowingly). Raises TransferError for a folder that is not a
    valid export (or holds a symbolic link, an out-of-range seq, JSON nested too deeply),
    ScopeNotAllowed for scopes not named, and TargetNotEmpty, naming every occupied scope,
    when a scope already holds data and ``replace`` is false; in every case before anything
    is written.
    """
    data = read_export(source, scopes=scopes)
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
            _write(temp, _read_bytes(path))
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
