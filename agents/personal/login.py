"""Sign-in throttling: too many failed passwords lock the account (and the client address).

Every password form (``/accounts/login/`` and the admin's login) checks ``locked(...)`` before
it looks at the password and calls ``record_failure`` / ``record_success`` after. The counts
live in the database (``LoginThrottle``), so every worker sees the same ones.

* an account name with ``MODEX_LOGIN_MAX_FAILURES`` failures (default 5) within
  ``MODEX_LOGIN_WINDOW`` seconds (900) is locked for ``MODEX_LOGIN_LOCKOUT`` seconds (900);
  while locked even the right password is refused (else the lock would only slow the guessing
  of which password is right, not the guessing itself);
* a client address gets ``MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS`` (default 30) over all account
  names, so one client cannot spread its guesses over many accounts;
* a successful sign-in clears the account's count (not the address's).

The price is a lockout an attacker can cause on purpose for one account; an operator lifts it at
once with ``manage.py login_unlock <username>``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.models import LoginThrottle


@dataclass(frozen=True, slots=True)
class Lock:
    """A lock in force: until when, and the words for the user."""

    until: datetime

    def message(self, *, now: datetime | None = None) -> str:
        seconds = max(1, int((self.until - (now or timezone.now())).total_seconds()))
        minutes = -(-seconds // 60)
        return (
            "Too many failed sign-ins for this account or from this address. "
            f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
        )


def _key(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}:{value}".encode("utf-8", "surrogatepass")).hexdigest()


def account_key(username: str) -> str:
    return _key("user", (username or "").strip().lower())


def address_key(address: str | None) -> str | None:
    return _key("addr", address) if address else None


def client_address(request) -> str | None:
    return request.META.get("REMOTE_ADDR") if request is not None else None


def _keys(username: str, address: str | None) -> list[tuple[str, int]]:
    keys = [(account_key(username), settings.MODEX_LOGIN_MAX_FAILURES)]
    if (addr := address_key(address)) is not None:
        keys.append((addr, settings.MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS))
    return keys


def locked(*, username: str, address: str | None) -> Lock | None:
    """The lock in force for this account name or address, if any."""
    now = timezone.now()
    rows = LoginThrottle.objects.filter(key__in=[k for k, _ in _keys(username, address)], locked_until__gt=now)
    until = max((row.locked_until for row in rows), default=None)
    return Lock(until) if until is not None else None


def record_failure(*, username: str, address: str | None) -> Lock | None:
    """Count one failed sign-in; returns the lock it caused, if it caused one."""
    now = timezone.now()
    window = timedelta(seconds=settings.MODEX_LOGIN_WINDOW)
    lockout = timedelta(seconds=settings.MODEX_LOGIN_LOCKOUT)
    lock = None
    with transaction.atomic():
        for key, limit in _keys(username, address):
            row, _ = LoginThrottle.objects.select_for_update().get_or_create(
                key=key, defaults={"window_started_at": now}
            )
            if now - row.window_started_at > window and not (row.locked_until and row.locked_until > now):
                row.failures, row.window_started_at, row.locked_until = 0, now, None
            row.failures += 1
            if row.failures >= limit:
                row.locked_until = now + lockout
                lock = Lock(row.locked_until)
            row.save()
    return lock


def record_success(*, username: str) -> None:
    LoginThrottle.objects.filter(key=account_key(username)).delete()


def unlock(*, username: str) -> int:
    """Lift the lock and count of an account name (the operator's command). Rows removed."""
    return LoginThrottle.objects.filter(key=account_key(username)).delete()[0]
