"""The WebSocket origin check: a socket opens only from a page of this very site.

Channels' ``AllowedHostsOriginValidator`` compares the Origin's host name with ALLOWED_HOSTS and
ignores its scheme and port, so a page served on another port of an allowed host (another app
on the same machine, a dev server) could open a chat socket with the user's cookies and read a
conversation. Here the Origin must equal the site's own origin, scheme and port included, as
Django's CSRF check does for forms: ``<scheme>://<Host header>``, the scheme being ``https`` for
a secure socket (``wss``, or ``SECURE_PROXY_SSL_HEADER`` set by a TLS-terminating proxy), and
the Host being one of ALLOWED_HOSTS; or one of CSRF_TRUSTED_ORIGINS exactly. A handshake without
an Origin, or with any other one, is refused (HTTP 403) before authentication or routing.
Settings are read per handshake, so a test's settings apply.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin1")
    return None


def _normalised(origin: str) -> str | None:
    """``scheme://host[:port]`` lower-cased, the default port dropped; None when not an origin."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") or parts.query:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    port_part = "" if port is None or str(port) == _DEFAULT_PORTS[scheme] else f":{port}"
    return f"{scheme}://{host}{port_part}"


def _secure(scope: dict) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        header, expected = proxy
        name = header.removeprefix("HTTP_").replace("_", "-").lower().encode("latin1")
        value = _header(scope, name)
        return value is not None and value.split(",")[0].strip() == expected
    return False


def same_origin(scope: dict) -> bool:
    """True when the handshake's Origin is this site's own origin (see the module docstring)."""
    origin = _header(scope, b"origin")
    if origin is None:
        return False
    wanted = _normalised(origin)
    if wanted is None:
        return False
    trusted = {_normalised(o) for o in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])}
    if wanted in trusted - {None}:
        return True
    host = _header(scope, b"host")
    if not host:
        return False
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    own = _normalised(f"{'https' if _secure(scope) else 'http'}://{host}")
    return own is not None and wanted == own


class SameOriginValidator:
    """ASGI middleware: pass a WebSocket handshake on only when ``same_origin(scope)``."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards WebSocket connections only")
        if same_origin(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
