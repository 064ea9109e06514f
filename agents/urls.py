from django.urls import path

from agents import views

urlpatterns = [
    path("", views.home, name="home"),
]
