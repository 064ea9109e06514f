"""How a compact summary's model is called (``memory.compression.summary``): the ``Summarizer``
protocol, one ``Caller`` per cleanup (bounded retries with backoff, a timeout per call that holds
for a sync summarizer too, run in a daemon thread it can abandon, a lower completion cap for a
one-section question), and what answer is usable at all (``clean_reply``, ``clean_answer``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from memory.compression.answers import parse_sections, strip_fence, usable_body
from memory.compression.summary_input import SECTIONS, SUMMARY_PREFIX, ChatPrompt

if TYPE_CHECKING:
    from memory.compression.summary import SummaryOptions

Sleep = Callable[[float], Awaitable[None]]


class Summarizer(Protocol):
    """What memory needs from a model: answer a chat prompt with text.

    May be a plain function or a coroutine function. An optional ``context_window`` attribute
    (tokens) tells ``compose_summary`` how much input fits in one call.
    """

    def __call__(self, messages: ChatPrompt, /) -> str | Awaitable[str]: ...


class SummarizerFailed(Exception):
    """A summarizer call failed on every attempt; ``reason`` says how, for the fallback heading."""

    def __init__(self, reason: str, *, calls: int, answered: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.calls = calls
        self.answered = answered  # the model answered, uselessly (not an error or a timeout)


class SummarizerWithdrawn(Exception):
    """The summarizer withdrew: its model is wanted for something more urgent (a cleanup ahead of
    need gives the model and the session back to a turn that must clean up itself). Never
    retried, no section filled in for it: the cleanup that asked ends ABORTED, nothing written."""


class InvalidAnswer(ValueError):
    """The summarizer answered, but not with a usable summary."""


def clean_reply(raw: Any) -> str:
    """The text of an answer that can be used at all: not empty, not an error text or a refusal,
    not the prompt said back (it may still lack every section). Raises InvalidAnswer."""
    if not isinstance(raw, str):
        raw = getattr(raw, "content", raw)
    if not isinstance(raw, str):
        raise InvalidAnswer(f"the summarizer returned {type(raw).__name__}, not text")
    text = strip_fence(raw.replace("\x00", ""))
    if text.startswith(SUMMARY_PREFIX):
        text = text[len(SUMMARY_PREFIX) :].strip()
    if not text:
        raise InvalidAnswer("the summarizer returned an empty answer")
    if not usable_body(text):
        raise InvalidAnswer(f"the answer is not a summary (it began: {shown(text)!r})")
    return text


def clean_answer(raw: Any) -> str:
    """The usable summary text in ``raw`` (at least one section found), or raise InvalidAnswer."""
    text = clean_reply(raw)
    if not parse_sections(text):
        raise InvalidAnswer(f"the answer has none of the sections {', '.join(SECTIONS)} (it began: {shown(text)!r})")
    return text


def shown(text: str) -> str:
    return " ".join(text.split())[:80]


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


async def _invoke(summarizer: Summarizer, prompt: ChatPrompt, timeout: float, overrides: dict[str, Any]) -> Any:
    if overrides:
        summarizer = functools.partial(summarizer, **overrides)
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


class Caller:
    """Calls one summarizer for one cleanup: counts the calls, keeps every prompt sent, retries
    errors and timeouts with backoff (``options``: a SummaryOptions' timeout, max_retries and
    backoff)."""

    def __init__(self, summarizer: Summarizer, options: SummaryOptions, sleep: Sleep) -> None:
        self.summarizer = summarizer
        self.options = options
        self.sleep = sleep
        self.calls = 0
        self.prompts: list[ChatPrompt] = []

    async def __call__(self, prompt: ChatPrompt) -> str:
        """A summary answer (``clean_answer``), with the bounded retries."""
        return await self._attempts(prompt, self.options.max_retries + 1, clean_answer)

    async def reply(self, prompt: ChatPrompt) -> str:
        """Any usable answer (``clean_reply``: sections or not). Errors and timeouts are retried;
        a useless answer is not (asking a small model the same again gets the same): it raises
        SummarizerFailed with ``answered`` at once."""
        return await self._attempts(prompt, self.options.max_retries + 1, clean_reply, retry_useless=False)

    async def once(self, prompt: ChatPrompt, *, max_tokens: int | None = None) -> str:
        """One attempt, no retry, any text accepted (a follow-up for one section). A summarizer
        that sends a completion cap (``max_tokens``: the model adapter's) sends ``max_tokens``
        instead when that is lower: a small model that rambles on stops there, not at the cap
        of a whole summary (512 tokens took 25-30 s a call with SmolLM2 on a CPU)."""
        cap = getattr(self.summarizer, "max_tokens", None)
        lower = max_tokens is not None and isinstance(cap, int) and max_tokens < cap
        return await self._attempts(prompt, 1, _text, retry_useless=False,
                                    overrides={"max_tokens": max_tokens} if lower else {})

    async def _attempts(
        self, prompt: ChatPrompt, attempts: int, clean: Callable[[Any], str], *, retry_useless: bool = True,
        overrides: dict[str, Any] | None = None,
    ) -> str:
        reason = "no attempt made"
        for attempt in range(attempts):
            if attempt:
                await self.sleep(self.options.backoff * (2 ** (attempt - 1)))
            self.calls += 1
            self.prompts.append(prompt)
            try:
                return clean(await _invoke(self.summarizer, prompt, self.options.timeout, overrides or {}))
            except (TimeoutError, asyncio.TimeoutError):
                reason = f"timed out after {self.options.timeout:g}s"
            except InvalidAnswer as exc:
                reason = str(exc)
                if not retry_useless:
                    raise SummarizerFailed(reason, calls=self.calls, answered=True) from None
            except SummarizerWithdrawn:
                raise
            except Exception as exc:  # any provider error: 429, 500, connection reset, ...
                reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise SummarizerFailed(f"{reason} ({attempts} attempt{'s' if attempts > 1 else ''})", calls=self.calls)


def _text(raw: Any) -> str:
    if not isinstance(raw, str):
        raw = getattr(raw, "content", raw)
    if not isinstance(raw, str):
        raise InvalidAnswer(f"the summarizer returned {type(raw).__name__}, not text")
    return raw.replace("\x00", "").strip()
