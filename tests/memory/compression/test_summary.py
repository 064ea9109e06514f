"""The compact summary: structured prompt, reasoning beside content, merge, retries, fallback."""

from __future__ import annotations

import asyncio
import time

import pytest

from memory.compression.summary import (
    FALLBACK_HEADING,
    SECTIONS,
    SUMMARY_PREFIX,
    InvalidAnswer,
    SummaryOptions,
    clean_answer,
    compose_summary,
    serialize_message,
    summary_budget,
)
from memory.config import MemoryConfig
from memory.tokens import count_text

from .helpers import T0, RecordingSummarizer, assistant, chain, good_answer, stored, summary_message, tool, user

HISTORY = stored(
    [
        user("Please find the cheapest flight to Lisbon"),
        assistant("Let me search.", reasoning="The user wants price first; search two sites in parallel."),
        *chain("site A: 120 EUR", "site B: 95 EUR", reasoning="Compare both results."),
        assistant("Site B is cheapest at 95 EUR.", reasoning="95 < 120, so B wins."),
    ]
)
PREVIOUS = (summary_message("## Goal\n- earlier goal: book a hotel in Porto", seq=0),)


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def run(summarizer, history=HISTORY, previous=PREVIOUS, sleep=None, **options):  # type: ignore[no-untyped-def]
    return asyncio.run(
        compose_summary(
            history=history,
            previous=previous,
            summarizer=summarizer,
            options=SummaryOptions(**options),
            cleanup_at=T0,
            sleep=sleep or Sleeps(),
        )
    )


def test_structured_summary_from_a_good_model() -> None:
    model = RecordingSummarizer()
    outcome = run(model)
    assert outcome.content.startswith(SUMMARY_PREFIX)
    assert not outcome.fallback and outcome.error is None and outcome.calls == 1
    system, prompt = model.prompts[0]
    assert system["role"] == "system" and all(f"## {name}" in system["content"] for name in SECTIONS)
    text = prompt["content"]
    assert "earlier goal: book a hotel in Porto" in text  # the previous summary is merged in
    for message in HISTORY:
        if message.reasoning_content:
            block = serialize_message(message)
            assert message.reasoning_content in block and block in text  # reasoning beside content
    assert "seq 1–6" in outcome.content.splitlines()[0]


def test_async_summarizer() -> None:
    seen = []

    async def model(messages):  # type: ignore[no-untyped-def]
        seen.append(messages)
        await asyncio.sleep(0)
        return good_answer()

    outcome = run(model)
    assert not outcome.fallback and len(seen) == 1


class RateLimited(Exception):
    status_code = 429


class ServerError(Exception):
    status_code = 500


def raising(exc: Exception):  # type: ignore[no-untyped-def]
    def model(messages):  # type: ignore[no-untyped-def]
        raise exc

    return model


def answering(text: object):  # type: ignore[no-untyped-def]
    return lambda messages: text


async def _hang(messages):  # type: ignore[no-untyped-def]
    await asyncio.sleep(60)


FAILURES = {
    "429": raising(RateLimited("Too Many Requests")),
    "500": raising(ServerError("Internal Server Error")),
    "connection": raising(ConnectionResetError("peer reset")),
    "timeout": _hang,
    "empty": answering(""),
    "whitespace": answering("  \n\t "),
    "error-text": answering("Error: the model is overloaded, please retry later."),
    "refusal": answering("I'm sorry, but I can't summarize this conversation."),
    "echo": answering("[3] user · 2 Dec 2026 10:00:03:\nPlease find the cheapest flight"),
    "not-text": answering(None),
}


#: Failures of the endpoint: retried with backoff, then the fallback.
ERRORS = {"429", "500", "connection", "timeout"}


