"""The staff proposals page: staff only, the source conversation shown, accept and reject, the
Dream Engine's warnings; CSRF, escaping. File and SQLite."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client

from agents.models import Conversation
from memory import core_proposals as proposals
from memory.core_memory import SOUL, CoreMemory, Origin
from memory.dream import FAILURE_KEY, LAST_RUN_KEY, FailureRecord, default_archive_scope
from memory.messages import Message, utcnow
from memory.scopes import SessionScope
from memory.stores.base import ArchiveDocument
from tests.agents.inspection.support import HOSTILE, _config

pytestmark = pytest.mark.django_db

URL = "/proposals/"


def core(services, user) -> CoreMemory:
    return CoreMemory(kv=services.bundle.kv, config=_config("default"), agent="default", user=str(user.pk))


def propose_from_chat(services, user):
    conversation = Conversation.objects.create(owner=user, agent="default", title="Naming the bot")
    session = SessionScope(conversation.session_id)
    services.bundle.messages.append(session, [
        Message(role="user", content=f"Hi there {HOSTILE}"),
        Message(role="assistant", content="Hello! How can I help?"),
        Message(role="user", content="Remember that your name is Zorblax."),
    ])
    made = core(services, user).propose(
        file=SOUL, action="append", text="Name: Zorblax", source="agent",
        origin=Origin(session=session.key(), evidence="Remember that your name is Zorblax."))
    return conversation, made


def propose_from_dream(services, user):
    scope = default_archive_scope(agent="default", user=str(user.pk))
    document = services.bundle.archive.put(scope, ArchiveDocument(session="session:old", summary="", messages=(
        Message(role="user", content="Be more formal with me, and call yourself Ada.", seq=4),)))
    return core(services, user).propose(
        file=SOUL, action="append", text="Tone: formal", source="dream",
        origin=Origin(session="session:old", document=document.id, evidence="Be more formal with me"))


def test_only_staff_see_or_decide(services, owner, staff, client_for):
    _, made = propose_from_chat(services, owner)
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert client_for(owner).get(URL).status_code == 403
    decide = f"/proposals/default/{made.id}/"
    assert client_for(owner).post(decide, {"decision": "accept"}).status_code == 403
    assert core(services, owner).read(file=SOUL).text == ""
    assert client_for(staff).get(URL).status_code == 200


def test_each_proposal_shows_the_conversation_it_came_from(services, owner, staff, client_for):
    conversation, from_chat = propose_from_chat(services, owner)
    from_dream = propose_from_dream(services, owner)
    response = client_for(staff).get(URL)
    body = response.content.decode()
    assert response["Cache-Control"] == "no-store"
    assert f'id="proposal-{from_chat.id}"' in body and f'id="proposal-{from_dream.id}"' in body
    assert "“Naming the bot”" in body and "owner" in body  # who, which conversation
    assert f"/admin/memory/storedmessage/session/{conversation.session_id}/" in body
    assert "Hello! How can I help?" in body and "Remember that your name is Zorblax." in body
    assert "the Dream Engine" in body and "Be more formal with me, and call yourself Ada." in body
    assert HOSTILE not in body and "&lt;script&gt;" in body


def test_accept_changes_soul_for_everyone_and_reject_keeps_it_out(services, owner, colleague, staff, client_for):
    _, from_chat = propose_from_chat(services, owner)
    from_dream = propose_from_dream(services, owner)
    staff_client = client_for(staff)
    response = staff_client.post(f"/proposals/default/{from_chat.id}/", {"decision": "accept"})
    assert response.status_code == 302 and response["Location"] == URL
    assert core(services, colleague).read(file=SOUL).text == "Name: Zorblax\n"  # every user's now
    assert core(services, colleague).history(file=SOUL)[-1].source == f"admin:{staff.pk}"
    staff_client.post(f"/proposals/default/{from_dream.id}/", {"decision": "reject"})
    assert "Tone: formal" not in core(services, colleague).read(file=SOUL).text
    assert proposals.list_proposals(kv=services.bundle.kv, agent="default", status="pending") == []
    again = staff_client.post(f"/proposals/default/{from_dream.id}/", {"decision": "accept"}, follow=True)
    assert "rejected already" in again.content.decode()
    assert staff_client.post("/proposals/default/no-such-id/", {"decision": "accept"}).status_code == 404
    assert staff_client.post(f"/proposals/default/{from_dream.id}/", {"decision": "maybe"}).status_code == 400


def test_decisions_need_the_csrf_token(services, owner, staff):
    _, made = propose_from_chat(services, owner)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    assert client.post(f"/proposals/default/{made.id}/", {"decision": "accept"}).status_code == 403
    assert core(services, owner).read(file=SOUL).text == ""


def test_the_dream_engines_warnings_are_shown(services, owner, staff, client_for):
    scope = default_archive_scope(agent="default", user=str(owner.pk))
    now = utcnow()
    failure = FailureRecord(attempts=2, error="the model's answer is not JSON (after a repair request)",
                            failed_at=now, next_attempt_at=now + timedelta(minutes=2), kind="invalid_answer",
                            answer=f"Sure! {HOSTILE}", run_id="run123")
    services.bundle.kv.put(scope, FAILURE_KEY, failure.to_json())
    services.bundle.kv.put(scope, LAST_RUN_KEY, json.dumps({"run_id": "run123", "status": "failed", "warnings": []}))
    body = client_for(staff).get(URL).content.decode()
    assert "did not answer with the JSON edits" in body and "Failed 2 times" in body
    assert "run123" in body and "Sure! &lt;script&gt;" in body and HOSTILE not in body
