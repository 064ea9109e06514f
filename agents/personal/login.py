"""Sign-in throttling: too many failed passwords lock the account (and the client address).

Every password form (``/accounts/login/`` and the admin's login) calls ``reserve(...)`` before
it looks at the password, and ``record_success`` / ``record_failure`` after. ``reserve`` counts
the attempt as a failure in advance, in one locked transaction, and refuses it when the account
or address is locked: so of a burst of parallel attempts, no more than the limit ever reach the
password check, whatever their timing. The counts live in the database (``LoginThrottle``), so
every worker sees the same ones.

* an account name with ``MODEX_LOGIN_MAX_FAILURES`` failures (default 5) within
  ``MODEX_LOGIN_WINDOW`` seconds (900) is locked for ``MODEX_LOGIN_LOCKOUT`` seconds (900);
  while locked even the right password is refused (else the lock would only slow the guessing
  of which password is right, not the guessing itself);
* a client address gets ``MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS`` (default 30) over all account
  names, so one client cannot spread its guesses over many accounts;
* a successful sign-in clears the account's count and gives the address back its reserved
  attempt.

The client address is ``REMOTE_ADDR``, or behind ``MODEX_TRUSTED_PROXIES`` proxies the
``X-Forwarded-For`` entry that the outermost trusted proxy wrote, counted from the right: the
entries left of it are written by the client and prove nothing (``client_address``).

The price is a lockout an attacker can cause on purpose for one account; an operator lifts it at
once with ``manage.py login_unlock <username>``.
"""

from __future__ import annotations

import hashlib
import ipaddress
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
    """The address the throttle counts for ``request``.

    With ``MODEX_TRUSTED_PROXIES`` = 0 (the default), ``REMOTE_ADDR``: what the server's socket
    saw. With N > 0, the Nth ``X-Forwarded-For`` entry from the right: each proxy appends the
    address it was connected from, so the last N entries are written by the N trusted proxies and
    the Nth from the right is the client as the outermost one saw it; anything further left is
    the client's own writing. A header with fewer entries (a request that skipped a proxy) gives
    its leftmost entry; no header, or an entry that is not an IP address, gives ``REMOTE_ADDR``.
    """
    if request is None:
        return None
    remote = request.META.get("REMOTE_ADDR") or None
    trusted = settings.MODEX_TRUSTED_PROXIES
    if trusted <= 0:
        return remote
    entries = [e.strip() for e in (request.META.get("HTTP_X_FORWARDED_FOR") or "").split(",")]
    entries = [e for e in entries if e]
    if not entries:
        return remote
    entry = entries[-min(trusted, len(entries))]
    try:
        return str(ipaddress.ip_address(entry))
    except ValueError:
        return remote


def _keys(username: str, address: str | None) -> list[tuple[str, int]]:
    keys = [(account_key(username), settings.MODEX_LOGIN_MAX_FAILURES)]
    if (addr := address_key(address)) is not None:
        keys.append((addr, settings.MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS))
    return keys


def locked(*, username: str, address: str | None) -> Lock | None:
    """The lock in force for this account name or address, if any (reads only)."""
    now = timezone.now()
    rows = LoginThrottle.objects.filter(key__in=[k for k, _ in _keys(username, address)], locked_until__gt=now)
    until = max((row.locked_until for row in rows), default=None)
    return Lock(until) if until is not None else None


def reserve(*, username: str, address: str | None) -> Lock | None:
    """Count one sign-in attempt as a failure before its password is checked, or refuse it.

    In one transaction that locks the account's and the address's rows: when either is locked,
    returns the lock and counts nothing (the password must not be checked); else adds one to
    both counts and returns None, and the attempt that reaches a limit sets the lock for every
    attempt after it while its own password is still checked. So the Nth attempt within the
    window is checked and the N+1th is not, however many run at once. The caller reports the
    outcome: ``record_success`` (the reservation is given back) or ``record_failure``.
    """
    now = timezone.now()
    window = timedelta(seconds=settings.MODEX_LOGIN_WINDOW)
    lockout = timedelta(seconds=settings.MODEX_LOGIN_LOCKOUT)
    with transaction.atomic():
        rows = []
        for key, limit in _keys(username, address):
            row, _ = LoginThrottle.objects.select_for_update().get_or_create(
                key=key, defaults={"window_started_at": now}
            )
            if row.locked_until and row.locked_until > now:
                return Lock(row.locked_until)
            if now - row.window_started_at > window:
                row.failures, row.window_started_at, row.locked_until = 0, now, None
            rows.append((row, limit))
        for row, limit in rows:
            row.failures += 1
            if row.failures >= limit:
                row.locked_until = now + lockout
            row.save()
    return None


def record_failure(*, username: str, address: str | None) -> Lock | None:
    """A reserved attempt's password was wrong: the count already holds it. Returns the lock
    now in force, if any, for the message."""
    return locked(username=username, address=address)


def record_success(*, username: str, address: str | None = None) -> None:
    """A reserved attempt signed in: clear the account's count and lock, and give the address
    its reserved attempt back (lifting the lock that attempt set, if it set one)."""
    now = timezone.now()
    with transaction.atomic():
        LoginThrottle.objects.filter(key=account_key(username)).delete()
        key = address_key(address)
        if key is None:
            return
        row = LoginThrottle.objects.select_for_update().filter(key=key).first()
        if row is None or row.failures <= 0:
            return
        row.failures -= 1
        if row.failures < settings.MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS and row.locked_until and row.locked_until > now:
            row.locked_until = None
        row.save()


def unlock(*, username: str) -> int:
    """Lift the lock and count of an account name (the operator's command). Rows removed."""
    return LoginThrottle.objects.filter(key=account_key(username)).delete()[0]
