"""The user's memory pages and API token settings (namespace ``memory``), included from agents/urls.py."""

from django.urls import path

from agents.personal import archive_views
from agents.personal import memory_views as memory_items
from agents.personal import views as memory_pages

app_name = "memory"

urlpatterns = [
    path("memory/", memory_pages.memory_index, name="index"),
    path("memory/<str:agent>/", memory_pages.agent_memory, name="agent"),
    path("memory/<str:agent>/files/<str:file>/", memory_pages.edit_core_file, name="edit"),
    path("memory/<str:agent>/files/<str:file>/items/<int:index>/edit/", memory_items.edit_item, name="edit_item"),
    path("memory/<str:agent>/files/<str:file>/items/<int:index>/delete/", memory_items.delete_item,
         name="delete_item"),
    path("memory/<str:agent>/files/<str:file>/restore/<int:version>/", memory_items.restore_version, name="restore"),
    path("memory/<str:agent>/forget/", memory_items.forget_everything, name="forget"),
    path("memory/<str:agent>/archive/", archive_views.archive_index, name="archive"),
    path("memory/<str:agent>/archive/<str:conversation_id>/", archive_views.archive_conversation,
         name="archive_conversation"),
    path("memory/<str:agent>/archive/<str:conversation_id>/forget/", archive_views.archive_forget,
         name="archive_forget"),
    path("settings/tokens/", memory_pages.token_settings, name="tokens"),
    path("settings/tokens/<int:token_id>/revoke/", memory_pages.revoke_token, name="revoke_token"),
    path("settings/password/", memory_pages.password_change, name="password"),
]
