"""The file backend: ``DefaultScopedStorage``, all four stores over per-scope directories.

Each scope owns ``root/<scope.path_parts()>/`` (``Scope.directory`` guarantees it lies inside
the root) with one directory per store::

    messages/   the session (see memory/stores/file_session.py)
    kv/         one real file per key (``SOUL.md`` is a markdown file a person can open), and a
                sidecar ``.<key>.meta.json`` with its version and the sha256 of its bytes
    cursors/    ``<consumer>.json``
    archive/    ``<seq>-<id>.json`` per document, plus a ``.md`` rendering for people

Keys, consumer names and document ids are validated before any path is built. Every write is
atomic and made under the directory's lock, so threads and processes on one machine can share a
root: KV values, sidecars, cursors and archive documents by temporary file, fsync,
``os.replace`` and directory fsync; sessions by their own commit protocol (file_session.py).

The four stores are separate objects because their interfaces share method names (``get``,
``put``, ``list``); ``DefaultScopedStorage`` owns the root and hands them out as one bundle.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from memory.messages import utcnow
from memory.scopes import Scope
from memory.stores import fsio
from memory.stores.base import (
    ConcurrentChange,
    CursorMove,
    CursorStore,
    Fence,
    KVItem,
    KVStore,
    KVWrite,
    MemoryStoreBundle,
    StorageUnavailable,
    VersionConflict,
    validate_key,
)
from memory.stores.codec import (
    check_commit,
    check_expected_version,
    check_fence,
    check_int,
    check_kv_value,
    check_prefix,
    check_scope,
)
from memory.stores.file_archive import FileArchiveStore
from memory.stores.file_session import FileMessageStore

BACKEND_NAME = "file"
_UNSET = ...
#: Where ``FileKVStore.commit`` keeps the journal of a commit while it lands (under the root;
#: a dot name is never a scope directory).
JOURNAL_DIR = ".journal"


class DefaultScopedStorage:
    """The framework's default storage: one root directory, the four stores over it.

    ``durable=False`` skips fsync (for throwaway data only: a crash may then lose recent writes,
    though never leave a torn file).
    """

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = Path(root).resolve()
        self.durable = durable
        self.kv = FileKVStore(self.root, durable=durable)
        self.messages = FileMessageStore(self.root, durable=durable, kv=self.kv)
        self.cursors = FileCursorStore(self.root, durable=durable, kv=self.kv)
        self.archive = FileArchiveStore(self.root, durable=durable, kv=self.kv)
        self.kv.recover()  # a commit a crash cut short is completed before anything is read

    def bundle(self) -> MemoryStoreBundle:
        return MemoryStoreBundle(
            backend=BACKEND_NAME, messages=self.messages, kv=self.kv, cursors=self.cursors, archive=self.archive
        )

    def __repr__(self) -> str:
        return f"DefaultScopedStorage({str(self.root)!r})"


def open_bundle(*, root: Path | None, using: str = "default") -> MemoryStoreBundle:
    """Registry entry point (``using`` is the SQL backends' argument, ignored here)."""
    if root is None:
        from django.conf import settings

        root = Path(settings.MODEX_WORKSPACE) / "memory"
    return DefaultScopedStorage(root).bundle()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


class FileKVStore(KVStore):
    """KV items as plain files; the sidecar makes versions survive crashes and human edits.

    The value is written first, then the sidecar. If they disagree (the sha256 in the sidecar
    is not the value's), the value was written after the sidecar: by a put that crashed between
    the two steps, or by a person editing the file. Either way the file is the newest text, so
    it counts as one version after the sidecar's, and the sidecar is repaired on the next read
    or write. A sidecar without a value (a crashed delete) means the key does not exist.
    """

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.root = root
        self.durable = durable

    def _dir(self, scope: Scope) -> Path:
        return fsio.scope_directory(self.root, check_scope(scope)) / "kv"

    @staticmethod
    def _meta(directory: Path, key: str) -> Path:
        return directory / f".{key}.meta.json"  # keys never start with '.': no clash

    @fsio.storage_errors
    def get(self, scope: Scope, key: str) -> KVItem | None:
        key = validate_key(key)
        directory = self._dir(scope)
        if not directory.is_dir():
            return None
        item, consistent = self._current(directory, scope, key)
        if consistent:
            return item
        with fsio.scope_lock(directory):
            return self._current(directory, scope, key, repair=True)[0]

    @fsio.storage_errors
    def put(self, scope: Scope, key: str, value: str, *, expected_version: int | None = None,
            fence: Fence | None = None) -> KVItem:
        key = validate_key(key)
        value = check_kv_value(value)
        expected = check_expected_version(expected_version)
        fence = check_fence(fence, kv_scope=scope, key=key)
        directory = self._dir(scope)
        fsio.ensure_dir(directory, durable=self.durable)
        with fsio.scope_lock(directory):
            if fence is not None:  # the lease is in this directory: checked under the same lock
                lease, _ = self._current(directory, scope, fence.key)
                if not fence.admits(None if lease is None else lease.value):
                    raise fence.refused(f"writing {key} in {scope}")
            current, _ = self._current(directory, scope, key)
            actual = current.version if current else 0
            if expected is not None and expected != actual:
                raise VersionConflict(
                    f"{key} in {scope} is at version {actual}, not {expected}; re-read it and retry",
                    expected=expected, actual=actual,
                )
            item = KVItem(scope=scope, key=key, value=value, version=actual + 1, updated_at=utcnow())
            data = value.encode("utf-8", "surrogatepass")
            # One directory fsync after both renames: every crash point is handled on read.
            fsio.atomic_write(directory / key, data, durable=self.durable, sync_dir=False)
            self._write_meta(directory, item, data)
            return item

    @fsio.storage_errors
    def delete(self, scope: Scope, key: str, *, expected_version: int | None = None,
               fence: Fence | None = None) -> bool:
        key = validate_key(key)
        expected = check_expected_version(expected_version)
        fence = check_fence(fence, kv_scope=scope, key=key)
        directory = self._dir(scope)
        if not directory.is_dir():
            if fence is not None:  # no directory, no lease
                raise fence.refused(f"deleting {key} in {scope}")
            if expected:
                raise VersionConflict(f"{key} does not exist in {scope}", expected=expected, actual=0)
            return False
        with fsio.scope_lock(directory):
            if fence is not None:  # as in put: the lease is in this directory, checked under the same lock
                lease, _ = self._current(directory, scope, fence.key)
                if not fence.admits(None if lease is None else lease.value):
                    raise fence.refused(f"deleting {key} in {scope}")
            current, _ = self._current(directory, scope, key)
            actual = current.version if current else 0
            if expected is not None and expected != actual:
                raise VersionConflict(
                    f"{key} in {scope} is at version {actual}, not {expected}; re-read it and retry",
                    expected=expected, actual=actual,
                )
            if current is None:
                return False
            # Value first: a crash between the two leaves a sidecar alone, which reads as absent.
            fsio.unlink_quietly(directory / key)
            fsio.unlink_quietly(self._meta(directory, key))
            if self.durable:
                fsio.fsync_dir(directory)
            return True

    @fsio.storage_errors
    def commit(self, writes: Sequence[KVWrite], *, cursor: CursorMove | None = None,
               fence: Fence | None = None) -> list[KVItem | None]:
        writes, cursor, fence = check_commit(writes, cursor, fence)
        if not writes and cursor is None:
            return []
        self.recover()
        directories = [self._dir(write.scope) for write in writes]
        cursor_path = _cursor_path(self.root, cursor.scope, cursor.consumer) if cursor is not None else None
        touched = {*directories, *([cursor_path.parent] if cursor_path is not None else [])}
        for directory in touched:
            fsio.ensure_dir(directory, durable=self.durable)
        what = f"a commit of {len(writes)} write(s)"
        if fence is not None:
            if not self._dir(fence.scope).is_dir():
                raise fence.refused(what)
            touched.add(self._dir(fence.scope))
        with _locked(touched):
            if fence is not None:
                lease, _ = self._current(self._dir(fence.scope), fence.scope, fence.key)
                if not fence.admits(None if lease is None else lease.value):
                    raise fence.refused(what)
            now = utcnow()
            entries: list[dict] = []
            items: list[KVItem | None] = []
            for write, directory in zip(writes, directories, strict=True):
                current, _ = self._current(directory, write.scope, write.key)
                actual = current.version if current else 0
                if write.expected_version is not None and write.expected_version != actual:
                    raise VersionConflict(
                        f"{write.key} in {write.scope} is at version {actual}, not {write.expected_version}; "
                        "re-read it and retry", expected=write.expected_version, actual=actual,
                    )
                before = {"version": actual, "sha256": _sha256(_encode(current.value)) if current else None}
                entries.append({"dir": str(directory.relative_to(self.root)), "key": write.key,
                                "value": write.value, "version": actual + 1, "before": before})
                items.append(None if write.value is None else
                             KVItem(scope=write.scope, key=write.key, value=write.value, version=actual + 1,
                                    updated_at=now))
            move = None
            if cursor is not None and cursor_path is not None:
                data = fsio.read_json(cursor_path)
                position = None if data is None else int(data["position"])
                if cursor.expected is not _UNSET and position != cursor.expected:
                    raise ConcurrentChange(
                        f"cursor {cursor.consumer!r} of {cursor.scope} is at {position}, not {cursor.expected}; "
                        "re-read and retry"
                    )
                move = {"path": str(cursor_path.relative_to(self.root)), "consumer": cursor.consumer,
                        "position": cursor.position, "before": position}
            journal = {"at": now.isoformat(), "locks": sorted(str(d.relative_to(self.root)) for d in touched),
                       "writes": entries, "cursor": move}
            journal_dir = self.root / JOURNAL_DIR
            fsio.ensure_dir(journal_dir, durable=self.durable)
            path = journal_dir / f"{now.strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:12]}.json"
            fsio.atomic_write(path, fsio.dump_json(journal), durable=self.durable)
            self._land(journal)
            fsio.unlink_quietly(path)
            if self.durable:
                fsio.fsync_dir(journal_dir)
            return items

    def recover(self) -> int:
        """Complete the commits a crash cut short (their journals); returns how many."""
        journal_dir = self.root / JOURNAL_DIR
        if not journal_dir.is_dir():
            return 0
        done = 0
        for name in sorted(os.listdir(journal_dir)):
            path = journal_dir / name
            if name.startswith(".") or not name.endswith(".json"):
                continue  # an atomic write in flight
            journal = fsio.read_json(path)
            if journal is None:
                continue  # finished meanwhile
            directories = {self.root / d for d in journal["locks"]}
            for directory in directories:
                fsio.ensure_dir(directory, durable=self.durable)
            # Under the same locks as the commit: a live commit (another thread or process) is
            # waited for, and has removed its journal by the time the locks are ours.
            with _locked(directories):
                if not path.exists():
                    continue
                self._land(journal)
                fsio.unlink_quietly(path)
                if self.durable:
                    fsio.fsync_dir(journal_dir)
                done += 1
        return done

    def _land(self, journal: dict) -> None:
        """Write what ``journal`` says, skipping what already landed and any key changed since
        (the caller holds the locks). A live commit's checks guarantee every write lands."""
        at = datetime.fromisoformat(journal["at"])
        synced: set[Path] = set()
        for entry in journal["writes"]:
            directory = self.root / entry["dir"]
            key = entry["key"]
            current, _ = self._current(directory, None, key)  # type: ignore[arg-type]
            state = {"version": current.version if current else 0,
                     "sha256": _sha256(_encode(current.value)) if current else None}
            value = entry["value"]
            if value is None:
                if current is not None and state == entry["before"]:
                    fsio.unlink_quietly(directory / key)
                    fsio.unlink_quietly(self._meta(directory, key))
                    synced.add(directory)
                continue
            data = _encode(value)
            if state == {"version": entry["version"], "sha256": _sha256(data)} or state != entry["before"]:
                continue  # landed already, or changed by someone else since: theirs is newer
            item = KVItem(scope=None, key=key, value=value, version=entry["version"], updated_at=at)  # type: ignore[arg-type]
            fsio.atomic_write(directory / key, data, durable=self.durable, sync_dir=False)
            self._write_meta(directory, item, data)
        move = journal.get("cursor")
        if move is not None:
            path = self.root / move["path"]
            data = fsio.read_json(path)
            position = None if data is None else int(data["position"])
            if position != move["position"] and position == move["before"]:
                record = {"consumer": move["consumer"], "position": move["position"], "updated_at": journal["at"]}
                fsio.atomic_write(path, fsio.dump_json(record), durable=self.durable)
        if self.durable:
            for directory in synced:
                fsio.fsync_dir(directory)

    @contextlib.contextmanager
    def fenced(self, fence: Fence | None, what: str) -> Iterator[None]:
        """For another store's write: hold the lease's directory lock while the write is made,
        after checking that ``fence``'s lease is still its own (else FencedOut)."""
        if fence is None:
            yield
            return
        directory = self._dir(fence.scope)
        if not directory.is_dir():
            raise fence.refused(what)
        with fsio.scope_lock(directory):
            lease, _ = self._current(directory, fence.scope, fence.key)
            if not fence.admits(None if lease is None else lease.value):
                raise fence.refused(what)
            yield

    @fsio.storage_errors
    def list(self, scope: Scope, *, prefix: str = "") -> list[KVItem]:
        prefix = check_prefix(prefix)
        directory = self._dir(scope)
        if not directory.is_dir():
            return []
        names = sorted(n for n in os.listdir(directory) if n.startswith(prefix) and _is_key(n))
        items = []
        with fsio.scope_lock(directory):
            for name in names:
                item = self._current(directory, scope, name, repair=True)[0]
                if item is not None:
                    items.append(item)
        return items

    def _current(self, directory: Path, scope: Scope, key: str, *, repair: bool = False) -> tuple[KVItem | None, bool]:
        """The item as the files say, and whether value and sidecar agreed."""
        path = directory / key
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except (FileNotFoundError, IsADirectoryError):
            return None, True
        try:
            value = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise StorageUnavailable(f"{path} is not UTF-8 text; fix or move the file") from None
        meta = fsio.read_json(self._meta(directory, key))
        if meta is not None and meta.get("sha256") == _sha256(data):
            updated = datetime.fromisoformat(meta["updated_at"])
            return KVItem(scope, key, value, int(meta["version"]), updated), True
        version = int(meta["version"]) + 1 if meta else 1
        item = KVItem(scope, key, value, version, _mtime(path))
        if repair:
            self._write_meta(directory, item, data)
        return item, False

    def _write_meta(self, directory: Path, item: KVItem, data: bytes) -> None:
        meta = {"key": item.key, "version": item.version, "sha256": _sha256(data),
                "updated_at": item.updated_at.isoformat()}
        fsio.atomic_write(self._meta(directory, item.key), fsio.dump_json(meta), durable=self.durable)


def _encode(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def _cursor_path(root: Path, scope: Scope, consumer: str) -> Path:
    """Where ``FileCursorStore`` keeps ``consumer``'s position in ``scope``."""
    return fsio.scope_directory(root, check_scope(scope)) / "cursors" / f"{consumer}.json"


@contextlib.contextmanager
def _locked(directories) -> Iterator[None]:
    """Hold the lock of every directory, taken in path order (so two commits never deadlock)."""
    with contextlib.ExitStack() as stack:
        for directory in sorted(set(directories), key=str):
            stack.enter_context(fsio.scope_lock(directory))
        yield


def _is_key(name: str) -> bool:
    try:
        validate_key(name)
    except ValueError:
        return False
    return True


class FileCursorStore(CursorStore):
    """One small JSON file per consumer: ``cursors/<consumer>.json``.

    ``kv`` is the FileKVStore holding the leases that fence writes (the bundle passes it)."""

    def __init__(self, root: Path, *, durable: bool = True, kv: FileKVStore | None = None) -> None:
        self.root = root
        self.durable = durable
        self._kv = kv

    def _dir(self, scope: Scope) -> Path:
        return fsio.scope_directory(self.root, check_scope(scope)) / "cursors"

    @fsio.storage_errors
    def get(self, scope: Scope, consumer: str) -> int | None:
        consumer = validate_key(consumer, what="consumer name")
        data = fsio.read_json(self._dir(scope) / f"{consumer}.json")
        return None if data is None else int(data["position"])

    @fsio.storage_errors
    def set(self, scope: Scope, consumer: str, position: int, *, expected: int | None | object = _UNSET,
            fence: Fence | None = None) -> None:
        consumer = validate_key(consumer, what="consumer name")
        check_int(position, "cursor position", minimum=0)
        if expected is not _UNSET and expected is not None:
            check_int(expected, "expected position")
        fence = check_fence(fence)
        directory = self._dir(scope)
        fsio.ensure_dir(directory, durable=self.durable)
        path = directory / f"{consumer}.json"
        with fsio.scope_lock(directory), fsio.fenced_by(self._kv, fence, f"moving cursor {consumer!r} of {scope}"):
            if expected is not _UNSET:
                data = fsio.read_json(path)
                actual = None if data is None else int(data["position"])
                if actual != expected:
                    raise ConcurrentChange(
                        f"cursor {consumer!r} of {scope} is at {actual}, not {expected}; re-read and retry"
                    )
            record = {"consumer": consumer, "position": position, "updated_at": utcnow().isoformat()}
            fsio.atomic_write(path, fsio.dump_json(record), durable=self.durable)

    @fsio.storage_errors
    def list(self, scope: Scope) -> dict[str, int]:
        directory = self._dir(scope)
        if not directory.is_dir():
            return {}
        out = {}
        for name in sorted(os.listdir(directory)):
            consumer = name.removesuffix(".json")
            if name.endswith(".json") and _is_key(consumer):
                data = fsio.read_json(directory / name)
                if data is not None:
                    out[consumer] = int(data["position"])
        return out
