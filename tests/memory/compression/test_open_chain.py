"""A cleanup forced while a tool chain is still open keeps the chain, so its late results land
after their call, not orphaned after the compact summary. A property, on every backend."""

from __future__ import annotations

import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.compression.cleanup import CleanupStatus
from memory.compression.pruned import PrunedCatalog
from memory.config import MemoryConfig
from memory.messages import Message, ToolCall
from memory.scopes import SessionScope
from memory.stores.base import MemoryStoreBundle
from memory.transcript import validate_transcript

from .helpers import call_id
from .test_cleanup import cleanup, conserved, conversation

CONFIG = MemoryConfig(context_window=4096, compression_threshold=1000, keep_tokens=300)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    turns=st.integers(0, 12),
    calls=st.integers(1, 3),
    data=st.data(),
    result_words=st.integers(1, 900),
    call_words=st.integers(0, 600),
)
def test_a_forced_cleanup_mid_chain_leaves_no_orphan(
    bundle: MemoryStoreBundle, tmp_path: Path, turns: int, calls: int, data: st.DataObject, result_words: int,
    call_words: int,
) -> None:
    answered = data.draw(st.integers(0, calls - 1), label="answered")
    session = SessionScope("o" + uuid.uuid4().hex[:12])
    catalog = PrunedCatalog(tmp_path / session.id)
    ids = [call_id() for _ in range(calls)]
    call = Message(
        role="assistant",
        content=None,
        reasoning_content="I need all of these " + "because " * call_words,
        tool_calls=tuple(ToolCall(i, "fetch", '{"q": "%s"}' % ("x" * call_words)) for i in ids),
    )

    def result(i: str) -> Message:
        return Message(role="tool", content="data " * result_words, tool_call_id=i, name="fetch")

    appended = bundle.messages.append(session, [*conversation(turns), call, *(result(i) for i in ids[:answered])])
    forced = cleanup(bundle, session, catalog, config=CONFIG, force=True)
    assert forced.status in (CleanupStatus.COMMITTED, CleanupStatus.NOTHING_TO_EVICT), forced.reason
    live = bundle.messages.read(session)
    assert any(m.id == appended[-1 - answered].id for m in live), "the open call was evicted"
    # The tools finish after the cleanup.
    appended += bundle.messages.append(session, [result(i) for i in ids[answered:]])
    validate_transcript(bundle.messages.read(session))
    conserved(bundle, session, catalog, [m.id for m in appended])
    # Once the chain is closed, it is an ordinary unit again.
    again = cleanup(bundle, session, catalog, config=CONFIG, force=True)
    assert again.status in (CleanupStatus.COMMITTED, CleanupStatus.NOTHING_TO_EVICT), again.reason
    validate_transcript(bundle.messages.read(session))
    conserved(bundle, session, catalog, [m.id for m in appended])
