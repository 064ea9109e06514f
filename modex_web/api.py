"""The JSON API: one NinjaAPI, one router per app (OpenAPI at /api/docs)."""

from ninja import NinjaAPI, Schema

api = NinjaAPI(title="Modex API", version="1", urls_namespace="api")


class Health(Schema):
    status: str


@api.get("/health", response=Health, auth=None, summary="Liveness probe")
def health(request) -> dict:
    return {"status": "ok"}
