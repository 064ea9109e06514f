"""What a word is for retrieval: folded words, stop words left out, English stems.

Archived messages and queries go through the same analysis, so "moved", "moving" and "Moves"
meet at one term, and "what did I say about..." does not match every message that holds "what"
or "I". Words come from ``memory.stores.textsearch.words`` (letters and digits, lower-cased,
diacritics removed), so both backends and the document search agree on what a word is.

Stems are the Snowball English stemmer's (Porter2). Stop words are the common English function
words below; a query made only of stop words has no terms (the vector side may still answer).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

import snowballstemmer

from memory.stores.textsearch import words

#: Common English function words: pronouns, articles, auxiliaries, prepositions, conjunctions,
#: question words and fillers of chat. Content words (names, places, things, verbs of action)
#: are never here.
STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before being
    below between both but by can cannot could couldn d did didn do does doesn doing don down during
    each few for from further had hadn has hasn have haven having he her here hers herself him himself
    his how i if in into is isn it its itself just ll m me more most mustn my myself no nor not now o
    of off on once only or other our ours ourselves out over own re s same shan she should shouldn so
    some such t than that the their theirs them themselves then there these they this those through
    to too under until up ve very was wasn we were weren what when where which while who whom why will
    with won would wouldn y you your yours yourself yourselves
    also am anything did does else ever hey hi hello yes yeah ok okay oh um uh well really
    got get gets getting go goes going gone let lets like said say says tell told thing things
    know think thought remember mention mentioned
    """.split()
)

#: Words shorter than this are ignored unless they hold a digit ("3", "42" count; "x" does not).
MIN_WORD = 2
#: A query longer than this many distinct terms keeps its first ones (bounds the work per search).
MAX_QUERY_TERMS = 32

_stemmer = snowballstemmer.stemmer("english")


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The Snowball English stem of a folded word (numbers and short words unchanged)."""
    if len(word) <= 3 or not word.isalpha():
        return word
    return _stemmer.stemWord(word)


def _kept(word: str) -> bool:
    if word in STOP_WORDS:
        return False
    return len(word) >= MIN_WORD or word.isdigit()


def terms(text: str) -> list[str]:
    """The index terms of ``text``, in order, repeats kept: stems of its non-stop words."""
    return [stem(word) for word in words(text) if _kept(word)]


def term_counts(text: str) -> tuple[Counter[str], int]:
    """The term frequencies of ``text`` and its length in terms (for BM25)."""
    found = terms(text)
    return Counter(found), len(found)


def query_terms(query: str) -> list[tuple[str, str]]:
    """The distinct (term, word) pairs of a query, in order, at most MAX_QUERY_TERMS.

    ``word`` is the folded word as typed, kept for prefix matching: "lisb" has the stem "lisb",
    which no message holds, but the word is a prefix of "lisbon".
    """
    if not isinstance(query, str):
        raise TypeError(f"a search query must be a string, got {type(query).__name__}")
    seen: dict[str, str] = {}
    for word in words(query):
        if not _kept(word):
            continue
        seen.setdefault(stem(word), word)
        if len(seen) >= MAX_QUERY_TERMS:
            break
    return list(seen.items())


def without_names(query: str, names: Iterable[str]) -> str:
    """``query`` without the words of ``names`` (the conversation's participants), whole words,
    any case, a possessive "'s" with them; ``query`` itself when nothing else would be left.

    A participant's name says who spoke, not what was said: every message of theirs is theirs
    without naming them, and the messages that do name them are mostly the other side
    addressing them ("Nadia! Busy as ever"). Kept in a query, "What kind of paintings does
    Nadia make?" ranks those greetings above "Watercolour landscapes, mostly the river".
    """
    found = sorted({word for name in names for word in re.findall(r"\w+", name or "") if len(word) >= MIN_WORD},
                   key=len, reverse=True)
    if not found:
        return query
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(word) for word in found) + r")(?:['\u2019]s)?\b", re.IGNORECASE)
    stripped = " ".join(pattern.sub(" ", query).split())
    return stripped if query_terms(stripped) else query


def distinct_words(texts: Iterable[str]) -> set[str]:
    """Every folded word of ``texts`` (highlighting: which words of a hit the query matched)."""
    out: set[str] = set()
    for text in texts:
        out.update(words(text))
    return out
