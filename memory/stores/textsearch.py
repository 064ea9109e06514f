"""Word-based archive search shared by the backends: tokenizing, BM25 scoring, snippets.

Queries are plain text. They are reduced to words (letters and digits; everything else, quotes
and operators included, only separates words), so no user text can ever be read as a query
language. Words are lower-cased and stripped of diacritics, like SQLite FTS5's ``unicode61``
tokenizer with ``remove_diacritics 2``, so both backends agree on what a word is.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_WORD = re.compile(r"[^\W_]+")
#: A query longer than this many distinct words keeps its first ones (bounds the work per search).
MAX_QUERY_TERMS = 32
SNIPPET_CHARS = 200

# BM25 parameters: the usual defaults, also FTS5's.
K1 = 1.2
B = 0.75


def fold(text: str) -> str:
    if text.isascii():  # nothing to decompose, no combining mark: the per-character pass is moot
        return text.lower()
    decomposed = unicodedata.normalize("NFD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).lower()


def words(text: str) -> list[str]:
    """The words of ``text``, folded, in order (repeats kept)."""
    return _WORD.findall(fold(text))


def query_terms(query: str) -> list[str]:
    """The distinct words of a query, in order, at most MAX_QUERY_TERMS."""
    if not isinstance(query, str):
        raise TypeError(f"a search query must be a string, got {type(query).__name__}")
    seen: dict[str, None] = {}
    for word in words(query):
        seen.setdefault(word, None)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen)


def fts_match_expression(terms: Sequence[str]) -> str:
    """An FTS5 MATCH string that means "any of these words": each one a quoted string."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def tsquery_expression(terms: Sequence[str]) -> str:
    """A PostgreSQL ``to_tsquery('simple', ...)`` string that means "any of these words": each
    one a quoted lexeme (terms hold only letters and digits, but quotes are escaped anyway)."""
    return " | ".join("'" + term.replace("'", "''").replace("\\", "\\\\") + "'" for term in terms)


@dataclass(frozen=True, slots=True)
class Scored:
    key: object
    score: float


def bm25(
    terms: Sequence[str],
    docs: Iterable[tuple[object, Sequence[str]]],
    *,
    total_docs: int | None = None,
    average_length: float | None = None,
) -> list[Scored]:
    """Okapi BM25 of each document (key, words) that holds at least one term, best first.

    ``total_docs`` and ``average_length`` describe the whole collection when ``docs`` is only
    the candidates that may match (documents without any term score 0 and are left out anyway).
    """
    docs = list(docs)
    if not terms or not docs:
        return []
    wanted = set(terms)
    counts = []
    for key, doc_words in docs:
        tf = Counter(w for w in doc_words if w in wanted)
        counts.append((key, tf, len(doc_words)))
    n_docs = total_docs if total_docs is not None else len(docs)
    avg = average_length if average_length is not None else sum(length for _, _, length in counts) / len(counts)
    avg = max(avg, 1.0)
    df = Counter(term for _, tf, _ in counts for term in tf)
    idf = {term: math.log(1 + (n_docs - df[term] + 0.5) / (df[term] + 0.5)) for term in df}
    scored = []
    for key, tf, length in counts:
        if not tf:
            continue
        norm = K1 * (1 - B + B * length / avg)
        score = sum(idf[t] * f * (K1 + 1) / (f + norm) for t, f in tf.items())
        scored.append(Scored(key, score))
    scored.sort(key=lambda s: -s.score)
    return scored


def snippet(text: str, terms: Sequence[str], *, width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` around the first query word found in it."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    start = None
    for term in terms:
        match = re.search(re.escape(term), flat, re.IGNORECASE)
        if match and (start is None or match.start() < start):
            start = match.start()
    if start is None:
        return flat[:width].rstrip() + "…"
    begin = max(0, start - width // 3)
    end = min(len(flat), begin + width)
    begin = max(0, end - width)
    piece = flat[begin:end].strip()
    return ("…" if begin > 0 else "") + piece + ("…" if end < len(flat) else "")
