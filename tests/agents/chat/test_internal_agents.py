"""An internal agent (``chat: false``, the shipped reviewer) is never offered to people: not on
the home or chat pages, not by the conversation form, the memory pages or the API."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from agents.llm import OfflineChatModel
from agents.models import Conversation
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def shipped_runtime(bot_file, tmp_path):
    runtime = Runtime(services=build_services(backend="file", workspace=tmp_path / "ws", model=OfflineChatModel()))
    chat.set_runtime_for_tests(runtime)
    yield runtime
    chat.set_runtime_for_tests(None)


@pytest.fixture
def client(owner):
    client = Client()
    client.force_login(owner)
    return client


def test_the_reviewer_is_not_offered_anywhere(client, shipped_runtime):
    for page in (reverse("home"), reverse("chat:list"), reverse("memory:index")):
        html = client.get(page).content.decode()
        assert "default" in html, page
        # The home page may say in prose that "a reviewer writes lessons"; the agent is not offered.
        assert not any(mark in html for mark in ('"reviewer"', "/reviewer/", ">reviewer<")), page
    assert [a["name"] for a in client.get("/api/agents").json()] == ["default"]


def test_starting_a_conversation_with_the_reviewer_is_refused_with_a_reason(client, owner, shipped_runtime):
    response = client.post(reverse("chat:create"), {"agent": "reviewer"}, follow=True)
    assert "works behind the scenes and is not offered for chat" in response.content.decode()
    assert not Conversation.objects.filter(owner=owner).exists()
    with pytest.raises(chat.AgentUnavailable, match="not offered for chat"):
        chat.create_conversation(user=owner, agent="reviewer")
    assert client.post(reverse("chat:create"), {"agent": "default"}).status_code == 302


def test_an_old_conversation_with_the_reviewer_says_why_it_cannot_go_on(client, owner, shipped_runtime):
    old = Conversation.objects.create(owner=owner, agent="reviewer", title="From before")
    html = client.get(reverse("chat:conversation", args=[old.pk])).content.decode()
    assert "works behind the scenes" in html


def test_the_reviewer_has_no_memory_pages_and_the_api_says_why(client, shipped_runtime):
    assert client.get(reverse("memory:agent", args=["reviewer"])).status_code == 404
    assert client.get(reverse("memory:archive", args=["reviewer"])).status_code == 404
    response = client.get("/api/agents/reviewer/core")
    assert response.status_code == 404 and "works behind the scenes" in response.json()["detail"]
    assert client.get("/api/agents/nobody/core").json()["detail"] == "No such agent."


def test_pages_for_users_name_no_presets_settings_files_or_paths(client, owner, shipped_runtime, settings, django_user_model):
    from django.conf import settings as conf

    conversation = chat.create_conversation(user=owner, agent="default")
    pages = (reverse("home"), reverse("chat:list"), reverse("memory:index"), reverse("memory:agent", args=["default"]),
             reverse("memory:archive", args=["default"]), reverse("chat:pruned", args=[conversation.pk]))
    for page in pages:
        html = client.get(page).content.decode()
        for leak in ("main_agent_memory", "subagent_memory", "bot.yml", str(conf.MODEX_WORKSPACE), "MODEX_"):
            assert leak not in html, (page, leak)
    # Where the Dream Engine is named, it is said what it is.
    for page in (reverse("home"), reverse("memory:agent", args=["default"]), reverse("memory:archive", args=["default"])):
        html = client.get(page).content.decode()
        assert "Dream Engine" in html and "background" in html, page
    staff = django_user_model.objects.create_user(username="boss", password="pw-boss-12345", is_staff=True)
    staff_client = Client()
    staff_client.force_login(staff)
    assert "main_agent_memory" in staff_client.get(reverse("home")).content.decode()  # staff still see the preset
