"""The Dream Engine against a real OpenAI-compatible endpoint (the fake server, over HTTP) whose
model answers prose, then broken JSON, then valid JSON: it asks in JSON mode, asks once more with
the parse error, and a failure is never silent (the run's record, the ``dream`` command, the
staff page)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from agents.llm import OpenAIChatModel
from agents.runtime.services import build_services
from agents.tasks import TaskEnvironment, dream_engine, task_environment
from memory.core_memory import USER, CoreMemory
from memory.dream import FAILURE_KEY, ConsolidationStatus, default_archive_scope
from memory.messages import Message
from memory.stores.base import ArchiveDocument
from tests.agents.test_long_term import long_term_agent
from tests.fakes.openai_server import FAKE_API_KEY, Reply

PROSE = "Sure! From these conversations I learned that the user is called Sam and likes jazz."
BROKEN = '{"edits": [{"file": "USER.md", "action": "add", "text": "Name: Sam", "source": '


@pytest.fixture
def world(tmp_path, fake_openai, owner):
    model = OpenAIChatModel(base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", max_retries=0)
    services = build_services(backend="sqlite", workspace=tmp_path, model=model)
    agent = long_term_agent()
    user = str(owner.pk)
    scope = default_archive_scope(agent="default", user=user)
    document = services.bundle.archive.put(scope, ArchiveDocument(
        session="session:c1", summary="", messages=(Message(role="user", content="My name is Sam.", seq=1),)))
    env = TaskEnvironment(services=services, find_agent={"default": agent}.get)
    return fake_openai, services, agent, user, scope, document, env


def valid(document) -> str:
    return json.dumps({"edits": [{"file": "USER.md", "action": "add", "text": "Name: Sam", "source": document.id,
                                  "seq": 1}]})


@pytest.mark.django_db(transaction=True)
def test_prose_then_valid_json_is_repaired_in_one_run(world):
    server, services, agent, user, scope, document, _ = world
    server.script(Reply(content=PROSE), Reply(content=valid(document)))
    result = dream_engine(services=services).consolidate(agent="default", user=user, config=agent.memory_config)
    assert result.status is ConsolidationStatus.CONSOLIDATED and result.repairs == 1 and result.edits == 1
    first, repair = (r.json for r in server.chat_requests)
    assert first["response_format"] == {"type": "json_object"} == repair["response_format"]
    # the repair request: the same prompt, the invalid answer, then the parse error and "JSON only"
    assert repair["messages"][:2] == first["messages"]
    assert repair["messages"][2] == {"role": "assistant", "content": PROSE}
    assert "not JSON" in repair["messages"][3]["content"] and "only the JSON object" in repair["messages"][3]["content"]
    core = CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent="default", user=user)
    assert core.read(file=USER).text == "Name: Sam\n"
    assert any("asked again" in w for w in result.warnings)


@pytest.mark.django_db(transaction=True)
def test_prose_then_broken_json_is_a_visible_failure_then_valid_json_recovers(world):
    server, services, agent, user, scope, document, env = world
    server.script(Reply(content=PROSE), Reply(content=BROKEN))
    out, err = io.StringIO(), io.StringIO()
    with task_environment(env), pytest.raises(CommandError, match="1 consolidation"):
        call_command("dream", stdout=out, stderr=err)
    assert len(server.chat_requests) == 2  # one repair, not a loop
    report = err.getvalue()
    assert "FAILED" in report and "after a repair request" in report
    assert "WARNING: The model did not answer with the JSON edits" in report
    assert "the model answered: '{\"edits\": [{\"file\": \"USER.md\"" in report
    # the run's record: what failed, how, and the start of the answer
    record = json.loads(services.bundle.kv.get_value(scope, FAILURE_KEY))
    assert record["kind"] == "invalid_answer" and record["answer"].startswith('{"edits"') and record["run_id"]
    core = CoreMemory(kv=services.bundle.kv, config=agent.memory_config, agent="default", user=user)
    assert core.read(file=USER).text == ""  # nothing half-learned

    server.script(Reply(content=valid(document)))
    out, err = io.StringIO(), io.StringIO()
    with task_environment(env):
        call_command("dream", stdout=out, stderr=err)
    assert "1 edit(s) applied" in out.getvalue() and err.getvalue() == ""
    assert core.read(file=USER).text == "Name: Sam\n"
    assert services.bundle.kv.get(scope, FAILURE_KEY) is None


@pytest.mark.django_db(transaction=True)
def test_the_time_limit_counts_the_models_time_not_the_wait_behind_a_turn(tmp_path, fake_openai, owner, monkeypatch):
    """On a one-slot local server, the consolidation's call waits at the gate while a user's turn
    holds the model, longer than the limit on a call; the limit counts from when the call is
    sent, so it is answered and consolidated instead of failing as a timeout."""
    import threading
    import time

    from agents import tasks
    from memory.dream import DreamOptions

    monkeypatch.setattr(tasks, "DreamOptions", lambda **kw: DreamOptions(model_timeout=1.0, **kw))
    model = OpenAIChatModel(base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake-model", max_retries=0)
    services = build_services(backend="sqlite", workspace=tmp_path, model=model, gated=True)
    assert services.gate is not None and services.gate.limit(model) == 1
    agent, user = long_term_agent(), str(owner.pk)
    document = services.bundle.archive.put(default_archive_scope(agent="default", user=user), ArchiveDocument(
        session="session:c1", summary="", messages=(Message(role="user", content="My name is Sam.", seq=1),)))
    fake_openai.script(Reply(content=valid(document)))
    mark = services.gate.mark_turn(model)  # a turn runs for 2.5 s
    threading.Timer(2.5, lambda: services.gate.kv.delete(mark.scope, mark.key)).start()
    started = time.monotonic()
    result = dream_engine(services=services).consolidate(agent="default", user=user, config=agent.memory_config)
    assert time.monotonic() - started >= 2.0  # it waited for the turn
    assert result.status is ConsolidationStatus.CONSOLIDATED and result.edits == 1, result
