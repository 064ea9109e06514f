"""Chat pages (namespace ``chat``), included from agents/urls.py."""

from django.urls import path

from agents.chat import views as chat_views

app_name = "chat"

urlpatterns = [
    path("conversations/", chat_views.conversation_list, name="list"),
    path("conversations/new/", chat_views.conversation_create, name="create"),
    path("conversations/<str:conversation_id>/", chat_views.conversation_detail, name="conversation"),
    path("conversations/<str:conversation_id>/rename/", chat_views.conversation_rename, name="rename"),
    path("conversations/<str:conversation_id>/delete/", chat_views.conversation_delete, name="delete"),
    path("conversations/<str:conversation_id>/pruned/", chat_views.conversation_pruned, name="pruned"),
    path("conversations/<str:conversation_id>/compact/", chat_views.conversation_compact, name="compact"),
    path("conversations/<str:conversation_id>/earlier/", chat_views.conversation_earlier, name="earlier"),
    path("conversations/<str:conversation_id>/context/", chat_views.conversation_context, name="context"),
]
