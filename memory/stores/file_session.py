"""The file backend's MessageStore: segment files under one small head that commits every change.

Layout of ``<scope dir>/messages/``::

    head.0.json, head.1.json      the commit point: version, last_seq, live count and tokens, the
                                  open segment, the sealed index's name, the pruned-id files; two
                                  checksummed slots written in turn, the higher valid version wins
    seg-<version>-<n>.jsonl       messages as JSON lines (``Message.to_record()``, plus
                                  ``"deleted": true`` once soft-deleted), at most SEGMENT_LINES
    sealed-<version>.json         the full segments before the open one (first/last seq, counts)
    pruned-<version>.jsonl        ids of pruned messages (so a pruned id is never appended again)

A commit writes the head into the slot that does not hold the current version, in place, and
fdatasyncs it. A write torn by a crash fails the slot's checksum, and readers take the other
slot: the previous commit. (In-place slots instead of temp file + rename: the rename and the
directory fsync it needs cost more than the rest of an append on ext4.)

Appends go to the open segment at the byte length the head records, so bytes beyond it (a
crashed append) are ignored and cut off by the next append. Prune and soft-delete write changed
segments under new names, then the head, then delete what the old head named: a crash leaves
the old state or the new, never a hole. Reads need no lock: they follow one head, and retry if
a concurrent commit deleted a file that head named.

Appends cost O(batch): the open segment's tail and the head (the sealed index only when a
segment fills), two fdatasyncs. Reading the last N messages opens the head and the newest
segments holding N live messages; the sealed index only when the open segment is not enough.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from memory.messages import Message
from memory.scopes import Scope
from memory.stores import fsio
from memory.stores.base import (
    ConcurrentChange,
    DuplicateMessage,
    Fence,
    InvalidPrune,
    MessageStore,
    PruneResult,
    SessionHead,
    StorageUnavailable,
)
from memory.stores.codec import (
    DecodeMemo,
    check_batch,
    check_fence,
    check_ids,
    check_prune_arguments,
    check_scope,
    check_window,
)
from memory.stores.file_format import (
    HEAD_SLOTS,
    RECENT_SEALED,
    SEGMENT_LINES,
    Head,
    Segment,
    SessionIds,
    all_segments,
    collect_garbage,
    encode_line,
    load_head,
    load_sealed,
    parse_line,
    read_segment,
    record_line,
    scan_ids,
    sealed_body,
    segment_of,
    write_head,
    write_pruned_ids,
)
from memory.tokens import with_tokens

# The id cache is bounded by sessions and by ids (about 100 bytes each): pruned ids accumulate.
_ID_CACHE_SCOPES = 256
_ID_CACHE_IDS = 200_000
_READ_ATTEMPTS = 4
#: (seq, deleted, message) by the exact bytes of a session line, shared by the process's stores.
LINES = DecodeMemo(16384)
_TEMP = re.compile(r"\..*\.tmp")


class FileMessageStore(MessageStore):
    """Sessions of a DefaultScopedStorage; see the module docstring for the layout."""

    def __init__(self, root: Path, *, durable: bool = True, kv=None) -> None:
        self.root = root
        self.durable = durable
        self._ids_cache: OrderedDict[str, SessionIds] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._kv = kv  # the FileKVStore holding the leases that fence writes (the bundle passes it)

    def _fenced(self, fence: Fence | None, what: str):
        """Hold the fence's lease still (its KV directory lock) and check it, or raise FencedOut.

        Taken inside the session's own lock; the KV store never takes a session lock, so the
        order is always session then KV: no deadlock.
        """
        if self._kv is None:
            raise ValueError(f"{what} is fenced, but this store has no KV store to check leases in (pass kv=)")
        return self._kv.fenced(fence, what)

    def _dir(self, scope: Scope) -> Path:
        return fsio.scope_directory(self.root, check_scope(scope)) / "messages"

    # -- reads ---------------------------------------------------------------------------------

    @fsio.storage_errors
    def head(self, scope: Scope) -> SessionHead:
        head = load_head(self._dir(scope))
        if head is None:
            return SessionHead(scope, 0, 0, 0, 0)
        return SessionHead(scope, head.version, head.last_seq, head.count, head.tokens)

    @fsio.storage_errors
    def read(self, scope: Scope, *, after_seq: int | None = None, last: int | None = None,
             include_deleted: bool = False) -> list[Message]:
        check_window(after_seq, last)
        directory = self._dir(scope)
        if last == 0:
            return []
        for _ in range(_READ_ATTEMPTS):
            head = load_head(directory)
            if head is None:
                return []
            try:
                return self._read_window(directory, head, after_seq, last, include_deleted)
            except FileNotFoundError:
                continue  # a commit replaced the files this head named: follow the new head
        with fsio.scope_lock(directory):
            head = load_head(directory)
            return [] if head is None else self._read_window(directory, head, after_seq, last, include_deleted)

    def _read_window(self, directory: Path, head: Head, after_seq: int | None, last: int | None,
                     include_deleted: bool) -> list[Message]:
        chosen: list[Segment] = []
        need = last
        for segment in self._newest_first(directory, head):
            if after_seq is not None and segment.last_seq <= after_seq:
                break
            chosen.append(segment)
            if need is not None and (after_seq is None or segment.first_seq > after_seq):
                need -= segment.lines if include_deleted else segment.live
                if need <= 0:
                    break
        picked: list[Message] = []
        for segment in chosen:
            for raw in reversed(read_segment(directory, segment)):
                # (seq, deleted, message) per line, decoded once per distinct line (codec.DecodeMemo).
                decoded = LINES.get(raw)
                if decoded is None:
                    line = parse_line(raw)
                    decoded = (line.seq, line.deleted, line.message())
                    LINES.put(raw, decoded)
                seq, deleted, message = decoded
                if after_seq is not None and seq <= after_seq:
                    break
                if include_deleted or not deleted:
                    picked.append(message)
                    if last is not None and len(picked) >= last:
                        break
            if last is not None and len(picked) >= last:
                break
        picked.reverse()
        return picked

    def _newest_first(self, directory: Path, head: Head) -> Iterator[Segment]:
        if head.open:
            yield head.open
        yield from reversed(head.recent)
        if head.sealed_segments > len(head.recent):  # the index is read only for long windows
            yield from reversed(load_sealed(directory, head)[: -len(head.recent) or None])

    # -- writes --------------------------------------------------------------------------------

    @fsio.storage_errors
    def append(self, scope: Scope, messages: Sequence[Message], *, fence: Fence | None = None) -> list[Message]:
        batch = check_batch(messages)
        fence = check_fence(fence)
        directory = self._dir(scope)
        if not batch:
            return []
        counted = [with_tokens(m) for m in batch]  # before the lock: counting can be slow
        fsio.ensure_dir(directory, durable=self.durable)
        with fsio.scope_lock(directory), self._fenced(fence, f"an append to {scope}"):
            head = load_head(directory) or self._new_head(directory, scope)
            ids = self._ids(directory, head)
            used = [m.id for m in counted if ids.used(m.id)]
            if used:
                raise DuplicateMessage(f"message id(s) {', '.join(map(repr, used[:5]))} already exist in {scope}")
            stored = [replace(m, seq=head.last_seq + i) for i, m in enumerate(counted, 1)]
            version = head.version + 1
            obsolete = self._write_appended(directory, head, stored, version)
            head.version, head.last_seq = version, stored[-1].seq
            self._commit(directory, scope, head, obsolete=obsolete)
            ids.seqs.update((m.id, m.seq) for m in stored)
            self._remember(directory, ids, head)
        return stored

    def _write_appended(self, directory: Path, head: Head, stored: list[Message], version: int) -> list[str]:
        """Write the batch into the open segment and new ones; return files the commit obsoletes."""
        pending = [(m, encode_line(m)) for m in stored]
        newly_sealed: list[Segment] = []
        created = 0
        current = head.open
        while pending:
            if current is None or current.lines >= SEGMENT_LINES:
                if current is not None:
                    newly_sealed.append(current)
                current = Segment(f"seg-{version:010d}-{created:03d}.jsonl", pending[0][0].seq, 0, 0, 0, 0, 0)
                created += 1
            room = SEGMENT_LINES - current.lines
            chunk, pending = pending[:room], pending[room:]
            data = b"".join(raw for _, raw in chunk)
            self._append_bytes(directory / current.file, current.bytes, data)
            current.last_seq = chunk[-1][0].seq
            current.lines += len(chunk)
            current.bytes += len(data)
            current.live += len(chunk)
            current.tokens += sum(m.tokens or 0 for m, _ in chunk)
        obsolete = []
        if newly_sealed:
            if head.sealed_file:
                obsolete.append(head.sealed_file)
            self._set_sealed(directory, head, load_sealed(directory, head) + newly_sealed, version)
        head.open = current
        if created and self.durable:
            fsio.fsync_dir(directory)  # new segment names must be durable before the head names them
        return obsolete

    def _append_bytes(self, path: Path, committed: int, data: bytes) -> None:
        flags = os.O_RDWR | (os.O_CREAT if committed == 0 else 0)
        fd = os.open(path, flags, fsio.FILE_MODE)
        try:
            os.ftruncate(fd, committed)  # drop what a crashed append left beyond the committed end
            os.lseek(fd, committed, os.SEEK_SET)
            fsio.write_all(fd, data)
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    @fsio.storage_errors
    def prune(self, scope: Scope, *, through_seq: int, summary: Message | None, expected_version: int,
              fence: Fence | None = None) -> PruneResult:
        check_prune_arguments(check_scope(scope), through_seq, summary, expected_version)
        fence = check_fence(fence)
        directory = self._dir(scope)
        if not _exists(directory):
            _check_version(scope, 0, expected_version)
            raise InvalidPrune(f"{scope} has no live message with seq {through_seq!r}")
        with fsio.scope_lock(directory), self._fenced(fence, f"a prune of {scope}"):
            head = load_head(directory)
            _check_version(scope, head.version if head else 0, expected_version)
            if head is None:
                raise InvalidPrune(f"{scope} has no live message with seq {through_seq}")
            return self._prune_locked(directory, scope, head, through_seq, summary)

    def _prune_locked(self, directory: Path, scope: Scope, head: Head, through_seq: int,
                      summary: Message | None) -> PruneResult:
        segments = all_segments(directory, head)
        index = next((i for i, s in enumerate(segments) if s.first_seq <= through_seq <= s.last_seq), None)
        if index is None:
            raise InvalidPrune(f"{scope} has no live message with seq {through_seq}")
        removed = [parse_line(raw) for segment in segments[: index + 1] for raw in read_segment(directory, segment)]
        kept = [line for line in removed if line.seq > through_seq]
        removed = [line for line in removed if line.seq <= through_seq]
        if not any(line.seq == through_seq and not line.deleted for line in removed):
            raise InvalidPrune(f"seq {through_seq} is not a live message of {scope} (deleted or already pruned)")
        ids = self._ids(directory, head)
        if summary is not None and ids.used(summary.id):
            raise InvalidPrune(f"the summary's id {summary.id!r} is already used in {scope}")
        evicted = tuple(line.message() for line in removed if not line.deleted)
        version = head.version + 1
        stored_summary = replace(with_tokens(summary), seq=through_seq) if summary is not None else None
        first_lines = ([parse_line(encode_line(stored_summary))] if stored_summary else []) + kept
        first = None
        if first_lines:
            first = segment_of(f"seg-{version:010d}-000.jsonl", first_lines)
            fsio.write_new(directory / first.file, b"".join(line.raw for line in first_lines), durable=self.durable)
        remaining = ([first] if first else []) + segments[index + 1:]
        if head.open is not None:  # the open segment stays last (it may be ``first`` or gone)
            head.open = remaining.pop() if remaining else None
        write_pruned_ids(directory, head, removed, version, durable=self.durable)
        self._set_sealed(directory, head, remaining, version)
        if self.durable:
            fsio.fsync_dir(directory)
        head.version = version
        self._commit(directory, scope, head, collect=True)
        for line in removed:
            ids.seqs.pop(line.id, None)
            ids.pruned.add(line.id)
        if stored_summary is not None:
            ids.seqs[stored_summary.id] = through_seq
        self._remember(directory, ids, head)
        result_head = SessionHead(scope, head.version, head.last_seq, head.count, head.tokens)
        return PruneResult(head=result_head, evicted=evicted, summary=stored_summary)

    @fsio.storage_errors
    def soft_delete(self, scope: Scope, ids: Sequence[str]) -> int:
        wanted = check_ids(ids)
        directory = self._dir(scope)
        if not wanted or not _exists(directory):
            return 0
        with fsio.scope_lock(directory):
            head = load_head(directory)
            if head is None:
                return 0
            known = self._ids(directory, head)
            targets = {known.seqs[i] for i in wanted if i in known.seqs}
            segments = all_segments(directory, head) if targets else []
            version = head.version + 1
            changed = 0
            sealed_changed = False
            for position, segment in enumerate(segments):
                if not any(segment.first_seq <= seq <= segment.last_seq for seq in targets):
                    continue
                lines = [parse_line(raw) for raw in read_segment(directory, segment)]
                hits = 0
                for line in lines:
                    if line.seq in targets and not line.deleted:
                        line.deleted, hits = True, hits + 1
                        line.raw = record_line({**line.record, "deleted": True})
                if hits:
                    changed += hits
                    sealed_changed |= head.open is None or position < len(segments) - 1
                    segments[position] = segment_of(f"seg-{version:010d}-{position:03d}.jsonl", lines)
                    fsio.write_new(directory / segments[position].file, b"".join(line.raw for line in lines),
                                   durable=self.durable)
            if not changed:
                return 0
            if head.open is not None:
                head.open = segments.pop()
            if sealed_changed:
                self._set_sealed(directory, head, segments, version)
            if self.durable:
                fsio.fsync_dir(directory)
            head.version = version
            self._commit(directory, scope, head, collect=True)
            known.version = version
            self._remember(directory, known, head)
            return changed

    @fsio.storage_errors
    def clear(self, scope: Scope) -> None:
        directory = self._dir(scope)
        if not _exists(directory):
            return
        with fsio.scope_lock(directory):
            head = load_head(directory)
            if head is None or head.is_empty():
                return
            # The head stays (empty): version and last_seq keep counting, so a caller holding
            # a version from before the clear can never prune the new session by mistake.
            cleared = Head(generation=head.generation, version=head.version + 1, last_seq=head.last_seq)
            self._commit(directory, scope, cleared, collect=True)
            with self._cache_lock:
                self._ids_cache.pop(str(directory), None)

    # -- head, index and files -----------------------------------------------------------------

    def _new_head(self, directory: Path, scope: Scope) -> Head:
        """Commit an empty head before any segment exists.

        So segment files without a head never come from an interrupted write: they mean the
        head was lost, and we refuse to touch them rather than overwrite someone's history.
        """
        names = [name for name in os.listdir(directory) if name not in (fsio.LOCK_NAME, *HEAD_SLOTS)]
        data = [name for name in names if not _TEMP.fullmatch(name)]
        if data:
            raise StorageUnavailable(
                f"{directory} holds session files ({', '.join(sorted(data)[:3])}) but no head; "
                "restore the head.*.json files or move the directory aside"
            )
        for name in names:
            fsio.unlink_quietly(directory / name)
        head = Head(generation=secrets.token_hex(8))
        self._commit(directory, scope, head)
        return head

    def _set_sealed(self, directory: Path, head: Head, sealed: list[Segment], version: int) -> None:
        if sealed:
            name = f"sealed-{version:010d}.json"
            fsio.write_new(directory / name, sealed_body(sealed), durable=self.durable)
        head.sealed_file = name if sealed else None
        head.recent = sealed[-RECENT_SEALED:]
        head.sealed_segments = len(sealed)
        head.sealed_live = sum(s.live for s in sealed)
        head.sealed_tokens = sum(s.tokens for s in sealed)

    def _commit(self, directory: Path, scope: Scope, head: Head, *, obsolete: Sequence[str] = (),
                collect: bool = False) -> None:
        """Write the head (the commit point), then delete what the old head named."""
        write_head(directory, head, scope, durable=self.durable)
        if collect:
            collect_garbage(directory, head)
        for name in obsolete:
            fsio.unlink_quietly(directory / name)

    # -- the id cache --------------------------------------------------------------------------

    def _ids(self, directory: Path, head: Head) -> SessionIds:
        """Every id of the session; cached per process, valid while the head's version holds.

        Called with the scope lock held. A process that did not make the last change (another
        process did) rebuilds it once by reading the session.
        """
        key = str(directory)
        with self._cache_lock:
            cached = self._ids_cache.get(key)
            if cached is not None and (cached.generation, cached.version) == (head.generation, head.version):
                self._ids_cache.move_to_end(key)
                return cached
        ids = scan_ids(directory, head)
        self._remember(directory, ids, head)
        return ids

    def _remember(self, directory: Path, ids: SessionIds, head: Head) -> None:
        ids.version = head.version
        with self._cache_lock:
            self._ids_cache[str(directory)] = ids
            self._ids_cache.move_to_end(str(directory))
            held = sum(entry.size() for entry in self._ids_cache.values())
            while len(self._ids_cache) > 1 and (len(self._ids_cache) > _ID_CACHE_SCOPES or held > _ID_CACHE_IDS):
                held -= self._ids_cache.popitem(last=False)[1].size()


def _exists(directory: Path) -> bool:
    return any((directory / name).exists() for name in HEAD_SLOTS)


def _check_version(scope: Scope, current: int, expected: int) -> None:
    if current != expected:
        raise ConcurrentChange(
            f"{scope} changed since it was read (version {current}, expected {expected}); re-read and retry"
        )
