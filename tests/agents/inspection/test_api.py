"""The JSON API: auth (session + CSRF, personal tokens), ownership (404), status codes."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.test import Client

from agents.personal.tokens import create_token, revoke_token
from memory.compression.pruned_format import HEAD_RE
from tests.agents.inspection.support import seed

pytestmark = pytest.mark.django_db


def bearer(raw: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def api_for(user):
    """A client whose requests carry a fresh personal token of ``user``."""
    _, raw = create_token(user=user, name="test")
    client = Client()

    def call(method: str, path: str, body=None, **extra):
        kwargs = {**bearer(raw), **extra}
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type="application/json")
        return getattr(client, method)(f"/api{path}", **kwargs)

    return call


def object_paths(seeded) -> list[str]:
    c = seeded.conversation.pk
    return [f"/conversations/{c}", f"/conversations/{c}/messages", f"/conversations/{c}/pruned"]


def every_get_path(seeded) -> list[str]:
    return ["/conversations", "/agents", "/agents/default/core", "/agents/default/core/USER.md",
            "/agents/default/core/USER.md/history", "/agents/default/experiences", "/scopes",
            "/memory/archives", "/memory/archives/default/documents",
            f"/memory/archives/default/documents/{seeded.document.id}", "/memory/archives/default/search?q=weather",
            *object_paths(seeded)]


def test_anonymous_and_bad_tokens_get_401(services, owner):
    seeded = seed(services, owner)
    _, raw = create_token(user=owner, name="soon revoked")
    token = revoke_token(user=owner, token_id=_.pk)
    assert token.revoked_at is not None
    for headers in ({}, bearer(raw), bearer("mdx_000000000000_nope"), bearer("garbage"),
                    {"HTTP_AUTHORIZATION": "Basic b3duZXI6b3duZXItcHctMQ=="}):
        for path in every_get_path(seeded):
            response = Client().get(f"/api{path}", **headers)
            assert response.status_code == 401, (path, headers)
        response = Client().put("/api/agents/default/core/USER.md", data='{"text": "x", "expected_version": 1}',
                                content_type="application/json", **headers)
        assert response.status_code == 401
    assert Client().get("/api/health").status_code == 200


def test_a_valid_token_works_and_records_its_use(services, owner):
    seed(services, owner)
    token, raw = create_token(user=owner, name="script")
    assert token.last_used_at is None and raw.startswith("mdx_") and token.digest != raw
    assert hashlib.sha256(raw.encode()).hexdigest() == token.digest
    response = Client().get("/api/conversations", **bearer(raw))
    assert response.status_code == 200 and len(response.json()) == 1
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize("who", ["colleague", "outsider"])
def test_another_users_objects_are_404(services, owner, colleague, outsider, who):
    seeded = seed(services, owner)
    call = api_for({"colleague": colleague, "outsider": outsider}[who])
    for path in object_paths(seeded):
        response = call("get", path)
        assert response.status_code == 404, path
        assert "weather" not in response.content.decode()
    assert call("get", "/conversations").json() == []
    assert call("get", f"/memory/archives/default/documents/{seeded.document.id}").status_code == 404
    assert call("get", "/memory/archives/default/documents").json() == []
    assert call("get", "/memory/archives/default/search?q=weather").json() == []
    assert call("get", "/memory/archives").json() == []
    core = call("get", "/agents/default/core").json()
    assert all("owner likes" not in f["text"] for f in core["files"])


def test_conversation_messages_and_catalog(services, owner):
    seeded = seed(services, owner)
    call = api_for(owner)
    c = seeded.conversation.pk
    detail = call("get", f"/conversations/{c}").json()
    assert detail["id"] == c and detail["session"]["catalogued"] == 4 and detail["session"]["count"] == 5
    messages = call("get", f"/conversations/{c}/messages").json()["messages"]
    assert [m["seq"] for m in messages] == [4, 5, 6, 7, 8]
    assert messages[0]["kind"] == "compact_summary"
    call_message = messages[2]
    assert call_message["tool_calls"][0]["name"] == "search" and call_message["reasoning_content"] == "I should look it up."
    window = call("get", f"/conversations/{c}/messages?after_seq=5&last=2").json()["messages"]
    assert [m["seq"] for m in window] == [7, 8]
    pruned = call("get", f"/conversations/{c}/pruned").json()
    assert pruned["total"] == 4 and [e["seq"] for e in pruned["entries"]] == [1, 2, 3, 4]
    expected = []
    for path in services.catalog.files(seeded.session):
        for number, line in enumerate(path.read_text().split("\n"), start=1):
            if HEAD_RE.match(line):
                expected.append(f"pruned/{c}/{path.name}:{number}:{line}")
    assert [f"{t['file']}:{t['line']}:{t['heading']}" for t in pruned["toc"]] == expected
    assert call("get", f"/conversations/{c}/messages?last=-1").status_code == 422
    assert call("get", "/conversations/..%2F..%2Fetc").status_code == 404


def test_core_memory_read_update_and_errors(services, owner):
    seed(services, owner)
    call = api_for(owner)
    core = call("get", "/agents/default/core").json()
    assert core["enabled"] and [f["file"] for f in core["files"]] == ["SOUL.md", "USER.md", "MEMORY.md"]
    user_file = call("get", "/agents/default/core/USER.md").json()
    assert "owner likes sailing" in user_file["text"] and user_file["editable"]
    ok = call("put", "/agents/default/core/USER.md", {"text": "- new profile\n", "expected_version": user_file["version"]})
    assert ok.status_code == 200 and ok.json()["version"] == user_file["version"] + 1
    stale = call("put", "/agents/default/core/USER.md", {"text": "late", "expected_version": user_file["version"]})
    assert stale.status_code == 409 and "changed meanwhile" in stale.json()["detail"]
    full = call("put", "/agents/default/core/USER.md", {"text": "word " * 4000, "expected_version": user_file["version"] + 1})
    assert full.status_code == 422 and "over its cap" in full.json()["detail"]
    soul = call("put", "/agents/default/core/SOUL.md", {"text": "hijack", "expected_version": 1})
    assert soul.status_code == 403
    assert call("get", "/agents/default/core/NOTES.md").status_code == 404
    assert call("get", "/agents/helper/core").status_code == 404
    assert call("get", "/agents/nope/core/USER.md").status_code == 404
    assert call("put", "/agents/default/core/USER.md", {"text": "x"}).status_code == 422
    garbled = call("put", "/agents/default/core/USER.md", data="{not json", content_type="application/json")
    assert garbled.status_code == 400
    assert call("put", "/agents/default/core/USER.md", {"text": "x", "expected_version": -1}).status_code == 422
    history = call("get", "/agents/default/core/USER.md/history").json()
    assert [h["who"] for h in history] == ["you", "the agent"] and history[0]["action"] == "rewrite"
    plain = call("get", "/agents/plain/core").json()
    assert plain["enabled"] is False and "core_enabled: true" in plain["how_to_enable"] and plain["files"] == []
    off = call("put", "/agents/plain/core/USER.md", {"text": "x", "expected_version": 0})
    assert off.status_code == 409 and "Core memory is off" in off.json()["detail"]
    lessons = call("get", "/agents/default/experiences").json()
    assert [e["name"] for e in lessons] == ["Checking the weather"]
    assert call("get", "/agents/plain/experiences").json() == []
    assert {a["name"] for a in call("get", "/agents").json()} == {"default", "plain"}


def test_session_auth_enforces_csrf_on_writes(services, owner):
    seed(services, owner)
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    read = client.get("/api/agents/default/core/USER.md")
    assert read.status_code == 200
    body = json.dumps({"text": "via browser", "expected_version": read.json()["version"]})
    assert client.put("/api/agents/default/core/USER.md", data=body, content_type="application/json").status_code == 403
    client.get("/memory/")  # sets the CSRF cookie, as any page does
    token = client.cookies["csrftoken"].value
    response = client.put("/api/agents/default/core/USER.md", data=body, content_type="application/json",
                          HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200 and response.json()["text"] == "via browser"
    _, raw = create_token(user=owner, name="script")
    scripted = Client(enforce_csrf_checks=True)  # a token needs no CSRF: browsers never send it on their own
    response = scripted.put("/api/agents/default/core/USER.md", data=json.dumps(
        {"text": "via script", "expected_version": response.json()["version"]}), content_type="application/json",
        **bearer(raw))
    assert response.status_code == 200


def test_scope_tree_read_and_staff_only_update(services, owner, staff, memory_bot):
    tree = api_for(owner)("get", "/scopes").json()
    assert tree["sha256"] == hashlib.sha256(memory_bot.read_bytes()).hexdigest()
    nodes = {n["name"]: n for n in tree["nodes"]}
    assert nodes["default"]["core_enabled"] and not nodes["plain"]["archive_enabled"] and nodes["helper"]["depth"] == 1
    update = {"sha256": tree["sha256"], "nodes": {"plain": {"archive_enabled": True}}}
    assert api_for(owner)("put", "/scopes", update).status_code == 403
    assert memory_bot.read_bytes().decode().count("archive_enabled") == 1
    call = api_for(staff)
    stale = call("put", "/scopes", {**update, "sha256": "0" * 64})
    assert stale.status_code == 409 and stale.json()["status"] == "conflict"
    invalid = call("put", "/scopes", {"sha256": tree["sha256"], "nodes": {"plain": {"core_enabled": True}}})
    assert invalid.status_code == 422 and invalid.json()["status"] == "invalid"
    assert call("put", "/scopes", {"sha256": tree["sha256"], "nodes": {"ghost": {}}}).status_code == 422
    assert call("put", "/scopes", {"sha256": tree["sha256"], "nodes": {"helper": {"core_enabled": True}}}).status_code == 422
    saved = call("put", "/scopes", update)
    assert saved.status_code == 200 and saved.json()["status"] == "saved"
    assert "restart" in saved.json()["message"] and any(line.startswith("+") for line in saved.json()["diff"])
    fresh = {n["name"]: n for n in saved.json()["tree"]["nodes"]}
    assert fresh["plain"]["archive_enabled"] and saved.json()["tree"]["sha256"] != tree["sha256"]
    threshold = call("put", "/scopes", {"sha256": saved.json()["tree"]["sha256"],
                                        "nodes": {"helper": {"compression_threshold": 3000}}})
    assert threshold.status_code == 200
    assert {n["name"]: n for n in threshold.json()["tree"]["nodes"]}["helper"]["compression_threshold"] == 3000
    assert call("put", "/scopes", update | {"sha256": threshold.json()["tree"]["sha256"]}).json()["status"] == "unchanged"


def test_openapi_schema_is_served(services, owner):
    assert Client().get("/api/openapi.json").status_code == 401  # to callers of the API only
    _, raw = create_token(user=owner, name="docs")
    response = Client().get("/api/openapi.json", **bearer(raw))
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in ("/api/conversations", "/api/agents/{agent}/core/{file}", "/api/scopes", "/api/memory/archives"):
        assert path in paths
    schemes = response.json()["components"]["securitySchemes"]
    assert {"TokenAuth", "BrowserSessionAuth"} <= set(schemes)
