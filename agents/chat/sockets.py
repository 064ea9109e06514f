"""Who holds which chat sockets, and closing them from anywhere (any worker, with Redis).

Every open chat socket is in two channel-layer groups: its user's (``user_group``) and its
conversation's (``conversation_group``). Closing them is a group message, so it reaches the
sockets of every worker that shares the channel layer (the Redis layer; the in-memory layer
reaches this process only):

* ``close_user_sockets``: the user signed out, changed their password, or was deactivated:
  every socket of theirs closes with 4401 (``keep_session`` spares the sockets of the browser
  session that changed the password, which stays signed in);
* ``close_conversation_sockets``: the conversation was deleted: its sockets close with 4404.

``SocketLimits`` keeps this process's count of each user's open sockets and running turns
against ``MODEX_MAX_SOCKETS_PER_USER`` and ``MODEX_MAX_TURNS_PER_USER``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter
from importlib import import_module

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.utils.crypto import constant_time_compare

from agents.models import Conversation

logger = logging.getLogger("agents.chat.sockets")

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_MANY = 4429  # the user has MODEX_MAX_SOCKETS_PER_USER chat sockets open already
#: The channel-layer message types (handled by ChatConsumer.modex_revoke / modex_deleted).
REVOKE = "modex.revoke"
DELETED = "modex.deleted"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def user_group(user_id: object) -> str:
    """The group of every chat socket of one user (a valid group name whatever the id)."""
    return f"modex.user.{_digest(str(user_id))}"


def conversation_group(conversation_id: str) -> str:
    """The group of every chat socket on one conversation."""
    return f"modex.conversation.{_digest(conversation_id)}"


def session_tag(session_key: str | None) -> str:
    """What a socket and a revocation compare to tell one browser session (never the key)."""
    return _digest(f"session:{session_key}") if session_key else ""


def _send(group: str, message: dict) -> bool:
    """Send ``message`` to ``group`` from synchronous code; False (logged) when it could not go.
    The socket's own checks (each turn and sync) still refuse a revoked user or a deleted
    conversation if a message is lost."""
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.exception("could not send %s to %s", message.get("type"), group)
        return False
    return True


async def aclose_user_sockets(*, user_id: object, keep_session: str | None = None) -> None:
    """``close_user_sockets`` from async code."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(user_group(user_id), {"type": REVOKE, "keep": session_tag(keep_session)})


def close_user_sockets(*, user_id: object, keep_session: str | None = None) -> bool:
    """Close every chat socket of ``user_id`` with 4401, in every worker on the channel layer;
    sockets opened by the browser session ``keep_session`` (a session key) stay open."""
    return _send(user_group(user_id), {"type": REVOKE, "keep": session_tag(keep_session)})


def close_session_sockets(*, user_id: object, session_key: str | None) -> bool:
    """Close the chat sockets of one browser session of ``user_id`` with 4401 (it signed out)."""
    if not session_key:
        return close_user_sockets(user_id=user_id)
    return _send(user_group(user_id), {"type": REVOKE, "only": session_tag(session_key)})


def close_conversation_sockets(*, conversation_id: str) -> bool:
    """Close every chat socket on ``conversation_id`` with 4404 (it was deleted)."""
    return _send(conversation_group(conversation_id), {"type": DELETED})


def still_allowed(*, user_id: str, session_key: str | None, conversation_id: str) -> int | None:
    """None while a socket may go on: its browser session still signs ``user_id`` in (not
    signed out, password unchanged, user active) and the conversation is still theirs; else
    the close code (4401 or 4404). Read before every turn and every sync, so a revocation
    whose group message was lost is still caught at the next frame."""
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None or not user.is_active or not session_key:
        return CLOSE_UNAUTHENTICATED
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    if str(data.get(SESSION_KEY)) != str(user.pk):
        return CLOSE_UNAUTHENTICATED
    stored_hash = data.get(HASH_SESSION_KEY) or ""
    if not constant_time_compare(stored_hash, user.get_session_auth_hash()):
        return CLOSE_UNAUTHENTICATED
    if not Conversation.objects.filter(pk=conversation_id, owner_id=user.pk).exists():
        return CLOSE_NOT_FOUND
    return None


class SocketLimits:
    """This process's count of open sockets and running turns per user, against the caps.

    Per process: with several workers a user can hold up to the cap on each. The counts change
    on the event loop and from threads alike, under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: Counter[str] = Counter()
        self._turns: Counter[str] = Counter()
        self._syncs: dict[str, tuple[float, float]] = {}  # user -> (tokens left, when counted)

    def open_socket(self, user_id: str) -> bool:
        """Count one more socket of ``user_id``; False (nothing counted) at the cap."""
        with self._lock:
            if self._sockets[user_id] >= settings.MODEX_MAX_SOCKETS_PER_USER:
                return False
            self._sockets[user_id] += 1
            return True

    def close_socket(self, user_id: str) -> None:
        with self._lock:
            self._sockets[user_id] -= 1
            if self._sockets[user_id] <= 0:
                del self._sockets[user_id]

    def start_turn(self, user_id: str) -> bool:
        """Count one more running turn of ``user_id``; False (nothing counted) at the cap."""
        with self._lock:
            if self._turns[user_id] >= settings.MODEX_MAX_TURNS_PER_USER:
                return False
            self._turns[user_id] += 1
            return True

    def end_turn(self, user_id: str) -> None:
        with self._lock:
            self._turns[user_id] -= 1
            if self._turns[user_id] <= 0:
                del self._turns[user_id]

    def allow_sync(self, user_id: str, *, now: float | None = None) -> bool:
        """One sync of ``user_id`` (over all their sockets), within ``MODEX_SYNCS_PER_MINUTE``:
        a bucket of that many, refilled evenly over a minute. False: refuse this one."""
        rate = settings.MODEX_SYNCS_PER_MINUTE
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, then = self._syncs.get(user_id, (float(rate), now))
            tokens = min(float(rate), tokens + (now - then) * rate / 60.0)
            if tokens < 1.0:
                self._syncs[user_id] = (tokens, now)
                return False
            self._syncs[user_id] = (tokens - 1.0, now)
            if len(self._syncs) > 10_000:  # forget the fullest buckets of users long gone
                for key in [k for k, (t, w) in self._syncs.items() if now - w > 60.0][:5_000]:
                    del self._syncs[key]
            return True

    def sockets(self, user_id: str) -> int:
        with self._lock:
            return self._sockets[user_id]

    def turns(self, user_id: str) -> int:
        with self._lock:
            return self._turns[user_id]


limits = SocketLimits()
