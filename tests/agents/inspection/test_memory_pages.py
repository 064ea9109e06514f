"""The user's memory pages: own files only, compare-and-set edits, caps, history, experiences."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from agents.declarations import get_declaration
from memory.core_memory import CoreMemory
from memory.scopes import AgentScope, UserScope
from tests.agents.inspection.support import HOSTILE, seed

pytestmark = pytest.mark.django_db

AGENT_URL = "/memory/default/"


def edit_url(file: str, agent: str = "default") -> str:
    return reverse("memory:edit", args=[agent, file])


def version_in(body: str, file: str) -> int:
    return int(re.search(rf'name="{re.escape(file)}-expected_version" value="(\d+)"', body).group(1))


def post_edit(client: Client, file: str, text: str, version: int, agent: str = "default"):
    return client.post(edit_url(file, agent), {f"{file}-text": text, f"{file}-expected_version": str(version)})


def test_pages_need_a_login(services, owner):
    client = Client()
    for url in ("/memory/", AGENT_URL, "/settings/tokens/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url
    response = client.post(edit_url("USER.md"), {"USER.md-text": "x", "USER.md-expected_version": "0"})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_each_user_sees_only_their_own_files(services, owner, colleague, outsider, client_for):
    seed(services, owner, marker="owner")
    seed(services, colleague, marker="colleague")
    owner_body = client_for(owner).get(AGENT_URL).content.decode()
    assert "owner likes sailing" in owner_body and "owner lives by the sea" in owner_body
    assert "colleague" not in owner_body
    colleague_body = client_for(colleague).get(AGENT_URL).content.decode()
    assert "colleague likes sailing" in colleague_body and "owner likes" not in colleague_body
    outsider_body = client_for(outsider).get(AGENT_URL).content.decode()
    assert "likes sailing" not in outsider_body and "lives by the sea" not in outsider_body
    assert "I am a careful assistant." in outsider_body  # SOUL.md is the agent's, shared
    for body in (owner_body, colleague_body, outsider_body):
        assert HOSTILE not in body


def test_index_lists_main_agents_and_their_layers(services, owner, client_for):
    body = client_for(owner).get("/memory/").content.decode()
    assert 'href="/memory/default/"' in body and 'href="/memory/plain/"' in body
    assert "helper" not in body  # subagents have no memory page


@pytest.mark.parametrize("url", ["/memory/helper/", "/memory/nope/", "/memory/..%2F/", "/memory/default/files/SECRET.md/"])
def test_unknown_agents_and_files_are_404(services, owner, client_for, url):
    client = client_for(owner)
    response = client.post(url, {}) if "files" in url else client.get(url)
    assert response.status_code == 404


def test_core_memory_off_says_how_to_switch_it_on(services, owner, staff, client_for):
    # A user reads who can switch it on; settings and file names are for staff.
    body = client_for(owner).get("/memory/plain/").content.decode()
    assert "Core memory is off" in body and "A staff member can switch it on." in body
    for internal in ("core_enabled", "archive_enabled", "bot.yml", "tool_supplements", "main_agent_memory"):
        assert internal not in body, internal
    assert "<textarea" not in body
    assert "does not learn experiences" in body
    response = post_edit(client_for(owner), "USER.md", "x", 0, agent="plain")
    assert response.status_code == 409 and b"Core memory is off" in response.content
    assert b"core_enabled" not in response.content
    staff_body = client_for(staff).get("/memory/plain/").content.decode()
    assert "core_enabled: true" in staff_body and "archive_enabled: true" in staff_body
    assert "tool_supplements: [experience]" in staff_body


def test_edit_saves_through_compare_and_set_and_records_who(services, owner, client_for):
    seed(services, owner)
    client = client_for(owner)
    body = client.get(AGENT_URL).content.decode()
    version = version_in(body, "USER.md")
    response = post_edit(client, "USER.md", "- likes sailing\n- prefers mornings\n", version)
    assert response.status_code == 302 and response["Location"].endswith("/memory/default/#file-USER.md")
    page = client.get(AGENT_URL).content.decode()
    assert "prefers mornings" in page and "Saved USER.md." in page
    assert version_in(page, "USER.md") == version + 1
    history = page[page.index('id="file-USER.md"'):page.index('id="file-MEMORY.md"')]
    assert "you" in history and "the agent" in history and "rewrite" in history
    memory_history = page[page.index('id="file-MEMORY.md"'):]
    assert "the Dream Engine" in memory_history


def test_a_conflict_loses_nothing(services, owner, client_for):
    seed(services, owner)
    client = client_for(owner)
    version = version_in(client.get(AGENT_URL).content.decode(), "USER.md")
    # the agent writes meanwhile
    CoreMemory(kv=services.bundle.kv, config=get_declaration().find("default").memory_config, agent="default",
               user=str(owner.pk)).append(file="USER.md", text="- agent added this", source="agent")
    response = post_edit(client, "USER.md", "my careful rewrite", version)
    assert response.status_code == 409
    body = response.content.decode()
    assert "changed meanwhile" in body
    assert "my careful rewrite" in body  # the person's text is still in the form
    assert "agent added this" in body  # and the current text is shown beside it
    assert version_in(body, "USER.md") == version + 1  # saving again applies to what they saw now
    stored = services.bundle.kv.get_value(UserScope(str(owner.pk)), "USER.md")
    assert "agent added this" in stored and "my careful rewrite" not in stored
    assert post_edit(client, "USER.md", "merged text", version + 1).status_code == 302


def test_over_the_cap_is_a_form_error_and_nothing_is_written(services, owner, client_for):
    seed(services, owner)
    client = client_for(owner)
    before = client.get(AGENT_URL).content.decode()
    version = version_in(before, "USER.md")
    huge = "word " * 4000
    response = post_edit(client, "USER.md", huge, version)
    assert response.status_code == 422
    body = response.content.decode()
    assert "over its cap" in body and "nothing was written" in body
    assert huge.strip()[:200] in body
    assert version_in(client.get(AGENT_URL).content.decode(), "USER.md") == version


def test_soul_is_read_only_unless_staff(services, owner, staff, client_for):
    seed(services, owner)
    body = client_for(owner).get(AGENT_URL).content.decode()
    assert 'name="SOUL.md-text"' not in body and "Read-only" in body
    response = post_edit(client_for(owner), "SOUL.md", "I am hijacked.", 1)
    assert response.status_code == 403
    assert "hijacked" not in services.bundle.kv.get_value(AgentScope("default"), "SOUL.md")
    staff_client = client_for(staff)
    body = staff_client.get(AGENT_URL).content.decode()
    assert 'name="SOUL.md-text"' in body
    assert post_edit(staff_client, "SOUL.md", "I am a very careful assistant.", version_in(body, "SOUL.md")).status_code == 302


def test_experiences_are_listed_escaped(services, owner, client_for):
    seed(services, owner)
    body = client_for(owner).get(AGENT_URL).content.decode()
    assert "Checking the weather" in body and "Use search before answering" in body
    assert "Search first. &lt;script&gt;" in body and HOSTILE not in body


def test_every_form_needs_the_csrf_token(services, owner, client_for):
    seed(services, owner)
    client = client_for(owner, enforce_csrf_checks=True)
    assert post_edit(client, "USER.md", "x", 1).status_code == 403
    assert client.post("/settings/tokens/", {"name": "script"}).status_code == 403
    assert client.post("/settings/tokens/1/revoke/").status_code == 403
    page = client.get(AGENT_URL)
    token = page.cookies["csrftoken"].value
    response = client.post(edit_url("USER.md"), {"USER.md-text": "with token", "USER.md-expected_version": str(
        version_in(page.content.decode(), "USER.md")), "csrfmiddlewaretoken": token})
    assert response.status_code == 302


def test_only_post_edits(services, owner, client_for):
    assert client_for(owner).get(edit_url("USER.md")).status_code == 405
