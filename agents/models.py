"""Django models of the agents app (persistence only)."""

import uuid

from django.conf import settings
from django.db import models


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
