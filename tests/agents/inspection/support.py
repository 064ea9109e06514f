"""Shared fixtures of the inspection tests (memory admin, memory pages, API, export/import).

``services`` builds private memory services of each backend over the test's workspace and makes
``agents.runtime.services.get_services()`` return them; ``memory_bot`` is a declaration with a main agent
whose archive and core memory are on (``default``), one with them off (``plain``) and a subagent.
``seeded`` fills the owner's memory with a bit of everything, including hostile markup.
Imported by the conftest of both inspection packages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import Client

from agents.runtime import services as services_module
from agents.declarations import clear_declaration_cache
from agents.experience.store import ExperienceStore
from agents.llm import OfflineChatModel
from agents.models import Conversation
from agents.runtime.services import MemoryServices, build_services
from memory.core_memory import CoreMemory
from memory.dream import default_archive_scope
from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall
from memory.scopes import AgentScope, SessionScope
from memory.stores.base import ArchiveDocument

MEMORY_BOT_YML = """\
persistence:
  backend: file
model:
  provider: offline
  name: modex-offline
  context_window: 8192
agents:
  default:
    description: Test assistant with every layer on.
    instructions: You are a test assistant.
    tools: [core_memory, archive_search, pruned_lookup, todo]
    tool_supplements: [experience]
    memory:
      archive_enabled: true
      core_enabled: true
    subagents:
      helper:
        description: A subagent.
        tools: [pruned_lookup]
  plain:
    description: Long-term layers off.
    instructions: You are plain.
    tools: []
"""

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
BACKEND_PARAMS = [pytest.param("file", id="file"), pytest.param("sqlite", id="sqlite")]


@pytest.fixture
def memory_bot(tmp_path: Path, settings) -> Path:
    path = tmp_path / "bot.yml"
    path.write_text(MEMORY_BOT_YML)
    settings.MODEX_SCOPES_FILE = path
    clear_declaration_cache()
    yield path
    clear_declaration_cache()


@pytest.fixture(params=BACKEND_PARAMS)
def services(request, tmp_path: Path, settings, memory_bot, db) -> MemoryServices:
    """Memory services of each backend, returned by get_services() for the test."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings.MODEX_WORKSPACE = workspace
    built = build_services(backend=request.param, workspace=workspace, model=OfflineChatModel())
    previous = services_module._services
    services_module._services = built
    yield built
    services_module._services = previous


@pytest.fixture
def staff(db, django_user_model):
    return django_user_model.objects.create_user(username="staffer", password="staff-pw-1", is_staff=True)


@pytest.fixture
def client_for():
    def make(user=None, **kwargs) -> Client:
        client = Client(**kwargs)
        if user is not None:
            client.force_login(user)
        return client

    return make


@dataclass
class Seeded:
    conversation: Conversation
    session: SessionScope
    archive_scope: object
    document: ArchiveDocument
    live: list[Message]
    evicted: list[Message]


def chain(text: str = "weather in Paris") -> list[Message]:
    """A user turn, an assistant tool call with reasoning, its result, and a final answer."""
    call = ToolCall(id="call-1", name="search", arguments_json='{"q": "%s"}' % text)
    return [
        Message(role="user", content=f"What is the {text}?"),
        Message(role="assistant", content=None, reasoning_content="I should look it up.", tool_calls=(call,)),
        Message(role="tool", content="Sunny, 21°C", tool_call_id="call-1", name="search"),
        Message(role="assistant", content=f"It is sunny. {HOSTILE}"),
    ]


def seed(services: MemoryServices, user, *, agent: str = "default", marker: str = "owner") -> Seeded:
    """A conversation of ``user`` with a pruned catalog, an archive document, core memory files,
    an experience, a todo list and a cursor."""
    conversation = Conversation.objects.create(owner=user, agent=agent, title=f"{marker} chat")
    session = SessionScope(conversation.session_id)
    bundle = services.bundle
    stored = bundle.messages.append(session, chain(f"{marker} weather") + chain(f"{marker} tides"))
    evicted = stored[:4]
    services.catalog.write(session, evicted)
    summary = Message(role="user", kind=KIND_COMPACT_SUMMARY, content=f"Summary: {marker} asked about weather.")
    head = bundle.messages.head(session)
    bundle.messages.prune(session, through_seq=evicted[-1].seq, summary=summary, expected_version=head.version)
    scope = default_archive_scope(agent=agent, user=str(user.pk))
    document = bundle.archive.put(scope, ArchiveDocument(
        session=session.key(), summary=f"{marker} asked about the weather {HOSTILE}", messages=tuple(evicted),
        title=f"{marker} weather talk", metadata={"cleanup": 1},
    ))
    core = CoreMemory(kv=bundle.kv, config=_config(agent), agent=agent, user=str(user.pk))
    core.append(file="USER.md", text=f"- {marker} likes sailing {HOSTILE}", source="agent")
    core.append(file="MEMORY.md", text=f"- {marker} lives by the sea", source="dream")
    if not bundle.kv.get(AgentScope(agent), "SOUL.md"):
        core.rewrite(file="SOUL.md", text="I am a careful assistant.", source="system", expected_version=0)
    ExperienceStore(kv=bundle.kv, agent=agent, user=str(user.pk)).create(  # lessons are per user
        name="Checking the weather", description=f"Use search before answering ({marker})",
        body=f"Search first. {HOSTILE}",
    )
    bundle.kv.put(session, "todo.json", '[{"content": "find tides", "done": false}]')
    bundle.cursors.set(scope, "dream", document.seq)
    return Seeded(conversation, session, scope, document, bundle.messages.read(session), evicted)


def _config(agent: str):
    from agents.declarations import get_declaration

    return get_declaration().find(agent).memory_config
