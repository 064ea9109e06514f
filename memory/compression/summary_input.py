"""The compact summary's input: messages serialised for the summarizer, chunked, and prompted.

Each message is written with its seq, role and date (``[12] user · 8 May 2023 14:05:``, UTC),
its ``reasoning_content`` beside its content (so the summary captures what the agent thought,
not only what it said) and its tool calls. Fields are only excerpted when a single message is
larger than half a chunk; history needing more than ``max_chunks`` chunks gives its oldest
messages as one-line digests (see ``plan_chunks``). Text is made storable on the way in: a
session written before lone surrogates were replaced at the store still summarizes.

The prompt is a template to fill in, the form small models (135M-8B) follow best: the six
headings in order, a line on what goes under each, short bullets. An answer that fills only
some of them is used as it is; ``section_prompt`` then asks for one missing section at a time,
as a follow-up to the same conversation (a server's prompt cache reuses the transcript). A
model that answers without filling in the template at all (the smallest ones chat on, or
continue the transcript) is asked one short question per section (``single_section_prompt``).
"""

from __future__ import annotations

from collections.abc import Sequence

from memory import tokens as tok
from memory.compression.dates import stamp
from memory.compression.statements import excerpt
from memory.messages import Message
from memory.text import storable

SUMMARY_PREFIX = "[compact_summary]"
SECTIONS = ("Goal", "Decisions", "Facts learned", "Open tasks", "Reasoning trail", "Tool results that matter")

ChatPrompt = list[dict[str, str]]


