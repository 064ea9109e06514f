"""Read-only selectors over pruned catalogs: which sessions have one, a catalog's table of
contents (exactly what ``grep -n "^## \\[" pruned/<session>/*.md`` prints), its blocks, and
search across catalogs.

The catalog is immutable markdown under ``<workspace>/pruned``; nothing here writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from memory.compression.pruned import PrunedCatalog, PrunedEntry, first_uncommitted_seq
from memory.compression.pruned_format import HEAD_RE
from memory.inspection import TranscriptItem, scopes, transcript
from memory.scopes import InvalidScopeId, SessionScope
from memory.stores.base import MemoryStoreBundle, MessageStore, SessionHead

SNIPPET_CHARS = 160


@dataclass(frozen=True, slots=True)
class CatalogSummary:
    session: SessionScope
    files: int
    entries: int


def catalog_sessions(catalog: PrunedCatalog, *, contains: str = "") -> list[CatalogSummary]:
    """Every session with a pruned catalog (id containing ``contains``), sorted by id."""
    try:
        names = sorted(e.name for e in os.scandir(catalog.root) if e.is_dir() and not e.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for name in names:
        if contains and contains.casefold() not in name.casefold():
            continue
        try:
            session = SessionScope(name)
        except InvalidScopeId:
            continue
        files = catalog.files(session)
        if files:
            out.append(CatalogSummary(session, len(files), catalog.count(session)))
    return out


@dataclass(frozen=True, slots=True)
class TocLine:
    """One line of the table of contents: ``<label>:<line>:<heading>`` as grep -n prints it."""

    label: str  # pruned/<session>/<file name>
    line: int
    heading: str
    seq: int
    page: int = 1  # the page of ``catalog_page`` that renders this block

    def __str__(self) -> str:
        return f"{self.label}:{self.line}:{self.heading}"


def table_of_contents(catalog: PrunedCatalog, session: SessionScope) -> list[TocLine]:
    """Every block heading of the session's catalog files, in file order, with line numbers."""
    toc = []
    for path in catalog.files(session):
        label = f"pruned/{session.id}/{path.name}"
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                match = HEAD_RE.match(line)
                if match:
                    toc.append(TocLine(label, number, line.rstrip("\n"), int(match.group(1))))
    return toc


@dataclass(frozen=True, slots=True)
class CatalogBlock:
    entry: PrunedEntry
    item: TranscriptItem
    committed: bool  # False: written by a cleanup that crashed before its prune committed

    @property
    def items(self) -> tuple[TranscriptItem, ...]:
        return (self.item,)

    @property
    def label(self) -> str:
        return f"pruned/{self.entry.path.parent.name}/{self.entry.path.name}:{self.entry.line}"


@dataclass(frozen=True, slots=True)
class CatalogPage:
    session: SessionScope
    toc: tuple[TocLine, ...]
    blocks: tuple[CatalogBlock, ...]
    total: int
    page: int
    pages: int


def catalog_page(
    catalog: PrunedCatalog, messages: MessageStore, session: SessionScope, *, page: int = 1, per_page: int = 100
) -> CatalogPage:
    """The table of contents and one page of rendered blocks of the session's catalog."""
    live = messages.read(session, last=8)
    boundary = first_uncommitted_seq(live)
    entries = catalog.entries(session)
    pages = max(1, -(-len(entries) // per_page))
    page = min(max(1, page), pages)
    chosen = entries[(page - 1) * per_page : page * per_page]
    items = transcript([e.message for e in chosen])
    blocks = tuple(
        CatalogBlock(entry, item, boundary is None or entry.seq < boundary) for entry, item in zip(chosen, items)
    )
    page_of = {entry.seq: index // per_page + 1 for index, entry in enumerate(entries)}
    toc = tuple(replace(line, page=page_of.get(line.seq, 1)) for line in table_of_contents(catalog, session))
    return CatalogPage(session, toc, blocks, len(entries), page, pages)


@dataclass(frozen=True, slots=True)
class CatalogHit:
    session: SessionScope
    entry: PrunedEntry
    snippet: str


def entry_text(entry: PrunedEntry) -> str:
    """What a search of the catalog looks in: the message's content, reasoning, name and calls
    (the parts it has, one per line)."""
    message = entry.message
    parts = [message.content or "", message.reasoning_content or "", message.name or ""]
    for call in message.tool_calls:
        parts += [call.name, call.arguments_json]
    return "\n".join(part for part in parts if part.strip())


def _haystack(entry: PrunedEntry) -> str:
    message = entry.message
    parts = [message.content or "", message.reasoning_content or "", message.name or ""]
    for call in message.tool_calls:
        parts += [call.name, call.arguments_json]
    return "\n".join(parts)


def _snippet(text: str, word: str) -> str:
    at = text.casefold().find(word)
    start = max(0, at - SNIPPET_CHARS // 3)
    piece = " ".join(text[start : start + SNIPPET_CHARS].split())
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")


def search_catalogs(
    catalog: PrunedCatalog, query: str, *, sessions: list[SessionScope] | None = None, limit: int = 100
) -> list[CatalogHit]:
    """Catalogued messages containing every word of ``query`` (case-insensitive, plain text),
    in session then seq order, at most ``limit``. An empty query finds nothing."""
    words = [w.casefold() for w in query.split()]
    if not words:
        return []
    chosen = sessions if sessions is not None else [s.session for s in catalog_sessions(catalog)]
    hits: list[CatalogHit] = []
    for session in chosen:
        for entry in catalog.entries(session):
            text = _haystack(entry)
            folded = text.casefold()
            if all(w in folded for w in words):
                hits.append(CatalogHit(session, entry, _snippet(text, words[0])))
                if len(hits) >= limit:
                    return hits
    return hits


def catalog_path_label(path: Path) -> str:
    return f"pruned/{path.parent.name}/{path.name}"


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A session in the admin's list: its head (None if it only has a catalog) and catalog size."""

    session: SessionScope
    head: SessionHead | None
    catalogued: int


def session_ids(bundle: MemoryStoreBundle, catalog: PrunedCatalog, *, contains: str = "") -> list[str]:
    """Every session with messages or a pruned catalog (id containing ``contains``), sorted."""
    needle = contains.casefold()
    found = {info.scope.id for info in scopes(bundle, store="messages", kind="session")}  # type: ignore[attr-defined]
    found.update(summary.session.id for summary in catalog_sessions(catalog))
    return sorted(ident for ident in found if not needle or needle in ident.casefold())


def is_derived(session_id: str) -> bool:
    """A session run on behalf of another one (``<parent>.<suffix>``: a subagent's, a reviewer's
    scratch session): listed in the admin only on request."""
    return "." in session_id


def session_rows(bundle: MemoryStoreBundle, catalog: PrunedCatalog, ids: list[str]) -> list[SessionRow]:
    """The admin's rows for sessions ``ids`` (one page of ``session_ids``)."""
    rows = []
    for ident in ids:
        session = SessionScope(ident)
        head = bundle.messages.head(session)
        rows.append(SessionRow(session, head if head.last_seq else None, catalog.count(session)))
    return rows
