"""The JSON API: one NinjaAPI, one router per app (OpenAPI at /api/docs).

Every endpoint but the health probe needs a caller: a personal API token
(``Authorization: Bearer <token>``, for scripts) or the browser's session (with CSRF on unsafe
methods). Without either: 401. The documentation (/api/docs) and the schema (/api/openapi.json)
need the same: a signed-in browser, or a token; anonymous visitors of the docs are sent to the
login page, anonymous schema requests get 401.
"""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import JsonResponse
from ninja import NinjaAPI, Schema

from agents.api import router as agents_router
from agents.personal.tokens import BrowserSessionAuth, TokenAuth
from memory.api import router as memory_router


def signed_in_docs(view):
    """Only callers of the API read its documentation: a session or a bearer token."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.user.is_authenticated or TokenAuth()(request) is not None:
            return view(request, *args, **kwargs)
        if request.path.endswith(".json"):
            return JsonResponse({"detail": "Unauthorized"}, status=401)
        return redirect_to_login(request.get_full_path())

    return wrapper


api = NinjaAPI(title="Modex API", version="1", urls_namespace="api", auth=[TokenAuth(), BrowserSessionAuth()],
               docs_decorator=signed_in_docs)


class Health(Schema):
    status: str


@api.get("/health", response=Health, auth=None, summary="Liveness probe")
def health(request) -> dict:
    return {"status": "ok"}


api.add_router("/", agents_router)
api.add_router("/memory", memory_router)
