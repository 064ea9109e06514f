"""The file backend's ArchiveStore: one JSON file per document, searched with BM25.

Layout of ``<scope dir>/archive/``::

    head.json                 {"last_seq": N}: seqs are never reused, even after a delete
    <seq>-<id>.json           the document (the truth), seq zero-padded so names sort by seq
    <seq>-<id>.md             a rendering for people; rewritten from the JSON, never read
    <seq>-<id>.vec            the messages' vectors: a JSON header line {"model": ...}, then bytes

A document file is written once and never changed, so a parsed copy can be cached by name.
Search scans the scope's documents: archives grow by one document per cleanup, so a scope holds
hundreds, not millions; the SQL backend is the one to use for more.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path

from memory.scopes import Scope
from memory.stores import fsio, textsearch
from memory.stores.base import (
    ArchiveDocument,
    ArchiveHit,
    ArchiveState,
    ArchiveStore,
    Fence,
    StorageUnavailable,
)
from memory.stores.codec import (
    check_document_id,
    check_fence,
    check_int,
    check_scope,
    document_from_record,
    document_to_record,
)

HEAD = "head.json"
_NAME = re.compile(r"(?P<seq>[0-9]{10,})-(?P<id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})\.json")
_CACHE_DOCUMENTS = 2048


def render_markdown(document: ArchiveDocument) -> str:
    """A person's view of an archive document (derived from the JSON, never read back)."""
    lines = [f"# {document.title or 'Archive document'} (#{document.seq})", ""]
    lines += [f"- id: `{document.id}`", f"- session: `{document.session}`",
              f"- created: {document.created_at.isoformat()}", "", "## Summary", "", document.summary, ""]
    if document.messages:
        lines += ["## Messages", ""]
        for message in document.messages:
            calls = ", ".join(call.name for call in message.tool_calls)
            lines.append(f"### [{message.seq}] {message.role}" + (f" · calls {calls}" if calls else ""))
            lines += ["", "~~~~", message.content or "", "~~~~", ""]
    return "\n".join(lines)


