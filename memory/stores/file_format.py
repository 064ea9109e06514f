"""The on-disk format of file-backed sessions: the head, segment records, message lines.

Pure data and small readers; memory/stores/file_session.py decides when to write what. See
that module's docstring for the layout and the commit protocol.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from memory.messages import Message, utcnow
from memory.scopes import Scope
from memory.stores import fsio
from memory.stores.base import StorageUnavailable
from memory.stores.codec import dumps

SEGMENT_LINES = 256
#: The head is written in place, alternating between two slots: a torn write fails its
#: checksum and readers use the other slot, which holds the previous commit.
HEAD_SLOTS = ("head.0.json", "head.1.json")
FORMAT = 1
#: Sealed segments the head itself describes, so tails just past the open segment skip the index.
RECENT_SEALED = 2
#: More pruned-id files than this are merged into one at the next prune.
MAX_PRUNED_FILES = 16


@dataclass(slots=True)
class Segment:
    file: str
    first_seq: int
    last_seq: int
    lines: int
    bytes: int
    live: int
    tokens: int  # of the live lines

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Segment:
        return cls(data["file"], *(int(data[f.name]) for f in fields(cls)[1:]))


@dataclass(slots=True)
class Head:
    generation: str  # new whenever a head is created, so caches never confuse two sessions
    version: int = 0
    last_seq: int = 0
    sealed_file: str | None = None
    sealed_segments: int = 0
    sealed_live: int = 0
    sealed_tokens: int = 0
    recent: list[Segment] = field(default_factory=list)  # the last RECENT_SEALED sealed segments
    open: Segment | None = None
    pruned_files: list[str] = field(default_factory=list)
    pruned_ids: int = 0

    @property
    def count(self) -> int:
        return self.sealed_live + (self.open.live if self.open else 0)

    @property
    def tokens(self) -> int:
        return self.sealed_tokens + (self.open.tokens if self.open else 0)

    def is_empty(self) -> bool:
        return self.open is None and self.sealed_file is None and not self.pruned_files

    def to_json(self, scope: Scope) -> dict[str, Any]:
        sealed = None
        if self.sealed_file:
            sealed = {"file": self.sealed_file, "segments": self.sealed_segments, "live": self.sealed_live,
                      "tokens": self.sealed_tokens, "recent": [s.to_json() for s in self.recent]}
        return {
            "format": FORMAT, "scope": scope.key(), "generation": self.generation, "version": self.version,
            "last_seq": self.last_seq, "count": self.count, "tokens": self.tokens, "sealed": sealed,
            "open": self.open.to_json() if self.open else None,
            "pruned": {"files": self.pruned_files, "ids": self.pruned_ids}, "updated_at": utcnow().isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path) -> Head:
        if data.get("format") != FORMAT:
            raise StorageUnavailable(f"{path} has format {data.get('format')!r}; this Modex reads format {FORMAT}")
        sealed = data.get("sealed") or {}
        pruned = data.get("pruned") or {}
        return cls(
            generation=data["generation"], version=int(data["version"]), last_seq=int(data["last_seq"]),
            sealed_file=sealed.get("file"), sealed_segments=int(sealed.get("segments", 0)),
            sealed_live=int(sealed.get("live", 0)), sealed_tokens=int(sealed.get("tokens", 0)),
            recent=[Segment.from_json(item) for item in sealed.get("recent", [])],
            open=Segment.from_json(data["open"]) if data.get("open") else None,
            pruned_files=list(pruned.get("files", [])), pruned_ids=int(pruned.get("ids", 0)),
        )


@dataclass(slots=True)
class Line:
    seq: int
    id: str
    deleted: bool
    tokens: int
    record: dict[str, Any]
    raw: bytes

    def message(self) -> Message:
        return Message.from_stored(self.record)


@dataclass(slots=True)
class SessionIds:
    """Every id used in one session (live and deleted ones with their seq, pruned ones)."""

    generation: str
    version: int
    seqs: dict[str, int]
    pruned: set[str]

    def used(self, message_id: str) -> bool:
        return message_id in self.seqs or message_id in self.pruned

    def size(self) -> int:
        return len(self.seqs) + len(self.pruned)


def encode_line(message: Message) -> bytes:
    return record_line(message.to_record())


def record_line(record: dict[str, Any]) -> bytes:
    """One JSON line; ``dumps`` escapes newlines and NUL, so a record never spans two lines."""
    return (dumps(record) + "\n").encode("utf-8")


def parse_line(raw: bytes) -> Line:
    try:
        record = json.loads(raw)
        deleted = bool(record.pop("deleted", False))
        return Line(record["seq"], record["id"], deleted, record.get("tokens") or 0, record, raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StorageUnavailable(f"a session line is not a message record ({exc}): {raw[:80]!r}") from None


def segment_of(name: str, lines: Sequence[Line]) -> Segment:
    live = [line for line in lines if not line.deleted]
    return Segment(name, lines[0].seq, lines[-1].seq, len(lines), sum(len(line.raw) for line in lines),
                   len(live), sum(line.tokens for line in live))


_DATA_FILE = re.compile(r"(seg|sealed|pruned)-.*")


def _checksum(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def head_bytes(head: Head, scope: Scope) -> bytes:
    body = head.to_json(scope)
    return fsio.dump_json({**body, "checksum": _checksum(body)})


def _read_slot(path: Path) -> Head | None:
    """The head in one slot, or None if the slot is missing, torn or damaged."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
        checksum = data.pop("checksum")
        if checksum != _checksum(data):
            return None
        return Head.from_json(data, path)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def load_head(directory: Path) -> Head | None:
    """The newest valid head slot; None for a session that never committed anything."""
    heads = [head for head in (_read_slot(directory / name) for name in HEAD_SLOTS) if head is not None]
    if heads:
        return max(heads, key=lambda head: head.version)
    if not any((directory / name).exists() for name in HEAD_SLOTS):
        return None
    try:
        data_files = [name for name in os.listdir(directory) if _DATA_FILE.fullmatch(name)]
    except FileNotFoundError:
        return None
    if data_files:
        raise StorageUnavailable(
            f"both head slots in {directory} are damaged; the session files are untouched, restore a head from a backup"
        )
    return None  # the very first commit was interrupted: nothing was ever stored


