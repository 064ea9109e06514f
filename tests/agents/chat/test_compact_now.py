""""Compact now" (POST /conversations/<id>/compact/): the owner runs one cleanup of a conversation
on demand, through the real pipeline under its lease; every outcome is said on the page."""

from __future__ import annotations

import asyncio

import pytest
from django.test import Client
from django.urls import reverse

from agents.chat import service as chat
from memory.compression.steps import LEASE_NAME
from memory.locks import acquire_lease, release_lease
from memory.tokens import message_tokens

pytestmark = pytest.mark.django_db

LONG = ("Here is some background for the plan: we compare three storage engines over several weeks, "
        "measure their write latency under load and keep notes on every failure we see. ")


def signed_in(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def talk(runtime, conversation, *texts):
    agent = chat.resolve_agent(conversation.agent)

    async def go():
        for text in texts:
            async for _event in runtime.run_turn(agent=agent, user_id=str(conversation.owner_id),
                                                 session=chat.session_of(conversation), text=text):
                pass

    asyncio.run(go())


def compact(client, conversation, **data):
    return client.post(reverse("chat:compact", args=[conversation.pk]), data, follow=True)


def test_compact_now_moves_the_older_part_to_the_pruned_catalog(owner, conversation, chat_runtime):
    talk(chat_runtime, conversation, *(f"{LONG} Step {n}." for n in range(3)))
    bundle, session = chat_runtime.services.bundle, chat.session_of(conversation)
    before = bundle.messages.head(session)
    assert before.tokens < chat.resolve_agent("default").memory_config.threshold  # not due by itself
    page = compact(signed_in(owner), conversation).content.decode()
    assert "Compacted:" in page and "moved to the pruned catalog" in page
    live = bundle.messages.read(session)
    assert live[0].kind == "compact_summary"
    assert bundle.messages.head(session).tokens < before.tokens
    catalogued = chat_runtime.services.catalog.count(session)
    assert catalogued >= 2 and catalogued + len(live) - 1 == before.count  # nothing lost
    # From the pruned page the form comes back to it.
    talk(chat_runtime, conversation, *(f"{LONG} More {n}." for n in range(3)))
    response = compact(signed_in(owner), conversation, back="pruned")
    assert response.redirect_chain[-1][0] == reverse("chat:pruned", args=[conversation.pk])
    assert "Compacted:" in response.content.decode()


def test_a_conversation_too_short_to_compact_says_so(owner, conversation, chat_runtime):
    client = signed_in(owner)
    assert "has no messages" in compact(client, conversation).content.decode()
    talk(chat_runtime, conversation, "Hello there.")
    session = chat.session_of(conversation)
    before = chat_runtime.services.bundle.messages.read(session)
    page = compact(client, conversation).content.decode()
    assert "Too short to compact" in page and "Compacted" not in page
    assert chat_runtime.services.bundle.messages.read(session) == before
    assert chat_runtime.services.catalog.count(session) == 0


def test_a_second_press_counts_only_what_follows_the_summary(owner, conversation, chat_runtime):
    talk(chat_runtime, conversation, *(f"{LONG} Step {n}." for n in range(3)))
    client = signed_in(owner)
    assert "Compacted:" in compact(client, conversation).content.decode()
    session = chat.session_of(conversation)
    live = chat_runtime.services.bundle.messages.read(session)
    since = sum(message_tokens(m) for m in live if not m.is_compact_summary)
    keep = chat.resolve_agent("default").memory_config.keep
    assert since <= keep
    page = compact(client, conversation).content.decode()
    # The summary itself is not "since the last summary": the number said is the kept tail's.
    assert f"everything since the last summary ({since:,} tokens) fits" in page.replace("&#x27;", "'")


def test_a_cleanup_already_running_is_reported_and_nothing_changes(owner, conversation, chat_runtime):
    talk(chat_runtime, conversation, *(f"{LONG} Step {n}." for n in range(3)))
    kv, session = chat_runtime.services.bundle.kv, chat.session_of(conversation)
    before = chat_runtime.services.bundle.messages.read(session)
    lease = acquire_lease(kv=kv, scope=session, name=LEASE_NAME, ttl=60, holder="another-worker")
    try:
        page = compact(signed_in(owner), conversation).content.decode()
    finally:
        release_lease(kv=kv, lease=lease)
    assert "already running" in page
    assert chat_runtime.services.bundle.messages.read(session) == before
    assert "Compacted:" in compact(signed_in(owner), conversation).content.decode()  # free again


def test_only_the_owner_compacts_with_a_post_and_a_csrf_token(owner, outsider, conversation, chat_runtime):
    talk(chat_runtime, conversation, *(f"{LONG} Step {n}." for n in range(3)))
    url = reverse("chat:compact", args=[conversation.pk])
    session = chat.session_of(conversation)
    before = chat_runtime.services.bundle.messages.read(session)
    assert Client().post(url).status_code == 302  # to the sign-in page
    assert signed_in(outsider).post(url).status_code == 404
    assert signed_in(owner).get(url).status_code == 405
    assert signed_in(owner, enforce_csrf_checks=True).post(url).status_code == 403
    assert chat_runtime.services.bundle.messages.read(session) == before


def test_the_pruned_page_offers_compact_now(owner, conversation, chat_runtime):
    page = signed_in(owner).get(reverse("chat:pruned", args=[conversation.pk])).content.decode()
    assert f'action="{reverse("chat:compact", args=[conversation.pk])}"' in page
    assert "csrfmiddlewaretoken" in page and "Compact now" in page


def test_the_chat_page_offers_compact_now_and_comes_back_to_the_conversation(owner, conversation, chat_runtime):
    url = reverse("chat:conversation", args=[conversation.pk])
    page = signed_in(owner).get(url).content.decode()
    form = page.split('id="compact-now"')[0].rsplit("<form", 1)[1] + page.split('id="compact-now"')[1].split("</form>")[0]
    assert f'action="{reverse("chat:compact", args=[conversation.pk])}"' in form and "csrfmiddlewaretoken" in form
    talk(chat_runtime, conversation, *(f"{LONG} Step {n}." for n in range(3)))
    response = compact(signed_in(owner), conversation)
    assert response.redirect_chain[-1][0] == url and "Compacted:" in response.content.decode()
