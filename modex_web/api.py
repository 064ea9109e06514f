"""The JSON API: one NinjaAPI, one router per app (OpenAPI at /api/docs).

Every endpoint but the health probe needs a caller: a personal API token
(``Authorization: Bearer <token>``, for scripts) or the browser's session (with CSRF on unsafe
methods). Without either: 401.
"""

from ninja import NinjaAPI, Schema

from agents.api import router as agents_router
from agents.personal.tokens import BrowserSessionAuth, TokenAuth
from memory.api import router as memory_router

api = NinjaAPI(title="Modex API", version="1", urls_namespace="api", auth=[TokenAuth(), BrowserSessionAuth()])


class Health(Schema):
    status: str


@api.get("/health", response=Health, auth=None, summary="Liveness probe")
def health(request) -> dict:
    return {"status": "ok"}


api.add_router("/", agents_router)
api.add_router("/memory", memory_router)
