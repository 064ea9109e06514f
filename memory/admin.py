"""Memory inspection in the admin (staff only, read-only), on every backend.

The SQL backend's models are only where the file backend has directories, so the admin does
not show rows: each ModelAdmin below is an entry point whose pages read through the store
interfaces and the pruned catalog (``memory.inspection``), whichever backend the process runs:

=====================================  ===============================================
/admin/memory/storedmessage/           sessions; ``session/<id>/`` a session's messages;
                                       ``catalogs/`` pruned catalogs and search across them;
                                       ``catalog/<id>/`` one catalog (contents + blocks)
/admin/memory/archiveentry/            archive documents per scope, filters, search;
                                       ``<scope key>/<id>/`` one document as a transcript
/admin/memory/kventry/                 KV items per scope; ``<scope key>/<key>/`` one item
/admin/memory/consumercursor/          consumer cursors per scope
=====================================  ===============================================

Any active staff user may view them (memory holds every user's conversations: keep staff few).
Nothing here adds, changes or deletes.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from memory import views
from memory.models import ArchiveEntry, ConsumerCursor, KVEntry, StoredMessage


class InspectionAdmin(admin.ModelAdmin):
    """A read-only admin entry whose pages come from ``memory.views``, not the model's rows."""

    #: (route, view function, url name suffix) beside the changelist; views get (request, admin, **kwargs).
    pages: tuple[tuple[str, object, str], ...] = ()
    changelist_page = None

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def changelist_view(self, request, extra_context=None):
        return type(self).changelist_page(request, self)

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view

        def bind(view):
            return wrap(lambda request, **kwargs: view(request, self, **kwargs))

        urls = [path("", wrap(self.changelist_view), name="%s_%s_changelist" % info)]
        urls += [path(route, bind(view), name=f"memory_{name}") for route, view, name in self.pages]
        return urls


@admin.register(StoredMessage)
class SessionInspection(InspectionAdmin):
    changelist_page = views.sessions
    pages = (
        ("session/<str:session_id>/", views.session_detail, "session"),
        ("catalogs/", views.catalogs, "catalogs"),
        ("catalog/<str:session_id>/", views.catalog_detail, "catalog"),
    )


@admin.register(ArchiveEntry)
class ArchiveInspection(InspectionAdmin):
    changelist_page = views.archive
    pages = (("<str:scope_key>/<str:document_id>/", views.archive_document, "archive_document"),)


@admin.register(KVEntry)
class KVInspection(InspectionAdmin):
    changelist_page = views.kv
    pages = (("<str:scope_key>/<str:key>/", views.kv_item, "kv_item"),)


@admin.register(ConsumerCursor)
class CursorInspection(InspectionAdmin):
    changelist_page = views.cursors
