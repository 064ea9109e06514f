"""A model answer over the summary budget is re-asked once, then cut section by section:
no section (least of all the reasoning trail) is ever lost by cutting the answer's end."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.compression.sections import fit_sections, items, split_sections
from memory.compression.summary import (
    CUT_BY_SECTION,
    REASKED,
    SECTIONS,
    SummaryOptions,
    compose_summary,
    shortened_note,
    summary_budget,
)
from memory.config import MemoryConfig
from memory.scopes import SessionScope
from memory.stores.base import MemoryStoreBundle
from memory.compression.pruned import PrunedCatalog
from memory.tokens import count_text

from .helpers import T0, good_answer
from .test_cleanup import cleanup, conserved, conversation
from .test_summary import HISTORY, Sleeps


def verbose(lines_per_section: list[int], words: int = 12, tag: str = "") -> str:
    blocks = []
    for name, lines in zip(SECTIONS, lines_per_section, strict=True):
        body = [f"- {name.lower()} {tag}item {i}: " + " ".join(f"w{i}x{j}" for j in range(words)) for i in range(lines)]
        blocks.append("\n".join([f"## {name}", *body]))
    return "\n\n".join(blocks)


class Scripted:
    """Answers each call with the next of ``answers`` (the last repeats); an Exception is raised."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = answers
        self.prompts: list[list[dict[str, str]]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        self.prompts.append(messages)
        answer = self.answers[min(len(self.prompts), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def compose(model: Scripted, max_tokens: int):  # type: ignore[no-untyped-def]
    return asyncio.run(
        compose_summary(
            history=HISTORY,
            summarizer=model,
            options=SummaryOptions(max_tokens=max_tokens, max_retries=2),
            cleanup_at=T0,
            sleep=Sleeps(),
        )
    )


def body_of(content: str) -> str:
    return content.split("\n\n", 1)[1]


MARKER = re.compile(r"^- \(… (\d+) more cut to fit\)$")


def assert_cut_by_section(original: str, fitted: str, budget: int) -> None:
    """``fitted`` holds every section of ``original``, in order, each made of whole items of the
    original section (in their order) and at most one marker line counting the items left out:
    no item is ever cut in half."""
    assert count_text(fitted) <= budget
    source = dict(split_sections(original))
    pieces = [(h, b) for h, b in split_sections(fitted) if h]
    assert [h for h, _ in pieces] == [h for h, _ in split_sections(original) if h]
    for heading, body in pieces:
        whole = items(source[heading])
        kept = items(body) if body else []
        markers = [k for k in kept if MARKER.match(k)]
        shown = [k for k in kept if not MARKER.match(k)]
        assert len(markers) <= 1, (heading, kept)
        positions = [whole.index(k) for k in shown]  # ValueError: an item that is not whole
        assert positions == sorted(positions), heading
        left_out = int(MARKER.match(markers[0]).group(1)) if markers else 0
        assert left_out + len(shown) == len(whole) or (not body and not shown), (heading, kept)


def test_an_answer_over_budget_is_re_asked_once_with_the_budget_stated() -> None:
    long, short = verbose([20] * 6), good_answer().strip()
    model = Scripted(long, short)
    outcome = compose(model, 300)
    assert not outcome.fallback and outcome.shortened == REASKED and outcome.calls == 2
    assert body_of(outcome.content) == short
    reask = model.prompts[1]
    assert reask[:2] == model.prompts[0] and reask[2] == {"role": "assistant", "content": long}
    assert f"{count_text(long)} tokens, over the limit of 300 tokens" in reask[3]["content"]


def test_still_over_after_the_re_ask_is_cut_by_section_never_from_the_end() -> None:
    long = verbose([30, 2, 2, 10, 40, 25], words=4)
    model = Scripted(long)
    outcome = compose(model, 400)
    assert not outcome.fallback and outcome.shortened == CUT_BY_SECTION and outcome.calls == 2
    body = body_of(outcome.content)
    assert body.startswith(shortened_note(400))
    assert_cut_by_section(long, body.split("\n\n", 1)[1], 400)
    trail = dict(split_sections(body))["## Reasoning trail"]
    assert len(trail.split("\n")) >= 3  # the trail got its share, not the crumbs
    # The small sections were kept whole; the big ones shared what was left.
    assert dict(split_sections(body))["## Decisions"] == dict(split_sections(long))["## Decisions"]


def test_a_re_ask_that_fails_still_uses_the_first_answer_cut_by_section() -> None:
    long = verbose([25] * 6)
    model = Scripted(long, RuntimeError("Error code: 429"))
    outcome = compose(model, 300)
    assert not outcome.fallback and outcome.shortened == CUT_BY_SECTION and outcome.calls == 4
    assert_cut_by_section(long, body_of(outcome.content).split("\n\n", 1)[1], 300)


def test_an_answer_within_budget_is_untouched() -> None:
    model = Scripted(good_answer())
    outcome = compose(model, 300)
    assert outcome.shortened is None and outcome.calls == 1 and body_of(outcome.content) == good_answer().strip()


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(st.integers(0, 40), min_size=6, max_size=6),
    words=st.integers(1, 60),
    budget=st.integers(96, 1200),
)
def test_fit_sections_keeps_every_section_within_budget(lines: list[int], words: int, budget: int) -> None:
    text = verbose([max(1, n) for n in lines], words)
    fitted = fit_sections(text, budget, note=shortened_note(budget))
    assert count_text(fitted) <= budget
    if count_text(text) <= budget:
        assert fitted == text
    else:
        rest = fitted.split("\n\n", 1)[1] if fitted.startswith("_(") else fitted
        assert_cut_by_section(text, rest, budget)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lines=st.lists(st.integers(1, 40), min_size=6, max_size=6),
    threshold=st.integers(700, 3000),
    keep_ratio=st.floats(0.05, 0.6),
)
def test_a_verbose_model_through_cleanup_loses_no_section(
    bundle: MemoryStoreBundle, tmp_path: Path, lines: list[int], threshold: int, keep_ratio: float
) -> None:
    config = MemoryConfig(
        context_window=threshold + 4000, compression_threshold=threshold, keep_tokens=int(threshold * keep_ratio)
    )
    budget = summary_budget(config)
    session = SessionScope("b" + uuid.uuid4().hex[:12])
    catalog = PrunedCatalog(tmp_path / session.id)
    appended = bundle.messages.append(session, conversation(max(4, threshold // 150)))
    answer = verbose(lines)
    model = Scripted(answer)
    result = cleanup(bundle, session, catalog, summarizer=model, config=config, force=True)
    assert result.committed and not result.fallback_summary
    body = body_of(bundle.messages.read(session)[0].content)
    assert count_text(body) <= budget
    if count_text(answer) <= budget:
        assert body == answer and len(model.prompts) == 1
    else:
        assert len(model.prompts) == 2 and body.startswith(shortened_note(budget))
        assert_cut_by_section(answer, body.split("\n\n", 1)[1], budget)
    conserved(bundle, session, catalog, [m.id for m in appended])
