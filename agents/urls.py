from django.urls import include, path

from agents import views

urlpatterns = [
    path("", views.home, name="home"),
    path("scopes/", views.scope_editor_view, name="scope_editor"),
    path("", include("agents.chat.urls")),
    path("", include("agents.personal.urls")),
    path("", include("agents.proposals.urls")),
    path("", include("agents.evaluation.urls")),
]
