"""The structured compact summary that replaces evicted history in the session.

Memory talks to a model only through ``Summarizer``: a callable, sync or async, taking a short
list of chat messages (``{"role", "content"}`` dicts: one system instruction, one user turn)
and returning the answer text. agents/ adapts any ChatModel to it; tests pass a function.

``compose_summary`` never raises because of the summarizer. A call that raises (429, 500, a
network error), times out, or answers with nothing usable (empty, whitespace, an error text,
anything without the required section headings) is retried a bounded number of times with a
small backoff; if it still fails, a deterministic fallback summary is built from the messages
themselves, marked as such, and still carrying the previous summary. So a failing model never
wipes a session and never causes a retry storm: at most ``(chunks + merges) x attempts`` calls,
and the first exhausted call stops the model path.

An answer longer than the budget is never cut from its end (that silently lost the last
sections: reasoning trail, open tasks, tool results). The final call is re-asked once with the
budget stated; if the second answer is still too long (or the re-ask fails), the shorter answer
is fitted section by section (``memory.compression.sections``: each section gets its share, none
is dropped) under a line saying so. Partial summaries of a chunked history are fitted the same
way, without a re-ask.

The summarizer's input holds every evicted message's content and ``reasoning_content`` in full
(``memory.compression.summary_input``), except a single field larger than the summarizer's own
window, which is given as head and tail excerpts (the pruned catalog keeps it whole). History
larger than that window is summarized in chunks whose summaries are then merged; history larger
than ``max_chunks`` windows gives its oldest messages as one-line digests, so one cleanup never
costs more than a bounded number of calls.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from memory import tokens as tok
from memory.config import MemoryConfig
from memory.compression.fallback import FALLBACK_HEADING, fallback_body
from memory.compression.sections import fit_sections
from memory.compression.summary_input import (
    SECTIONS,
    SUMMARY_PREFIX,
    ChatPrompt,
    merge_prompt,
    plan_chunks,
    serialize_message,
    shorten_prompt,
    summary_prompt,
)
from memory.messages import Message
from memory.text import storable

Sleep = Callable[[float], Awaitable[None]]


class Summarizer(Protocol):
    """What memory needs from a model: answer a chat prompt with text.

    May be a plain function or a coroutine function. An optional ``context_window`` attribute
    (tokens) tells ``compose_summary`` how much input fits in one call.
    """

    def __call__(self, messages: ChatPrompt, /) -> str | Awaitable[str]: ...


class SummarizerFailed(Exception):
    """A summarizer call failed on every attempt; ``reason`` says how, for the fallback heading."""

    def __init__(self, reason: str, *, calls: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.calls = calls


class InvalidAnswer(ValueError):
    """The summarizer answered, but not with a usable summary."""


@dataclass(frozen=True, slots=True)
class SummaryOptions:
    """Knobs of ``compose_summary``; defaults suit a hosted model."""

    max_tokens: int = 1024  # budget of the summary body in the session
    window_tokens: int | None = None  # the summarizer's window; None: its context_window or 16384
    timeout: float = 120.0  # seconds per call
    max_retries: int = 2  # extra attempts per call after the first
    backoff: float = 0.5  # seconds before the first retry, doubled for each further one
    max_chunks: int = 8  # older history beyond this many chunks is given as one-line digests


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """The summary text to store, and how it was obtained."""

    content: str  # the full message content, starting with "[compact_summary]"
    fallback: bool
    error: str | None  # why the summarizer path failed (None when it did not)
    calls: int  # summarizer calls made, retries included
    prompts: tuple[ChatPrompt, ...] = field(default=(), repr=False)  # every prompt sent, in order
    shortened: str | None = None  # None (fit at once), REASKED or CUT_BY_SECTION


REASKED = "re-asked"  # the first answer was over the budget; the re-asked one fit
CUT_BY_SECTION = "cut by section"  # still over after the re-ask: each section cut to its share


def shortened_note(budget: int) -> str:
    """The line that marks a summary fitted section by section."""
    return (
        f"_(Shortened to fit its {budget}-token budget: each section was cut to its share; "
        "the pruned catalog has the full history.)_"
    )


def summary_budget(config: MemoryConfig) -> int:
    """Tokens a compact summary may take so that summary + kept tail stays below the threshold."""
    return config.summary_budget


# -- calling the summarizer -------------------------------------------------------------------

_HEADING_RES = {
    name: re.compile(rf"(?im)^[ \t]{{0,3}}#{{1,6}}[ \t]*\**[ \t]*{re.escape(name)}\b") for name in SECTIONS
}
_FENCE_RE = re.compile(r"\A```[\w-]*\n(?P<body>.*)\n```\Z", re.S)


def clean_answer(raw: Any) -> str:
    """The usable summary body in ``raw``, or raise InvalidAnswer saying why not."""
    if not isinstance(raw, str):
        raw = getattr(raw, "content", raw)
    if not isinstance(raw, str):
        raise InvalidAnswer(f"the summarizer returned {type(raw).__name__}, not text")
    text = raw.replace("\x00", "").strip()
    fenced = _FENCE_RE.match(text)
    if fenced:
        text = fenced.group("body").strip()
    if text.startswith(SUMMARY_PREFIX):
        text = text[len(SUMMARY_PREFIX) :].strip()
    if not text:
        raise InvalidAnswer("the summarizer returned an empty answer")
    missing = [name for name, pattern in _HEADING_RES.items() if not pattern.search(text)]
    if missing:
        shown = " ".join(text.split())[:80]
        raise InvalidAnswer(f"the answer lacks the section(s) {', '.join(missing)} (it began: {shown!r})")
    return text


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


async def _invoke(summarizer: Summarizer, prompt: ChatPrompt, timeout: float) -> Any:
    if _is_async(summarizer):
        return await asyncio.wait_for(summarizer(prompt), timeout)
    result = await asyncio.wait_for(_in_daemon_thread(summarizer, prompt), timeout)
    if inspect.isawaitable(result):
        result = await asyncio.wait_for(result, timeout)
    return result


def _in_daemon_thread(fn: Callable[[ChatPrompt], Any], prompt: ChatPrompt) -> asyncio.Future[Any]:
    """Run a sync summarizer off the loop so the timeout holds. A daemon thread, not the
    default executor: a call that hangs past its timeout is abandoned, and nothing (loop
    shutdown, interpreter exit) waits for it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def work() -> None:
        try:
            value, error = fn(prompt), None
        except BaseException as exc:  # handed to the awaiting coroutine
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the loop is gone: the caller gave up long ago

    threading.Thread(target=work, name="memory-summarizer", daemon=True).start()
    return future