@pytest.mark.parametrize("failure", FAILURES, ids=list(FAILURES))
def test_failures_fall_back_after_bounded_retries(failure: str) -> None:
    """An endpoint that fails is retried (with backoff) and then left alone; a useless answer is
    not asked again as it was: short questions follow, and after two useless replies, the fallback."""
    calls = []

    def counted(messages):  # type: ignore[no-untyped-def]
        calls.append(1)
        return FAILURES[failure](messages)

    counted_model = counted
    if failure == "timeout":

        async def counted_model(messages):  # type: ignore[no-untyped-def]
            calls.append(1)
            return await _hang(messages)

    sleeps = Sleeps()
    outcome = run(counted_model, sleep=sleeps, timeout=0.05, max_retries=2, backoff=0.5)
    if failure in ERRORS:
        assert outcome.fallback and len(calls) == 3 and outcome.calls == 3
        assert sleeps.waits == [0.5, 1.0]  # small, bounded backoff; tests never really wait
    else:
        assert outcome.fallback and len(calls) == 3 and outcome.calls == 3 and sleeps.waits == []
        assert "no section asked for alone was usable" in outcome.error
    body = outcome.content
    assert body.startswith(SUMMARY_PREFIX)
    assert f"{FALLBACK_HEADING} (the summarizer failed:" in body
    assert "earlier goal: book a hotel in Porto" in body  # the previous summary survives
    assert "cheapest flight to Lisbon" in body and "tool_" in body  # built from the messages
    assert "95 < 120" in body or "Compare both results" in body  # reasoning excerpts
    assert outcome.error and outcome.error in body or outcome.error[:60] in body


def test_a_transient_error_is_retried_then_succeeds() -> None:
    answers = iter([RateLimited("slow down"), good_answer()])

    def model(messages):  # type: ignore[no-untyped-def]
        item = next(answers)
        if isinstance(item, Exception):
            raise item
        return item

    outcome = run(model)
    assert not outcome.fallback and outcome.calls == 2


def test_a_hanging_sync_summarizer_is_bounded_by_the_timeout() -> None:
    def slow(messages):  # type: ignore[no-untyped-def]
        time.sleep(1.0)
        return good_answer()

    started = time.monotonic()
    outcome = run(slow, timeout=0.05, max_retries=0)
    assert outcome.fallback and "timed out" in (outcome.error or "")
    assert time.monotonic() - started < 0.9


def test_fallback_is_deterministic() -> None:
    first = run(raising(RateLimited("x")))
    second = run(raising(RateLimited("x")))
    assert first.content == second.content


def test_fenced_or_prefixed_answers_are_accepted_and_long_ones_cut_to_budget() -> None:
    assert clean_answer("```markdown\n" + good_answer() + "\n```").startswith("## Goal")
    assert clean_answer(SUMMARY_PREFIX + "\n" + good_answer()).startswith("## Goal")
    with pytest.raises(InvalidAnswer, match="empty"):
        clean_answer("\x00 ")
    long = good_answer("word " * 3000)
    outcome = run(answering(long), max_tokens=200)
    body = outcome.content.split("\n\n", 1)[1]
    assert not outcome.fallback and count_text(body) <= 200


def test_history_larger_than_the_summarizer_window_is_chunked_then_merged() -> None:
    history = stored(
        [
            m
            for i in range(60)
            for m in (
                user(f"question {i} " + "detail " * 60),
                assistant(f"answer {i} " + "more " * 60, reasoning=f"reasoning-marker-{i}"),
            )
        ]
    )
    model = RecordingSummarizer(context_window=2500)
    outcome = run(model, history=history, max_tokens=300)
    assert not outcome.fallback
    assert model.calls > 2  # several chunks, then at least one merge
    assert "partial_summary" in model.prompts[-1][1]["content"]
    assert "earlier goal" in model.prompts[-1][1]["content"]  # the previous summary joins the merge
    seen = model.seen_text()
    assert all(f"reasoning-marker-{i}" in seen for i in range(60))
    assert all(count_text(m["content"]) < 2500 for p in model.prompts for m in p)


def test_a_field_larger_than_the_summarizer_window_is_excerpted() -> None:
    huge = stored([user("HEAD " + "filler " * 20000 + " TAIL")])
    model = RecordingSummarizer(context_window=3000)
    outcome = run(model, history=huge, previous=())
    assert not outcome.fallback
    seen = model.seen_text()
    assert "HEAD" in seen and "TAIL" in seen and "tokens omitted here" in seen
    assert all(count_text(m["content"]) < 3000 for p in model.prompts for m in p)


def test_fallback_with_tool_results_and_no_previous_summary() -> None:
    history = stored([*chain("the answer is 42"), tool("call_orphan", "x")][:2])
    outcome = run(raising(RuntimeError("down")), history=history, previous=())
    assert outcome.fallback and "the answer is 42" in outcome.content and "Previous summary" not in outcome.content


def test_summary_budget_leaves_room_under_the_threshold() -> None:
    config = MemoryConfig(context_window=16384)
    assert config.keep + summary_budget(config) < config.threshold
    tight = MemoryConfig(context_window=1000, compression_threshold=500, keep_tokens=480)
    assert summary_budget(tight) == 96  # floor: a summary needs some room
