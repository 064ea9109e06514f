"""Admin for conversations (with links to their session and pruned catalog) and API tokens.

The memory admin reads the stores through ``memory.inspection``, whose provider
``AgentsConfig.ready()`` registers (``agents.runtime.services.inspection_source``).
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from agents.models import Conversation, PersonalAPIToken
from memory import inspection
from memory.scopes import SessionScope




@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "owner", "agent", "updated_at", "memory_links")
    list_filter = ("agent", "updated_at")
    search_fields = ("id", "title", "owner__username")
    list_select_related = ("owner",)
    readonly_fields = ("id", "owner", "agent", "created_at", "updated_at", "memory_links")
    fields = ("id", "title", "owner", "agent", "created_at", "updated_at", "memory_links")
    ordering = ("-updated_at",)

    def has_add_permission(self, request) -> bool:
        return False  # conversations start in the chat, where the agent is checked

    def has_view_permission(self, request, obj=None) -> bool:
        # Any active staff user may inspect memory (memory/admin.py); the conversation list is
        # its way in. Renaming or deleting still needs the model permissions.
        return (request.user.is_active and request.user.is_staff) or super().has_view_permission(request, obj)

    def has_module_permission(self, request) -> bool:
        return (request.user.is_active and request.user.is_staff) or super().has_module_permission(request)

    @admin.display(description="Memory")
    def memory_links(self, obj: Conversation) -> str:
        if not obj or not obj.pk:
            return "—"
        source = inspection.source()
        catalogued = source.catalog.count(SessionScope(obj.session_id))
        session_url = reverse("admin:memory_session", args=[obj.session_id])
        if not catalogued:
            return format_html('<a href="{}">session</a> · no pruned catalog yet', session_url)
        return format_html(
            '<a href="{}">session</a> · <a href="{}">pruned catalog ({} message{})</a>',
            session_url,
            reverse("admin:memory_catalog", args=[obj.session_id]),
            catalogued,
            "" if catalogued == 1 else "s",
        )


@admin.register(PersonalAPIToken)
class PersonalAPITokenAdmin(admin.ModelAdmin):
    """Tokens are created by their users on the settings page; staff can only see and revoke."""

    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    exclude = ("digest",)
    actions = ("revoke",)

    def has_add_permission(self, request) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token{'s' if count != 1 else ''}.")
