"""Marking what a search matched, for the pages that show found messages (a user's archive, the
pruned catalog of a conversation).

A query's words are those the archive retrieval uses (``memory.retrieval.text.query_terms``:
folded, stop words left out, each word as typed). A word of a text matches a query word when it
begins with it ("lisb" marks Lisbon) or has the same English stem ("moving" marks moved). Output
is HTML: the text escaped, matches in ``<mark>``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from django.utils.safestring import SafeString, mark_safe

from memory.retrieval import text as analysis
from memory.stores.textsearch import fold

#: A query longer than this is cut first.
MAX_QUERY_CHARS = 500
_TOKEN = re.compile(r"[^\W_]+")


def query_words(query: str) -> tuple[str, ...]:
    """The folded words of ``query`` a search looks for (no stop words), in order."""
    return tuple(word for _term, word in analysis.query_terms((query or "")[:MAX_QUERY_CHARS]))


def matches(token: str, words: Sequence[str]) -> bool:
    """Whether one word of a text matches one of ``words`` (folded query words)."""
    folded = fold(token)
    stemmed = analysis.stem(folded)
    return any(folded.startswith(word) or stemmed == analysis.stem(word) for word in words)


def contains_all(text: str, words: Sequence[str]) -> bool:
    """Whether every one of ``words`` matches some word of ``text`` (False for no words)."""
    if not words:
        return False
    tokens = {token for token in _TOKEN.findall(text)}
    return all(any(matches(token, (word,)) for token in tokens) for word in words)


def highlight(text: str, words: Sequence[str]) -> SafeString:
    """``text`` escaped, each word matching one of ``words`` in ``<mark>``."""
    if not words:
        return mark_safe(html.escape(text))  # noqa: S308 - escaped
    out, at = [], 0
    for match in _TOKEN.finditer(text):
        if matches(match.group(0), words):
            out.append(html.escape(text[at:match.start()]))
            out.append(f"<mark>{html.escape(match.group(0))}</mark>")
            at = match.end()
    out.append(html.escape(text[at:]))
    return mark_safe("".join(out))  # noqa: S308 - every piece is escaped


def excerpt(text: str, words: Sequence[str], *, limit: int) -> SafeString:
    """``text`` with its matches marked; a longer one cut to about ``limit`` characters around
    its first match, at spaces, with "…" where it was cut."""
    if len(text) <= limit:
        return highlight(text, words)
    first = next((m.start() for m in _TOKEN.finditer(text) if words and matches(m.group(0), words)), 0)
    start = max(0, first - limit // 3)
    if start:
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < first else start
    end = min(len(text), start + limit)
    if end < len(text):
        space = text.rfind(" ", start, end)
        end = space if space > first else end
    piece = highlight(text[start:end], words)
    return mark_safe(("…" if start else "") + piece + ("…" if end < len(text) else ""))  # noqa: S308
