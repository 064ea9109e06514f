"""Read-only selectors over the memory stores, for the admin, the memory pages and the API.

Everything here goes through the four store interfaces and the pruned catalog, so it works the
same on every backend. The one exception is scope discovery (``scopes``): the store ABCs have no
"list scopes" method, so each backend gets a small walker here (the file backend's directory
tree, the SQL backend's ``scope_key`` columns). Scopes whose storage name is a digest (composite
keys too long for a directory or an index) cannot be named back and are left out.

``memory`` imports nothing from ``agents``: the process's stores are handed in through
``set_provider`` (``agents.admin`` registers one over ``agents.runtime.services.get_services``).
Catalog selectors live in ``memory.inspection_catalog``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from memory.compression.pruned import PrunedCatalog
from memory.messages import Message
from memory.scopes import SCOPE_KINDS, CompositeScope, InvalidScopeId, Scope, SessionScope
from memory.stores.base import ArchiveDocument, ArchiveHit, KVItem, MemoryStoreBundle, SessionHead

STORES = ("messages", "kv", "cursors", "archive")

# -- the process's stores ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InspectionSource:
    """What inspection reads: the store bundle, the pruned catalog, and (optionally) who owns
    which session, which only the app that keeps conversations knows."""

    bundle: MemoryStoreBundle
    catalog: PrunedCatalog
    workspace: Path | None = None
    sessions_of_user: Callable[[str], list[str]] | None = None


_provider: Callable[[], InspectionSource] | None = None


def set_provider(provider: Callable[[], InspectionSource] | None) -> None:
    """Register the callable that returns the process's stores (called on every use, so a
    provider over swappable services always answers with the current ones)."""
    global _provider
    _provider = provider


def source() -> InspectionSource:
    """The process's stores; raises ImproperlyConfigured when no provider was registered."""
    if _provider is None:
        raise ImproperlyConfigured(
            "no memory inspection provider is registered: call memory.inspection.set_provider() at startup "
            "(agents.admin does this for the Modex app)"
        )
    return _provider()


# -- scope discovery --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScopeInfo:
    """One scope that holds data, and in which stores (a subset of STORES)."""

    scope: Scope
    stores: frozenset[str]

    @property
    def key(self) -> str:
        return self.scope.key()

    @property
    def kind(self) -> str:
        return self.scope.kind

    def part(self, kind: str) -> str | None:
        """The id of the scope's ``kind`` part (the scope itself, or a part of a composite)."""
        return scope_part(self.scope, kind)


def scope_part(scope: Scope, kind: str) -> str | None:
    """The id of ``scope``'s part of ``kind`` (``user`` of ``composite:agent:a+user:1`` is ``1``)."""
    parts = scope.parts if isinstance(scope, CompositeScope) else (scope,)
    for part in parts:
        if part.kind == kind and hasattr(part, "id"):
            return part.id  # type: ignore[attr-defined]
    return None


def _file_scopes(bundle: MemoryStoreBundle) -> dict[Scope, set[str]]:
    root = Path(getattr(bundle.kv, "root"))
    found: dict[Scope, set[str]] = {}
    for kind_dir in _subdirs(root):
        kind = kind_dir.name
        if kind == "global":
            candidates: Iterable[tuple[Path, str]] = [(kind_dir, "global")]
        elif kind == "composite":
            candidates = ((d, _composite_key(d.name)) for d in _subdirs(kind_dir))
        elif kind in SCOPE_KINDS:
            candidates = ((d, f"{kind}:{d.name}") for d in _subdirs(kind_dir))
        else:
            continue
        for directory, key in candidates:
            scope = _parse(key)
            if scope is None:
                continue
            stores = {name for name in STORES if (directory / name).is_dir()}
            if stores:
                found[scope] = stores
    return found


