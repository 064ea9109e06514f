"""Chat pages: login, ownership (another user's conversation is a 404), CSRF, the page's content."""

from __future__ import annotations

import asyncio

import pytest
from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from agents.chat.meter import METER_KEY
from agents.runtime.events import ContextReady
from agents.models import Conversation
from memory.hooks import SectionAccount
from memory.messages import Message, ToolCall
from memory.transcript import validate_transcript

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_for():
    def make(user, **kwargs):
        client = Client(**kwargs)
        client.force_login(user)
        return client

    return make


def run_turns(runtime, conversation, *texts):
    agent = chat.resolve_agent(conversation.agent)

    async def go():
        for text in texts:
            async for _event in runtime.run_turn(agent=agent, user_id="1", session=chat.session_of(conversation), text=text):
                pass

    asyncio.run(go())


URLS = ("chat:conversation", "chat:pruned", "chat:delete")


def test_every_page_needs_a_login(client, conversation):
    for url in [reverse("chat:list")] + [reverse(name, args=[conversation.pk]) for name in URLS]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url
    assert client.post(reverse("chat:create"), {"agent": "default"}).status_code == 302
    assert Conversation.objects.count() == 1


def test_another_users_conversation_is_a_404_everywhere(client_for, conversation, outsider):
    client = client_for(outsider)
    for name in URLS:
        assert client.get(reverse(name, args=[conversation.pk])).status_code == 404, name
    assert client.post(reverse("chat:rename", args=[conversation.pk]), {"title": "mine now"}).status_code == 404
    assert client.post(reverse("chat:delete", args=[conversation.pk])).status_code == 404
    assert client.get(reverse("chat:conversation", args=["not-a-real-id"])).status_code == 404
    conversation.refresh_from_db()
    assert conversation.title == chat.DEFAULT_TITLE
    listing = client.get(reverse("chat:list")).content.decode()
    assert conversation.pk not in listing


def test_create_lists_main_agents_only_and_redirects_to_the_conversation(client_for, owner, chat_runtime):
    client = client_for(owner)
    page = client.get(reverse("chat:list")).content.decode()
    assert 'value="default"' in page and 'value="roomy"' in page and 'value="helper"' not in page
    response = client.post(reverse("chat:create"), {"agent": "roomy"})
    conversation = Conversation.objects.get(owner=owner)
    assert response.status_code == 302 and response["Location"] == reverse("chat:conversation", args=[conversation.pk])
    assert conversation.agent == "roomy"
    for bad in ("helper", "nobody", ""):
        response = client.post(reverse("chat:create"), {"agent": bad}, follow=True)
        assert "not a main agent" in response.content.decode()
    assert Conversation.objects.filter(owner=owner).count() == 1


def test_starting_again_reuses_an_empty_conversation(client_for, owner, conversation, chat_runtime):
    client = client_for(owner)
    empty = client.post(reverse("chat:create"), {"agent": "roomy"})
    again = client.post(reverse("chat:create"), {"agent": "roomy"})
    assert empty["Location"] == again["Location"], "nothing said yet: the same conversation"
    assert Conversation.objects.filter(owner=owner, agent="roomy").count() == 1
    roomy = Conversation.objects.get(owner=owner, agent="roomy")
    run_turns(chat_runtime, roomy, "hello")
    third = client.post(reverse("chat:create"), {"agent": "roomy"})
    assert third["Location"] != again["Location"]
    assert Conversation.objects.filter(owner=owner, agent="roomy").count() == 2


def test_forms_need_csrf(owner, conversation, client_for):
    client = client_for(owner, enforce_csrf_checks=True)
    assert client.post(reverse("chat:create"), {"agent": "default"}).status_code == 403
    assert client.post(reverse("chat:rename", args=[conversation.pk]), {"title": "x"}).status_code == 403
    assert client.post(reverse("chat:delete", args=[conversation.pk])).status_code == 403
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert page.count('name="csrfmiddlewaretoken"') >= 2  # new conversation, rename (+ logout)
    assert Conversation.objects.filter(pk=conversation.pk).exists()


