"""The user's memory pages and API token settings (namespace ``memory``), included from agents/urls.py."""

from django.urls import path

from agents.personal import views as memory_pages

app_name = "memory"

urlpatterns = [
    path("memory/", memory_pages.memory_index, name="index"),
    path("memory/<str:agent>/", memory_pages.agent_memory, name="agent"),
    path("memory/<str:agent>/files/<str:file>/", memory_pages.edit_core_file, name="edit"),
    path("settings/tokens/", memory_pages.token_settings, name="tokens"),
    path("settings/tokens/<int:token_id>/revoke/", memory_pages.revoke_token, name="revoke_token"),
    path("settings/password/", memory_pages.password_change, name="password"),
]