class _Caller:
    def __init__(self, summarizer: Summarizer, options: SummaryOptions, sleep: Sleep) -> None:
        self.summarizer = summarizer
        self.options = options
        self.sleep = sleep
        self.calls = 0
        self.prompts: list[ChatPrompt] = []

    async def __call__(self, prompt: ChatPrompt) -> str:
        reason = "no attempt made"
        for attempt in range(self.options.max_retries + 1):
            if attempt:
                await self.sleep(self.options.backoff * (2 ** (attempt - 1)))
            self.calls += 1
            self.prompts.append(prompt)
            try:
                return clean_answer(await _invoke(self.summarizer, prompt, self.options.timeout))
            except (TimeoutError, asyncio.TimeoutError):
                reason = f"timed out after {self.options.timeout:g}s"
            except InvalidAnswer as exc:
                reason = str(exc)
            except Exception as exc:  # any provider error: 429, 500, connection reset, ...
                reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise SummarizerFailed(f"{reason} ({self.options.max_retries + 1} attempts)", calls=self.calls)


# -- composing --------------------------------------------------------------------------------


def previous_summary_text(summaries: Sequence[Message]) -> str | None:
    """The bodies of evicted compact summaries, oldest first, without the marker."""
    texts = []
    for message in summaries:
        text = (message.content or "").strip()
        if text.startswith(SUMMARY_PREFIX):
            text = text[len(SUMMARY_PREFIX) :].strip()
        if text:
            texts.append(text)
    return "\n\n".join(texts) or None


def _header(history: Sequence[Message], cleanup_at: datetime) -> str:
    if history:
        span = f"seq {history[0].seq}–{history[-1].seq} ({len(history)} messages)"
    else:
        span = "no new messages"
    return (
        f"{SUMMARY_PREFIX} Earlier history, {span}, compacted at {cleanup_at.isoformat(timespec='seconds')}. "
        "The full messages are in the pruned catalog (pruned_lookup by seq)."
    )