def write_head(directory: Path, head: Head, scope: Scope, *, durable: bool) -> None:
    """Commit ``head``: overwrite the slot that does not hold the current version, then sync it."""
    path = directory / HEAD_SLOTS[head.version % 2]
    data = head_bytes(head, scope)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, fsio.FILE_MODE)
    try:
        fsio.write_all(fd, data)
        os.ftruncate(fd, len(data))
        if durable:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    if created and durable:
        fsio.fsync_dir(directory)


def load_sealed(directory: Path, head: Head) -> list[Segment]:
    """The sealed segments the head names; FileNotFoundError if a later commit removed them."""
    if not head.sealed_file:
        return []
    path = directory / head.sealed_file
    data = fsio.read_json(path)
    if data is None:
        raise FileNotFoundError(path)
    try:
        return [Segment.from_json(item) for item in data["segments"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageUnavailable(f"{path} is not a segment index ({exc!r})") from None


def sealed_body(sealed: Sequence[Segment]) -> bytes:
    return fsio.dump_json({"format": FORMAT, "segments": [s.to_json() for s in sealed]}, indent=1)


def read_lines(path: Path, size: int | None = None) -> list[bytes]:
    """The first ``size`` bytes of ``path`` (all if None) as lines, each ending in a newline."""
    with open(path, "rb") as handle:
        data = handle.read() if size is None else handle.read(size)
    if size is not None and len(data) != size:
        raise StorageUnavailable(f"{path} is shorter ({len(data)} bytes) than committed ({size})")
    return [line + b"\n" for line in data.split(b"\n")[:-1]]


def read_segment(directory: Path, segment: Segment) -> list[bytes]:
    lines = read_lines(directory / segment.file, segment.bytes)
    if len(lines) != segment.lines:
        raise StorageUnavailable(f"{directory / segment.file} holds {len(lines)} lines, the head says {segment.lines}")
    return lines


def all_segments(directory: Path, head: Head) -> list[Segment]:
    return load_sealed(directory, head) + ([head.open] if head.open else [])


def scan_ids(directory: Path, head: Head) -> SessionIds:
    """Every id the session has used, read from its files (the cold path of the id cache)."""
    seqs: dict[str, int] = {}
    for segment in all_segments(directory, head):
        for raw in read_segment(directory, segment):
            line = parse_line(raw)
            seqs[line.id] = line.seq
    pruned = {json.loads(raw)["id"] for name in head.pruned_files for raw in read_lines(directory / name)}
    return SessionIds(head.generation, head.version, seqs, pruned)


def write_pruned_ids(directory: Path, head: Head, removed: Sequence[Line], version: int, *, durable: bool) -> None:
    """Record the ids of ``removed`` in a new pruned-id file and name it in ``head`` (not committed)."""
    lines = [dumps({"id": line.id, "seq": line.seq}) + "\n" for line in removed]
    files = list(head.pruned_files)
    if len(files) >= MAX_PRUNED_FILES:  # merge, so a cold id scan opens few files
        merged = [raw.decode("utf-8") for name in files for raw in read_lines(directory / name)]
        lines, files = merged + lines, []
    name = f"pruned-{version:010d}.jsonl"
    fsio.write_new(directory / name, "".join(lines).encode("utf-8"), durable=durable)
    head.pruned_files = [*files, name]
    head.pruned_ids += len(removed)


def collect_garbage(directory: Path, head: Head) -> None:
    """Delete what the committed ``head`` does not name. Call with the lock held (no writer mid-way)."""
    keep = {*HEAD_SLOTS, fsio.LOCK_NAME, *head.pruned_files}
    if head.sealed_file:
        keep.add(head.sealed_file)
        keep.update(s.file for s in load_sealed(directory, head))
    if head.open:
        keep.add(head.open.file)
    for name in os.listdir(directory):
        if name not in keep:
            fsio.unlink_quietly(directory / name)
