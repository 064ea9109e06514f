"""Memories item by item on the user's memory page: each line with its source, edited or deleted
on its own, a version restored, history as diffs, "forget everything" with a confirmation; LF
only. File and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from agents.models import Conversation
from agents.runtime.services import get_services
from memory.config import MemoryConfig
from memory.core_memory import MEMORY, USER, CoreMemory, Origin
from memory.dream import DreamEngine, default_archive_scope
from memory.messages import Message
from memory.stores.base import ArchiveDocument
from tests.agents.inspection.support import HOSTILE, _config

pytestmark = pytest.mark.django_db

PAGE = "/memory/default/"


def core(user, agent="default") -> CoreMemory:
    return CoreMemory(kv=get_services().bundle.kv, config=_config(agent), agent=agent, user=str(user.pk))


def seed_lines(user):
    conversation = Conversation.objects.create(owner=user, agent="default", title="Moving house")
    said = datetime(2023, 5, 8, 14, 3, tzinfo=UTC)
    memory = core(user)
    memory.append(file=USER, text="- Name: Sam", source="agent", origin=Origin(session=f"session:{conversation.pk}"))
    memory.append(file=USER, text="- Lives in Porto", source="dream",
                  origin=Origin(session=f"session:{conversation.pk}", document="doc-1", said_at=said))
    memory.append(file=USER, text=f"- Likes jazz {HOSTILE}", source=f"user:{user.pk}")
    memory.append(file=MEMORY, text="- Decided: use SQLite", source="agent")
    return conversation


def item_post(client, file, index, line, version, text=None, action="delete"):
    data = {"line": line, "expected_version": str(version)}
    if text is not None:
        data["text"] = text
    return client.post(f"/memory/default/files/{file}/items/{index}/{action}/", data, follow=True)


def test_each_line_is_listed_with_its_source(services, owner, client_for):
    conversation = seed_lines(owner)
    body = client_for(owner).get(PAGE).content.decode()
    assert 'id="item-USER.md-0"' in body and 'id="item-USER.md-2"' in body and 'id="item-MEMORY.md-0"' in body
    porto = body[body.index('id="item-USER.md-1"'):body.index('id="item-USER.md-2"')]
    assert "Lives in Porto" in porto and "the Dream Engine (from your archived conversations)" in porto
    assert f'href="/conversations/{conversation.pk}/"' in porto and "“Moving house”" in porto
    assert "said 2023-05-08" in porto
    jazz = body[body.index('id="item-USER.md-2"'):body.index('id="item-MEMORY.md-0"')]
    assert "you" in jazz and HOSTILE not in body
    # USER.md's description is true: one profile, read by every agent
    assert "One file shared by every agent you talk to" in body


def test_one_line_is_deleted_or_edited_on_its_own(services, owner, client_for):
    seed_lines(owner)
    client = client_for(owner)
    version = core(owner).read(file=USER).version
    response = item_post(client, USER, 1, "- Lives in Porto", version)
    assert "Deleted “Lives in Porto” from USER.md." in response.content.decode()
    assert core(owner).read(file=USER).text == f"- Name: Sam\n- Likes jazz {HOSTILE}\n"
    response = item_post(client, USER, 0, "- Name: Sam", version + 1, text="Samantha Reyes", action="edit")
    assert "Changed one line" in response.content.decode()
    assert core(owner).read(file=USER).text.splitlines()[0] == "- Samantha Reyes"  # the bullet is kept
    history = core(owner).history(file=USER)
    assert [c.source for c in history[-2:]] == [f"user:{owner.pk}"] * 2


def test_a_stale_or_foreign_item_form_writes_nothing(services, owner, colleague, client_for):
    seed_lines(owner)
    before = core(owner).read(file=USER)
    stale = item_post(client_for(owner), USER, 0, "- Name: Sam", before.version - 1)
    assert "changed since you opened this page" in stale.content.decode()
    moved = item_post(client_for(owner), USER, 0, "- Lives in Porto", before.version)  # not line 0 any more
    assert "changed since you opened this page" in moved.content.decode()
    # Bob posting Alice's line deletes nothing of hers: the form works on his own file only
    item_post(client_for(colleague), USER, 0, "- Name: Sam", before.version)
    assert core(owner).read(file=USER) == before
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(f"/memory/default/files/{USER}/items/0/delete/",
                       {"line": "- Name: Sam", "expected_version": before.version}).status_code == 403
    assert core(owner).read(file=USER) == before
    bad = client_for(owner).post(f"/memory/default/files/{USER}/items/0/delete/", {"line": "x"})
    assert bad.status_code == 400 and core(owner).read(file=USER) == before


def test_history_shows_diffs_and_a_version_can_be_restored(services, owner, client_for):
    seed_lines(owner)
    memory = core(owner)
    state = memory.read(file=USER)
    memory.rewrite(file=USER, text="- Name: Sam\n- Lives in Braga\n", source=f"user:{owner.pk}",
                   expected_version=state.version)
    body = client_for(owner).get(PAGE).content.decode()
    assert 'class="del"><span aria-hidden="true">- </span><span class="sr-only">removed: </span>- Lives in Porto' in body
    assert 'class="add"><span aria-hidden="true">+ </span><span class="sr-only">added: </span>- Lives in Braga' in body
    response = client_for(owner).post(f"/memory/default/files/{USER}/restore/{state.version}/",
                                      {"expected_version": state.version + 1}, follow=True)
    assert f"Restored version {state.version} of USER.md." in response.content.decode()
    assert memory.read(file=USER).text == state.text
    assert memory.history(file=USER)[-1].action == "restore"


def test_a_whole_file_edit_from_a_browser_is_stored_with_lf(services, owner, client_for):
    seed_lines(owner)
    version = core(owner).read(file=MEMORY).version
    client_for(owner).post(f"/memory/default/files/{MEMORY}/",
                           {f"{MEMORY}-text": "- one\r\n- two\r\n", f"{MEMORY}-expected_version": str(version)})
    assert core(owner).read(file=MEMORY).text == "- one\n- two\n"


def test_forget_everything_needs_its_confirmation_and_keeps_older_statements_out(services, owner, client_for):
    seed_lines(owner)
    before = {f: core(owner).read(file=f).text for f in (USER, MEMORY)}
    refused = client_for(owner).post("/memory/default/forget/", {"confirm": "yes"}, follow=True)
    assert "Type “forget” to confirm" in refused.content.decode()
    assert {f: core(owner).read(file=f).text for f in (USER, MEMORY)} == before
    done = client_for(owner).post("/memory/default/forget/", {"confirm": "forget"}, follow=True)
    assert "Forgotten" in done.content.decode()
    assert core(owner).read(file=USER).text == "" and core(owner).read(file=MEMORY).text == ""

    # A full consolidation of an older conversation does not learn it back.
    scope = default_archive_scope(agent="default", user=str(owner.pk))
    get_services().bundle.archive.put(scope, ArchiveDocument(session="session:old", summary="", messages=(
        Message(role="user", content="I live in Lisbon.", seq=1, created_at=datetime(2024, 1, 1, tzinfo=UTC)),)))
    from agents.llm import OfflineChatModel, as_text_completion

    config = MemoryConfig(archive_enabled=True, core_enabled=True)
    DreamEngine(bundle=get_services().bundle, model=as_text_completion(OfflineChatModel())).consolidate(
        agent="default", user=str(owner.pk), config=config, mode="full")
    assert core(owner).read(file=USER).text == ""


def test_soul_stays_read_only_for_users_item_by_item_too(services, owner, client_for):
    from tests.agents.inspection.support import seed

    seed(services, owner)
    body = client_for(owner).get(PAGE).content.decode()
    soul = body[body.index('id="file-SOUL.md"'):body.index('id="file-USER.md"')]
    assert "I am a careful assistant." in soul and "/items/" not in soul and "Restore version" not in soul
    response = item_post(client_for(owner), "SOUL.md", 0, "I am a careful assistant.", 1)
    assert "only staff can change it" in response.content.decode()
