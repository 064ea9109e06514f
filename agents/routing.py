"""WebSocket routes, mounted by modex_web.asgi."""

websocket_urlpatterns: list = []
