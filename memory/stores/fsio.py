"""Crash-safe file primitives for the file backend: atomic replace, durable directories, locks.

Everything here is about one promise: after a crash, a file is either its old bytes or its new
bytes, and a directory entry that was reported written survives. ``atomic_write`` writes a
temporary file in the same directory, fsyncs it, ``os.replace``-s it over the target (atomic on
POSIX) and fsyncs the directory so the rename itself is durable.

``scope_lock`` serialises writers of one directory: a ``threading.Lock`` per path for the
threads of this process, plus ``fcntl.flock`` on a ``.lock`` file for other processes on the
same machine (flock is not reliable over NFS; the file backend is a single-machine backend).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import secrets
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from memory.scopes import Scope
from memory.stores.base import StorageUnavailable

# Memory holds people's conversations: private to the account that runs Modex.
FILE_MODE = 0o600
DIR_MODE = 0o700
LOCK_NAME = ".lock"
TMP_SUFFIX = ".tmp"

T = TypeVar("T")


def storage_errors(func: Callable[..., T]) -> Callable[..., T]:
    """Turn OS errors (disk full, permissions, vanished mounts) into StorageUnavailable."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return func(*args, **kwargs)
        except OSError as exc:
            raise StorageUnavailable(f"file storage failed: {exc}") from exc

    return wrapper


@functools.lru_cache(maxsize=4096)
def scope_directory(root: Path, scope: Scope) -> Path:
    """``scope.directory(root)``, remembered: resolving costs a few syscalls per path component.

    Stale only if someone swaps a directory of the root for a symlink while Modex runs, which
    needs write access to the root, and therefore to all its data, anyway.
    """
    return scope.directory(root)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def temp_name(name: str) -> str:
    # Leading dot: never a legal KV key or archive name, so listings skip in-flight files.
    return f".{name}.{secrets.token_hex(4)}{TMP_SUFFIX}"


def atomic_write(path: Path, data: bytes, *, durable: bool = True, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old bytes or the new, never a mix.

    ``sync_dir=False`` skips the directory fsync when the caller fsyncs it after a later step.
    """
    tmp = path.with_name(temp_name(path.name))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable and sync_dir:
        fsync_dir(path.parent)


def write_new(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write a file under a name nothing refers to yet (the caller commits it by reference)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path, *, durable: bool = True) -> None:
    """Create ``path`` and missing parents, fsyncing each parent so the new entries survive."""
    if path.is_dir():
        return
    missing: list[Path] = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue
        if durable:
            fsync_dir(directory.parent)


def read_json(path: Path) -> Any | None:
    """The decoded JSON file, or None if it does not exist."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise StorageUnavailable(f"{path} is not valid JSON ({exc}); restore it or move it aside") from None


def dump_json(data: Any, *, indent: int | None = 2) -> bytes:
    """Readable, deterministic JSON (lone surrogates pass through, so any str round-trips)."""
    text = json.dumps(data, ensure_ascii=False, indent=indent, sort_keys=indent is not None)
    return text.encode("utf-8", "surrogatepass") + (b"\n" if indent is not None else b"")


def unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# -- locks ------------------------------------------------------------------------------------


class _ThreadLock:
    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


# Weak values: a directory's lock lives while some thread holds or waits for it, so the registry
# does not grow with every session ever touched.
_thread_locks: weakref.WeakValueDictionary[str, _ThreadLock] = weakref.WeakValueDictionary()
_registry_lock = threading.Lock()


def _thread_lock(directory: Path) -> _ThreadLock:
    key = str(directory)
    with _registry_lock:
        lock = _thread_locks.get(key)
        if lock is None:
            lock = _ThreadLock()
            _thread_locks[key] = lock
        return lock


@contextmanager
def scope_lock(directory: Path) -> Iterator[None]:
    """Exclusive lock on ``directory`` (which must exist) across threads and processes.

    Not reentrant. The lock file is never deleted: deleting it would let a waiter lock a stale
    inode while a newcomer locks a fresh one, and both would believe they are alone.
    """
    holder = _thread_lock(directory)
    with holder.lock:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock


def fenced_by(kv, fence, what: str):
    """``kv.fenced(fence, what)`` (``kv`` a FileKVStore): for the file stores whose fenced writes
    check a lease kept in the KV store."""
    if fence is None:
        return contextlib.nullcontext()
    if kv is None:
        raise ValueError(f"{what} is fenced, but this store has no KV store to check leases in (pass kv=)")
    return kv.fenced(fence, what)
