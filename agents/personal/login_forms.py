"""The sign-in forms (site and admin) with the throttle of agents/personal/login.py in front."""

from __future__ import annotations

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm
from django.core.exceptions import ValidationError

from agents.personal import login


class _Throttled:
    """Reserve the attempt (or refuse a locked account or address) before the password is
    checked; report the outcome after (agents/personal/login.py)."""

    throttled: str | None = None

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        address = login.client_address(self.request)
        if not (username and self.cleaned_data.get("password")):
            # No password will be checked: nothing to reserve, but a lock still shows.
            lock = login.locked(username=username, address=address)
            if lock is not None:
                self.throttled = lock.message()
                raise ValidationError(self.throttled, code="throttled")
            return super().clean()
        lock = login.reserve(username=username, address=address)
        if lock is not None:
            self.throttled = lock.message()
            raise ValidationError(self.throttled, code="throttled")
        try:
            cleaned = super().clean()
        except ValidationError:
            if self.user_cache is None:
                lock = login.record_failure(username=username, address=address)
                if lock is not None:
                    self.throttled = lock.message()
                    raise ValidationError(self.throttled, code="throttled") from None
            raise
        login.record_success(username=username, address=address)
        return cleaned


class ThrottledAuthenticationForm(_Throttled, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(_Throttled, AdminAuthenticationForm):
    pass


class ThrottledPasswordChangeForm(PasswordChangeForm):
    """Django's password change, its old-password check throttled like a sign-in: a stolen
    session cannot be used to guess the password (and then change it)."""

    throttled: str | None = None

    def __init__(self, user, *args, request=None, **kwargs) -> None:
        self.request = request
        super().__init__(user, *args, **kwargs)

    def clean_old_password(self):
        username = self.user.get_username()
        address = login.client_address(self.request)
        lock = login.reserve(username=username, address=address)
        if lock is not None:
            self.throttled = lock.message()
            raise ValidationError(self.throttled, code="throttled")
        try:
            value = super().clean_old_password()
        except ValidationError:
            lock = login.record_failure(username=username, address=address)
            if lock is not None:
                self.throttled = lock.message()
                raise ValidationError(self.throttled, code="throttled") from None
            raise
        login.record_success(username=username, address=address)
        return value