def test_rename(client_for, owner, conversation):
    client = client_for(owner)
    client.post(reverse("chat:rename", args=[conversation.pk]), {"title": "  Trip   planning "})
    conversation.refresh_from_db()
    assert conversation.title == "Trip planning"
    response = client.post(reverse("chat:rename", args=[conversation.pk]), {"title": "   "}, follow=True)
    assert "Give the conversation a title" in response.content.decode()
    conversation.refresh_from_db()
    assert conversation.title == "Trip planning"


def test_the_page_renders_history_meter_and_the_offline_notice(client_for, owner, conversation, chat_runtime):
    run_turns(chat_runtime, conversation, "todo: buy <b>milk</b>", "hello")
    page = client_for(owner).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert 'hx-ext="ws"' in page and f'ws-connect="/ws/chat/{conversation.pk}/"' in page
    assert "ext/hx-ws-2" in page, "the ws extension script is on the page"
    assert "buy &lt;b&gt;milk&lt;/b&gt;" in page and "<b>milk</b>" not in page
    assert '<details class="reasoning">' in page and '<details class="tool" id="tool-' in page
    assert "OPENAI_BASE_URL" in page and "OPENAI_API_KEY" in page and "OPENAI_MODEL" in page
    assert 'id="meter"' in page and 'id="composer"' in page and "hx-swap-oob" not in page
    assert '<a class="skip-link" href="#composer-text">Skip to the message box</a>' in page
    assert "Up to 32,000 characters per message." in page and "maxlength" not in page.split('id="composer"')[1]


def test_history_shows_the_compact_summary_as_a_card(client_for, owner, conversation, chat_runtime):
    filler = " ".join(["alpha beta gamma delta"] * 40)
    run_turns(chat_runtime, conversation, *[f"turn {n} {filler}" for n in range(6)])
    messages = chat_runtime.services.bundle.messages.read(chat.session_of(conversation))
    assert messages[0].is_compact_summary
    page = client_for(owner).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert 'class="msg summary"' in page and "Earlier messages were summarized" in page
    pruned = client_for(owner).get(reverse("chat:pruned", args=[conversation.pk])).content.decode()
    assert "Table of contents" in pruned and "Message 1 · user · " in pruned
    assert 'href="#seq-1"' in pruned and 'id="seq-1"' in pruned


def test_history_keeps_what_cleanup_moved_out_scrollable_with_the_cut_marked(client_for, owner, conversation, chat_runtime):
    """After cleanups and a reload the page still shows the whole conversation: the catalogued
    messages in order, marked pruned, then the cut, then the live summary and tail."""
    filler = " ".join(["alpha beta gamma delta"] * 40)
    texts = [f"turn {n} {filler}" for n in range(12)]
    run_turns(chat_runtime, conversation, *texts)
    session = chat.session_of(conversation)
    live = chat_runtime.services.bundle.messages.read(session)
    assert live[0].is_compact_summary and chat_runtime.services.catalog.count(session) > 4
    page = client_for(owner).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    positions = [page.index(f"turn {n} alpha") for n in range(12)]
    assert positions == sorted(positions), "every user message is on the page, in order"
    cut = page.index('class="cut-mark"')
    first_live_user = next(m for m in live if m.role == "user")
    assert page.index('class="msg user is-pruned"') < cut < page.index(first_live_user.content[:20])
    assert page.count('class="cut-mark"') == 1
    assert page.count('class="msg user is-pruned"') == sum(
        1 for e in chat_runtime.services.catalog.entries(session) if e.message.role == "user"
    )


def test_history_is_bounded_and_counts_what_it_leaves_out(client_for, owner, conversation, chat_runtime, monkeypatch):
    filler = " ".join(["alpha beta gamma delta"] * 40)
    run_turns(chat_runtime, conversation, *[f"turn {n} {filler}" for n in range(8)])
    session = chat.session_of(conversation)
    total = len(chat_runtime.services.bundle.messages.read(session)) + chat_runtime.services.catalog.count(session)
    monkeypatch.setattr(chat, "HISTORY_LIMIT", 6)
    history = chat.history(conversation=conversation)
    assert len(history.messages) + len(history.pruned) == 6
    assert history.hidden == total - 6
    page = client_for(owner).get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert f"{total - 6} earlier messages" in page and 'id="load-earlier"' in page
    everything = [e.message for e in chat_runtime.services.catalog.entries(session)]
    everything += chat_runtime.services.bundle.messages.read(session)
    assert [m.id for m in history.pruned + history.messages] == [m.id for m in everything][-6:], "the latest six, in order"


