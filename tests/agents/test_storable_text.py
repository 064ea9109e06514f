"""Any text a model can produce reaches every store as storable text (issue 16, deliverable 3).

A Python str may hold lone surrogates (a model's JSON can say ``"\\ud83d"``) and NUL. The turn
below runs over the real HTTP fake OpenAI server on every backend (file, SQLite, PostgreSQL when
configured): the model streams arbitrary text as content and reasoning, calls the todo and core
memory tools with it, answers the cleanup's summary request with it; the session crosses its
threshold mid-turn, so the cleanup runs inside the turn. Afterwards: the cleanup committed, the
session is under its threshold, every message of the turn is whole in the session or the pruned
catalog (and the archive), and every stored text is valid Unicode.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from agents.declarations import load_declaration
from agents.experience.store import ExperienceStore, experience_scope
from agents.llm.openai import OpenAIChatModel
from agents.runtime.events import CleanupDone, ContentChunk, ReasoningChunk, TurnFinished
from agents.runtime.loop import Runtime
from memory.text import StorableDeltas
from agents.runtime.services import build_services
from agents.runtime.tools.history_tools import archive_scope_for
from agents.runtime.tools.todo import TODO_KEY
from agents.llm import ContentDelta, ReasoningDelta
from memory.compression.steps import INTENT_KEY
from memory.core_memory import MEMORY, clean_text, core_scope
from memory.scopes import AgentScope, SessionScope
from memory.text import REPLACEMENT, is_storable
from memory.transcript import validate_transcript
from tests.agents.test_runtime import no_sleep
from tests.fakes.openai_server import FAKE_API_KEY, FakeToolCall, Reply

REPO = Path(__file__).resolve().parents[2]
HEADINGS = ("Goal", "Decisions", "Facts learned", "Open tasks", "Reasoning trail", "Tool results that matter")
FILLER = "\U0001d11e" * 300  # 900 tokens in 300 chunks: pushes the session over its threshold after step 1

#: Arbitrary Python strings, weighted towards what breaks stores: lone surrogates, NUL, pairs.
hostile = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(codec=None), max_size=12),
        st.sampled_from(["\ud83d", "\ude00", "\ud83d\ude00", "\x00", "\udfff\ud800", "😀", "## [1]", "---"]),
    ),
    min_size=1,
    max_size=5,
).map("".join)
nonblank = hostile.filter(lambda t: clean_text(normal(t)).strip())


def normal(text: str) -> str:
    """What storable text a model's ``text`` becomes: surrogate pairs joined, lone ones U+FFFD.

    A pair written as two JSON escapes decodes to one character (in one chunk by the JSON
    decoder, across chunks by the runtime), so this is the oracle, not ``storable`` alone.
    """
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def agent_node():
    node = load_declaration(REPO / "config" / "scopes" / "bot.yml").find("default")
    config = replace(
        node.memory_config,
        archive_enabled=True,
        core_enabled=True,
        context_window=4096,
        compression_threshold=700,
        keep_tokens=60,
    )
    return replace(node, memory_config=config)


class Script:
    """The model: a tool-calling first step, a summary for the cleanup, a final answer."""

    def __init__(self, *, content: str, reasoning: str, item: str, fact: str, summary: str) -> None:
        self.content, self.reasoning, self.item, self.fact, self.summary = content, reasoning, item, fact, summary
        self.steps = 0
        self.lock = threading.Lock()

    def __call__(self, request):
        body = request.json
        if not body.get("tools"):  # the cleanup's summarizer
            sections = "\n".join(f"## {h}\n- {self.summary}" for h in HEADINGS)
            return Reply(content=sections, chunk_chars=3)
        with self.lock:
            self.steps += 1
            first = self.steps == 1
        if first:
            return Reply(
                reasoning=self.reasoning + FILLER,
                content=self.content,
                tool_calls=[
                    FakeToolCall("call_todo", "todo", json.dumps({"action": "add", "item": self.item})),
                    FakeToolCall(
                        "call_core", "core_memory", json.dumps({"action": "append", "file": MEMORY, "text": self.fact})
                    ),
                ],
                chunk_chars=1,  # every surrogate pair of the text is split over two chunks
            )
        return Reply(content=self.content, reasoning=self.reasoning, chunk_chars=2)


def stored_texts(message):
    yield from (message.content or "", message.reasoning_content or "")
    for call in message.tool_calls:
        yield from (call.id, call.name, call.arguments_json)


@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate], suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=hostile, reasoning=hostile, item=nonblank, fact=nonblank, summary=hostile)
def test_any_model_text_survives_a_turn_and_its_cleanup_on_every_backend(
    threaded_bundle, tmp_path, fake_openai, content, reasoning, item, fact, summary
):
    script = Script(content=content, reasoning=reasoning, item=item, fact=fact, summary=summary)
    fake_openai.responder = script
    model = OpenAIChatModel(
        base_url=fake_openai.url, api_key=FAKE_API_KEY, model="fake", timeout=10, max_retries=0, sleep=no_sleep
    )
    workspace = tmp_path / uuid.uuid4().hex
    services = build_services(backend=threaded_bundle.backend, workspace=workspace, model=model, bundle=threaded_bundle)
    runtime = Runtime(services=services)
    agent, user = agent_node(), f"u{uuid.uuid4().hex[:10]}"  # examples share the stores
    session = SessionScope(f"text-{uuid.uuid4().hex[:12]}")

    async def run():
        events = [e async for e in runtime.run_turn(agent=agent, user_id=user, session=session, text="note this")]
        io = lambda fn, *a, **k: sync_to_async(fn, thread_sensitive=True)(*a, **k)  # noqa: E731
        kv, messages = services.bundle.kv, services.bundle.messages
        return (
            events,
            await io(messages.read, session),
            await io(messages.head, session),
            await io(kv.get, session, TODO_KEY),
            await io(kv.get, session, INTENT_KEY),
            await io(kv.get, core_scope(file=MEMORY, agent=agent.name, user=user), MEMORY),
            await io(services.bundle.archive.list, archive_scope_for(agent=agent.name, user_id=user)),
        )

    events, live, head, todo, intent, memory_file, archived = async_to_sync(run)()

    # The turn finished and its cleanup committed; the session ends under its threshold.
    cleanups = [e for e in events if isinstance(e, CleanupDone)]
    assert cleanups and all(c.committed for c in cleanups), [c.reason for c in cleanups]
    assert any(isinstance(e, TurnFinished) for e in events)
    assert head.tokens <= agent.memory_config.threshold
    assert intent is None  # the cleanup's intent was saved (a KV value) and cleared

    # What the browser was sent is what was stored: valid text, pairs joined across chunks.
    streamed = "".join(e.text for e in events if isinstance(e, ContentChunk))
    assert streamed == normal(content) * 2
    assert "".join(e.text for e in events if isinstance(e, ReasoningChunk)) == normal(reasoning + FILLER) + normal(reasoning)

    # Nothing lost: every message of the turn is in the session or, whole, in the pruned catalog.
    validate_transcript(live)
    final = live[-1]
    assert final.role == "assistant" and (final.content or "") == normal(content)
    assert final.reasoning_content == (normal(reasoning) or None)
    summary_message = live[0]
    assert summary_message.is_compact_summary
    evicted = [services.catalog.lookup(session, seq) for seq in range(1, summary_message.seq + 1)]
    assert all(m is not None for m in evicted)
    first_reply = next(m for m in evicted if m.role == "assistant")
    assert (first_reply.content or "") == normal(content) and first_reply.reasoning_content == normal(reasoning + FILLER)
    assert json.loads(first_reply.tool_calls[0].arguments_json)["item"] == normal(item)
    results = {m.tool_call_id: m.content for m in evicted if m.role == "tool"}
    assert normal(item) in results["call_todo"]
    assert results["call_core"].startswith("Appended to MEMORY.md")
    assert len(archived) == 1 and [m.id for m in archived[0].messages] == [m.id for m in evicted]

    # The KV values the tools wrote hold the text, made storable.
    assert [i["text"] for i in json.loads(todo.value)["items"]] == [normal(item)]
    assert clean_text(normal(fact)).strip("\n") in memory_file.value

    for message in [*live, *evicted, *archived[0].messages]:
        assert all(is_storable(text) for text in stored_texts(message))
    assert is_storable(archived[0].summary) and is_storable(memory_file.value) and is_storable(todo.value)


def test_split_surrogate_pairs_are_joined_and_lone_ones_replaced():
    deltas = StorableDeltas()
    pieces = [deltas.text(ContentDelta, t) for t in ["a\ud83d", "\ude00b", "\ud83d", "c", "\ude00", "d\ud83d"]]
    pieces.append(deltas.flush(ContentDelta))
    assert "".join(pieces) == f"a😀b{REPLACEMENT}c{REPLACEMENT}d{REPLACEMENT}"
    # channels are kept apart: a held high surrogate waits for its own channel's next piece
    assert deltas.text(ReasoningDelta, "x\ud83d") == "x"
    assert deltas.text(ContentDelta, "\ude00") == REPLACEMENT
    assert deltas.text(ReasoningDelta, "\ude00") == "😀"


@pytest.mark.parametrize("text", ["lone \ud83d high", "lone \ude00 low", "nul \x00 inside", "\udfff\ud800\x00"])
def test_lessons_with_any_text_are_created_and_updated(bundle, text):
    lessons = ExperienceStore(kv=bundle.kv, agent="default", user="7")
    created = lessons.create(name=f"topic {text}", description=f"about {text}", body=f"body {text}")
    assert is_storable(created.body) and "\x00" not in created.body
    assert created.body == normal(f"body {text}").replace("\x00", "")
    updated = lessons.update(name=created.name, body=f"new {text}", description=f"now {text}")
    assert updated.body == normal(f"new {text}").replace("\x00", "")
    assert is_storable(bundle.kv.get(experience_scope("default", "7"), updated.key).value)
