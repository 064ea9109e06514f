"""What a change of a user's credentials revokes: API tokens, other sessions, open chat sockets.

Wired to the auth signals in ``AgentsConfig.ready``:

* **sign-out** (``user_logged_out``): that browser session's chat sockets close (4401);
* **password change** (``set_password`` + save, by any path: the password page, the admin,
  ``manage.py changepassword``) and **``set_unusable_password``**: every API token of the user
  is revoked and every chat socket of theirs closes (4401; a tab of the browser that changed
  the password reconnects on reload, its session kept). The user's other browser
  sessions are signed out by Django itself: a session remembers a digest of the password hash
  it signed in with, and any other hash signs it out at its next request (and the socket's
  next turn, agents.chat.sockets.still_allowed);
* **deactivation** (saved with ``is_active`` false) and **deletion**: every socket closes
  (tokens of an inactive user authenticate nobody already).

A login's silent hash upgrade (a new hasher or iteration count) is no password change: it
revokes nothing.
"""

from __future__ import annotations

from agents.chat.sockets import close_session_sockets, close_user_sockets
from agents.personal.tokens import revoke_all_tokens

def _password_changed(instance, update_fields) -> bool:
    if getattr(instance, "_password", None) is not None:
        return True  # set_password: the raw password is kept until the save has finished
    if update_fields is not None and "password" not in update_fields:
        return False
    return not instance.has_usable_password()  # set_unusable_password leaves no raw password


def on_user_saved(sender, instance, created: bool, update_fields=None, **kwargs) -> None:
    """post_save of the user model (see the module docstring)."""
    if created:
        return
    if _password_changed(instance, update_fields):
        revoke_all_tokens(user=instance)
        close_user_sockets(user_id=instance.pk)
    elif not instance.is_active and (update_fields is None or "is_active" in update_fields):
        close_user_sockets(user_id=instance.pk)


def on_user_deleted(sender, instance, **kwargs) -> None:
    """post_delete of the user model: their sockets close."""
    close_user_sockets(user_id=instance.pk)


def on_logged_out(sender, request, user, **kwargs) -> None:
    """user_logged_out: the sockets of the session signing out close (the signal comes before
    the session is flushed, so its key is still known)."""
    if user is None:
        return
    session = getattr(request, "session", None)
    close_session_sockets(user_id=user.pk, session_key=getattr(session, "session_key", None))


def connect() -> None:
    """Connect the handlers to the auth signals (idempotent)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.signals import user_logged_out
    from django.db.models.signals import post_delete, post_save

    user_model = get_user_model()
    post_save.connect(on_user_saved, sender=user_model, dispatch_uid="modex-revoke-on-credentials-change")
    post_delete.connect(on_user_deleted, sender=user_model, dispatch_uid="modex-revoke-on-user-deleted")
    user_logged_out.connect(on_logged_out, dispatch_uid="modex-close-sockets-on-logout")
