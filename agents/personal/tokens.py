"""Personal API tokens: create (shown once), list, revoke, and authenticate a bearer token.

A token reads ``mdx_<prefix>_<secret>``: ``prefix`` (12 hex characters) is public, stored as
is and used to find the row; only the sha256 of the whole token is stored, compared in
constant time. A token expires ``MODEX_TOKEN_TTL_DAYS`` after it was made (0: never), and every
token of a user is revoked when that user's password changes or is made unusable (a stolen
password's tokens do not outlive the reset; agents/personal/revocation.py). A revoked or expired token, or one whose user is inactive, authenticates nobody.
A read-only token authenticates reads (GET, HEAD, OPTIONS) only: a script that only exports
cannot change memory if it leaks.
``TokenAuth`` is the django-ninja security class for ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone
from ninja.security import HttpBearer, SessionAuth

from agents.models import PersonalAPIToken

TOKEN_PREFIX = "mdx_"
PREFIX_CHARS = 12
MAX_NAME = 100
MAX_ACTIVE_TOKENS = 20
#: ``last_used_at`` is written at most this often per token (a script may call many times a second).
TOUCH_EVERY = timedelta(minutes=1)


class TokenError(Exception):
    """Base of the token errors; the message says what to do."""


class TokenNotFound(TokenError):
    """No token of this user by that id (another user's token is reported the same way)."""


class InvalidTokenName(TokenError, ValueError):
    """An empty or over-long token name, or too many active tokens."""


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _split(raw: str) -> str | None:
    """The prefix of a well-formed token, else None."""
    if not isinstance(raw, str) or len(raw) > 200 or not raw.startswith(TOKEN_PREFIX):
        return None
    prefix = raw[len(TOKEN_PREFIX) : len(TOKEN_PREFIX) + PREFIX_CHARS]
    if len(prefix) != PREFIX_CHARS or raw[len(TOKEN_PREFIX) + PREFIX_CHARS : len(TOKEN_PREFIX) + PREFIX_CHARS + 1] != "_":
        return None
    return prefix


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def create_token(*, user, name: str, read_only: bool = False) -> tuple[PersonalAPIToken, str]:
    """A new token for ``user``: the row and the token text, which is never retrievable again."""
    name = " ".join((name or "").split())
    if not name:
        raise InvalidTokenName("Give the token a name, e.g. the script that will use it.")
    if len(name) > MAX_NAME:
        raise InvalidTokenName(f"A token name has at most {MAX_NAME} characters.")
    if sum(t.active for t in PersonalAPIToken.objects.filter(user=user, revoked_at__isnull=True)) >= MAX_ACTIVE_TOKENS:
        raise InvalidTokenName(f"You have {MAX_ACTIVE_TOKENS} active tokens; revoke one you no longer use first.")
    for _ in range(5):
        prefix = secrets.token_hex(PREFIX_CHARS // 2)
        raw = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
        try:
            token = PersonalAPIToken.objects.create(
                user=user, name=name, prefix=prefix, digest=_digest(raw), expires_at=_expiry(), read_only=read_only
            )
        except IntegrityError:  # a prefix collision: astronomically rare, just draw again
            continue
        return token, raw
    raise TokenError("Could not create a token; try again.")


def _expiry():
    days = settings.MODEX_TOKEN_TTL_DAYS
    return timezone.now() + timedelta(days=days) if days else None


def revoke_all_tokens(*, user) -> int:
    """Revoke every active token of ``user`` (their password changed); how many were."""
    return PersonalAPIToken.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=timezone.now())


def list_tokens(*, user) -> list[PersonalAPIToken]:
    """The user's tokens, newest first (revoked ones included, marked by ``revoked_at``)."""
    return list(PersonalAPIToken.objects.filter(user=user).order_by("-created_at"))


def revoke_token(*, user, token_id: int) -> PersonalAPIToken:
    """Revoke one of the user's tokens (idempotent); raises TokenNotFound for any other id."""
    token = PersonalAPIToken.objects.filter(user=user, pk=token_id).first()
    if token is None:
        raise TokenNotFound("No such token.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def authenticate_token(raw: str, *, method: str = "GET"):
    """The active user a token belongs to, or None (malformed, unknown, revoked, expired,
    inactive, or read-only and ``method`` is not a read)."""
    prefix = _split(raw)
    if prefix is None:
        return None
    token = PersonalAPIToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None or not hmac.compare_digest(token.digest, _digest(raw)):
        return None
    if not token.active or not token.user.is_active:
        return None
    if token.read_only and method.upper() not in SAFE_METHODS:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > TOUCH_EVERY:
        PersonalAPIToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user


class TokenAuth(HttpBearer):
    """``Authorization: Bearer <personal API token>``. Sets ``request.user`` to the token's user."""

    def __call__(self, request):
        # ninja's HttpBearer logs a header of another scheme whole, at ERROR ("Token mdx_..."
        # or "Basic <password>"): read it here and never log it.
        scheme, _, token = (request.headers.get(self.header) or "").strip().partition(" ")
        if scheme.lower() != self.openapi_scheme or not token.strip():
            return None
        return self.authenticate(request, token)

    def authenticate(self, request, token: str):
        user = authenticate_token(token.strip(), method=request.method)
        if user is not None:
            request.user = user
        return user


class BrowserSessionAuth(SessionAuth):
    """Django's session login, for the browser: CSRF is enforced on unsafe methods (ninja's
    SessionAuth does it), but only once there is a signed-in session, so an anonymous call
    (or one with a bad token) gets 401 rather than a confusing CSRF 403."""

    def __call__(self, request):
        if not request.user.is_authenticated:
            return None
        return super().__call__(request)
