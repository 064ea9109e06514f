"""What the pages say about the model before any turn: the window and threshold really used
(asked from the server once, from the first page view), whether it calls tools, and the memory
work queued. Real pages, the real HTTP fake server."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from agents.llm.openai import OpenAIChatModel
from agents.tasks import enqueue_experience_review
from tests.agents.support import fresh_queue  # noqa: F401
from tests.fakes.openai_server import FAKE_API_KEY

pytestmark = pytest.mark.django_db
NO_TOOLS = {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 1,
            "chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}


@pytest.fixture
def served(make_runtime, fake_openai):
    fake_openai.props = NO_TOOLS
    model = OpenAIChatModel(base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", timeout=5)
    return make_runtime(model=model)


def page_of(user, url):
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_the_chat_page_shows_the_scaled_window_from_the_first_view(owner, served, fake_openai):
    conversation = chat.create_conversation(user=owner, agent="default")
    page = page_of(owner, reverse("chat:conversation", args=[conversation.pk]))
    # bot.yml (the chat_bot fixture) says 4096 / 700; the server's window is 2048: half of each.
    assert "window 2048 · threshold 350" in page and "bot.yml: 4096 / 700" in page
    assert "<strong>0</strong> / 2048 tokens" in page  # the meter, before any turn
    assert "sized to the server&#x27;s 2,048-token window" in page
    assert 'id="tools-note"' in page and "cannot format tool calls" in page
    page_of(owner, reverse("chat:conversation", args=[conversation.pk]))
    assert [r.path for r in fake_openai.get_requests] == ["/v1/models", "/props"]  # asked once


def test_the_home_page_says_what_the_server_can_do(owner, served):
    page = page_of(owner, reverse("home"))
    assert "llama.cpp · window 2048 tokens · 1 slot" in page
    assert "no (the chat template cannot format tool calls)" in page and "lessons as JSON" in page
    assert "1 at a time, chat first" not in page  # this runtime's services have no gate
    assert "Cleanup at 350 of 2048 tokens (scaled to the server's window" in page


def test_memory_work_queued_shows_on_the_chat_page_and_for_staff_on_home(owner, served, fresh_queue, django_user_model):  # noqa: F811
    conversation = chat.create_conversation(user=owner, agent="default")
    page = page_of(owner, reverse("chat:conversation", args=[conversation.pk]))
    assert '<p id="memory-work" class="memory-work small muted" role="status" hidden>' in page
    enqueue_experience_review(agent="default", user=str(owner.pk), session="session:x", final_id="f" * 32, final_seq=3)
    page = page_of(owner, reverse("chat:conversation", args=[conversation.pk]))
    assert "Memory work queued: 1 review." in page
    assert "Memory work queued" not in page_of(owner, reverse("home"))  # not staff
    staff = django_user_model.objects.create_user("staffer", password="x", is_staff=True)
    assert "Memory work queued: 1 review." in page_of(staff, reverse("home"))
