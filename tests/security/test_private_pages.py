"""Private responses are never cached, and what only the operator should know is shown to staff only.

Every route of the URL configuration (pages, the JSON API, the admin) is requested for real
through the Django test client, signed in, with real ids of the user's own objects; every
response must carry ``Cache-Control: no-store``. A new route is covered without touching this
test (it walks the resolver), and one whose parameters it cannot fill fails it.
"""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import get_resolver
from django.urls.resolvers import RegexPattern, URLResolver

from agents.personal import memory as user_memory
from agents.personal.tokens import create_token
from tests.agents.inspection.support import memory_bot, seed, services  # noqa: F401

pytestmark = pytest.mark.django_db


def routes(resolver=None, prefix: str = "") -> list[tuple[str, bool]]:
    """Every route as (its pattern text, whether any part of it is a regular expression)."""
    out = []
    for entry in (resolver or get_resolver()).url_patterns:
        text = prefix + str(entry.pattern)
        regex = isinstance(entry.pattern, RegexPattern)
        if isinstance(entry, URLResolver):
            out += [(t, r or regex) for t, r in routes(entry, text)]
        else:
            out.append((text, regex))
    return out


def concrete(pattern: str, values: dict[str, str]) -> str:
    """A path for ``pattern`` with each ``<conv:name>`` filled from ``values``."""
    def fill(match: re.Match) -> str:
        name = match.group(1).rpartition(":")[2]
        if name not in values:
            raise AssertionError(f"no value for <{match.group(1)}> in {pattern!r}: add one to this test")
        return values[name]

    return "/" + re.sub(r"<([^>]+)>", fill, pattern)


def admin_regex_path(pattern: str) -> str:
    """The admin's few regex routes (``^(?P<app_label>agents|...)/$``): the first alternative."""
    path = pattern.replace("^", "").replace("$", "")
    path = re.sub(r"\(\?P<\w+>([\w.-]+)(\|[^)]*)?\)", r"\1", path)
    return "/" + path


def no_store(response) -> bool:
    return "no-store" in response.get("Cache-Control", "")


def test_every_route_answers_with_no_store(services, owner, django_user_model):  # noqa: F811
    admin = django_user_model.objects.create_superuser(username="root-admin", password="admin-pw-1")
    seeded = seed(services, owner)
    token, raw = create_token(user=owner, name="script")
    values = {
        "conversation_id": seeded.conversation.pk, "agent": "default", "file": "USER.md",
        "token_id": str(token.pk), "document_id": seeded.document.id, "object_id": str(owner.pk),
        "app_label": "agents", "content_type_id": "1", "url": "nowhere", "id": "1",
        "session_id": seeded.conversation.pk, "scope_key": seeded.session.key(), "key": "todo.json",
        "index": "0", "version": "1", "proposal_id": "none",
    }
    people = {"owner": Client(raise_request_exception=False), "staff": Client(raise_request_exception=False)}
    people["owner"].force_login(owner)
    people["staff"].force_login(admin)
    checked = []
    for pattern, regex in routes():
        if pattern.startswith("static/"):
            continue
        path = admin_regex_path(pattern) if regex else concrete(pattern, values)
        who = "staff" if pattern.startswith(("admin/", "scopes/")) else "owner"
        response = people[who].get(path)
        assert response.status_code < 500, (path, response.status_code)
        assert no_store(response), f"{path} ({response.status_code}) has Cache-Control {response.get('Cache-Control')!r}"
        checked.append(path)
    # The API with a token, anonymous callers, POST answers and the login page too.
    for path in ("/api/conversations", "/api/agents/default/core", f"/api/conversations/{seeded.conversation.pk}/messages"):
        response = Client().get(path, HTTP_AUTHORIZATION=f"Bearer {raw}")
        assert response.status_code == 200 and no_store(response), path
        assert response.json() is not None
    assert no_store(Client().get("/api/conversations"))  # 401 JSON
    assert no_store(Client().get("/accounts/login/"))
    assert no_store(people["owner"].post("/settings/tokens/", {"name": "another"}))
    assert no_store(people["owner"].post(f"/conversations/{seeded.conversation.pk}/rename/", {"title": "Renamed"}))
    assert len(checked) > 40, checked
    assert any(p.startswith("/admin/") for p in checked) and any(p.startswith("/api/") for p in checked)


