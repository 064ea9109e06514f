"""The memory inspection pages of the admin (wired in ``memory.admin``): parse, select, render.

Each view takes ``(request, model_admin, **url kwargs)``; the admin site has already checked
that the user is active staff. Reads go through ``memory.inspection`` (store interfaces and the
pruned catalog), so every page works on every backend. Content is rendered escaped.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, time, timedelta
from functools import wraps

from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from memory import inspection, inspection_catalog
from memory.compression.pruned_format import PrunedCatalogError
from memory.core_memory import HISTORY_SUFFIX, CoreChange
from memory.scopes import SCOPE_KINDS, InvalidScopeId, SessionScope
from memory.stores.base import InvalidKey, StoreError

NAV = (
    ("sessions", "Sessions", "admin:memory_storedmessage_changelist"),
    ("catalogs", "Pruned catalogs", "admin:memory_catalogs"),
    ("archive", "Archive", "admin:memory_archiveentry_changelist"),
    ("kv", "KV entries", "admin:memory_kventry_changelist"),
    ("cursors", "Cursors", "admin:memory_consumercursor_changelist"),
)
PER_PAGE = 50


def _page(request: HttpRequest, model_admin, template: str, *, title: str, section: str, **context) -> HttpResponse:
    src = inspection.source()
    context.update(
        model_admin.admin_site.each_context(request),
        title=title,
        opts=model_admin.opts,
        nav=NAV,
        section=section,
        backend=src.bundle.backend,
    )
    return render(request, template, context)


def store_errors(view):
    """A store or catalog that cannot be read shows its message (503), not a traceback."""

    @wraps(view)
    def wrapper(request: HttpRequest, model_admin, **kwargs) -> HttpResponse:
        try:
            return view(request, model_admin, **kwargs)
        except (StoreError, PrunedCatalogError, OSError) as exc:
            if isinstance(exc, InvalidKey):
                raise Http404("No such item.") from None
            response = _page(request, model_admin, "admin/memory/error.html", title="Memory unavailable",
                             section="", error=str(exc))
            response.status_code = 503
            return response

    return wrapper


def _session(session_id: str) -> SessionScope:
    try:
        return SessionScope(session_id)
    except InvalidScopeId:
        raise Http404("No such session.") from None


def _scope(key: str):
    scope = inspection.parse_scope(key)
    if scope is None:
        raise Http404("No such scope.")
    return scope


def _int(value: str | None, default: int) -> int:
    try:
        return max(1, int(value or default))
    except ValueError:
        return default


def _date(value: str | None, *, end: bool = False) -> datetime | None:
    try:
        day = datetime.strptime((value or "").strip(), "%Y-%m-%d").date()
    except ValueError:
        return None
    moment = datetime.combine(day, time.min, tzinfo=UTC)
    return moment + timedelta(days=1) - timedelta(microseconds=1) if end else moment


def usernames(user_ids) -> dict[str, str]:
    """``{user id: username}`` for the ids that are numeric primary keys of existing users."""
    numeric = [int(i) for i in user_ids if str(i).isdigit()]
    model = get_user_model()
    return {str(pk): name for pk, name in model.objects.filter(pk__in=numeric).values_list("pk", model.USERNAME_FIELD)}


# -- sessions and catalogs --------------------------------------------------------------------


@store_errors
def sessions(request: HttpRequest, model_admin) -> HttpResponse:
    src = inspection.source()
    query = request.GET.get("q", "").strip()
    every = inspection_catalog.session_ids(src.bundle, src.catalog, contains=query)
    derived = request.GET.get("derived") == "1"
    ids = every if derived else [i for i in every if not inspection_catalog.is_derived(i)]
    page = Paginator(ids, PER_PAGE).get_page(request.GET.get("page"))
    rows = inspection_catalog.session_rows(src.bundle, src.catalog, list(page))
    return _page(request, model_admin, "admin/memory/sessions.html", title="Sessions", section="sessions",
                 page=page, rows=rows, q=query, derived=derived, hidden=len(every) - len(ids))


@store_errors
def session_detail(request: HttpRequest, model_admin, session_id: str) -> HttpResponse:
    src = inspection.source()
    session = _session(session_id)
    show_all = request.GET.get("all") == "1"
    view = inspection.session_view(src.bundle, session, last=None if show_all else 200)
    if not view.messages and not view.head.last_seq and not src.catalog.files(session):
        raise Http404("No such session.")
    return _page(
        request, model_admin, "admin/memory/session.html", title=f"Session {session.id}", section="sessions",
        session=session, view=view, items=inspection.transcript(view.messages, deleted_ids=view.deleted_ids),
        kv=src.bundle.kv.list(session), cursors=src.bundle.cursors.list(session),
        catalogued=src.catalog.count(session), show_all=show_all,
    )


@store_errors
def catalogs(request: HttpRequest, model_admin) -> HttpResponse:
    src = inspection.source()
    query = request.GET.get("q", "").strip()
    contains = request.GET.get("session", "").strip()
    summaries = inspection_catalog.catalog_sessions(src.catalog, contains=contains)
    hits = []
    if query:
        hits = inspection_catalog.search_catalogs(src.catalog, query, sessions=[s.session for s in summaries])
    page = Paginator(summaries, PER_PAGE).get_page(request.GET.get("page"))
    return _page(request, model_admin, "admin/memory/catalogs.html", title="Pruned catalogs", section="catalogs",
                 page=page, hits=hits, q=query, session_q=contains)


@store_errors
def catalog_detail(request: HttpRequest, model_admin, session_id: str) -> HttpResponse:
    src = inspection.source()
    session = _session(session_id)
    if not src.catalog.files(session):
        raise Http404("This session has no pruned catalog.")
    page = inspection_catalog.catalog_page(
        src.catalog, src.bundle.messages, session, page=_int(request.GET.get("page"), 1)
    )
    return _page(request, model_admin, "admin/memory/catalog.html", title=f"Pruned catalog of session {session.id}",
                 section="catalogs", catalog=page, session=session)


# -- archive ----------------------------------------------------------------------------------


@store_errors
def archive(request: HttpRequest, model_admin) -> HttpResponse:
    src = inspection.source()
    get = request.GET
    filters = inspection.ArchiveFilter(
        agent=get.get("agent", "").strip(),
        user=get.get("user", "").strip(),
        since=_date(get.get("since")),
        until=_date(get.get("until"), end=True),
    )
    overview = inspection.archive_overview(src.bundle, filters=filters, query=get.get("q", "").strip())
    return _page(
        request, model_admin, "admin/memory/archive.html", title="Archive", section="archive",
        overview=overview, filters=filters, names=usernames(overview.users),
        since=get.get("since", ""), until=get.get("until", ""),
    )


@store_errors
def archive_document(request: HttpRequest, model_admin, scope_key: str, document_id: str) -> HttpResponse:
    src = inspection.source()
    scope = _scope(scope_key)
    document = src.bundle.archive.get(scope, document_id)
    if document is None:
        raise Http404("No such archive document.")
    session = inspection.parse_scope(document.session)
    return _page(
        request, model_admin, "admin/memory/archive_document.html",
        title=document.title or f"Archive document #{document.seq}", section="archive",
        scope=scope, document=document, items=inspection.transcript(document.messages),
        metadata=json.dumps(dict(document.metadata), indent=2, ensure_ascii=False, sort_keys=True),
        session_id=session.id if isinstance(session, SessionScope) else "",
    )


# -- KV and cursors ---------------------------------------------------------------------------


@store_errors
def kv(request: HttpRequest, model_admin) -> HttpResponse:
    src = inspection.source()
    category = request.GET.get("category", "")
    kind = request.GET.get("kind", "")
    category = category if category in inspection.KV_CATEGORIES else ""
    kind = kind if kind in SCOPE_KINDS else ""
    groups = inspection.kv_overview(src.bundle, category=category, scope_kind=kind)
    page = Paginator(groups, PER_PAGE).get_page(request.GET.get("page"))
    return _page(request, model_admin, "admin/memory/kv.html", title="KV entries", section="kv", page=page,
                 category=category, kind=kind, categories=inspection.KV_CATEGORIES,
                 kinds=SCOPE_KINDS)


@store_errors
def kv_item(request: HttpRequest, model_admin, scope_key: str, key: str) -> HttpResponse:
    src = inspection.source()
    scope = _scope(scope_key)
    item = src.bundle.kv.get(scope, key)
    if item is None:
        raise Http404("No such KV item.")
    changes = []
    if key.endswith(HISTORY_SUFFIX):
        for line in item.value.splitlines():
            try:
                changes.append(CoreChange.from_json(line))
            except (ValueError, KeyError, TypeError):
                continue
    pretty = inspection.pretty_json(item.value) if key.endswith(".json") else ""
    return _page(request, model_admin, "admin/memory/kv_item.html", title=f"{key} in {scope.key()}", section="kv",
                 item=item, scope=scope, changes=changes, pretty=pretty, category=inspection.kv_category(key))


@store_errors
def cursors(request: HttpRequest, model_admin) -> HttpResponse:
    src = inspection.source()
    return _page(request, model_admin, "admin/memory/cursors.html", title="Consumer cursors", section="cursors",
                 rows=inspection.cursor_overview(src.bundle))
