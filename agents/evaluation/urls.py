"""The recall benchmark's page (namespace ``evaluation``), included from agents/urls.py."""

from django.urls import path

from agents.evaluation import views

app_name = "evaluation"

urlpatterns = [
    path("evaluation/", views.results_page, name="results"),
]