async def compose_summary(
    *,
    history: Sequence[Message],
    previous: Sequence[Message] = (),
    summarizer: Summarizer,
    options: SummaryOptions,
    cleanup_at: datetime,
    sleep: Sleep = asyncio.sleep,
) -> SummaryOutcome:
    """Summarize ``history`` (evicted messages) merged with the ``previous`` compact summaries.

    Returns the content of the new ``[compact_summary]`` message, at most about
    ``options.max_tokens`` tokens plus a one-line header. Never raises because of the
    summarizer (see the module docstring); ``sleep`` is injectable so tests do not wait.
    """
    previous_text = previous_summary_text(previous)
    if previous_text:
        previous_text = fit_sections(previous_text, options.max_tokens)
    window = options.window_tokens or getattr(summarizer, "context_window", None) or 16384
    overhead = 400 + options.max_tokens + (tok.count_text(previous_text) if previous_text else 0)
    chunk_tokens = max(256, int((window - overhead) * 0.85))
    chunks = plan_chunks(history, chunk_tokens=chunk_tokens, max_chunks=options.max_chunks)
    caller = _Caller(summarizer, options, sleep)
    header = _header(history, cleanup_at)
    budget = options.max_tokens
    try:
        if len(chunks) <= 1:
            only = chunks[0] if chunks else ""
            body, shortened = await _within_budget(
                caller, summary_prompt(only, previous=previous_text, part=(1, 1), max_tokens=budget), budget
            )
        else:
            parts = [
                fit_sections(
                    await caller(summary_prompt(chunk, previous=None, part=(i, len(chunks)), max_tokens=budget)),
                    budget,
                )
                for i, chunk in enumerate(chunks, 1)
            ]
            body, shortened = await _merge(caller, parts, previous=previous_text, options=options, window=window)
    except SummarizerFailed as exc:
        body = fallback_body(history=history, previous_text=previous_text, reason=exc.reason, max_tokens=budget)
        return SummaryOutcome(
            content=storable(f"{header}\n\n{body}"),
            fallback=True,
            error=exc.reason,
            calls=caller.calls,
            prompts=tuple(caller.prompts),
        )
    return SummaryOutcome(
        content=storable(f"{header}\n\n{body}"),
        fallback=False,
        error=None,
        calls=caller.calls,
        prompts=tuple(caller.prompts),
        shortened=shortened,
    )


async def _within_budget(caller: _Caller, prompt: ChatPrompt, budget: int) -> tuple[str, str | None]:
    """The final answer, at most ``budget`` tokens: asked, re-asked once, then fitted by section."""
    first = await caller(prompt)
    used = tok.count_text(first)
    if used <= budget:
        return first, None
    try:
        second: str | None = await caller(shorten_prompt(prompt, first, used=used, budget=budget))
    except SummarizerFailed:
        second = None  # the first answer is still a usable summary: fit it rather than fall back
    if second is not None:
        second_used = tok.count_text(second)
        if second_used <= budget:
            return second, REASKED
        if second_used < used:
            first = second
    return fit_sections(first, budget, note=shortened_note(budget)), CUT_BY_SECTION


async def _merge(
    caller: _Caller, parts: list[str], *, previous: str | None, options: SummaryOptions, window: int
) -> tuple[str, str | None]:
    # Merge in groups that fit the window, level by level, until one summary remains.
    budget = options.max_tokens
    room = max(2, (window - 400 - budget * 2) // max(1, budget + 40))
    while len(parts) > 1 or previous is not None:
        if len(parts) <= room:
            return await _within_budget(caller, merge_prompt(parts, previous=previous, max_tokens=budget), budget)
        parts = [
            fit_sections(await caller(merge_prompt(parts[i : i + room], previous=None, max_tokens=budget)), budget)
            for i in range(0, len(parts), room)
        ]
    return parts[0], None


__all__ = [
    "CUT_BY_SECTION",
    "FALLBACK_HEADING",
    "REASKED",
    "SECTIONS",
    "SUMMARY_PREFIX",
    "InvalidAnswer",
    "Summarizer",
    "SummarizerFailed",
    "SummaryOptions",
    "SummaryOutcome",
    "clean_answer",
    "compose_summary",
    "fit_sections",
    "fallback_body",
    "serialize_message",
    "summary_budget",
]