def test_static_files_keep_their_own_cache_policy(client):
    response = client.get("/static/css/modex.css")
    if response.status_code == 200:  # served by WhiteNoise when collected
        assert not no_store(response)


# -- what only staff see --------------------------------------------------------------------------


@pytest.fixture
def endpoint_services(services):  # noqa: F811
    """The test's services with an OpenAI-compatible model at a private address (nothing is
    sent to it: the home page only describes it)."""
    import dataclasses

    from agents.chat import service as chat
    from agents.llm.openai import OpenAIChatModel
    from agents.runtime.loop import Runtime

    model = OpenAIChatModel(base_url="http://10.1.2.3:8001/v1", api_key=None, model="qwen-internal")
    built = dataclasses.replace(services, model=model)
    chat.set_runtime_for_tests(Runtime(services=built))
    yield built
    chat.set_runtime_for_tests(None)


def test_the_home_page_shows_the_workspace_and_model_endpoint_to_staff_only(endpoint_services, owner, staff, settings):
    ordinary, boss = Client(), Client()
    ordinary.force_login(owner)
    boss.force_login(staff)
    workspace = str(settings.MODEX_WORKSPACE)
    page = ordinary.get("/").content.decode()
    assert "10.1.2.3" not in page and workspace not in page
    assert "qwen-internal" in page  # the model's name is no secret
    staff_page = boss.get("/").content.decode()
    assert "10.1.2.3:8001" in staff_page and workspace in staff_page


def test_the_scope_tree_api_names_the_declarations_path_to_staff_only(services, owner, staff, memory_bot):  # noqa: F811
    ordinary, boss = Client(), Client()
    ordinary.force_login(owner)
    boss.force_login(staff)
    tree = ordinary.get("/api/scopes").json()
    assert tree["file"] is None and tree["nodes"]
    assert str(memory_bot) not in json.dumps(tree) and memory_bot.name not in json.dumps(tree)
    assert boss.get("/api/scopes").json()["file"]


def test_soul_history_names_staff_to_staff_only(services, owner, staff, django_user_model):  # noqa: F811
    seed(services, owner)
    state = user_memory.read_core_file(user=staff, agent="default", file="SOUL.md").state
    user_memory.update_core_file(user=staff, agent="default", file="SOUL.md", text="I am careful and kind.",
                                 expected_version=state.version)
    other_staff = django_user_model.objects.create_user(username="colleague-staff", password="pw-2-staff", is_staff=True)
    ordinary, boss = Client(), Client()
    ordinary.force_login(owner)
    boss.force_login(other_staff)
    page = ordinary.get("/memory/default/").content.decode()
    assert "staffer" not in page and "a staff member" in page
    history = ordinary.get("/api/agents/default/core/SOUL.md/history").json()
    assert all(str(staff.pk) not in h["source"] and "staffer" not in h["who"] for h in history)
    assert any(h["source"] == "staff" and h["who"] == "a staff member" for h in history)
    assert "staff (staffer)" in boss.get("/memory/default/").content.decode()
    staff_history = boss.get("/api/agents/default/core/SOUL.md/history").json()
    assert any(h["source"] == f"admin:{staff.pk}" for h in staff_history)


def test_the_icon_is_named_on_every_page_and_favicon_ico_leads_to_it(client, owner):
    response = client.get("/favicon.ico")  # asked by browsers on pages that name no icon (the admin)
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")
    assert 'rel="icon"' in client.get("/accounts/login/").content.decode()
