"""Django models of the agents app (persistence only)."""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


def _new_conversation_id() -> str:
    return uuid.uuid4().hex


class Conversation(models.Model):
    """One chat between a user and a main agent; its session lives in the memory stores."""

    id = models.CharField(primary_key=True, max_length=32, default=_new_conversation_id, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    agent = models.CharField(max_length=128)
    title = models.CharField(max_length=200, default="New conversation")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return f"{self.title} ({self.agent})"

    @property
    def session_id(self) -> str:
        """The SessionScope id of this conversation's session (a valid scope id)."""
        return self.id


class PersonalAPIToken(models.Model):
    """A personal API token for scripts (``Authorization: Bearer <token>``); see agents/tokens.py.

    The token itself is shown once, at creation; only its sha256 is kept, beside a short
    public ``prefix`` that finds the row without scanning.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)  # sha256 hex of the whole token
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)  # None: never (tokens made before expiry existed)
    read_only = models.BooleanField(default=False)  # GET/HEAD/OPTIONS only

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "personal API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def active(self) -> bool:
        return self.revoked_at is None and not self.expired


class LoginThrottle(models.Model):
    """Failed sign-ins of one account or one client address (agents/personal/login.py).

    ``key`` is a digest (``user:<name>`` or ``addr:<ip>``), so the table names nobody.
    """

    key = models.CharField(max_length=64, unique=True)
    failures = models.PositiveIntegerField(default=0)
    window_started_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "login throttle"
