"""Experience lessons never carry one user's private text to another user (issue 20, B).

The privacy model (agents/experience/store.py, README "Security"): lessons are per user. Alice's
runs are planted with private strings that the reviewer quotes into her lesson (the offline
reviewer copies the failed tool call's error, as a real model may copy anything); then Bob, a
user of the same agent, is searched everywhere he can read: his memory page, the API, his
agent's context (every request the model gets in his turns) and the agent's experience tool in
his runs. Alice's own lesson holding the string is the control: the search can fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.tasks import default_task_backend
from django.test import Client

from agents.chat import service as chat
from agents.declarations import clear_declaration_cache, get_declaration
from agents.experience.store import ExperienceStore, experience_scope
from agents.llm import OfflineChatModel
from agents.personal.tokens import create_token
from agents.runtime import services as services_module
from agents.runtime.context import ToolContext
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services
from agents.runtime.tools.scratchpad import RunScratchpad
from agents.tasks import TaskEnvironment, arun_recorded_tasks
from memory.scopes import AgentScope, SessionScope
from tests.agents.inspection.support import MEMORY_BOT_YML

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "alice-private-SSN-078-05-1120"
BOB_SECRET = "bob-private-IBAN-DE89370400440532013000"


class Recording:
    """The offline model, keeping every request it is sent."""

    def __init__(self) -> None:
        self.inner = OfflineChatModel()
        self.name = self.inner.name
        self.requests: list[str] = []

    def describe(self) -> str:
        return self.inner.describe()

    def stream(self, *, messages, tools=None, **options):
        self.requests.append(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False))
        return self.inner.stream(messages=messages, tools=tools, **options)


@pytest.fixture(params=["file", "sqlite"])
def world(request, tmp_path: Path, settings):
    bot = tmp_path / "bot.yml"
    bot.write_text(MEMORY_BOT_YML)
    settings.MODEX_SCOPES_FILE = bot
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings.MODEX_WORKSPACE = workspace
    clear_declaration_cache()
    default_task_backend.clear()
    model = Recording()
    services = build_services(backend=request.param, workspace=workspace, model=model)
    previous = services_module._services
    services_module._services = services
    runtime = Runtime(services=services)
    chat.set_runtime_for_tests(runtime)
    yield services, runtime, model
    chat.set_runtime_for_tests(None)
    services_module._services = previous
    default_task_backend.clear()
    clear_declaration_cache()


async def turn(runtime, agent, user, session, text):
    return [e async for e in runtime.run_turn(agent=agent, user_id=str(user.pk), session=session, text=text)]


def readable_by(user) -> dict[str, str]:
    """Everything ``user`` reads over HTTP about the agent: memory pages, the API (by token)."""
    client = Client()
    client.force_login(user)
    _, raw = create_token(user=user, name="probe")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    pages = {url: client.get(url) for url in ("/memory/", "/memory/default/", "/conversations/")}
    pages.update({f"api {url}": api.get(f"/api{url}") for url in (
        "/agents/default/experiences", "/agents/default/core", "/agents", "/conversations",
        "/memory/archives", "/memory/archives/default/documents")})
    for url, response in pages.items():
        assert response.status_code == 200, url
    return {url: response.content.decode() for url, response in pages.items()}


async def test_b_one_users_private_text_in_a_lesson_never_reaches_another_user(world, owner, colleague):
    services, runtime, model = world
    agent = get_declaration().find("default")
    env = TaskEnvironment(services=services, find_agent={agent.name: agent}.get)
    alice, bob = owner, colleague

    # Alice's run fails a tool call whose error quotes her private text; the review records it.
    await turn(runtime, agent, alice, SessionScope("alice-1"), f"done: {SECRET}")
    [ran] = await arun_recorded_tasks(environment=env)
    assert ran.return_value["created"], ran.return_value
    [lesson] = await sync_to_async(ExperienceStore(kv=services.bundle.kv, agent="default", user=str(alice.pk)).list)()
    assert SECRET in lesson.body  # the control: the reviewer did carry it into a lesson
    assert SECRET in (await sync_to_async(readable_by)(alice))["api /agents/default/experiences"]

    # Bob uses the same agent: a failing call of the same tool (a same-topic lesson), then more.
    model.requests.clear()
    bob_session = SessionScope("bob-1")
    await turn(runtime, agent, bob, bob_session, f"done: {BOB_SECRET}")
    await arun_recorded_tasks(environment=env)
    await turn(runtime, agent, bob, bob_session, "todo: water the plants")
    await turn(runtime, agent, bob, SessionScope("bob-2"), "what do you know about me?")
    [bobs] = await sync_to_async(ExperienceStore(kv=services.bundle.kv, agent="default", user=str(bob.pk)).list)()
    assert BOB_SECRET in bobs.body and SECRET not in bobs.body
    assert model.requests and any("<available_experiences>" in r for r in model.requests)
    for request in model.requests:
        assert SECRET not in request  # Bob's context, and the reviewer of Bob's run

    ctx = ToolContext(services=services, runtime=runtime, agent=agent, user_id=str(bob.pk), session=bob_session,
                      scratchpad=RunScratchpad())
    roster = runtime.roster(agent)
    listed = await roster.call(ctx, name="experience", arguments_json='{"action": "list"}')
    read = await roster.call(ctx, name="experience", arguments_json=json.dumps({"action": "read", "name": lesson.slug}))
    assert listed.ok and SECRET not in listed.content and SECRET not in read.content

    for url, body in (await sync_to_async(readable_by)(bob)).items():
        assert SECRET not in body, url
    for url, body in (await sync_to_async(readable_by)(alice)).items():
        assert BOB_SECRET not in body, url

    # Nothing agent-wide holds either: no lesson lives where every user of the agent reads.
    shared = await sync_to_async(services.bundle.kv.list)(AgentScope("default"), prefix="experience.")
    assert shared == []
    assert experience_scope("default", str(alice.pk)) != experience_scope("default", str(bob.pk))
