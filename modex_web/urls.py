from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path

from agents.personal.login_forms import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm
from modex_web.api import api

# Both password forms go through the sign-in throttle (agents/personal/login.py).
admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    # Browsers ask for /favicon.ico on pages that name no icon (the admin's): the same icon.
    path("favicon.ico", lambda request: redirect(static("favicon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/login/", auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("agents.urls")),
]
