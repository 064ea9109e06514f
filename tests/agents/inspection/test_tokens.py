"""Personal API tokens: the settings page (shown once, hashed, revoke), and the token service."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agents.personal import tokens
from agents.models import PersonalAPIToken

pytestmark = pytest.mark.django_db

TOKEN_RE = re.compile(r"mdx_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


def test_create_shows_the_token_once_and_stores_only_its_hash(owner, client_for):
    client = client_for(owner)
    response = client.post("/settings/tokens/", {"name": "nightly <export>"})
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    body = response.content.decode()
    raw = TOKEN_RE.search(body).group(0)
    assert "nightly &lt;export&gt;" in body and "shown only this once" in body
    row = PersonalAPIToken.objects.get(user=owner)
    assert raw not in (row.digest, row.prefix) and raw.startswith(f"mdx_{row.prefix}_")
    later = client.get("/settings/tokens/").content.decode()
    assert raw not in later and f"mdx_{row.prefix}_…" in later
    assert Client().get("/api/conversations", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200


def test_revoke_stops_the_token(owner, client_for):
    token, raw = tokens.create_token(user=owner, name="script")
    client = client_for(owner)
    response = client.post(f"/settings/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    assert "Revoked" in client.get("/settings/tokens/").content.decode()
    assert Client().get("/api/conversations", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 302  # idempotent


@pytest.mark.parametrize("who", ["colleague", "outsider"])
def test_another_users_token_cannot_be_seen_or_revoked(owner, colleague, outsider, client_for, who):
    token, raw = tokens.create_token(user=owner, name="owner's script")
    client = client_for({"colleague": colleague, "outsider": outsider}[who])
    assert "owner&#x27;s script" not in client.get("/settings/tokens/").content.decode()
    assert client.post(f"/settings/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_bad_names_and_too_many_tokens(owner, client_for):
    client = client_for(owner)
    assert client.post("/settings/tokens/", {"name": "   "}).status_code == 422
    assert client.post("/settings/tokens/", {"name": "x" * 101}).status_code == 422
    for i in range(tokens.MAX_ACTIVE_TOKENS):
        tokens.create_token(user=owner, name=f"t{i}")
    response = client.post("/settings/tokens/", {"name": "one more"})
    assert response.status_code == 422 and b"revoke one" in response.content
    assert client.put("/settings/tokens/").status_code == 405


def test_authenticate_token_rejects_everything_but_an_active_token(owner):
    token, raw = tokens.create_token(user=owner, name="t")
    assert tokens.authenticate_token(raw) == owner
    for bad in ("", "mdx_", raw[:-1], raw + "x", raw.replace("mdx_", "xdm_"), f"mdx_{token.prefix}_wrong", "a" * 500):
        assert tokens.authenticate_token(bad) is None, bad
    owner.is_active = False
    owner.save()
    assert tokens.authenticate_token(raw) is None
