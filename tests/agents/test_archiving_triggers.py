"""When conversations reach the archive (agents/archiving.py): a user who comes back in another
conversation, a conversation gone quiet, and ``manage.py archive_sessions``; through the real
runtime, stores and recorded task queue, on the file and SQLite backends."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import TaskResultStatus
from django.utils import timezone

from agents.archiving import CATCH_UP_HOOK, IDLE_HOOK
from agents.runtime.tools.history_tools import archive_scope_for
from agents.tasks import TaskEnvironment, arun_recorded_tasks, task_environment
from memory.assembly.archive import recall_lines
from memory.scopes import SessionScope
from tests.agents.support import (  # noqa: F401
    BACKENDS,
    RecordingModel,
    fresh_queue,
    off_loop,
    queued,
    runtime_setup,
    turn,
)
from tests.agents.test_long_term import long_term_agent

PORTO = "My sister Maya moved to Porto last month, she works at a bakery there."


pytestmark = pytest.mark.usefixtures("fresh_queue")


def archived_texts(services, user: str) -> list[str]:
    scope = archive_scope_for(agent="default", user_id=user)
    return [m.content for doc in services.bundle.archive.list(scope) for m in doc.messages]


async def new_conversation(owner):
    from agents.models import Conversation

    row = await sync_to_async(Conversation.objects.create)(owner=owner, agent="default")
    return SessionScope(row.pk)


def system_prompt(model: RecordingModel) -> str:
    return model.requests[-1]["messages"][0]["content"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("backend_name", ["file", "sqlite"])
async def test_what_was_said_in_a_short_conversation_is_recalled_in_the_next(tmp_path, backend_name, owner):
    agent = long_term_agent(core_enabled=False)  # the archive alone carries it across
    model = RecordingModel()
    runtime, services, _ = runtime_setup(tmp_path, backend_name, agent, model)
    user = str(owner.pk)
    first = await new_conversation(owner)
    await turn(runtime, agent, first, PORTO, user=user)
    before = (await off_loop(services.bundle.messages.head, first)).count
    assert await off_loop(archived_texts, services, user) == []  # far below any cleanup threshold

    second = await new_conversation(owner)
    await turn(runtime, agent, second, "Which city did Maya move to?", user=user)

    assert PORTO in await off_loop(archived_texts, services, user)
    recall = system_prompt(model).split("<archive_recall>")[1].split("</archive_recall>")[0]
    assert any(speaker == "user" and "Porto" in text for _, speaker, _, text in recall_lines(recall))
    # The conversation left behind is unchanged: archiving copies, it never prunes.
    assert (await off_loop(services.bundle.messages.head, first)).count == before

    # Back in the first conversation: the second is archived; nothing is archived twice.
    await turn(runtime, agent, first, "Thanks!", user=user)
    texts = await off_loop(archived_texts, services, user)
    assert texts.count(PORTO) == 1 and "Which city did Maya move to?" in texts


@pytest.mark.django_db(transaction=True)
async def test_recall_sent_with_the_message_for_a_prefix_caching_server(tmp_path, owner, settings):
    settings.MODEX_RECALL_PLACEMENT = "message"
    agent = long_term_agent(core_enabled=False)
    model = RecordingModel()
    runtime, services, _ = runtime_setup(tmp_path, "sqlite", agent, model)
    user = str(owner.pk)
    await turn(runtime, agent, await new_conversation(owner), PORTO, user=user)
    second = await new_conversation(owner)
    asked = len(model.requests)
    events = await turn(runtime, agent, second, "Which city did Maya move to?", user=user)

    assert len(model.requests) == asked + 1  # answered from the recall sent with it, no search
    request = model.requests[-1]["messages"]
    assert "<archive_recall>" not in request[0]["content"] and "<archive_summaries" in request[0]["content"]
    asked = request[-1]["content"]
    assert asked.startswith("<archive_recall>") and asked.endswith("\n\nWhich city did Maya move to?")
    assert "Porto" in "".join(getattr(e, "text", "") for e in events)  # the offline model read it there
    # Only what the user wrote is stored.
    stored = await off_loop(services.bundle.messages.read, second)
    assert [m.content for m in stored if m.role == "user"] == ["Which city did Maya move to?"]


@pytest.mark.django_db(transaction=True)
async def test_the_idle_task_archives_a_conversation_once_it_has_been_quiet(tmp_path, owner, settings):
    settings.MODEX_ARCHIVE_IDLE_MINUTES = 30
    agent = long_term_agent(core_enabled=False)
    runtime, services, env = runtime_setup(tmp_path, "sqlite", agent, RecordingModel())
    user = str(owner.pk)
    session = await new_conversation(owner)
    await turn(runtime, agent, session, PORTO, user=user)

    [job] = queued("archive_idle_conversation")
    assert job.task.run_after is not None and job.task.run_after - timezone.now() > timedelta(minutes=29)
    now = await arun_recorded_tasks(environment=env)
    assert "archive_idle_conversation" not in [r.task.name for r in now]  # not due yet

    later = timezone.now() + timedelta(minutes=31)
    ran = await arun_recorded_tasks(environment=env, now=later)
    assert [(r.task.name, r.status) for r in ran] == [("archive_idle_conversation", TaskResultStatus.SUCCESSFUL)]
    assert ran[0].return_value["status"] == "not_idle"  # the messages are younger than 30 minutes here
    assert await off_loop(archived_texts, services, user) == []


@pytest.mark.django_db(transaction=True)
async def test_the_idle_task_archives_when_the_last_message_is_old_enough(tmp_path, owner, settings):
    settings.MODEX_ARCHIVE_IDLE_MINUTES = 0  # every message is "idle" at once: archived after the turn
    agent = long_term_agent()
    runtime, services, env = runtime_setup(tmp_path, "file", agent, RecordingModel())
    user = str(owner.pk)
    session = await new_conversation(owner)
    await turn(runtime, agent, session, PORTO, user=user)
    ran = await arun_recorded_tasks(environment=env)
    names = [r.task.name for r in ran]
    [archived] = [r for r in ran if r.task.name == "archive_idle_conversation"]
    assert archived.return_value["status"] == "archived"
    assert "consolidate_core_memory" in names  # core memory on: the Dream Engine reads what arrived
    assert PORTO in await off_loop(archived_texts, services, user)


async def test_layers_off_install_neither_trigger(tmp_path):
    from agents.runtime.hooks import HookPoint

    agent = long_term_agent(archive_enabled=False, core_enabled=False)
    runtime, _, _ = runtime_setup(tmp_path, "file", agent, RecordingModel())
    await turn(runtime, agent, SessionScope("off1"), PORTO)
    hooks = runtime.hooks_for(agent)
    names = hooks.names(HookPoint.BEFORE_STEP) + hooks.names(HookPoint.AFTER_GRAPH)
    assert CATCH_UP_HOOK not in names and IDLE_HOOK not in names
    on = long_term_agent()
    names = runtime.hooks_for(on).names(HookPoint.BEFORE_STEP) + runtime.hooks_for(on).names(HookPoint.AFTER_GRAPH)
    assert CATCH_UP_HOOK in names and IDLE_HOOK in names
    assert queued("archive_idle_conversation") == []


@pytest.mark.django_db(transaction=True)
def test_archive_sessions_backfills_every_conversation_once(tmp_path, owner, colleague):
    from agents.llm import OfflineChatModel
    from agents.models import Conversation
    from agents.runtime.services import build_services
    from memory.messages import Message

    agent = long_term_agent()
    services = build_services(backend="sqlite", workspace=tmp_path, model=OfflineChatModel())
    env = TaskEnvironment(services=services, find_agent={"default": agent}.get)
    for person, text in ((owner, PORTO), (colleague, "I keep bees on my roof in Leeds.")):
        row = Conversation.objects.create(owner=person, agent="default")
        services.bundle.messages.append(SessionScope(row.pk), [Message(role="user", content=text),
                                                               Message(role="assistant", content="Noted.")])
    with task_environment(env):
        out = io.StringIO()
        call_command("archive_sessions", stdout=out)
        assert "archived 4 messages from 2 conversations" in out.getvalue()
        out = io.StringIO()
        call_command("archive_sessions", stdout=out)
        assert "archived 0 messages from 0 conversations; 2 up to date" in out.getvalue()
        with pytest.raises(CommandError, match="no main agent"):
            call_command("archive_sessions", "--agent", "nobody", stdout=io.StringIO())
        with pytest.raises(CommandError, match="user id"):
            call_command("archive_sessions", "--user", "../etc", stdout=io.StringIO())
    # Each user's words went to that user's archive only.
    assert archived_texts(services, str(owner.pk)) == [PORTO, "Noted."]
    assert archived_texts(services, str(colleague.pk)) == ["I keep bees on my roof in Leeds.", "Noted."]
