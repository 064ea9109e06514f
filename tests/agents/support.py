"""What the runtime-level tests share: backends, a recording model, one set of services, a turn.

``runtime_setup`` is the one way these tests wire a Runtime over real stores in ``tmp_path``
(``build_services``), with a ``TaskEnvironment`` so the recorded background tasks run against
the same services and agent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.tasks import default_task_backend

from agents.llm import OfflineChatModel
from agents.runtime.loop import Runtime
from agents.runtime.services import MemoryServices, build_services
from agents.tasks import TaskEnvironment
from memory.scopes import SessionScope

BACKENDS = ["file", pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True))]


class RecordingModel:
    """A ChatModel that records every request it forwards to the offline model, and fails the
    requests ``fail_when(messages, tools)`` picks (an endpoint that is down for those)."""

    def __init__(self, inner: Any = None, *, failure: str = "the endpoint is down") -> None:
        self.inner = inner or OfflineChatModel()
        self.name = self.inner.name
        self.requests: list[dict] = []
        self.fail_when: Callable[[list, list | None], bool] | None = None
        self.failure = failure

    def describe(self) -> str:
        return self.inner.describe()

    def stream(self, *, messages, tools=None, **options):
        self.requests.append({"messages": messages, "tools": tools})
        if self.fail_when is not None and self.fail_when(messages, tools):
            return self._fail()
        return self.inner.stream(messages=messages, tools=tools, **options)

    async def _fail(self):
        raise RuntimeError(self.failure)
        yield  # pragma: no cover

    def requests_with_tool(self, name: str) -> list[dict]:
        return [r for r in self.requests if name in tool_names(r["tools"])]


def tool_names(tools: list | None) -> set[str]:
    return {t["function"]["name"] for t in tools or []}


def runtime_setup(tmp_path, backend: str, agent: Any, model: Any) -> tuple[Runtime, MemoryServices, TaskEnvironment]:
    services = build_services(backend=backend, workspace=tmp_path, model=model)
    env = TaskEnvironment(services=services, find_agent={agent.name: agent}.get)
    return Runtime(services=services), services, env


async def turn(runtime: Runtime, agent: Any, session: SessionScope, text: str, user: str = "7") -> list:
    return [event async for event in runtime.run_turn(agent=agent, user_id=user, session=session, text=text)]


def off_loop(fn, *args, **kwargs):
    return sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


def queued(name: str) -> list:
    return [r for r in default_task_backend.results if r.task.name == name]


@pytest.fixture
def fresh_queue():
    default_task_backend.clear()
    yield
    default_task_backend.clear()
