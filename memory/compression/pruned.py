"""The pruned catalog: a grep-able, immutable markdown record of every message cleanup removed.

Layout: ``<root>/<session_id>/NNNNNN-seqFFFFFFFFF-LLLLLLLLL.md``, one file per cleanup (NNNNNN
numbers the files in write order; F and L are the first and last seq in it). A file is written
once, atomically (temp file, fsync, a hard link to its final name, which never replaces an
existing file, directory fsync), and never rewritten.

A file is a three-line header, a blank line, then one block per message::

    # Pruned catalog · session abc
    Cleanup 1 at 2026-12-02T10:00:00+00:00 · seq 1–240
    240 messages · table of contents: grep -n "^## \\[" pruned/abc/*.md

    ## [12] assistant · 2026-12-02T10:00:00+00:00 · calls: search, fetch
    <!-- modex {"id":"…","seq":12,"role":"assistant","kind":"message",…} -->

    Reasoning:

        the reasoning, every line indented by four spaces

    Content:

        the content, every line indented by four spaces

    ---

So ``grep -n "^## \\[" pruned/<session_id>/*.md`` prints a line-numbered table of contents of
exactly what was taken out. Message text can never break it: every content line is indented
(no content line can be ``---`` or start with ``## [``), and a field holding characters that
would confuse line tools (NUL and other controls, CR, Unicode line separators, lone
surrogates) is written escaped (``\\uXXXX``, backslash doubled) and flagged in the metadata.
The metadata comment holds the rest of the message as JSON, so a block parses back to the
exact ``Message``. ``Reasoning:``/``Content:`` sections are present exactly when the field is
not None.

Commit rule: cleanup writes the catalog before it commits the prune, so after a crash between
the two the catalog may hold blocks for messages still live in the session. Those are not yet
committed: readers pass ``before_seq=first_uncommitted_seq(live)`` to ``entries`` to leave
them out, and the next write skips them (writes are idempotent per message id), so each
message is counted exactly once. Reading what is catalogued and creating the new file are one
step under the session directory's lock, and a cleanup makes that step under its lease's fence
(``write(guard=...)``): a cleanup that stalled past its lease while another took over finds
the fence refusing, and two writers can never both write a message.
"""
from __future__ import annotations

import bisect
import contextlib
import errno
import os
import re
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from memory.compression.pruned_format import (
    CatalogConflict,
    CatalogUnavailable,
    CorruptCatalog,
    PrunedCatalogError,
    PrunedEntry,
    parse_file,
    render_file,
)
from memory.messages import Message, utcnow
from memory.stores import fsio
from memory.stores.fsio import DIR_MODE as CATALOG_DIR_MODE
from memory.stores.fsio import FILE_MODE as CATALOG_FILE_MODE
from memory.scopes import SessionScope

_NAME_RE = re.compile(r"^(\d{6,})-seq(\d{9,})-(\d{9,})\.md$")
_TEMP_MAX_AGE = 600.0  # seconds: older temp files are leftovers of a crashed write
_MERGED_SESSIONS = 64  # sessions whose merged entry list is kept
_CREATE_ATTEMPTS = 3
# os.link fails with these where the file system has no hard links (some FUSE and SMB mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV})


def first_uncommitted_seq(live: Sequence[Message]) -> int | None:
    """The seq from which catalog entries are not yet committed: the first live message that
    is not a compact summary (None when there is none, i.e. every entry is committed)."""
    for message in live:
        if not message.is_compact_summary:
            return message.seq
    return None


# -- the catalog ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FileInfo:
    number: int
    first: int
    last: int
    path: Path


