"""The staff proposals page (namespace ``proposals``), included from agents/urls.py."""

from django.urls import path

from agents.proposals import views

app_name = "proposals"

urlpatterns = [
    path("proposals/", views.proposals_page, name="index"),
    path("proposals/<str:agent>/<str:proposal_id>/", views.decide, name="decide"),
]
