"""Budgets against the window: what MemoryConfig.budget_problems rejects, and what a config it
accepts guarantees end to end (on every backend): after any cleanup, the assembled context
holds the compact summary, and the pruned section stays within its budget."""

from __future__ import annotations

import uuid
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memory.assembly.assembler import ContextAssembler, default_pipeline
from memory.assembly.pruned import PrunedProvider
from memory.compression.pruned import PrunedCatalog
from memory.config import PRUNED_MIN_BUDGET, InvalidMemoryConfig, MemoryConfig
from memory.scopes import SessionScope
from memory.stores.base import MemoryStoreBundle
from memory.tokens import count_text

from .helpers import RecordingSummarizer
from .test_cleanup import cleanup, conversation


def test_the_reported_case_is_a_problem_naming_the_pruned_budget_first() -> None:
    (problem,) = MemoryConfig(context_window=2048, pruned_budget_tokens=1200).budget_problems()
    assert problem.keys[0] == "pruned_budget_tokens"
    assert "context window (2048 tokens)" in problem.message and "too many" in problem.message


def test_common_windows_with_default_budgets_have_no_problem() -> None:
    for window in (8192, 16384, 32768, 128_000):
        for archive in (False, True):
            assert MemoryConfig(context_window=window, archive_enabled=archive).budget_problems() == ()
    assert MemoryConfig(context_window=4096).budget_problems() == ()


def test_a_pruned_budget_too_small_to_say_anything_is_a_problem() -> None:
    (problem,) = MemoryConfig(pruned_budget_tokens=10).budget_problems()
    assert problem.keys == ("pruned_budget_tokens",) and f"below {PRUNED_MIN_BUDGET}" in problem.message


def test_a_kept_tail_that_leaves_no_room_for_the_summary_is_a_problem() -> None:
    config = MemoryConfig(context_window=16384, compression_threshold=1000, keep_tokens=950)
    (problem,) = config.budget_problems()
    assert problem.keys[0] == "keep_tokens" and "every step would clean up again" in problem.message


def test_the_compact_pruned_section_fits_the_minimum_budget(bundle: MemoryStoreBundle, tmp_path: Path) -> None:
    from tests.memory.assembly.helpers import ctx

    session = SessionScope("m" + uuid.uuid4().hex[:12])
    catalog = PrunedCatalog(tmp_path / "pruned")
    messages = bundle.messages.append(session, conversation(40))
    catalog.write(session, messages)
    config = MemoryConfig(pruned_budget_tokens=PRUNED_MIN_BUDGET)
    section = PrunedProvider(catalog=catalog).provide(ctx(bundle, session, config=config))
    assert section is not None and section.tokens <= PRUNED_MIN_BUDGET
    assert f'total="{len(messages)}"' in section.text and "pruned_lookup" in section.text


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    window=st.integers(1024, 12_000),
    threshold_ratio=st.floats(0.3, 0.95),
    keep_ratio=st.floats(0.0, 0.6),
    pruned=st.integers(0, 3000),
    archive=st.sampled_from([None, 200, 1500]),
    turns=st.integers(4, 40),
    rounds=st.integers(1, 3),
)
def test_a_config_without_budget_problems_keeps_the_summary_in_context(
    bundle: MemoryStoreBundle,
    tmp_path: Path,
    window: int,
    threshold_ratio: float,
    keep_ratio: float,
    pruned: int,
    archive: int | None,
    turns: int,
    rounds: int,
) -> None:
    threshold = int(window * threshold_ratio)
    try:
        config = MemoryConfig(
            context_window=window,
            compression_threshold=threshold,
            keep_tokens=int(threshold * keep_ratio),
            pruned_budget_tokens=pruned,
            archive_enabled=archive is not None,
            archive_budget_tokens=archive or 1500,
        )
    except InvalidMemoryConfig:
        assume(False)
    assume(not config.budget_problems())
    session = SessionScope("w" + uuid.uuid4().hex[:12])
    catalog = PrunedCatalog(tmp_path / session.id)
    assembler = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog))
    for _ in range(rounds):
        bundle.messages.append(session, conversation(turns, words=20))
        result = cleanup(bundle, session, catalog, summarizer=RecordingSummarizer(), config=config, force=True)
        if not result.committed:
            continue
        context = assembler.assemble(session=session, config=config, agent="default", user="42")
        assert context.total_tokens <= window
        assert context.session_messages and context.session_messages[0].is_compact_summary, "summary dropped"
        for section in context.sections:
            if section.name == "pruned catalog":
                assert count_text(section.text) <= pruned
