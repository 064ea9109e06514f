"""Fixtures for the chat tests: a small declaration, a runtime over private services, sockets.

``chat_bot`` points MODEX_SCOPES_FILE at a declaration whose ``default`` agent has a tiny
compression threshold (cleanup after a few turns) and one tool (``todo``), so every path of a
turn shows up quickly. ``chat_runtime`` makes ``agents.chat.service.get_runtime()`` return a Runtime
over file-backed services in the test's tmp dir with the offline model (``make_runtime`` takes
a ``chunk_delay`` to slow streaming down, for stop/disconnect tests).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from agents.chat import service as chat
from agents.chat import turns
from agents.llm import OfflineChatModel
from agents.models import Conversation
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services

CHAT_BOT_YML = """\
persistence:
  backend: file
model:
  provider: offline
  name: modex-offline
  context_window: 4096
agents:
  default:
    description: Test assistant with a tiny threshold.
    instructions: You are a test assistant.
    tools: [todo]
    memory:
      compression_threshold: 700
      keep_tokens: 250
  roomy:
    description: A second main agent.
    instructions: You are roomy.
    tools: []
    subagents:
      helper:
        description: Not a main agent.
        tools: []
"""

ORIGIN = b"http://testserver"


@pytest.fixture
def chat_bot(tmp_path: Path, settings) -> Path:
    path = tmp_path / "bot.yml"
    path.write_text(CHAT_BOT_YML)
    settings.MODEX_SCOPES_FILE = path
    return path


@pytest.fixture
def make_runtime(tmp_path: Path, chat_bot):
    made: list[Runtime] = []

    def make(*, chunk_delay: float = 0.0, backend: str = "file", model=None) -> Runtime:
        model = model or OfflineChatModel(chunk_delay=chunk_delay)
        services = build_services(backend=backend, workspace=tmp_path / "ws", model=model)
        runtime = Runtime(services=services)
        chat.set_runtime_for_tests(runtime)
        made.append(runtime)
        return runtime

    yield make
    chat.set_runtime_for_tests(None)


@pytest.fixture
async def live_turns():
    """The process's live chat turns; those still running when the test ends are stopped and
    awaited (a turn outlives its socket: agents.chat.turns)."""
    yield turns.registry
    await turns.registry.finish_all()


@pytest.fixture
def chat_runtime(make_runtime) -> Runtime:
    return make_runtime()


@pytest.fixture
def allowed_hosts(settings):
    """Allow the test client's hosts; the socket's origin check (modex_web.websocket) reads
    ALLOWED_HOSTS at every handshake."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver", "localhost"]
    return settings.ALLOWED_HOSTS


@pytest.fixture
def conversation(owner, chat_runtime) -> Conversation:
    return chat.create_conversation(user=owner, agent="default")


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


async def open_socket(conversation_id: str, user=None, *, origin: bytes = ORIGIN) -> WebsocketCommunicator:
    """A communicator on the real ASGI application (origin check, session auth, routing)."""
    from modex_web.asgi import application

    headers = [(b"origin", origin), (b"host", b"testserver")]
    if user is not None:
        headers.append((b"cookie", await sync_to_async(session_cookie)(user)))
    return WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/", headers=headers)


async def receive_until(comm: WebsocketCommunicator, needle: str, *, timeout: float = 10.0) -> list[str]:
    """Frames up to and including the first one containing ``needle``."""
    frames: list[str] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"no frame with {needle!r} within {timeout}s; got {len(frames)}: {frames[-3:]}")
        frame = await comm.receive_from(timeout=remaining)
        frames.append(frame)
        if needle in frame:
            return frames


async def drain(comm: WebsocketCommunicator, *, quiet: float = 0.2) -> list[str]:
    """Every frame until the socket has been quiet for ``quiet`` seconds."""
    frames = []
    # receive_nothing, not a receive_from timeout: asgiref cancels the application on a timeout.
    while not await comm.receive_nothing(timeout=quiet):
        frames.append(await comm.receive_from())
    return frames


IDLE = 'data-state="idle"'  # the composer is enabled again: the turn is over
RUNNING = 'data-state="running"'


async def connected(conversation, user) -> WebsocketCommunicator:
    """A socket of ``user`` on ``conversation``, handshake accepted."""
    comm = await open_socket(conversation.pk, user)
    ok, _ = await comm.connect()
    assert ok
    return comm


async def stored(runtime: Runtime, conversation):
    """The conversation's session as the runtime's store holds it."""
    return await sync_to_async(runtime.services.bundle.messages.read, thread_sensitive=True)(chat.session_of(conversation))
