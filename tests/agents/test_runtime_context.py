"""``ContextReady`` carries the request it reports: what the model is sent at that step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agents.declarations import load_declaration
from agents.llm import OfflineChatModel
from agents.runtime.events import ContextReady, ToolFinished
from agents.runtime.loop import Runtime
from agents.runtime.services import build_services
from memory.assembly.assembler import AssembledContext
from memory.messages import Message
from memory.scopes import SessionScope

REPO = Path(__file__).resolve().parents[2]


async def test_each_step_reports_the_request_the_model_is_sent(tmp_path):
    node = load_declaration(REPO / "config" / "scopes" / "bot.yml").find("default")
    node = replace(node, memory_config=replace(node.memory_config, archive_enabled=True))
    services = build_services(backend="file", workspace=tmp_path, model=OfflineChatModel())
    session = SessionScope("s1")
    services.bundle.messages.append(session, [Message(role="user", content="earlier", id="m-earlier")])
    runtime = Runtime(services=services)
    events = [e async for e in runtime.run_turn(agent=node, user_id="7", session=session,
                                               text="search the archive for the boat")]
    ready = [e for e in events if isinstance(e, ContextReady)]
    assert len(ready) == 2 and any(isinstance(e, ToolFinished) for e in events)  # a tool call, then the answer
    first, second = (e.context for e in ready)
    assert isinstance(first, AssembledContext)
    assert first.total_tokens == ready[0].total_tokens and first.account == ready[0].sections
    assert [m.id for m in first.session_messages][0] == "m-earlier"
    assert first.session_messages[-1].content == "search the archive for the boat"
    assert second.session_messages[-1].role == "tool"  # the second request holds the tool's result
    assert first.messages[0]["role"] == "system" and "archive_search" in {t["function"]["name"] for t in first.tools}
    assert ready[0] == ContextReady(ready[0].step, ready[0].sections, ready[0].total_tokens, ready[0].window,
                                    ready[0].threshold, session_tokens=first.session_tokens)  # the figures alone still compare equal
