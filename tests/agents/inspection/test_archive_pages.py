"""The user's archive: archived conversations listed, searched (prefixes of words too, matches
marked, no scores), read, and removed from memory with what the agent and the Dream Engine took
from them. Each user sees their own archive only, staff included. File and SQLite."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from agents.models import Conversation
from agents.runtime.services import get_services
from agents.runtime.tools.history_tools import archive_scope_for
from memory import core_proposals
from memory.archiving import ARCHIVE_CURSOR, ArchivingStatus, archive_conversation
from memory.core_memory import MEMORY, SOUL, USER, CoreMemory, Origin
from memory.dream import LEASE_NAME as DREAM_LEASE
from memory.locks import acquire_lease, release_lease
from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import ArchiveDocument
from tests.agents.inspection.support import HOSTILE, _config

pytestmark = pytest.mark.django_db

MAY = datetime(2023, 5, 8, 14, 0, tzinfo=UTC)
JUNE = datetime(2023, 6, 20, 9, 30, tzinfo=UTC)


def archive_url(agent: str = "default") -> str:
    return reverse("memory:archive", args=[agent])


def conversation_url(conversation: str, agent: str = "default") -> str:
    return reverse("memory:archive_conversation", args=[agent, conversation])


def forget_url(conversation: str, agent: str = "default") -> str:
    return reverse("memory:archive_forget", args=[agent, conversation])


def scope_of(user, agent: str = "default"):
    return archive_scope_for(agent=agent, user_id=str(user.pk))


def talk(user, title: str, turns: list[tuple[str, str]], when: datetime, *, agent: str = "default"):
    """A conversation of ``user`` with ``turns`` (role, text) from ``when``, archived."""
    conversation = Conversation.objects.create(owner=user, agent=agent, title=title)
    session = SessionScope(conversation.session_id)
    bundle = get_services().bundle
    bundle.messages.append(session, [Message(role=role, content=text, created_at=when + timedelta(minutes=i))
                                     for i, (role, text) in enumerate(turns)])
    result = archive_conversation(bundle=bundle, session=session, archive_scope=scope_of(user, agent))
    assert result.status == ArchivingStatus.ARCHIVED
    return conversation, result.documents


def core(user, agent: str = "default") -> CoreMemory:
    return CoreMemory(kv=get_services().bundle.kv, config=_config(agent), agent=agent, user=str(user.pk))


def moving(user):
    """Two archived conversations of ``user``: a move to Lisbon (May), jazz (June), and the
    lines and proposal the agent and the Dream Engine took from the first."""
    lisbon, [lisbon_doc] = talk(user, "Moving house", [
        ("user", "I moved to Lisbon last week, the flat is near the river."),
        ("assistant", f"Congratulations on the move! {HOSTILE}"),
        ("user", "My sister Ana visits in July."),
    ], MAY)
    jazz, [jazz_doc] = talk(user, "Music", [
        ("user", "I have been listening to a lot of jazz lately."),
        ("assistant", "Any favourite pianists?"),
    ], JUNE)
    memory = core(user)
    origin = Origin(session=f"session:{lisbon.pk}", document=lisbon_doc.id, said_at=MAY)
    memory.append(file=USER, text="- Lives in Lisbon", source="dream", origin=replace(origin, seq=1))
    memory.append(file=MEMORY, text="- Sister Ana visits in July", source="dream", origin=origin)
    memory.append(file=USER, text="- Moved recently", source="agent", origin=Origin(session=f"session:{lisbon.pk}"))
    memory.append(file=USER, text="- Likes jazz", source="dream",
                  origin=Origin(session=f"session:{jazz.pk}", document=jazz_doc.id, said_at=JUNE))
    memory.append(file=USER, text="- Prefers short answers", source=f"user:{user.pk}")
    memory.propose(file=SOUL, action="append", text=f"Greets {user.username} in Portuguese", source="dream",
                   origin=Origin(session=f"session:{lisbon.pk}", document=lisbon_doc.id, said_at=MAY,
                                 evidence="I moved to Lisbon"))
    return lisbon, jazz


def test_pages_need_a_login(services, owner):
    lisbon, _ = moving(owner)
    from django.test import Client

    for url in (archive_url(), conversation_url(lisbon.pk), forget_url(lisbon.pk)):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url
    response = Client().post(forget_url(lisbon.pk))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert get_services().bundle.archive.list(scope_of(owner)) != []


def test_the_archive_lists_conversations_with_titles_dates_and_counts(services, owner, client_for):
    lisbon, jazz = moving(owner)
    # A conversation deleted from the chat list keeps its archive, titled from its content.
    gone, _ = talk(owner, "Old chat", [("user", "Planning a trip to Kyoto in autumn."), ("assistant", "Lovely.")],
                   MAY - timedelta(days=30))
    gone_id = gone.pk
    gone.delete()
    body = client_for(owner).get(archive_url()).content.decode()
    assert "3 archived conversations" in body
    assert body.index("Music") < body.index("Moving house") < body.index("Planning a trip to Kyoto")  # newest first
    assert "8 May 2023" in body and "3 messages" in body and "20 Jun 2023" in body
    assert f'href="{conversation_url(lisbon.pk)}"' in body and f'href="{forget_url(jazz.pk)}"' in body
    assert f'href="/conversations/{lisbon.pk}/"' in body  # still in the chat list
    assert f'href="{conversation_url(gone_id)}"' in body
    assert f'href="/conversations/{gone_id}/"' not in body
    assert "Dream Engine (a background process" in body  # said in words
    for leak in ("main_agent_memory", "seq", "composite:", "session:", "score"):
        assert leak not in body, leak


def test_search_finds_partial_words_marks_them_and_shows_no_score(services, owner, client_for):
    lisbon, _ = moving(owner)
    response = client_for(owner).get(archive_url(), {"q": "lisb"})
    body = response.content.decode()
    assert response.status_code == 200
    assert "I moved to <mark>Lisbon</mark> last week" in body
    assert f'href="{conversation_url(lisbon.pk)}?q=lisb#m-' in body
    assert "Moving house" in body and "8 May 2023, 14:00" in body and "you" in body
    assert "score" not in body.lower() and "0.00" not in body
    # No message holds the word: whatever the search offers was found by meaning, and says so.
    other = client_for(owner).get(archive_url(), {"q": "xylophonist"}).content.decode()
    listed = other.split('id="hits-h"', 1)[1]
    assert "<mark>" not in listed
    assert "Nothing found for “xylophonist”" in other or listed.count("archive-hit-head") == listed.count(
        "found by meaning")
    assert "score" not in other.lower()


def test_each_user_searches_and_reads_only_their_own_archive(services, owner, colleague, staff, client_for):
    lisbon, _ = moving(owner)
    theirs, _ = talk(colleague, "Iceland", [("user", "Reykjavik was cold and wonderful.")], JUNE)
    owner_client = client_for(owner)
    assert "Reykjavik" not in owner_client.get(archive_url(), {"q": "reykjavik"}).content.decode()
    assert "Reykjavik" not in owner_client.get(archive_url()).content.decode()
    assert owner_client.get(conversation_url(theirs.pk)).status_code == 404
    for other in (colleague, staff):  # staff get no other user's archive here either
        client = client_for(other)
        body = client.get(archive_url(), {"q": "lisbon"}).content.decode()
        assert "Lisbon" not in body and "Moving house" not in body
        assert "Moving house" not in client.get(archive_url()).content.decode()
        assert client.get(conversation_url(lisbon.pk)).status_code == 404
        assert client.get(forget_url(lisbon.pk)).status_code == 404
        assert client.post(forget_url(lisbon.pk)).status_code == 404
    assert len(get_services().bundle.archive.list(scope_of(owner))) == 2  # nothing removed


def test_hostile_ids_and_unknown_agents_are_404(services, owner, client_for):
    moving(owner)
    client = client_for(owner)
    for conversation in ("..", "a b", "x" * 200, "%2e%2e", "nope"):
        assert client.get(f"/memory/default/archive/{conversation}/").status_code == 404, conversation
        assert client.post(f"/memory/default/archive/{conversation}/forget/").status_code == 404, conversation
    assert client.get(archive_url("nobody")).status_code == 404
    assert client.get(archive_url("helper")).status_code == 404  # a subagent has no archive page


def test_a_conversation_reads_in_order_with_the_words_searched_for_marked(services, owner, client_for):
    lisbon, _ = moving(owner)
    body = client_for(owner).get(conversation_url(lisbon.pk), {"q": "sister lisb"}).content.decode()
    first = body.index("I moved to <mark>Lisbon</mark>")
    assert first < body.index("Congratulations on the move!") < body.index("My <mark>sister</mark> Ana")
    assert HOSTILE not in body and "&lt;script&gt;" in body
    assert 'id="m-1"' in body and "8 May 2023" in body and "You" in body
    assert "score" not in body.lower()


def test_the_confirmation_says_what_will_be_removed(services, owner, client_for):
    lisbon, _ = moving(owner)
    body = client_for(owner).get(forget_url(lisbon.pk)).content.decode()
    assert "Remove “Moving house” from memory?" in body
    assert "3 archived messages" in body and "8 May 2023" in body
    assert "3 lines of your memory files" in body
    for line in ("- Lives in Lisbon", "- Sister Ana visits in July", "- Moved recently"):
        assert line in body
    assert "Likes jazz" not in body and "Prefers short answers" not in body
    assert "1 proposed change" in body
    assert "Dream Engine (which learns from your archived conversations)" in body
    assert "delete it there to remove its messages too" in body  # the conversation stays
    assert len(get_services().bundle.archive.list(scope_of(owner))) == 2  # a GET removes nothing


def test_removing_a_conversation_takes_out_its_archive_lines_and_proposals(services, owner, client_for):
    lisbon, jazz = moving(owner)
    client = client_for(owner)
    assert "Lisbon" in client.get(archive_url(), {"q": "lisbon"}).content.decode()  # indexed before
    response = client.post(forget_url(lisbon.pk), follow=True)
    body = response.content.decode()
    assert response.redirect_chain[-1][0] == archive_url()
    assert ("Removed “Moving house” from memory: 3 archived messages, 3 lines of your memory files, "
            "1 proposed change waiting for staff.") in body
    bundle = get_services().bundle
    assert [d.session for d in bundle.archive.list(scope_of(owner))] == [f"session:{jazz.pk}"]
    # The search index noticed: nothing of it is found any more, by words or by meaning.
    found = client.get(archive_url(), {"q": "lisbon sister river"}).content.decode()
    assert "Lisbon" not in found and "Ana" not in found
    assert get_services().retrieval.conversation(scope_of(owner), f"session:{lisbon.pk}") == []
    assert client.get(conversation_url(lisbon.pk)).status_code == 404
    # What was learned from it is gone; the rest stays.
    memory = core(owner)
    assert memory.read(file=USER).text == "- Likes jazz\n- Prefers short answers\n"
    assert memory.read(file=MEMORY).text == ""
    assert memory.history(file=USER)[-1].source == f"user:{owner.pk}"
    assert core_proposals.list_proposals(kv=bundle.kv, agent="default", status=core_proposals.PENDING) == []
    # The conversation itself is untouched, and what was archived is not archived again.
    session = SessionScope(lisbon.session_id)
    assert Conversation.objects.filter(pk=lisbon.pk).exists() and bundle.messages.head(session).count == 3
    again = archive_conversation(bundle=bundle, session=session, archive_scope=scope_of(owner))
    assert again.status == ArchivingStatus.UP_TO_DATE
    assert client.get(forget_url(lisbon.pk)).status_code == 404


def test_removing_one_user_s_conversation_leaves_another_s_alone(services, owner, colleague, client_for):
    lisbon, _ = moving(owner)
    theirs, _ = moving(colleague)
    client_for(owner).post(forget_url(lisbon.pk))
    assert len(get_services().bundle.archive.list(scope_of(colleague))) == 2
    assert "Lives in Lisbon" in core(colleague).read(file=USER).text
    pending = core_proposals.list_proposals(kv=get_services().bundle.kv, agent="default",
                                            status=core_proposals.PENDING)
    assert [p.user for p in pending] == [str(colleague.pk)]
    assert "Lisbon" in client_for(colleague).get(archive_url(), {"q": "lisbon"}).content.decode()


def test_a_consolidation_running_meanwhile_blocks_the_removal_and_nothing_changes(services, owner, client_for):
    lisbon, _ = moving(owner)
    bundle = get_services().bundle
    lease = acquire_lease(kv=bundle.kv, scope=scope_of(owner), name=DREAM_LEASE, ttl=60)
    try:
        response = client_for(owner).post(forget_url(lisbon.pk), follow=True)
    finally:
        release_lease(kv=bundle.kv, lease=lease)
    body = response.content.decode()
    assert response.redirect_chain[-1][0] == forget_url(lisbon.pk)
    assert "Nothing was removed: your memory is being updated from your conversations right now" in body
    assert len(bundle.archive.list(scope_of(owner))) == 2
    assert "Lives in Lisbon" in core(owner).read(file=USER).text


def test_a_conversation_archived_before_cursors_is_not_archived_again(services, owner, client_for):
    """Documents written by cleanups before the archive cursor existed said how far a session
    was archived; once they are removed, the cursor has to say it."""
    conversation = Conversation.objects.create(owner=owner, agent="default", title="Early days")
    session = SessionScope(conversation.session_id)
    bundle = get_services().bundle
    stored = bundle.messages.append(session, [Message(role="user", content="Early words about Lisbon", created_at=MAY),
                                              Message(role="assistant", content="Noted.", created_at=MAY)])
    bundle.archive.put(scope_of(owner), ArchiveDocument(session=session.key(), summary="Early words.",
                                                        messages=tuple(stored), title="Early words",
                                                        metadata={"through_seq": stored[-1].seq}))
    assert bundle.cursors.get(session, ARCHIVE_CURSOR) is None
    client_for(owner).post(forget_url(conversation.pk))
    assert bundle.archive.list(scope_of(owner)) == []
    assert bundle.cursors.get(session, ARCHIVE_CURSOR) == stored[-1].seq
    again = archive_conversation(bundle=bundle, session=session, archive_scope=scope_of(owner))
    assert again.status == ArchivingStatus.UP_TO_DATE and bundle.archive.list(scope_of(owner)) == []


def test_the_memory_pages_link_to_the_archive(services, owner, client_for):
    lisbon, _ = moving(owner)
    client = client_for(owner)
    assert f'href="{archive_url()}"' in client.get("/memory/").content.decode()
    page = client.get("/memory/default/").content.decode()
    assert f'href="{archive_url()}"' in page
    # A line the Dream Engine learned links to the conversation it came from.
    assert f'href="/conversations/{lisbon.pk}/"' in page
    ident = lisbon.pk
    lisbon.delete()
    page = client.get("/memory/default/").content.decode()
    # ... the message it rests on, when the Dream Engine recorded it
    assert f'href="{conversation_url(ident)}#m-1"' in page and f'href="{conversation_url(ident)}"' in page
    assert "archived conversation</a>" in page


def test_an_agent_with_the_archive_off_says_so_in_words_a_user_can_act_on(services, owner, staff, client_for):
    body = client_for(owner).get(archive_url("plain")).content.decode()
    assert "The archive is off for plain" in body and "A staff member can switch it on." in body
    assert "bot.yml" not in body and "archive_enabled" not in body
    staff_body = client_for(staff).get(archive_url("plain")).content.decode()
    assert 'href="/scopes/"' in staff_body
