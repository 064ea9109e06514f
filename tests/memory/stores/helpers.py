"""Builders shared by the store tests (no backend knowledge here)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from memory.messages import KIND_COMPACT_SUMMARY, Message, ToolCall

HOSTILE_IDS = (
    "..", ".", "../x", "a/b", "/etc", "%2e%2e", "a\x00b", "x" * 300, "", "a b", "..\\x", "\\", "-a", ".hidden",
)


def user(text: str | None = "hello", **kw) -> Message:
    return Message(role="user", content=text, **kw)


def assistant(text: str | None = "ok", **kw) -> Message:
    return Message(role="assistant", content=text, **kw)


def summary(text: str = "summary of what happened", **kw) -> Message:
    return Message(role="user", content=text, kind=KIND_COMPACT_SUMMARY, **kw)


def conversation(n: int, *, prefix: str = "m") -> list[Message]:
    """``n`` alternating user/assistant messages with distinct, predictable content."""
    return [
        Message(role="user" if i % 2 == 0 else "assistant", content=f"{prefix} {i} " + "word " * (i % 7))
        for i in range(n)
    ]


def tool_chain() -> list[Message]:
    """An assistant turn with two parallel tool calls, both results, and the final answer."""
    calls = (
        ToolCall(id="call_a", name="search", arguments_json='{"q": "naïve café", "n": 3}'),
        ToolCall(id="call_b", name="read_file", arguments_json='{"path": "/tmp/x"}'),
    )
    return [
        user("look it up"),
        Message(role="assistant", content=None, reasoning_content="I should search, then read.", tool_calls=calls),
        Message(role="tool", content='{"hits": ["a", "b"]}', tool_call_id="call_b", name="read_file"),
        Message(role="tool", content="three results", tool_call_id="call_a", name="search"),
        assistant("Here is what I found.", reasoning_content="Both tools answered."),
    ]


def tricky_messages() -> list[Message]:
    """Every field, and content that breaks naive storage."""
    lagos = timezone(timedelta(hours=1))
    return [
        user("héllo wörld ñ 中文 日本語 한국어"),
        user("emoji 👩‍💻🚀 family 👨‍👩‍👧‍👦 flag 🇫🇷"),
        user("مرحبا بالعالم — שלום עולם"),
        user("nul \x00 inside \x00"),
        user(""),
        assistant(None, reasoning_content="thinking only"),
        user('quotes " \' backslash \\ newline\nline2\r\ncrlf \u2028 sep \t tab'),
        user("---\n## [3] user · fake header\n---"),
        user("lone surrogate \ud800 here"),
        Message(role="system", content="be brief", name="policy", kind="runtime_note",
                created_at=datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=lagos), tokens=7),
        *tool_chain(),
    ]


def big_text(size: int = 1_000_000) -> str:
    # Varied words: a run of one repeated character is a pathological case for BPE tokenizers.
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    parts, length, i = [], 0, 0
    while length < size:
        word = f"{words[i % len(words)]}{i % 97}"
        parts.append(word)
        length += len(word) + 1
        i += 1
    return " ".join(parts)[:size]


def files_under(path: Path) -> set[str]:
    """Every file and directory below ``path`` (relative), for "nothing was written" checks."""
    if not path.exists():
        return set()
    found = set()
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            found.add(os.path.relpath(os.path.join(dirpath, name), path))
    return found
