"""Security middleware of the site (HTTP responses only; the socket has its own checks).

``NoStoreMiddleware``: every response Django renders carries ``Cache-Control: no-store``
(with ``private`` and the rest of Django's never-cache set), so neither a browser's cache nor a
shared proxy keeps a page or API answer that holds someone's conversations, memory or tokens,
and the back button after signing out does not show them again. Static files never reach it
(WhiteNoise answers them earlier, with their own long cache). A view that already chose a
``Cache-Control`` keeps it.
"""

from __future__ import annotations

from django.utils.cache import add_never_cache_headers
from django.utils.deprecation import MiddlewareMixin


class NoStoreMiddleware(MiddlewareMixin):
    """``Cache-Control: no-store`` on every rendered response that sets no policy of its own
    (MiddlewareMixin: runs in the sync and the async request path alike)."""

    def process_response(self, request, response):
        if not response.has_header("Cache-Control"):
            add_never_cache_headers(response)
        return response
