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