def _composite_key(name: str) -> str:
    # "agent.default+user.42": kind names hold no '.', ids no '+' (see CompositeScope.path_parts).
    if name.startswith("sha256-"):
        return ""
    parts = []
    for part in name.split("+"):
        kind, sep, ident = part.partition(".")
        if not sep:
            return ""
        parts.append(f"{kind}:{ident}")
    return "composite:" + "+".join(parts)


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(Path(entry.path) for entry in os.scandir(path) if entry.is_dir() and not entry.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _parse(key: str) -> Scope | None:
    if not key:
        return None
    try:
        return Scope.parse(key)
    except InvalidScopeId:
        return None


def _sql_scopes(bundle: MemoryStoreBundle) -> dict[Scope, set[str]]:
    from memory.models import ArchiveEntry, ConsumerCursor, KVEntry, SessionHead as SessionHeadRow

    using = getattr(bundle.messages, "using", "default")
    found: dict[Scope, set[str]] = {}
    for store, model in (("messages", SessionHeadRow), ("kv", KVEntry), ("cursors", ConsumerCursor),
                         ("archive", ArchiveEntry)):
        for key in model.objects.using(using).values_list("scope_key", flat=True).distinct():
            scope = _parse(key)  # digests of over-long keys do not parse: left out
            if scope is not None:
                found.setdefault(scope, set()).add(store)
    return found


#: Backend name -> walker returning {scope: stores holding data}. One entry per backend.
DISCOVERY: dict[str, Callable[[MemoryStoreBundle], dict[Scope, set[str]]]] = {
    "file": _file_scopes,
    "sqlite": _sql_scopes,
}


def scopes(bundle: MemoryStoreBundle, *, store: str | None = None, kind: str | None = None) -> list[ScopeInfo]:
    """Every scope of ``bundle`` that holds data, sorted by key.

    ``store`` keeps scopes with data in that store (one of STORES), ``kind`` scopes of that kind
    (``session``, ``composite``, ...). Raises ValueError for a backend without a walker.
    """
    walker = DISCOVERY.get(bundle.backend)
    if walker is None:
        raise ValueError(f"no scope discovery for backend {bundle.backend!r}")
    infos = [ScopeInfo(scope, frozenset(stores)) for scope, stores in walker(bundle).items()]
    if store is not None:
        infos = [info for info in infos if store in info.stores]
    if kind is not None:
        infos = [info for info in infos if info.kind == kind]
    return sorted(infos, key=lambda info: info.key)


def parse_scope(key: str) -> Scope | None:
    """``Scope.parse(key)``, or None for anything that is not a scope key."""
    return _parse(key) if isinstance(key, str) else None


# -- sessions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session as inspection shows it: its head, a window of messages (soft-deleted ones
    included and flagged), and how many live messages lie before the window."""

    scope: SessionScope
    head: SessionHead
    messages: tuple[Message, ...]
    deleted_ids: frozenset[str]
    earlier: int


def session_view(bundle: MemoryStoreBundle, session: SessionScope, *, last: int | None = 200) -> SessionView:
    """The session's newest ``last`` messages (None: all), soft-deleted ones flagged."""
    head = bundle.messages.head(session)
    every = bundle.messages.read(session, last=last, include_deleted=True)
    first = every[0].seq if every else None
    live = bundle.messages.read(session, after_seq=None if first is None else first - 1)
    live_ids = {m.id for m in live}
    deleted = frozenset(m.id for m in every if m.id not in live_ids)
    return SessionView(session, head, tuple(every), deleted, max(0, head.count - len(live)))


# -- transcripts ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolCallView:
    id: str
    name: str
    arguments: str  # pretty-printed JSON when it parses, else the raw text


@dataclass(frozen=True, slots=True)
class TranscriptItem:
    """One message made readable: calls with their arguments, a tool result with its call's name."""

    message: Message
    calls: tuple[ToolCallView, ...] = ()
    answers: str = ""  # for a tool message: the name of the call it answers
    deleted: bool = False

    @property
    def role(self) -> str:
        return self.message.role

    @property
    def is_summary(self) -> bool:
        return self.message.is_compact_summary


