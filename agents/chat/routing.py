"""WebSocket routes, mounted by modex_web.asgi (behind the origin check + AuthMiddlewareStack)."""

from django.urls import re_path

from agents.chat.consumer import ChatConsumer, UnroutedConsumer

# Any id of the id alphabet's length reaches the consumer, which closes with 4404 for one the
# user does not own. Every other path is refused at the handshake (HTTP 403) by the last route:
# without it the router raises and the server answers 500 with a traceback.
websocket_urlpatterns: list = [
    re_path(r"^ws/chat/(?P<conversation_id>[^/]{1,128})/$", ChatConsumer.as_asgi()),
    re_path(r"", UnroutedConsumer.as_asgi()),
]
