"""The fallback summary spends its whole budget and keeps every evicted step's reasoning as one
line, or says how many (and which) were elided; no section is ever cut off. Properties, the
pipeline one on every backend."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.compression.fallback import fallback_body
from memory.compression.pruned import PrunedCatalog
from memory.compression.sections import split_sections
from memory.compression.summary import SECTIONS, SummaryOptions
from memory.config import MemoryConfig
from memory.messages import Message
from memory.scopes import SessionScope
from memory.stores.base import MemoryStoreBundle
from memory.tokens import count_text

from .helpers import assistant, chain, stored, summary_message, user
from .test_cleanup import cleanup, conserved

_LINE = re.compile(r"^- seq (\d+): ", re.M)
_ELIDED = re.compile(r"^- … (\d+) more reasoning step\(s\), seq (\d+)(?:–(\d+))?, elided", re.M)


def trail_of(body: str) -> str:
    return dict(split_sections(body))["## Reasoning trail"]


def check_trail(body: str, reasoning_seqs: list[int]) -> tuple[list[int], list[int]]:
    """Every reasoning step is a line of the trail or inside the one elided range; returns both."""
    trail = trail_of(body)
    shown = [int(n) for n in _LINE.findall(trail)]
    elided: list[int] = []
    match = _ELIDED.search(trail)
    if match:
        count, first, last = int(match[1]), int(match[2]), int(match[3] or match[2])
        elided = [s for s in reasoning_seqs if first <= s <= last]
        assert len(elided) == count and not set(elided) & set(shown)
    assert sorted(shown + elided) == reasoning_seqs, (shown, elided)
    if not reasoning_seqs:
        assert trail == "- none"
    return shown, elided


def history_with(reasonings: list[int]) -> list[Message]:
    messages: list[Message] = []
    for i, words in enumerate(reasonings):
        messages.append(user(f"question {i}"))
        if i % 3 == 0:
            messages += chain(f"result {i}", reasoning=f"step {i}: " + "think " * words)
        else:
            messages.append(assistant(f"answer {i}", reasoning=f"step {i}: " + "ponder " * words))
    return stored(messages)


def test_the_default_case_keeps_every_one_of_96_reasonings() -> None:
    # The default config's budget, 96 evicted reasonings: the old fallback kept 8 of them.
    history = history_with([30] * 96)
    body = fallback_body(history=history, previous_text=None, reason="429", max_tokens=2048)
    shown, elided = check_trail(body, [m.seq for m in history if m.reasoning_content])
    assert len(shown) == 96 and elided == []
    assert 2048 - 60 <= count_text(body) <= 2048  # the budget is used, not a tenth of it


def test_a_small_budget_elides_from_the_middle_and_says_how_many() -> None:
    history = history_with([20] * 60)
    body = fallback_body(history=history, previous_text="## Goal\n- old goal", reason="500", max_tokens=300)
    seqs = [m.seq for m in history if m.reasoning_content]
    shown, elided = check_trail(body, seqs)
    assert shown and elided and shown[0] == seqs[0] and shown[-1] == seqs[-1]
    assert [f"## {name}" for name in SECTIONS] == [h for h, _ in split_sections(body) if h.startswith("## ")][-6:]
    assert count_text(body) <= 300 and "old goal" in body


@settings(max_examples=80, deadline=None)
@given(
    reasonings=st.lists(st.integers(0, 80), max_size=150),
    budget=st.integers(96, 2048),
    previous=st.none() | st.integers(1, 400),
)
def test_fallback_body_properties(reasonings: list[int], budget: int, previous: int | None) -> None:
    history = history_with(reasonings)
    previous_text = None if previous is None else "## Goal\n- " + "earlier " * previous + "\n## Open tasks\n- old task"
    body = fallback_body(history=history, previous_text=previous_text, reason="Error code: 429", max_tokens=budget)
    assert count_text(body) <= budget
    headings = [h for h, _ in split_sections(body) if h.startswith("## ") and h[3:] in SECTIONS]
    assert headings == [f"## {name}" for name in SECTIONS]
    shown, elided = check_trail(body, [m.seq for m in history if m.reasoning_content])
    if elided:
        # Lines were elided only because the budget was spent.
        assert count_text(body) >= budget - 40, (count_text(body), budget)


class Down:
    def __call__(self, messages: list[dict[str, str]]) -> str:
        raise RuntimeError("Error code: 503 - upstream down")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(reasonings=st.lists(st.integers(0, 60), min_size=1, max_size=120), budget=st.integers(96, 2048))
def test_a_fallback_through_cleanup_keeps_the_trail(
    bundle: MemoryStoreBundle, tmp_path: Path, reasonings: list[int], budget: int
) -> None:
    session = SessionScope("t" + uuid.uuid4().hex[:12])
    catalog = PrunedCatalog(tmp_path / session.id)
    messages = [m for m in history_with(reasonings)]
    appended = bundle.messages.append(session, [Message(**_fields(m)) for m in messages])
    config = MemoryConfig(context_window=1_000_000, compression_threshold=100, keep_tokens=0)
    result = cleanup(
        bundle, session, catalog, summarizer=Down(), config=config, force=True,
        summary_options=SummaryOptions(max_tokens=budget, max_retries=0),
    )
    assert result.committed and result.fallback_summary
    live = bundle.messages.read(session)
    body = live[0].content.split("\n\n", 1)[1]
    assert count_text(body) <= budget
    evicted = [m for m in appended if m.seq is not None and m.seq <= result.through_seq]
    check_trail(body, [m.seq for m in evicted if m.reasoning_content and m.reasoning_content.strip()])
    conserved(bundle, session, catalog, [m.id for m in appended])


def _fields(message: Message) -> dict:
    return {
        "role": message.role,
        "content": message.content,
        "reasoning_content": message.reasoning_content,
        "tool_calls": message.tool_calls,
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }


def test_a_previous_summary_is_carried_section_by_section() -> None:
    previous = summary_message("## Goal\n- " + "goal " * 600 + "\n## Open tasks\n- the task that must survive").content
    text = previous.removeprefix("[compact_summary] ")
    body = fallback_body(history=history_with([5] * 3), previous_text=text, reason="x", max_tokens=600)
    sections = dict(split_sections(body))
    assert sections["## Open tasks"].startswith("- the task that must survive") and count_text(body) <= 600
    # The 600-word goal could not fit: it went whole, a line says so, nothing is half there.
    assert "goal goal" not in body and "- (… " in sections["## Goal"]
    assert "latest request" in sections["## Goal"]  # the newest item that fits stays