def pretty_json(text: str) -> str:
    """``text`` re-indented if it is JSON, else unchanged."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return text


def transcript(messages: Sequence[Message], *, deleted_ids: Iterable[str] = ()) -> list[TranscriptItem]:
    """``messages`` as transcript items, in the given order."""
    deleted = frozenset(deleted_ids)
    names: dict[str, str] = {}
    items = []
    for message in messages:
        calls = tuple(ToolCallView(c.id, c.name, pretty_json(c.arguments_json)) for c in message.tool_calls)
        names.update((c.id, c.name) for c in message.tool_calls)
        answers = ""
        if message.role == "tool":
            answers = message.name or names.get(message.tool_call_id or "", "") or (message.tool_call_id or "")
        items.append(TranscriptItem(message, calls, answers, message.id in deleted))
    return items


# -- archive ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveFilter:
    """Which archive documents to show: by the agent/user parts of their scope, by date."""

    agent: str = ""
    user: str = ""
    since: datetime | None = None
    until: datetime | None = None

    def matches_scope(self, info: ScopeInfo) -> bool:
        return (not self.agent or info.part("agent") == self.agent) and (
            not self.user or info.part("user") == self.user
        )

    def matches(self, document: ArchiveDocument) -> bool:
        return (self.since is None or document.created_at >= self.since) and (
            self.until is None or document.created_at <= self.until
        )


@dataclass(frozen=True, slots=True)
class ArchiveGroup:
    """The documents (or search hits) of one archive scope."""

    info: ScopeInfo
    documents: tuple[ArchiveDocument, ...] = ()
    hits: tuple[ArchiveHit, ...] = ()
    total: int = 0


@dataclass(frozen=True, slots=True)
class ArchiveOverview:
    groups: tuple[ArchiveGroup, ...]
    agents: tuple[str, ...]  # every agent id seen in archive scopes (for the filter)
    users: tuple[str, ...]
    query: str = ""
    truncated: bool = False  # more scopes matched than were shown


def archive_overview(
    bundle: MemoryStoreBundle,
    *,
    filters: ArchiveFilter = ArchiveFilter(),
    query: str = "",
    per_scope: int = 50,
    max_scopes: int = 100,
) -> ArchiveOverview:
    """Archive documents per scope, newest first, filtered; with ``query``, search hits instead
    (``ArchiveStore.search`` per scope; scores compare only within one scope's list)."""
    infos = scopes(bundle, store="archive")
    agents = sorted({a for a in (i.part("agent") for i in infos) if a})
    users = sorted({u for u in (i.part("user") for i in infos) if u}, key=_natural)
    chosen = [info for info in infos if filters.matches_scope(info)]
    groups = []
    for info in chosen[:max_scopes]:
        if query.strip():
            hits = [h for h in bundle.archive.search(info.scope, query, limit=per_scope) if filters.matches(h.document)]
            if hits:
                groups.append(ArchiveGroup(info, hits=tuple(hits), total=len(hits)))
            continue
        documents = [d for d in bundle.archive.list(info.scope, newest_first=True) if filters.matches(d)]
        if documents:
            groups.append(ArchiveGroup(info, documents=tuple(documents[:per_scope]), total=len(documents)))
    return ArchiveOverview(tuple(groups), tuple(agents), tuple(users), query, len(chosen) > max_scopes)


def _natural(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 62, value)


# -- KV ---------------------------------------------------------------------------------------

KV_CATEGORIES = ("core memory", "history", "experience", "todo", "other")


def kv_category(key: str) -> str:
    """What a KV key holds, for grouping: core memory, history, experience, todo, other."""
    if key in ("SOUL.md", "USER.md", "MEMORY.md"):
        return "core memory"
    if key.endswith(".history"):
        return "history"
    if key.startswith("experience."):
        return "experience"
    if key.startswith("todo"):
        return "todo"
    return "other"


@dataclass(frozen=True, slots=True)
class KVGroup:
    info: ScopeInfo
    items: tuple[KVItem, ...]

    @property
    def rows(self) -> list[tuple[KVItem, str]]:
        """(item, category) pairs."""
        return [(item, kv_category(item.key)) for item in self.items]


def kv_overview(bundle: MemoryStoreBundle, *, category: str = "", scope_kind: str = "", prefix: str = "") -> list[KVGroup]:
    """KV items per scope, filtered by category (KV_CATEGORIES), scope kind and key prefix."""
    groups = []
    for info in scopes(bundle, store="kv", kind=scope_kind or None):
        items = [i for i in bundle.kv.list(info.scope, prefix=prefix) if not category or kv_category(i.key) == category]
        if items:
            groups.append(KVGroup(info, tuple(items)))
    return groups


def cursor_overview(bundle: MemoryStoreBundle) -> list[tuple[ScopeInfo, dict[str, int]]]:
    """Every scope's consumer cursors."""
    out = []
    for info in scopes(bundle, store="cursors"):
        positions = bundle.cursors.list(info.scope)
        if positions:
            out.append((info, positions))
    return out

