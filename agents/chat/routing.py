"""WebSocket routes, mounted by modex_web.asgi (behind AllowedHostsOriginValidator + AuthMiddlewareStack)."""

from django.urls import re_path

from agents.chat.consumer import ChatConsumer

# Any id reaches the consumer, which closes with 4404 for one the user does not own (a route
# miss would be an opaque handshake failure instead).
websocket_urlpatterns: list = [
    re_path(r"^ws/chat/(?P<conversation_id>[^/]{1,128})/$", ChatConsumer.as_asgi()),
]
