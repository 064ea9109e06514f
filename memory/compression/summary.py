"""The structured compact summary that replaces evicted history in the session.

Memory talks to a model only through ``Summarizer``: a callable, sync or async, taking a short
list of chat messages (``{"role", "content"}`` dicts: one system instruction, one user turn)
and returning the answer text. agents/ adapts any ChatModel to it; tests pass a function.

``compose_summary`` never raises because of the summarizer. A call that raises (429, 500, a
network error) or times out is retried a bounded number of times with a small backoff; if it
still fails, a deterministic fallback summary is built from the messages themselves
(``memory.compression.fallback``), marked as such, and still carrying the previous summary.
An answer with nothing usable in it (empty, an error text or a refusal, the prompt said back)
is not asked again as it was: see below. So a failing model never wipes a session and never
causes a retry storm: at most ``(chunks + merges) x attempts`` calls, plus one per section, and
the first exhausted call stops the model path.

Small models write some sections, not all (``memory.compression.answers`` reads whatever form
they use, JSON included). A partial answer is used: each missing section is asked for alone,
once, as a follow-up (``section_prompt``), and what is still missing is built from the messages
(``fallback.filled_section``). An answer with no section at all, or a useless one (the smallest
models chat on, continue the transcript, or say the prompt back), is not retried: each section
is asked as one short question on the same material (``single_section_prompt``; with
``SummaryOptions.sections_alone``, for a model known to answer so, the template is not asked at
all: ``agents.runtime.summary_style``), and only if
none of those is usable does the fallback run. Errors and timeouts are retried, and then fall
back at once. Whatever the model wrote, every user statement of fact or preference it did not
already say is added to "Facts learned", dated, with its seq, and so are the previous summary's
facts it dropped: a fact stays in the summary until the budget pushes it out (to the pruned
catalog and the archive, where it always is). The header dates what was summarized ("Earlier
history from 8 May 2023 to 12 May 2023, seq 1–40").

An answer longer than the budget is never cut from its end (that silently lost the last
sections: reasoning trail, open tasks, tool results). The final call is re-asked once with the
budget stated; if the second answer is still too long (or the re-ask fails), the shorter answer
is fitted section by section (``memory.compression.sections``: each section gets its share, none
is dropped, no item is cut in half) under a line saying so. Partial summaries of a chunked
history are fitted the same way, without a re-ask.

The summarizer's input holds every evicted message's content and ``reasoning_content`` in full
(``memory.compression.summary_input``), except a single field larger than the summarizer's own
window, which is given as head and tail excerpts (the pruned catalog keeps it whole). History
larger than that window is summarized in chunks whose summaries are then merged; history larger
than ``max_chunks`` windows gives its oldest messages as one-line digests, so one cleanup never
costs more than a bounded number of calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memory import tokens as tok
from memory.config import SUMMARY_HEADER_TOKENS, MemoryConfig
from memory.compression.answers import parse_sections, render_sections, strip_fence, usable_body
from memory.compression.dates import day, span
from memory.compression.fallback import FALLBACK_HEADING, Material, facts_lines, fallback_body, filled_section
from memory.compression.sections import fit_sections
from memory.compression.summary_calls import (
    Caller,
    InvalidAnswer,
    Sleep,
    Summarizer,
    SummarizerFailed,
    clean_answer,
    clean_reply,
    shown,
)
from memory.compression.summary_input import (
    SECTIONS,
    SUMMARY_PREFIX,
    ChatPrompt,
    merge_prompt,
    plan_chunks,
    section_prompt,
    section_tokens,
    single_section_prompt,
    serialize_message,
    shorten_prompt,
    summary_prompt,
)
from memory.messages import Message
from memory.text import storable


@dataclass(frozen=True, slots=True)
class SummaryOptions:
    """Knobs of ``compose_summary``; defaults suit a hosted model."""

    max_tokens: int = 1024  # budget of the summary body in the session
    window_tokens: int | None = None  # the summarizer's window; None: its context_window or 16384
    timeout: float = 120.0  # seconds per call
    max_retries: int = 2  # extra attempts per call after the first
    backoff: float = 0.5  # seconds before the first retry, doubled for each further one
    max_chunks: int = 8  # older history beyond this many chunks is given as one-line digests
    ask_missing_sections: bool = True  # ask for each section a partial answer lacks, once, alone
    #: Skip the whole template and ask each section alone at once: for a model that answered the
    #: template with no section before (its whole answer, cut at the cap, cost a small local model
    #: a minute and was never used). Only for a history summarized in one call.
    sections_alone: bool = False


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """The summary text to store, and how it was obtained."""

    content: str  # the full message content, starting with "[compact_summary]"
    fallback: bool
    error: str | None  # why the summarizer path failed (None when it did not)
    calls: int  # summarizer calls made, retries included
    prompts: tuple[ChatPrompt, ...] = field(default=(), repr=False)  # every prompt sent, in order
    shortened: str | None = None  # None (fit at once), REASKED or CUT_BY_SECTION
    model_sections: tuple[str, ...] = ()  # the sections the model wrote (the others were built)
    #: Whether the model's answer to the whole template held any section: None when the template
    #: was not asked in one call (sections asked alone, a long history in parts) or not answered.
    template_followed: bool | None = None
    #: The answer without a section ran longer than the summary's budget: the model chatted on
    #: (not an empty or refused answer, which says less about the model).
    template_ran_on: bool = False


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


def default_options(config: MemoryConfig) -> SummaryOptions:
    """The options a cleanup under ``config`` summarizes with unless its caller says otherwise:
    the defaults, within the summary's budget."""
    return SummaryOptions(max_tokens=summary_budget(config))