def line_excerpt(text: str | None, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters at a word boundary, marked ``…``
    (``memory.compression.statements.excerpt``)."""
    return excerpt(text, limit)


_FRAME = 24  # tokens of per-message framing in the serialised transcript


def _excerpt(text: str, cap: int) -> str:
    """``text`` if it fits in ``cap`` tokens, else its head and tail around an omission marker."""
    encoded = tok.encoding().encode_ordinary(text)
    if len(encoded) <= cap:
        return text
    head, tail = (cap * 2) // 3, cap // 3
    omitted = len(encoded) - head - tail
    return (
        tok.encoding().decode(encoded[:head])
        + f"\n[… {omitted} tokens omitted here; the pruned catalog has the full text …]\n"
        + tok.encoding().decode(encoded[-tail:] if tail else [])
    )


def serialize_message(message: Message, *, field_cap: int | None = None) -> str:
    """One message as summarizer input: header, reasoning beside content, tool calls.

    Fields are excerpted only when the message is larger than ``field_cap`` tokens (checked on
    the cached count first, so ordinary messages are never re-tokenized).
    """
    oversized = field_cap is not None and tok.message_tokens(message) > field_cap

    def fit(text: str) -> str:
        # Storable first: sessions stored before the storable-text boundary may hold lone
        # surrogates, which neither the token counter nor an HTTP request can take.
        text = storable(text)
        return _excerpt(text, field_cap) if oversized and field_cap is not None else text

    # "[N] role (...) · date:" headers: N is the seq pruned_lookup takes, and the form is the
    # one transcript readers (people, the offline model) recognise.
    head = f"[{message.seq}] {message.role}"
    if message.role == "tool":
        head += f" ({storable(message.name or 'tool')}) result of call {storable(message.tool_call_id or '')}"
    elif message.tool_calls:
        head += f" (tool calls: {', '.join(storable(call.name) for call in message.tool_calls)})"
    elif message.name:
        head += f" ({storable(message.name)})"
    head += f" · {stamp(message.created_at)}"
    lines = [head + ":"]
    if message.reasoning_content:
        lines += ["<reasoning>", fit(message.reasoning_content), "</reasoning>"]
    if message.content:
        lines.append(fit(message.content))
    for call in message.tool_calls:
        lines.append(f"-> calls {storable(call.name)}({fit(call.arguments_json)}) [id {storable(call.id)}]")
    return "\n".join(lines)


def _digest(message: Message) -> str:
    first = storable(message.content or "").strip().splitlines()
    text = line_excerpt(first[0] if first else "", 120)
    calls = f" calls {', '.join(storable(c.name) for c in message.tool_calls)}" if message.tool_calls else ""
    thought = (
        f" (reasoning: {line_excerpt(storable(message.reasoning_content), 120)})" if message.reasoning_content else ""
    )
    return f"[{message.seq}] {message.role} · {stamp(message.created_at)}{calls}: {text}{thought}"


def plan_chunks(messages: Sequence[Message], *, chunk_tokens: int, max_chunks: int) -> list[str]:
    """Serialised transcript split into chunks of about ``chunk_tokens`` tokens each.

    When the history would need more than ``max_chunks`` chunks, the oldest messages are given
    as one-line digests (and beyond those, as a count): recent history matters most, and the
    catalog has everything.
    """
    pieces: list[tuple[int, str]] = []
    budget = chunk_tokens * max_chunks
    used = 0
    split = 0  # messages[:split] are digested
    for index in range(len(messages) - 1, -1, -1):
        cost = min(tok.message_tokens(messages[index]), chunk_tokens) + _FRAME
        if used + cost > budget:
            split = index + 1
            break
        used += cost
    if split:
        digests: list[str] = []
        digest_budget = chunk_tokens  # digests get at most one chunk
        omitted = 0
        for message in reversed(messages[:split]):
            if digest_budget <= 0:
                omitted += 1
                continue
            line = _digest(message)
            digest_budget -= len(line) // 3 + 4  # rough: digests are short, never re-tokenized
            digests.append(line)
        digests.reverse()
        if omitted:
            digests.insert(0, f"[{omitted} older messages omitted here; they are in the pruned catalog]")
        pieces.append((chunk_tokens, "Older messages, as one-line digests:\n" + "\n".join(digests)))
    for message in messages[split:]:
        cost = min(tok.message_tokens(message), chunk_tokens) + _FRAME
        pieces.append((cost, serialize_message(message, field_cap=chunk_tokens // 2)))

    chunks: list[str] = []
    current: list[str] = []
    current_tokens = 0
    for cost, text in pieces:
        if current and current_tokens + cost > chunk_tokens:
            chunks.append("\n\n".join(current))
            current, current_tokens = [], 0
        current.append(text)
        current_tokens += cost
    if current:
        chunks.append("\n\n".join(current))
    return chunks


_FILL_IN = "\n\nNow fill in the template."

#: What goes under each section, one line each (the template's guide).
GUIDE = {
    "Goal": "what the user wants overall",
    "Decisions": "what was decided or agreed, and when",
    "Facts learned": (
        "every fact the user told about themselves, the people, places and plans they mention, and every "
        "preference, each with its date"
    ),
    "Open tasks": "what is still to do",
    "Reasoning trail": "what the assistant thought and why (its <reasoning>), not only what it said",
    "Tool results that matter": "results later work depends on: values, ids, paths",
}


def _instructions(max_tokens: int, *, merge: bool) -> str:
    task = (
        "Summarize these partial summaries of one conversation, given in chronological order, into one summary."
        if merge
        else "Summarize the earlier part of a conversation between a user and an AI assistant. The assistant "
        "will read your summary instead of those messages, so keep what it needs."
    )
    template = "\n".join(f"## {name}\n- ..." for name in SECTIONS)
    guide = "\n".join(f"- {name}: {GUIDE[name]}." for name in SECTIONS)
    return (
        f"{task}\n\nFill in this template. Under each heading write short lines starting with \"- \", "
        "or \"- none\".\n\n"
        f"{template}\n\nWhat goes where:\n{guide}\n\n"
        "Dates: messages are marked with their date and time (UTC). Start a line with the date when it "
        "matters, for example \"- On 8 May 2023 the user moved to Porto.\" "
        "If a previous summary is given, keep every goal, decision, fact and open task from it that still holds. "
        f"Stay under {max_tokens} tokens. Answer with the filled-in template only."
    )


def summary_prompt(chunk: str, *, previous: str | None, part: tuple[int, int], max_tokens: int) -> ChatPrompt:
    body = []
    if previous:
        body.append(f"<previous_summary>\n{previous}\n</previous_summary>")
    label = f' part="{part[0]} of {part[1]}"' if part[1] > 1 else ""
    body.append(f"<transcript{label}>\n{chunk}\n</transcript>")
    body.append(_FILL_IN.strip())
    return [
        {"role": "system", "content": _instructions(max_tokens, merge=False)},
        {"role": "user", "content": "\n\n".join(body)},
    ]


def merge_prompt(parts: Sequence[str], *, previous: str | None, max_tokens: int) -> ChatPrompt:
    body = []
    if previous:
        body.append(f"<previous_summary>\n{previous}\n</previous_summary>")
    body += [f'<partial_summary part="{i}">\n{text}\n</partial_summary>' for i, text in enumerate(parts, 1)]
    body.append(_FILL_IN.strip())
    return [
        {"role": "system", "content": _instructions(max_tokens, merge=True)},
        {"role": "user", "content": "\n\n".join(body)},
    ]


def section_tokens(max_tokens: int) -> int:
    """The tokens a one-section answer is asked to fit, for a summary of ``max_tokens``."""
    return max(32, max_tokens // 4)


def section_prompt(prompt: ChatPrompt, answer: str, name: str, *, max_tokens: int) -> ChatPrompt:
    """``prompt`` and its ``answer``, then a request for the one section ``name`` it lacks.

    The conversation so far is repeated as it was, so a server that caches prompts reuses it;
    the request is short and asks for bullet lines only, which small models manage."""
    return [
        *prompt,
        {"role": "assistant", "content": answer},
        {
            "role": "user",
            "content": f"Now write only the \"{name}\" section: {GUIDE[name]}. Answer with short lines starting "
            f"with \"- \" (or \"- none\"), at most {section_tokens(max_tokens)} tokens, nothing else.",
        },
    ]


_SECTION_SYSTEM = (
    "You read the earlier part of a conversation between a user and an AI assistant, and answer one "
    "question about it. Messages are marked with their date and time (UTC)."
)


def single_section_prompt(prompt: ChatPrompt, name: str, *, max_tokens: int) -> ChatPrompt:
    """One section asked for on its own, for a model that did not fill in the template: the same
    material as ``prompt`` (the transcript, the previous summary) and one short question after it.
    Every section's prompt starts the same way, so a server's prompt cache reuses the material."""
    material = prompt[-1]["content"].removesuffix(_FILL_IN).rstrip()
    return [
        {"role": "system", "content": _SECTION_SYSTEM},
        {
            "role": "user",
            "content": f"{material}\n\nWrite the \"{name}\" of this conversation: {GUIDE[name]}. Answer with "
            f"short lines starting with \"- \" (or \"- none\"), at most {section_tokens(max_tokens)} tokens, "
            "nothing else.",
        },
    ]


def shorten_prompt(prompt: ChatPrompt, answer: str, *, used: int, budget: int) -> ChatPrompt:
    """``prompt`` followed by the over-long ``answer`` and a request to rewrite it within ``budget``."""
    headings = ", ".join(SECTIONS)
    return [
        *prompt,
        {"role": "assistant", "content": answer},
        {
            "role": "user",
            "content": f"That summary is {used} tokens, over the limit of {budget} tokens. Rewrite it in at most "
            f"{budget} tokens. Keep all six sections ({headings}) with the same headings, in the same order, and "
            "shorten each one; do not drop the reasoning trail, the open tasks, the facts or the tool results that "
            "later work depends on. Answer with the summary only.",
        },
    ]
