"""Cost: a turn of a 100k-message session reads only the window it needs.

The MessageStore is wrapped to count what it returns; the same turn is timed on a 1k-message
session. Both numbers are printed (run with ``-s``) and recorded as test properties.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from memory.assembly.assembler import ContextAssembler, default_pipeline
from memory.config import MemoryConfig
from memory.messages import Message

from .helpers import new_session

CONFIG = MemoryConfig(context_window=16384)
BATCH = 2000


class CountingMessages:
    """A MessageStore proxy counting read() calls and the messages they return."""

    def __init__(self, inner):
        self._inner = inner
        self.reads = 0
        self.returned = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def read(self, scope, **kwargs):
        messages = self._inner.read(scope, **kwargs)
        self.reads += 1
        self.returned += len(messages)
        return messages


def build_session(bundle, n):
    session = new_session()
    for start in range(0, n, BATCH):
        batch = [
            Message(
                role="user" if i % 2 == 0 else "assistant",
                content=f"message number {i} about the ongoing task, with a few more words of detail",
            )
            for i in range(start, min(n, start + BATCH))
        ]
        bundle.messages.append(session, batch)
    return session


def timed_turn(bundle, catalog, session, *, repeat=3):
    counting = CountingMessages(bundle.messages)
    assembler = ContextAssembler(stores=replace(bundle, messages=counting), pipeline=default_pipeline(catalog=catalog))
    best = float("inf")
    for _ in range(repeat):
        counting.reads = counting.returned = 0
        started = time.perf_counter()
        context = assembler.assemble(session=session, config=CONFIG, agent="default", instructions="Be brief.")
        best = min(best, time.perf_counter() - started)
    return context, counting, best


@pytest.mark.slow
def test_a_100k_session_costs_about_what_a_1k_session_costs(bundle, catalog, record_property):
    small = build_session(bundle, 1_000)
    large = build_session(bundle, 100_000)

    small_context, small_reads, small_time = timed_turn(bundle, catalog, small)
    large_context, large_reads, large_time = timed_turn(bundle, catalog, large)

    sent = len(large_context.session_messages)
    assert large_context.omitted_messages == 100_000 - sent
    # Only the window (plus the estimate's slack) is read, never the session.
    assert large_reads.returned <= 2 * sent + 64, (large_reads.returned, sent)
    assert large_reads.reads <= 3
    assert small_reads.returned <= 1_000
    # Both sessions are larger than the window, so both turns send about the same messages.
    assert small_context.omitted_messages > 0

    print(
        f"\n[{bundle.backend}] 1k session: {small_time * 1000:.1f} ms, read {small_reads.returned} messages "
        f"in {small_reads.reads} call(s), sent {len(small_context.session_messages)}"
    )
    print(
        f"[{bundle.backend}] 100k session: {large_time * 1000:.1f} ms, read {large_reads.returned} messages "
        f"in {large_reads.reads} call(s), sent {sent}"
    )
    record_property("ms_1k", round(small_time * 1000, 1))
    record_property("ms_100k", round(large_time * 1000, 1))
    # Generous: the point is "close", not a benchmark; a whole-session read would be ~100x.
    assert large_time <= 5 * small_time + 0.25, (small_time, large_time)


def test_a_skewed_session_grows_its_read_until_the_window_is_full(bundle, catalog):
    # Big old messages inflate the average, so the first estimate reads too few small new ones.
    session = new_session()
    bundle.messages.append(session, [Message(role="user", content="bulk " * 4000) for _ in range(40)])
    bundle.messages.append(
        session, [Message(role="user" if i % 2 == 0 else "assistant", content=f"short {i}") for i in range(3000)]
    )
    context, counting, _ = timed_turn(bundle, catalog, session, repeat=1)
    assert counting.reads >= 2
    assert context.omitted_messages > 0 and len(context.session_messages) > 500
    # Filled: the window plus the next older message would not fit.
    older = bundle.messages.read(session, last=len(context.session_messages) + 1)[0]
    assert context.total_tokens + older.tokens > CONFIG.context_window - context.reply_reserve