def test_the_pruned_page_escapes_everything(client_for, owner, conversation, chat_runtime):
    svc = chat_runtime.services
    session = chat.session_of(conversation)
    stored = svc.bundle.messages.append(
        session,
        [
            Message(role="user", content="<script>alert('x')</script>\n---\n## [99] fake"),
            Message(role="assistant", content="", tool_calls=(ToolCall(id="c1", name="todo", arguments_json='{"a": "<i>"}'),)),
            Message(role="tool", content="<img src=x onerror=alert(1)>", tool_call_id="c1", name="todo"),
        ],
    )
    svc.catalog.write(session, stored)
    svc.bundle.messages.prune(session, through_seq=stored[-1].seq, summary=Message(role="user", content="s", kind="compact_summary"), expected_version=svc.bundle.messages.head(session).version)
    page = client_for(owner).get(reverse("chat:pruned", args=[conversation.pk])).content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page and "<i>" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<tr><td>") == 3 and "<td><code>todo</code></td>" in page


def test_delete_asks_first_then_removes_session_memory(client_for, owner, conversation, chat_runtime):
    filler = " ".join(["one two three four five"] * 40)
    run_turns(chat_runtime, conversation, *[f"turn {n} {filler}" for n in range(6)], "todo: tidy up")
    svc = chat_runtime.services
    session = chat.session_of(conversation)
    svc.bundle.kv.put(session, METER_KEY, "{}")
    assert svc.catalog.count(session) > 0 and svc.bundle.kv.list(session)
    client = client_for(owner)
    confirm = client.get(reverse("chat:delete", args=[conversation.pk])).content.decode()
    assert "Delete the conversation" in confirm and 'method="post"' in confirm
    assert Conversation.objects.filter(pk=conversation.pk).exists(), "GET deletes nothing"
    response = client.post(reverse("chat:delete", args=[conversation.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("chat:list")
    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert svc.bundle.messages.read(session) == []
    assert svc.bundle.kv.list(session) == []
    assert svc.catalog.count(session) == 0 and not svc.catalog.directory(session).exists()


def test_delete_refuses_while_a_reply_is_written(client_for, owner, conversation, chat_runtime):
    from memory.locks import acquire_lease

    acquire_lease(kv=chat_runtime.services.bundle.kv, scope=chat.session_of(conversation), name="turn", ttl=60)
    response = client_for(owner).post(reverse("chat:delete", args=[conversation.pk]), follow=True)
    assert "still being written" in response.content.decode()
    assert Conversation.objects.filter(pk=conversation.pk).exists()


def test_meter_history_is_kept_in_the_session_kv_and_bounded(conversation, chat_runtime):
    from agents.chat.meter import MAX_POINTS, load_history, record_context

    kv, session = chat_runtime.services.bundle.kv, chat.session_of(conversation)
    for n in range(MAX_POINTS + 30):
        event = ContextReady(1, (SectionAccount("system", 10, 1), SectionAccount("messages", n, n)), 20 + n, 4096, 700)
        record_context(kv=kv, session=session, event=event)
    history = load_history(kv=kv, session=session)
    assert len(history.points) == MAX_POINTS and history.points[-1].total == 20 + MAX_POINTS + 29
    assert history.turns == MAX_POINTS + 30 and len(kv.get(session, METER_KEY).value) < 20000


def test_transcript_stays_legal_in_history(conversation, chat_runtime):
    run_turns(chat_runtime, conversation, "todo: a", "show my todo list")
    validate_transcript(chat_runtime.services.bundle.messages.read(chat.session_of(conversation)))