# -- composing --------------------------------------------------------------------------------


def previous_summary_text(summaries: Sequence[Message]) -> str | None:
    """The bodies of evicted compact summaries, oldest first, without the marker."""
    texts = []
    for message in summaries:
        text = storable(message.content or "").strip()  # summaries stored before text was made storable
        if text.startswith(SUMMARY_PREFIX):
            text = text[len(SUMMARY_PREFIX) :].strip()
        if text:
            texts.append(text)
    return "\n\n".join(texts) or None


def _header(history: Sequence[Message], cleanup_at: datetime) -> str:
    if history:
        when = span(history)
        what = f"Earlier history {when}, seq {history[0].seq}–{history[-1].seq} ({len(history)} messages)"
    else:
        what = "Earlier history, no new messages"
    return (
        f"{SUMMARY_PREFIX} {what}, compacted on {day(cleanup_at)}. "
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
    if previous_text:  # a summary is its body within the budget and its one-line header
        previous_text = fit_sections(previous_text, options.max_tokens + SUMMARY_HEADER_TOKENS)
    material = Material.of(history, previous_text)
    window = options.window_tokens or getattr(summarizer, "context_window", None) or 16384
    overhead = 400 + options.max_tokens + (tok.count_text(previous_text) if previous_text else 0)
    chunk_tokens = max(256, int((window - overhead) * 0.85))
    chunks = plan_chunks(history, chunk_tokens=chunk_tokens, max_chunks=options.max_chunks)
    caller = Caller(summarizer, options, sleep)
    header = _header(history, cleanup_at)
    budget = options.max_tokens
    useless: str | None = None  # why the first answer could not be used at all
    followed: bool | None = None
    ran_on = False
    try:
        if len(chunks) <= 1:
            only = chunks[0] if chunks else ""
            prompt = summary_prompt(only, previous=previous_text, part=(1, 1), max_tokens=budget)
            if options.sections_alone:
                answer, shortened = "", None
                useless = "this model answered the template with no section before; each was asked alone"
            else:
                try:
                    answer, shortened = await _within_budget(caller, prompt, budget)
                    followed = bool(parse_sections(answer))
                    ran_on = not followed and tok.count_text(answer) > budget
                except SummarizerFailed as exc:
                    if not exc.answered:
                        raise  # the endpoint is failing: no questions, the fallback
                    answer, shortened, useless, followed = "", None, exc.reason, False  # ask section by section
        else:
            parts = [
                fit_sections(
                    await caller(summary_prompt(chunk, previous=None, part=(i, len(chunks)), max_tokens=budget)),
                    budget,
                )
                for i, chunk in enumerate(chunks, 1)
            ]
            answer, shortened, prompt = await _merge(
                caller, parts, previous=previous_text, options=options, window=window
            )
        sections, from_model = await _completed(
            caller, prompt, answer, material=material, options=options, useless=useless
        )
    except SummarizerFailed as exc:
        body = fallback_body(history=history, previous_text=previous_text, reason=exc.reason, max_tokens=budget)
        return SummaryOutcome(
            content=storable(f"{header}\n\n{body}"),
            fallback=True,
            error=exc.reason,
            calls=caller.calls,
            prompts=tuple(caller.prompts),
            template_followed=followed,
            template_ran_on=ran_on,
        )
    # A whole answer that needed nothing added is kept exactly as the model wrote it.
    whole = sections == parse_sections(answer) and len(sections) == len(SECTIONS)
    body = answer if whole else render_sections(sections)
    if tok.count_text(body) > budget:
        body, shortened = fit_sections(body, budget, note=shortened_note(budget)), CUT_BY_SECTION
    return SummaryOutcome(
        content=storable(f"{header}\n\n{body}"),
        fallback=False,
        error=None,
        calls=caller.calls,
        prompts=tuple(caller.prompts),
        shortened=shortened,
        model_sections=from_model,
        template_followed=followed,
        template_ran_on=ran_on,
    )


async def _completed(
    caller: Caller,
    prompt: ChatPrompt,
    answer: str,
    *,
    material: Material,
    options: SummaryOptions,
    useless: str | None = None,
) -> tuple[dict[str, str], tuple[str, ...]]:
    """Every section, and the names of those the model wrote.

    The model's sections first. A partial answer: each missing section asked for alone as a
    follow-up (once, stopping at the first failed call). An answer without any section (the
    template was not followed): each section asked as one short question on the same material,
    stopping at the first failed call or at two useless replies in a row; if none comes,
    SummarizerFailed (the fallback). Then the rest built from the messages, and the facts the model left out."""
    sections = parse_sections(answer)
    if not sections:
        sections = await _section_by_section(caller, prompt, options=options)
        if not sections:
            said = useless or f"the answer has none of the sections (it began: {shown(answer)!r})"
            raise SummarizerFailed(f"{said}, and no section asked for alone was usable", calls=caller.calls)
    elif options.ask_missing_sections:
        for name in [name for name in SECTIONS if name not in sections]:
            try:
                reply = await caller.once(section_prompt(prompt, answer, name, max_tokens=options.max_tokens),
                                          max_tokens=section_cap(options.max_tokens))
            except SummarizerFailed:
                break  # the model is failing now: do not ask it again and again
            body = _section_body(reply, name)
            if body is not None:
                sections[name] = body
    from_model = tuple(name for name in SECTIONS if name in sections)
    for name in SECTIONS:
        if name not in sections:
            sections[name] = filled_section(name, material)
        elif name == "Facts learned":
            # Only the model's facts count as saying a fact: one mentioned elsewhere (in the goal,
            # say) is still listed here, with its date.
            written = sections[name]
            extra = facts_lines(material, beside=written, carry=False)
            if extra:
                kept = "" if written.strip().lower() in ("- none", "none", "- (none)") else written
                sections[name] = "\n".join(part for part in (kept, *extra) if part)
    return sections, from_model


def section_cap(max_tokens: int) -> int:
    """The completion cap of a one-section answer: twice what it is asked to fit (a model counts
    roughly; an answer cut there loses the end of one line, not a section)."""
    return 2 * section_tokens(max_tokens)


#: Useless replies in a row (an error text, a refusal, the transcript said back) that end the
#: questions: one may be a small model's bad draw, two mean it is not helping.
USELESS_IN_A_ROW = 2


async def _section_by_section(caller: Caller, prompt: ChatPrompt, *, options: SummaryOptions) -> dict[str, str]:
    sections: dict[str, str] = {}
    useless = 0
    for name in SECTIONS:
        try:
            reply = await caller.once(single_section_prompt(prompt, name, max_tokens=options.max_tokens),
                                      max_tokens=section_cap(options.max_tokens))
        except SummarizerFailed as exc:
            if not exc.answered:
                break  # the endpoint is failing: no more questions
            reply = ""
        body = _section_body(reply, name)
        if body is None:
            useless += 1
            if useless >= USELESS_IN_A_ROW:
                break
            continue
        useless = 0
        sections[name] = body
    return sections


def _section_body(reply: str, name: str) -> str | None:
    """The body of section ``name`` in a reply that was asked for it alone, or None."""
    found = parse_sections(reply)
    body = found.get(name) if found else strip_fence(reply)
    return body if body and usable_body(body) else None


async def _within_budget(caller: Caller, prompt: ChatPrompt, budget: int) -> tuple[str, str | None]:
    """The final answer: asked, and re-asked once with the budget stated when it is over it.

    Returns the answer (still over the budget when the re-ask did not help: the caller fits it
    by section) and how it was shortened."""
    first = await caller.reply(prompt)
    used = tok.count_text(first)
    if used <= budget or not parse_sections(first):
        return first, None  # within budget, or not a summary to shorten (asked section by section)
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
    return first, CUT_BY_SECTION


async def _merge(
    caller: Caller, parts: list[str], *, previous: str | None, options: SummaryOptions, window: int
) -> tuple[str, str | None, ChatPrompt]:
    # Merge in groups that fit the window, level by level, until one summary remains.
    budget = options.max_tokens
    room = max(2, (window - 400 - budget * 2) // max(1, budget + 40))
    while len(parts) > 1 or previous is not None:
        if len(parts) <= room:
            prompt = merge_prompt(parts, previous=previous, max_tokens=budget)
            answer, shortened = await _within_budget(caller, prompt, budget)
            return answer, shortened, prompt
        parts = [
            fit_sections(await caller(merge_prompt(parts[i : i + room], previous=None, max_tokens=budget)), budget)
            for i in range(0, len(parts), room)
        ]
    return parts[0], None, merge_prompt(parts, previous=None, max_tokens=budget)


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
    "clean_reply",
    "compose_summary",
    "default_options",
    "fit_sections",
    "fallback_body",
    "serialize_message",
    "summary_budget",
]
