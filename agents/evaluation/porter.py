"""The Porter stemmer, in the variant LoCoMo's F1 uses (NLTK's ``PorterStemmer()`` default mode).

That variant is Porter's algorithm (M. F. Porter, "An algorithm for suffix stripping", Program
14(3), 1980) with NLTK's extensions:

* a small table of irregular forms (``dying`` -> ``die``, ``skies`` -> ``sky``, ...);
* words of one or two letters are left as they are;
* ``-ies`` and ``-ied`` on four-letter words keep their ``e`` (``dies`` -> ``die``, ``tied`` -> ``tie``);
* step 1c turns a final ``y`` into ``i`` only after a consonant that is not the first letter
  (``happy`` -> ``happi``, ``enjoy`` and ``by`` stay);
* step 2 reads ``-bli`` (not ``-abli``) as ``-ble``, applies ``-alli`` -> ``-al`` first and then
  step 2 again, and adds ``-fulli`` -> ``-ful`` and ``-logi`` -> ``-log``;
* the *o condition (cvc) also holds for a two-letter stem vowel + consonant.

Input is lower-cased first. Only ASCII letters take part in the rules; other characters are
treated as consonants, as in the reference implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

_VOWELS = frozenset("aeiou")

_IRREGULAR = {
    "skies": "sky",
    "sky": "sky",
    "dying": "die",
    "lying": "lie",
    "tying": "tie",
    "news": "news",
    "innings": "inning",
    "inning": "inning",
    "outings": "outing",
    "outing": "outing",
    "cannings": "canning",
    "canning": "canning",
    "howe": "howe",
    "proceed": "proceed",
    "exceed": "exceed",
    "succeed": "succeed",
}


def _consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC){m}[V]: the number of vowel-consonant transitions."""
    pattern = "".join("c" if _consonant(stem, i) else "v" for i in range(len(stem)))
    return pattern.count("vc")


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _consonant(word, len(word) - 1)


def _ends_cvc(word: str) -> bool:
    """*o: the stem ends consonant-vowel-consonant, the last not w, x or y (or is vowel+consonant)."""
    n = len(word)
    if n >= 3:
        return (
            _consonant(word, n - 3) and not _consonant(word, n - 2) and _consonant(word, n - 1)
            and word[-1] not in "wxy"
        )
    return n == 2 and not _consonant(word, 0) and _consonant(word, 1)


Rule = tuple[str, str, Callable[[str], bool] | None]


def _apply(word: str, rules: list[Rule]) -> str:
    """The first rule whose suffix ends ``word`` decides: it applies if its condition holds on
    the stem (what precedes the suffix), else the word stays as it is."""
    for suffix, replacement, condition in rules:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            if condition is None or condition(stem):
                return stem + replacement
            return word
    return word


def _positive(stem: str) -> bool:
    return _measure(stem) > 0


def _above_one(stem: str) -> bool:
    return _measure(stem) > 1


def _step1a(word: str) -> str:
    if word.endswith("ies") and len(word) == 4:
        return word[:-3] + "ie"
    return _apply(word, [("sses", "ss", None), ("ies", "i", None), ("ss", "ss", None), ("s", "", None)])


def _step1b(word: str) -> str:
    if word.endswith("ied"):
        return word[:-3] + ("ie" if len(word) == 4 else "i")
    if word.endswith("eed"):
        stem = word[:-3]
        return stem + "ee" if _positive(stem) else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            stem = word[: -len(suffix)]
            break
    else:
        return word
    if stem.endswith(("at", "bl", "iz")):
        return stem + "e"
    if _double_consonant(stem) and stem[-1] not in "lsz":
        return stem[:-1]
    if _measure(stem) == 1 and _ends_cvc(stem):
        return stem + "e"
    return stem


def _step1c(word: str) -> str:
    if word.endswith("y") and len(word) > 2 and _consonant(word, len(word) - 2):
        return word[:-1] + "i"
    return word


_STEP2: list[Rule] = [
    ("ational", "ate", _positive),
    ("tional", "tion", _positive),
    ("enci", "ence", _positive),
    ("anci", "ance", _positive),
    ("izer", "ize", _positive),
    ("bli", "ble", _positive),
    ("alli", "al", _positive),
    ("entli", "ent", _positive),
    ("eli", "e", _positive),
    ("ousli", "ous", _positive),
    ("ization", "ize", _positive),
    ("ation", "ate", _positive),
    ("ator", "ate", _positive),
    ("alism", "al", _positive),
    ("iveness", "ive", _positive),
    ("fulness", "ful", _positive),
    ("ousness", "ous", _positive),
    ("aliti", "al", _positive),
    ("iviti", "ive", _positive),
    ("biliti", "ble", _positive),
    ("fulli", "ful", _positive),
]


def _step2(word: str) -> str:
    if word.endswith("alli") and _positive(word[:-4]):
        return _step2(word[:-4] + "al")
    if word.endswith("logi"):
        # The "l" belongs to the stem, so short stems (geo-, theo-) count like long ones.
        return word[:-1] if _positive(word[:-3]) else word
    return _apply(word, _STEP2)


_STEP3: list[Rule] = [
    ("icate", "ic", _positive),
    ("ative", "", _positive),
    ("alize", "al", _positive),
    ("iciti", "ic", _positive),
    ("ical", "ic", _positive),
    ("ful", "", _positive),
    ("ness", "", _positive),
]


def _ion(stem: str) -> bool:
    return _above_one(stem) and stem.endswith(("s", "t"))


_STEP4: list[Rule] = [
    ("al", "", _above_one),
    ("ance", "", _above_one),
    ("ence", "", _above_one),
    ("er", "", _above_one),
    ("ic", "", _above_one),
    ("able", "", _above_one),
    ("ible", "", _above_one),
    ("ant", "", _above_one),
    ("ement", "", _above_one),
    ("ment", "", _above_one),
    ("ent", "", _above_one),
    ("ion", "", _ion),
    ("ou", "", _above_one),
    ("ism", "", _above_one),
    ("ate", "", _above_one),
    ("iti", "", _above_one),
    ("ous", "", _above_one),
    ("ive", "", _above_one),
    ("ize", "", _above_one),
]


def _step4(word: str) -> str:
    # The longest suffix decides: "-ement" before "-ment" before "-ent" (listed in that order).
    return _apply(word, _STEP4)


def _step5(word: str) -> str:
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _ends_cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word[:-1]) > 1:
        word = word[:-1]
    return word


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The stem of ``word`` (lower-cased first)."""
    word = word.lower()
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 2:
        return word
    for step in (_step1a, _step1b, _step1c, _step2):
        word = step(word)
    word = _apply(word, _STEP3)
    word = _step4(word)
    return _step5(word)
