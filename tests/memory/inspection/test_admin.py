"""The memory admin: staff only, every page on both backends, content escaped, filters work."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.agents.inspection.support import HOSTILE, seed

pytestmark = pytest.mark.django_db

ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"


def admin_urls(seeded) -> list[str]:
    scope = seeded.archive_scope.key()
    return [
        reverse("admin:index"),
        reverse("admin:app_list", args=["memory"]),
        reverse("admin:memory_storedmessage_changelist"),
        reverse("admin:memory_session", args=[seeded.session.id]),
        reverse("admin:memory_catalogs"),
        reverse("admin:memory_catalog", args=[seeded.session.id]),
        reverse("admin:memory_archiveentry_changelist"),
        reverse("admin:memory_archive_document", args=[scope, seeded.document.id]),
        reverse("admin:memory_kventry_changelist"),
        reverse("admin:memory_kv_item", args=[seeded.session.key(), "todo.json"]),
        reverse("admin:memory_kv_item", args=[f"user:{seeded.conversation.owner.pk}", "USER.md"]),
        reverse("admin:memory_kv_item", args=[f"user:{seeded.conversation.owner.pk}", "USER.md.history"]),
        reverse("admin:memory_consumercursor_changelist"),
        reverse("admin:agents_conversation_changelist"),
        reverse("admin:agents_conversation_change", args=[seeded.conversation.pk]),
    ]


def test_every_page_renders_for_staff_and_escapes_content(services, owner, staff, client_for):
    seeded = seed(services, owner)
    client = client_for(staff)
    for url in admin_urls(seeded):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        body = response.content.decode()
        assert HOSTILE not in body, url
        assert "onerror=alert(1)>" not in body, url


@pytest.mark.parametrize("who", ["anonymous", "owner", "colleague", "outsider"])
def test_nobody_but_staff_gets_in(services, owner, colleague, outsider, client_for, who):
    seeded = seed(services, owner)
    user = {"anonymous": None, "owner": owner, "colleague": colleague, "outsider": outsider}[who]
    client = client_for(user)
    for url in admin_urls(seeded):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
        assert b"weather" not in response.content


def test_session_page_shows_the_transcript(services, owner, staff, client_for):
    seeded = seed(services, owner)
    body = client_for(staff).get(reverse("admin:memory_session", args=[seeded.session.id])).content.decode()
    assert "compact_summary" in body and "Summary: owner asked about weather." in body
    assert "owner tides" in body and "→ calls <code>search</code>" in body
    assert "I should look it up." in body  # reasoning shown
    assert "result of <code>search</code>" in body
    assert ESCAPED in body
    assert "todo.json" in body and "4 messages taken out by cleanup" in body


def test_catalog_page_has_the_grep_table_of_contents(services, owner, staff, client_for):
    seeded = seed(services, owner)
    body = client_for(staff).get(reverse("admin:memory_catalog", args=[seeded.session.id])).content.decode()
    files = services.catalog.files(seeded.session)
    for path in files:
        for number, line in enumerate(path.read_text().split("\n"), start=1):
            if line.startswith("## ["):
                heading = line.replace("<", "&lt;").replace(">", "&gt;")
                assert f"pruned/{seeded.session.id}/{path.name}:{number}:" in body
                assert heading in body
    for message in seeded.evicted:
        assert f'id="block-{message.seq}"' in body
    assert "I should look it up." in body and ESCAPED in body


def test_catalog_search_finds_across_sessions(services, owner, colleague, staff, client_for):
    seed(services, owner, marker="owner")
    other = seed(services, colleague, marker="colleague")
    client = client_for(staff)
    body = client.get(reverse("admin:memory_catalogs"), {"q": "colleague weather"}).content.decode()
    assert "2 matches for" in body and other.session.id in body  # the question and the call
    assert "owner weather" not in body
    assert "Nothing in the pruned catalogs matches" in client.get(
        reverse("admin:memory_catalogs"), {"q": "zebra"}).content.decode()


def test_archive_filters_and_search(services, owner, colleague, staff, client_for):
    mine = seed(services, owner, marker="owner")
    theirs = seed(services, colleague, marker="colleague")
    client = client_for(staff)
    url = reverse("admin:memory_archiveentry_changelist")
    body = client.get(url).content.decode()
    assert "owner weather talk" in body and "colleague weather talk" in body
    body = client.get(url, {"user": str(colleague.pk)}).content.decode()
    assert "colleague weather talk" in body and "owner weather talk" not in body
    assert f"{colleague.pk} · colleague" in body  # user filter labelled with the username
    body = client.get(url, {"agent": "plain"}).content.decode()
    assert "weather talk" not in body
    body = client.get(url, {"q": "colleague"}).content.decode()
    assert "colleague weather talk" in body and "owner weather talk" not in body and "score" in body
    body = client.get(url, {"until": "2000-01-01"}).content.decode()
    assert "No archive documents match these filters" in body
    body = client.get(url, {"since": "2000-01-01", "until": "not a date"}).content.decode()
    assert "owner weather talk" in body
    doc = client.get(reverse("admin:memory_archive_document", args=[mine.archive_scope.key(), mine.document.id]))
    text = doc.content.decode()
    assert "owner weather talk" in text and "Sunny, 21°C" in text and ESCAPED in text and "cleanup" in text
    assert theirs.document.id not in text


def test_kv_and_cursor_pages(services, owner, staff, client_for):
    seeded = seed(services, owner)
    client = client_for(staff)
    url = reverse("admin:memory_kventry_changelist")
    body = client.get(url).content.decode()
    for key in ("SOUL.md", "USER.md", "MEMORY.md", "USER.md.history", "experience.checking-the-weather.md", "todo.json"):
        assert key in body
    body = client.get(url, {"category": "experience"}).content.decode()
    assert "experience.checking-the-weather.md" in body and "todo.json" not in body
    body = client.get(url, {"kind": "session"}).content.decode()
    assert "todo.json" in body and "SOUL.md" not in body
    history = client.get(reverse("admin:memory_kv_item", args=[f"user:{owner.pk}", "USER.md.history"])).content.decode()
    assert "<code>agent</code>" in history and "append" in history
    todo = client.get(reverse("admin:memory_kv_item", args=[seeded.session.key(), "todo.json"])).content.decode()
    assert "find tides" in todo
    cursors = client.get(reverse("admin:memory_consumercursor_changelist")).content.decode()
    assert seeded.archive_scope.key().replace("+", "+") in cursors and "dream" in cursors


def test_conversation_admin_links_to_the_catalog(services, owner, staff, client_for):
    seeded = seed(services, owner)
    client = client_for(staff)
    catalog_url = reverse("admin:memory_catalog", args=[seeded.session.id])
    for url in (reverse("admin:agents_conversation_changelist"),
                reverse("admin:agents_conversation_change", args=[seeded.conversation.pk])):
        body = client.get(url).content.decode()
        assert catalog_url in body and "pruned catalog (4 messages)" in body


@pytest.mark.parametrize("url", [
    "/admin/memory/storedmessage/session/..%2F..%2Fetc/",
    "/admin/memory/storedmessage/session/nope/",
    "/admin/memory/storedmessage/catalog/nope/",
    "/admin/memory/archiveentry/bogus/abc/",
    "/admin/memory/archiveentry/user:1/missing/",
    "/admin/memory/archiveentry/user:1/bad id!/",
    "/admin/memory/kventry/user:1/missing/",
    "/admin/memory/kventry/user:1/..%2Fx/",
    "/admin/memory/kventry/nokind/x/",
])
def test_unknown_or_hostile_ids_are_404(services, staff, client_for, url):
    assert client_for(staff).get(url).status_code == 404


def test_empty_stores_render(services, staff, client_for):
    client = client_for(staff)
    assert "No sessions" in client.get(reverse("admin:memory_storedmessage_changelist")).content.decode()
    assert "No pruned catalogs yet" in client.get(reverse("admin:memory_catalogs")).content.decode()
    assert "No archive documents yet" in client.get(reverse("admin:memory_archiveentry_changelist")).content.decode()
    assert "No KV items" in client.get(reverse("admin:memory_kventry_changelist")).content.decode()
    assert "No cursors yet" in client.get(reverse("admin:memory_consumercursor_changelist")).content.decode()


def test_the_page_names_the_backend_it_reads(services, staff, client_for):
    body = client_for(staff).get(reverse("admin:memory_storedmessage_changelist")).content.decode()
    assert f"backend: <code>{services.bundle.backend}</code>" in body


def test_review_and_subagent_sessions_are_listed_only_on_request(services, owner, staff, client_for):
    from memory.messages import Message
    from memory.scopes import SessionScope

    seeded = seed(services, owner)
    for suffix in ("review-1a2b", "review-3c4d", "sub-researcher-5e6f"):
        services.bundle.messages.append(SessionScope(f"{seeded.session.id}.{suffix}"), [Message(role="user", content="x")])
    client = client_for(staff)
    url = reverse("admin:memory_storedmessage_changelist")
    body = client.get(url).content.decode()
    assert seeded.session.id in body and ".review-" not in body and ".sub-" not in body
    assert "3 subagent and review sessions not listed" in body
    shown = client.get(url, {"derived": "1"}).content.decode()
    assert f"{seeded.session.id}.review-1a2b" in shown and f"{seeded.session.id}.sub-researcher-5e6f" in shown
