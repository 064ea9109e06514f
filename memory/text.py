"""Storable text: the one boundary every piece of model or user text crosses before a store.

A Python ``str`` may hold lone surrogates (``json.loads('"\\ud83d"')`` makes one); UTF-8, SQLite
text columns, PostgreSQL and the browser cannot. ``storable`` replaces each with U+FFFD so the text
can be written, read back, rendered and sent. Valid text comes back as the same object.
"""
from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same object when there is none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def is_storable(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class StorableDeltas:
    """Makes streamed text storable piece by piece (``memory.text.storable``), per channel.

    A model's JSON may write one character as a surrogate pair split over two chunks
    (``"\\ud83d"`` then ``"\\ude00"``): a high surrogate at the end of a piece is held back and
    joined with a low one opening the next piece; any other surrogate becomes U+FFFD. So the
    browser and the store see the same text, and it is always valid Unicode.
    """

    def __init__(self) -> None:
        self._held: dict[type, str] = {}

    def text(self, channel: type, text: str) -> str:
        held = self._held.pop(channel, "")
        if held and text and "\udc00" <= text[0] <= "\udfff":
            held, text = chr(0x10000 + ((ord(held) - 0xD800) << 10) + (ord(text[0]) - 0xDC00)), text[1:]
        if text and "\ud800" <= text[-1] <= "\udbff":
            self._held[channel], text = text[-1], text[:-1]
        return storable(held) + storable(text)

    def flush(self, channel: type) -> str:
        """What is still held back for ``channel`` (a lone high surrogate, as U+FFFD)."""
        return storable(self._held.pop(channel, ""))
