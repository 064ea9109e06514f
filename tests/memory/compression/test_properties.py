"""Cleanup invariants as hypothesis properties, on every backend.

For any generated session (tool chains, parallel calls, repaired interrupted chains, reasoning,
messages bigger than the window) and any threshold/keep, after any number of cleanups:
the session is a legal transcript; every appended message is in the session or the committed
catalog (and the archive when on), once, in order; the summarizer saw every evicted
reasoning_content; a cleanup right after a cleanup changes nothing; storage grows linearly.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from memory.compression.cleanup import CleanupStatus, run_cleanup
from memory.compression.pruned import PrunedCatalog, first_uncommitted_seq
from memory.compression.summary import SummaryOptions, summary_budget
from memory.config import MemoryConfig
from memory.hooks import MemoryHookDispatcher
from memory.messages import Message, ToolCall
from memory.scopes import SessionScope, UserScope
from memory.stores.base import MemoryStoreBundle
from memory.stores.registry import open_bundle
from memory.transcript import repair_transcript, validate_transcript

from .helpers import RecordingSummarizer, call_id, no_sleep

VOCABULARY = ["alpha", "beta", "gamma", "delta", "---", "## [1]", "```", "שלום", "🎉", "x\x00y"]
words = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=40).map(" ".join)


class CleanupMachine(RuleBasedStateMachine):
    def __init__(self, bundle: MemoryStoreBundle, root: Path) -> None:
        super().__init__()
        self.bundle = bundle
        self.session = SessionScope("p" + uuid.uuid4().hex[:12])
        self.archive = UserScope("u" + uuid.uuid4().hex[:12])
        self.catalog = PrunedCatalog(root / "pruned")
        self.appended: list[Message] = []
        self.config = MemoryConfig()
        self.model = RecordingSummarizer()
        self.cleanups = 0

    @initialize(
        threshold=st.integers(300, 3000),
        keep_ratio=st.floats(0.0, 0.95),
        archive=st.booleans(),
        window=st.sampled_from([None, 4096]),
    )
    def configure(self, threshold: int, keep_ratio: float, archive: bool, window: int | None) -> None:
        keep = min(threshold - 1, int(threshold * keep_ratio))
        self.config = MemoryConfig(
            context_window=threshold + 500, compression_threshold=threshold, keep_tokens=keep, archive_enabled=archive
        )
        self.model = RecordingSummarizer(context_window=window)

    def append(self, messages: list[Message]) -> None:
        self.appended += self.bundle.messages.append(self.session, messages)

    @rule(text=words)
    def user_turn(self, text: str) -> None:
        self.append([Message(role="user", content=text)])

    @rule(text=words, reasoning=st.none() | words)
    def assistant_turn(self, text: str, reasoning: str | None) -> None:
        self.append([Message(role="assistant", content=text, reasoning_content=reasoning)])

    @rule(results=st.lists(words, min_size=1, max_size=4), reasoning=st.none() | words)
    def tool_chain(self, results: list[str], reasoning: str | None) -> None:
        ids = [call_id() for _ in results]
        calls = tuple(ToolCall(i, f"tool_{n}", '{"q": 1}') for n, i in enumerate(ids))
        chain = [Message(role="assistant", content=None, reasoning_content=reasoning, tool_calls=calls)]
        chain += [
            Message(role="tool", content=result, tool_call_id=i, name=f"tool_{n}")
            for n, (i, result) in enumerate(zip(ids, results, strict=True))
        ]
        self.append(chain)

    @rule(calls=st.integers(1, 3), answered=st.integers(0, 2))
    def interrupted_chain(self, calls: int, answered: int) -> None:
        ids = [call_id() for _ in range(calls)]
        partial = [Message(role="assistant", content=None, tool_calls=tuple(ToolCall(i, "fetch", "{}") for i in ids))]
        partial += [Message(role="tool", content="ok", tool_call_id=i, name="fetch") for i in ids[:answered]]
        repaired, _ = repair_transcript(partial)  # the runtime repairs before anything is persisted
        self.append(repaired)

    @rule(factor=st.floats(1.05, 1.6))
    def huge_message(self, factor: float) -> None:
        count = int(self.config.context_window * factor)
        self.append([Message(role="user", content="huge " * count)])

    @rule(force=st.booleans())
    def cleanup(self, force: bool) -> None:
        seen_before = len(self.model.prompts)
        committed_before = self.committed_ids()
        result = self.run(force=force)
        assert result.status in (CleanupStatus.COMMITTED, CleanupStatus.SKIPPED, CleanupStatus.NOTHING_TO_EVICT)
        if result.committed:
            self.cleanups += 1
            assert result.under_threshold or "threshold" in result.reason
            kept = self.bundle.messages.read(self.session)[1:]
            assert sum(m.tokens or 0 for m in kept) <= self.config.keep
            # The summarizer saw every evicted reasoning_content.
            seen = "\n".join(m["content"] for p in self.model.prompts[seen_before:] for m in p)
            evicted_now = [m for m in self.appended if m.id in set(self.committed_ids()) - set(committed_before)]
            for message in evicted_now:
                if message.reasoning_content:
                    assert message.reasoning_content in seen
        # A cleanup right after a cleanup changes nothing.
        live, files = self.bundle.messages.read(self.session), self.catalog.files(self.session)
        version = self.bundle.messages.head(self.session).version
        calls = len(self.model.prompts)
        again = self.run(force=force)
        assert again.status in (CleanupStatus.SKIPPED, CleanupStatus.NOTHING_TO_EVICT), again.reason
        assert self.bundle.messages.read(self.session) == live and self.catalog.files(self.session) == files
        assert self.bundle.messages.head(self.session).version == version and len(self.model.prompts) == calls

    def run(self, *, force: bool):  # type: ignore[no-untyped-def]
        return run_cleanup(
            bundle=self.bundle,
            session=self.session,
            config=self.config,
            summarizer=self.model,
            catalog=self.catalog,
            hooks=MemoryHookDispatcher(),
            archive_scope=self.archive,
            force=force,
            # Enough chunks that no history is digested, so every reasoning reaches the model.
            summary_options=SummaryOptions(max_tokens=summary_budget(self.config), max_chunks=10_000),
            sleep=no_sleep,
        )

    def committed_ids(self) -> list[str]:
        live = self.bundle.messages.read(self.session)
        return [e.message.id for e in self.catalog.entries(self.session, before_seq=first_uncommitted_seq(live))]

    @invariant()
    def legal_and_conserved(self) -> None:
        live = self.bundle.messages.read(self.session)
        validate_transcript(live)
        assert all(not m.is_compact_summary for m in live[1:])
        catalogued = [e.message.id for e in self.catalog.entries(self.session)]
        assert len(catalogued) == len(set(catalogued))
        ids = self.committed_ids() + [m.id for m in live if not m.is_compact_summary]
        assert ids == [m.id for m in self.appended]
        entries = {e.message.id: e.message for e in self.catalog.entries(self.session)}
        assert all(entries[m.id] == m for m in self.appended if m.id in entries)  # catalogued whole
        if self.config.archive_enabled:
            archived = [m.id for d in self.bundle.archive.list(self.archive) for m in d.messages]
            assert archived == self.committed_ids()
        else:
            assert self.bundle.archive.list(self.archive) == []

    @precondition(lambda self: self.cleanups > 0)
    @invariant()
    def one_summary_at_the_head(self) -> None:
        live = self.bundle.messages.read(self.session)
        assert live and live[0].is_compact_summary and live[0].content.startswith("[compact_summary]")
        assert live[0].role == "user"


def test_cleanup_invariants(bundle: MemoryStoreBundle, tmp_path: Path) -> None:
    counter = itertools.count()
    run_state_machine_as_test(
        lambda: CleanupMachine(bundle, tmp_path / f"run{next(counter)}"),
        settings=settings(
            max_examples=30,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_stored_bytes_grow_linearly_over_many_cleanups(tmp_path: Path) -> None:
    bundle = open_bundle("file", root=tmp_path / "store")
    catalog = PrunedCatalog(tmp_path / "pruned")
    session = SessionScope("linear")
    config = MemoryConfig(context_window=4096, compression_threshold=1200, keep_tokens=400, archive_enabled=True)
    archive = UserScope("7")
    sizes = []
    for round_ in range(40):
        batch = []
        for i in range(14):
            batch.append(Message(role="user", content=f"round {round_} question {i} " + "word " * 40))
            batch.append(Message(role="assistant", content="answer " * 40, reasoning_content="thinking " * 10))
        bundle.messages.append(session, batch)
        result = run_cleanup(
            bundle=bundle,
            session=session,
            config=config,
            summarizer=RecordingSummarizer(),
            catalog=catalog,
            hooks=MemoryHookDispatcher(),
            archive_scope=archive,
            sleep=no_sleep,
        )
        assert result.committed, (round_, result)
        if round_ in (0, 19, 20, 39):
            sizes.append(_tree_bytes(tmp_path))
    first_half = sizes[1] - sizes[0]
    second_half = sizes[3] - sizes[2]
    # Linear growth: the second 19 rounds cost about what the first 19 did (quadratic: ~3x).
    assert second_half < first_half * 1.35, (first_half, second_half)