class PrunedCatalog:
    """The pruned catalogs of every session under ``root`` (``<workspace>/pruned``).

    Thread-safe. Parsed files are cached by (path, mtime, size), so repeated reads cost a
    ``stat`` per file; the cache is a bounded LRU (``max_cached_entries`` messages in all), so
    a long-running process reading many sessions does not grow without bound. Writes to one
    session are serialised by a lock on its directory (threads and processes of one host; across
    hosts, the cleanup lease's fence passed as ``guard`` orders them); reads may run at any time
    and see whole files only.
    """

    def __init__(self, root: Path, *, max_cached_entries: int = 200_000) -> None:
        self.root = Path(root)
        self.max_cached_entries = max_cached_entries
        self._files: OrderedDict[Path, tuple[tuple[int, int], list[PrunedEntry]]] = OrderedDict()
        self._cached = 0  # entries held by _files
        # Per session directory: the files' signatures and their merged, seq-sorted entries.
        self._merged: OrderedDict[Path, tuple[tuple[object, ...], list[PrunedEntry], list[int]]] = OrderedDict()
        self._lock = threading.Lock()

    def directory(self, session: SessionScope) -> Path:
        """``<root>/<session id>``; the id is a validated scope id, so it is a safe name."""
        return self.root / session.id

    # -- reading ----------------------------------------------------------------------------

    def _index(self, session: SessionScope) -> list[_FileInfo]:
        directory = self.directory(session)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        except NotADirectoryError as exc:
            raise CatalogUnavailable(f"cannot use the pruned catalog at {directory}: a file is in the way") from exc
        except OSError as exc:
            raise CatalogUnavailable(f"cannot read the pruned catalog at {directory}: {exc}") from exc
        infos = []
        for name in names:
            match = _NAME_RE.match(name)
            if match:
                infos.append(_FileInfo(int(match[1]), int(match[2]), int(match[3]), directory / name))
        infos.sort(key=lambda info: info.number)
        return infos

    @staticmethod
    def _signature(path: Path) -> tuple[int, int]:
        try:
            stat = path.stat()
        except OSError as exc:
            raise CatalogUnavailable(f"cannot read {path}: {exc}") from exc
        return (stat.st_mtime_ns, stat.st_size)

    def _parsed(self, path: Path, signature: tuple[int, int] | None = None) -> list[PrunedEntry]:
        signature = signature or self._signature(path)
        with self._lock:
            cached = self._files.get(path)
            if cached is not None and cached[0] == signature:
                self._files.move_to_end(path)
                return cached[1]
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCatalog(f"{path}: not UTF-8 ({exc})") from None
        except OSError as exc:
            raise CatalogUnavailable(f"cannot read {path}: {exc}") from exc
        entries = parse_file(text, path=path)
        with self._lock:
            old = self._files.pop(path, None)
            self._cached -= len(old[1]) if old else 0
            self._files[path] = (signature, entries)
            self._cached += len(entries)
            while self._cached > self.max_cached_entries and len(self._files) > 1:
                _, (_, dropped) = self._files.popitem(last=False)
                self._cached -= len(dropped)
        return entries

    def _sorted(self, session: SessionScope) -> tuple[list[PrunedEntry], list[int]]:
        """All entries of the session sorted by seq, and their seqs (for bisect), cached."""
        infos = self._index(session)
        signatures = [self._signature(info.path) for info in infos]
        key = tuple(zip((info.path for info in infos), signatures, strict=True))
        directory = self.directory(session)
        with self._lock:
            cached = self._merged.get(directory)
            if cached is not None and cached[0] == key:
                self._merged.move_to_end(directory)
                return cached[1], cached[2]
        entries = [entry for info, sig in zip(infos, signatures, strict=True) for entry in self._parsed(info.path, sig)]
        entries.sort(key=lambda entry: entry.seq)
        seqs = [entry.seq for entry in entries]
        with self._lock:
            self._merged[directory] = (key, entries, seqs)
            while len(self._merged) > _MERGED_SESSIONS:
                self._merged.popitem(last=False)
        return entries, seqs

    def files(self, session: SessionScope) -> list[Path]:
        """The session's catalog files in write order (also seq order)."""
        return [info.path for info in self._index(session)]

    def entries(self, session: SessionScope, *, before_seq: int | None = None) -> list[PrunedEntry]:
        """Every catalogued message of the session in seq order.

        ``before_seq`` keeps only entries with a smaller seq: pass
        ``first_uncommitted_seq(live messages)`` to leave out blocks of an uncommitted cleanup.
        """
        entries, seqs = self._sorted(session)
        end = len(entries) if before_seq is None else bisect.bisect_left(seqs, before_seq)
        return entries[:end]

    def lookup(self, session: SessionScope, seq: int) -> Message | None:
        """The catalogued message with ``seq``, reading only the files whose range covers it."""
        for info in self._index(session):
            if info.first <= seq <= info.last:
                for entry in self._parsed(info.path):
                    if entry.seq == seq:
                        return entry.message
        return None

    def count(self, session: SessionScope) -> int:
        """How many messages the session's catalog holds."""
        return len(self._sorted(session)[0])

    # -- writing ----------------------------------------------------------------------------

    def write(
        self,
        session: SessionScope,
        messages: Sequence[Message],
        *,
        cleanup_at: datetime | None = None,
        guard: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> Path | None:
        """Write the messages not yet catalogued as one new file; return it (None: nothing new).

        Idempotent per message: a message whose seq is already catalogued with the same id is
        skipped, so a retried cleanup never duplicates a block. What is catalogued is read and
        the new file created in one step under the session directory's lock, the file by an
        atomic create (a name that exists is never replaced), so two writers of the same
        messages, even at once, write them once. ``guard`` (the cleanup's lease fence) is
        entered inside that step, around the check and the create: a writer whose lease has
        passed to another holder writes nothing (the guard raises). Compact summaries are never
        catalogued (their seq is the last evicted message's, and they live on in the next
        summary). Raises CatalogConflict if a seq is catalogued under another id, and
        CatalogUnavailable when the directory cannot be written; on any error no file appears.
        """
        todo = sorted((m for m in messages if not m.is_compact_summary), key=lambda m: _seq_of(m))
        if len({m.seq for m in todo}) != len(todo):
            raise ValueError("write() got two messages with the same seq")
        if not todo:
            return None
        directory = self.directory(session)
        cleanup_at = cleanup_at or utcnow()
        with _catalog_errors(directory):
            # Private to the service's user, like the file store: a catalog holds whole messages.
            directory.parent.mkdir(mode=CATALOG_DIR_MODE, parents=True, exist_ok=True)
            directory.mkdir(mode=CATALOG_DIR_MODE, exist_ok=True)
        # What the guard raises (FencedOut, the lease store's own errors) passes through as it is.
        with _locked(directory), (guard() if guard is not None else contextlib.nullcontext()):
            with _catalog_errors(directory):
                for _ in range(_CREATE_ATTEMPTS):
                    infos = self._index(session)
                    fresh = self._not_catalogued(todo, infos)
                    if not fresh:
                        return None
                    self._sweep_temps(directory)
                    number = max((info.number for info in infos), default=0) + 1
                    name = f"{number:06d}-seq{fresh[0].seq:09d}-{fresh[-1].seq:09d}.md"
                    data = render_file(session=session, number=number, messages=fresh, cleanup_at=cleanup_at)
                    created = _create_atomically(directory, name, data.encode("utf-8"))
                    if created is not None:
                        return created
                    # Another writer created that name meanwhile (one that does not share this
                    # host's lock, e.g. on shared storage): read what it wrote and go again.
                raise CatalogUnavailable(f"cannot write the pruned catalog at {directory}: it kept changing")

    def _not_catalogued(self, todo: list[Message], infos: list[_FileInfo]) -> list[Message]:
        # Only files whose seq range covers a candidate are parsed: a write costs what it
        # writes (plus a directory listing), not the whole history.
        if not infos:
            return todo
        fresh = []
        known: dict[int, str] = {}
        parsed: set[Path] = set()
        newest = max(info.last for info in infos)
        for message in todo:
            if message.seq > newest:
                fresh.append(message)
                continue
            covering = [info for info in infos if info.first <= message.seq <= info.last]
            for info in covering:
                if info.path not in parsed:
                    parsed.add(info.path)
                    known.update((entry.seq, entry.message.id) for entry in self._parsed(info.path))
            existing = known.get(message.seq)
            if existing is None:
                fresh.append(message)
            elif existing != message.id:
                raise CatalogConflict(
                    f"seq {message.seq} is already in the pruned catalog as message {existing}, not {message.id}; "
                    "was the session cleared without deleting its catalog?"
                )
        return fresh

    @staticmethod
    def _sweep_temps(directory: Path) -> None:
        now = time.time()
        for entry in os.scandir(directory):
            if entry.name.startswith(".") and ".tmp-" in entry.name:
                try:
                    if now - entry.stat().st_mtime > _TEMP_MAX_AGE:
                        os.unlink(entry.path)
                except OSError:
                    pass  # a leftover we cannot remove harms nobody: names starting with '.' are ignored

    def delete_session(self, session: SessionScope) -> None:
        """Remove the session's whole catalog (when its conversation is deleted). Idempotent."""
        directory = self.directory(session)
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise CatalogUnavailable(f"cannot delete the pruned catalog at {directory}: {exc}") from exc
        with self._lock:
            for path in [p for p in self._files if p.parent == directory]:
                self._cached -= len(self._files.pop(path)[1])
            self._merged.pop(directory, None)


@contextlib.contextmanager
def _catalog_errors(directory: Path) -> Iterator[None]:
    """OS errors of the catalog's own files as CatalogUnavailable, naming the directory."""
    try:
        yield
    except (FileExistsError, NotADirectoryError) as exc:
        raise CatalogUnavailable(f"cannot create the pruned catalog at {directory}: a file is in the way") from exc
    except OSError as exc:
        raise CatalogUnavailable(f"cannot write the pruned catalog at {directory}: {exc.strerror or exc}") from exc


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """The session directory's lock (memory.stores.fsio.scope_lock); failing to take it is a
    CatalogUnavailable, what happens while it is held is the caller's."""
    lock = fsio.scope_lock(directory)
    with _catalog_errors(directory):
        lock.__enter__()
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def _seq_of(message: Message) -> int:
    if message.seq is None:
        raise ValueError("only stored messages (with a seq) can be catalogued")
    return message.seq


def _create_atomically(directory: Path, name: str, data: bytes) -> Path | None:
    """Create ``directory/name`` holding ``data``, whole or not at all; None if the name exists.

    The bytes go to a temporary file first (fsynced), which is then hard-linked to the final
    name: a link never replaces an existing file, so the name is created once. On a file
    system without hard links the temporary file is renamed instead, after checking the name
    is free (the session directory's lock keeps that check and the rename together).
    """
    temp = directory / f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    final = directory / name
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, CATALOG_FILE_MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, final)
        except FileExistsError:
            return None
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            if final.exists():
                return None
            os.replace(temp, final)
    finally:
        try:
            os.unlink(temp)
        except OSError:
            pass
    _fsync_directory(directory)
    return final


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not supported on this platform; the rename itself is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = [
    "CatalogConflict",
    "CatalogUnavailable",
    "CorruptCatalog",
    "PrunedCatalog",
    "PrunedCatalogError",
    "PrunedEntry",
    "first_uncommitted_seq",
]