class FileArchiveStore(ArchiveStore):
    def __init__(self, root: Path, *, durable: bool = True, kv=None) -> None:
        self.root = root
        self.durable = durable
        self._kv = kv  # the FileKVStore holding the leases that fence puts (the bundle passes it)
        self._cache: OrderedDict[str, tuple[ArchiveDocument, list[str]]] = OrderedDict()
        self._cache_lock = threading.Lock()

    def _dir(self, scope: Scope) -> Path:
        return fsio.scope_directory(self.root, check_scope(scope)) / "archive"

    @fsio.storage_errors
    def put(self, scope: Scope, document: ArchiveDocument, *, fence: Fence | None = None) -> ArchiveDocument:
        record = document_to_record(document)  # validates the id before any path is built
        fence = check_fence(fence)
        directory = self._dir(scope)
        fsio.ensure_dir(directory, durable=self.durable)
        with fsio.scope_lock(directory), fsio.fenced_by(self._kv, fence, f"an archive put to {scope}"):
            names = self._names(directory)
            for seq, document_id in names:
                if document_id == document.id:
                    return self._load(directory, seq, document_id)
            head = fsio.read_json(directory / HEAD) or {}
            # The head is written after the document: trust whichever is further along.
            seq = max([int(head.get("last_seq", 0))] + [s for s, _ in names]) + 1
            record["seq"] = seq
            stored = document_from_record(record)
            fsio.atomic_write(directory / _file(seq, document.id), fsio.dump_json(record), durable=self.durable)
            fsio.atomic_write(directory / HEAD, fsio.dump_json({"last_seq": seq}), durable=self.durable)
            fsio.atomic_write(directory / _file(seq, document.id, ".md"),
                              render_markdown(stored).encode("utf-8", "surrogatepass"), durable=self.durable)
            return stored

    @fsio.storage_errors
    def get(self, scope: Scope, document_id: str) -> ArchiveDocument | None:
        document_id = check_document_id(document_id)
        directory = self._dir(scope)
        for seq, name_id in self._names(directory):
            if name_id == document_id:
                return self._load(directory, seq, name_id)
        return None

    @fsio.storage_errors
    def list(self, scope: Scope, *, after_seq: int | None = None, limit: int | None = None,
             newest_first: bool = False) -> list[ArchiveDocument]:
        if after_seq is not None:
            check_int(after_seq, "after_seq")
        if limit is not None:
            check_int(limit, "limit", minimum=0)
        directory = self._dir(scope)
        names = [n for n in self._names(directory) if after_seq is None or n[0] > after_seq]
        if newest_first:
            names.reverse()
        if limit is not None:
            names = names[:limit]
        return [self._load(directory, seq, document_id) for seq, document_id in names]

    @fsio.storage_errors
    def search(self, scope: Scope, query: str, *, limit: int = 10) -> list[ArchiveHit]:
        terms = textsearch.query_terms(query)
        check_int(limit, "limit")
        directory = self._dir(scope)
        if not terms or limit <= 0:
            return []
        loaded = {}
        for seq, document_id in reversed(self._names(directory)):  # newest first: ties go to the newest
            loaded[seq] = self._load_with_words(directory, seq, document_id)
        ranked = textsearch.bm25(terms, ((seq, doc_words) for seq, (_, doc_words) in loaded.items()))
        hits = []
        for scored in ranked[:limit]:
            document = loaded[scored.key][0]
            hits.append(ArchiveHit(document, scored.score, textsearch.snippet(document.search_text(), terms)))
        return hits

    @fsio.storage_errors
    def delete(self, scope: Scope, document_id: str) -> bool:
        document_id = check_document_id(document_id)
        directory = self._dir(scope)
        if not directory.is_dir():
            return False
        with fsio.scope_lock(directory):
            for seq, name_id in self._names(directory):
                if name_id == document_id:
                    fsio.unlink_quietly(directory / _file(seq, name_id))  # the JSON is the truth
                    fsio.unlink_quietly(directory / _file(seq, name_id, ".md"))
                    fsio.unlink_quietly(directory / _file(seq, name_id, ".vec"))
                    if self.durable:
                        fsio.fsync_dir(directory)
                    return True
        return False

    @fsio.storage_errors
    def archive_state(self, scope: Scope) -> ArchiveState:
        names = self._names(self._dir(scope))
        return ArchiveState(last_seq=names[-1][0] if names else 0, count=len(names))

    @fsio.storage_errors
    def put_vectors(self, scope: Scope, document_id: str, *, model: str, vectors: bytes) -> bool:
        document_id = check_document_id(document_id)
        if not isinstance(model, str) or not model or "\n" in model:
            raise ValueError("a vector model name is a non-empty line of text")
        if not isinstance(vectors, bytes | bytearray | memoryview):
            raise TypeError("vectors must be bytes")
        directory = self._dir(scope)
        if not directory.is_dir():
            return False
        with fsio.scope_lock(directory):
            for seq, name_id in self._names(directory):
                if name_id == document_id:
                    header = json.dumps({"model": model}).encode() + b"\n"
                    fsio.atomic_write(directory / _file(seq, name_id, ".vec"), header + bytes(vectors),
                                      durable=self.durable)
                    return True
        return False

    @fsio.storage_errors
    def vectors(self, scope: Scope, *, after_seq: int | None = None) -> dict[str, tuple[str, bytes]]:
        if after_seq is not None:
            check_int(after_seq, "after_seq")
        directory = self._dir(scope)
        found: dict[str, tuple[str, bytes]] = {}
        for seq, document_id in self._names(directory):
            if after_seq is not None and seq <= after_seq:
                continue
            try:
                data = (directory / _file(seq, document_id, ".vec")).read_bytes()
            except FileNotFoundError:
                continue
            header, _, body = data.partition(b"\n")
            try:
                model = json.loads(header)["model"]
            except (ValueError, KeyError, TypeError):
                continue  # a damaged sidecar: as if none were stored (re-embedded)
            found[document_id] = (model, body)
        return found

    # -- files ---------------------------------------------------------------------------------

    @staticmethod
    def _names(directory: Path) -> list[tuple[int, str]]:
        try:
            entries = os.listdir(directory)
        except FileNotFoundError:
            return []
        found = []
        for name in entries:
            match = _NAME.fullmatch(name)
            if match:
                found.append((int(match["seq"]), match["id"]))
        found.sort()
        return found

    def _load(self, directory: Path, seq: int, document_id: str) -> ArchiveDocument:
        return self._load_with_words(directory, seq, document_id)[0]

    def _load_with_words(self, directory: Path, seq: int, document_id: str) -> tuple[ArchiveDocument, list[str]]:
        path = directory / _file(seq, document_id)
        key = str(path)
        with self._cache_lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        record = fsio.read_json(path)
        if record is None:
            raise StorageUnavailable(f"{path} vanished while being read (deleted meanwhile?)")
        try:
            document = document_from_record(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageUnavailable(f"{path} is not a valid archive document: {exc}") from None
        entry = (document, textsearch.words(document.search_text()))
        with self._cache_lock:
            self._cache[key] = entry
            while len(self._cache) > _CACHE_DOCUMENTS:
                self._cache.popitem(last=False)
        return entry


def _file(seq: int, document_id: str, suffix: str = ".json") -> str:
    return f"{seq:010d}-{document_id}{suffix}"
