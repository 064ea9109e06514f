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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from memory.messages import utcnow
from memory.scopes import Scope
from memory.stores import fsio
from memory.stores.base import (
    ConcurrentChange,
    CursorStore,
    Fence,
    KVItem,
    KVStore,
    MemoryStoreBundle,
    StorageUnavailable,
    VersionConflict,
    validate_key,
)
from memory.stores.codec import (
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


def fenced_by(kv: FileKVStore | None, fence: Fence | None, what: str):
    """``kv.fenced(fence, what)``: for stores whose fenced writes check a lease in ``kv``."""
    if fence is None:
        return contextlib.nullcontext()
    if kv is None:
        raise ValueError(f"{what} is fenced, but this store has no KV store to check leases in (pass kv=)")
    return kv.fenced(fence, what)


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
        with fsio.scope_lock(directory), fenced_by(self._kv, fence, f"moving cursor {consumer!r} of {scope}"):
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
