"""Secrets out of text that came back from a model endpoint (error bodies, stream errors).

A server may echo what it was sent: the API key (whole, cut short or with a character changed:
"Incorrect API key provided: sk-abc...xyz"), the Authorization header, or the credentials of a
base URL such as ``http://user:password@host/v1`` (which travel as HTTP Basic auth, so also as
base64). ``scrub_secrets`` replaces every such piece with ``[redacted]``, then anything shaped
like a well-known key or token (``memory.assembly.governance.redact``), before the text reaches
a log, an exception message or the user.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import unquote, urlsplit

from memory.assembly.governance import redact

REDACTED = "[redacted]"
#: Fewest characters of a secret that count as a piece of it (shorter runs are too common).
MIN_PIECE = 8
_WORD = re.compile(r"[A-Za-z0-9._~+/=:-]+")
_GLUE = re.compile(r"([=:]+)")
_BASIC = re.compile(r"(?i)(\bbasic\s+)[A-Za-z0-9+/=_-]{4,}")


def _secrets(*, key: str | None, base_url: str | None) -> list[str]:
    found = [key] if key else []
    if base_url:
        try:
            parts = urlsplit(base_url)
            user, password = parts.username, parts.password
        except ValueError:
            user = password = None
        if password:  # the user name alone is no secret (and may be a common word)
            found += [password, unquote(password)]
        if user or password:
            pair = f"{unquote(user or '')}:{unquote(password or '')}".encode()
            found += [base64.b64encode(pair).decode(), base64.urlsafe_b64encode(pair).decode()]
            found += [f"{user or ''}:{password or ''}"]
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def _near(word: str, secret: str) -> bool:
    """``word`` is ``secret``, a piece of it, or it with a few characters changed, in any
    letter case (an error page may upper-case what it echoes)."""
    word, secret = word.lower(), secret.lower()
    if len(secret) < MIN_PIECE:
        return word == secret
    if secret in word or (len(word) >= MIN_PIECE and word in secret):
        return True
    head = next((i for i, (a, b) in enumerate(zip(word, secret)) if a != b), min(len(word), len(secret)))
    return head >= MIN_PIECE or (len(word) >= MIN_PIECE and word[-MIN_PIECE:] == secret[-MIN_PIECE:])


def _scrub_word(word: str, secrets: list[str]) -> str:
    """``word`` redacted if it is near a secret; a word glued to a name by ``=`` or ``:``
    (``api_key=sk-…`` cut short) has each of its parts judged alone, and keeps the name."""
    if any(_near(word, s) for s in secrets):
        return REDACTED
    parts = _GLUE.split(word)
    if len(parts) == 1:
        return word
    return "".join(
        REDACTED if i % 2 == 0 and part and any(_near(part, s) for s in secrets) else part
        for i, part in enumerate(parts)
    )


def scrub_secrets(text: str, *, key: str | None = None, base_url: str | None = None) -> str:
    """``text`` without the key, the base URL's credentials, or anything close to them."""
    if not text:
        return text
    secrets = _secrets(key=key, base_url=base_url)
    for secret in secrets:
        text = re.sub(re.escape(secret), REDACTED, text, flags=re.IGNORECASE)
    if secrets:
        text = _WORD.sub(lambda m: _scrub_word(m.group(0), secrets), text)
    text = _BASIC.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return redact(text)[0]
