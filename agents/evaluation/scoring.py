"""Scoring an answer without a judge model, per dataset kind (``score_answer``).

* **generated**: a normalized match on the reference. Text is NFKC-folded, lower-cased and cut
  into words at anything that is not a letter or digit; the reference matches when its words
  occur as a run in the answer's words (or those of one of its ``accepted`` spellings), or, for
  values holding a digit ("B-14"), when its letters and digits are those of whole
  space-separated chunks of the answer ("B14" and "b 14" match "B-14", "B-145" does not). A
  temporal reference that is a date ("13 May 2023") matches any date in the answer naming the
  same day ("May 13th, 2023", "2023-05-13", or "13 May" without a year). An answer that also
  names the ``stale`` value (what the reference replaced) does not say which holds: wrong.
* **locomo**: LoCoMo's token F1 (``agents.evaluation.f1``); category 5 (adversarial) wants an
  abstention.
* **longmemeval**: the official score is the judge's (``judges``); without one, the reference's
  words as a run in the answer ("contains the answer", reported as unofficial), and an
  abstention for ``_abs`` questions.

Every question whose ``answer`` is None wants the answer to say it does not know
(``says_unknown``).
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date

from agents.evaluation.data import Question
from agents.evaluation.f1 import locomo_f1

ABSTENTION = re.compile(
    r"\b(?:(?:do not|don't|dont|did not|didn't) (?:know|have|recall|remember|see)"
    r"|(?:not|never) (?:been )?(?:told|mentioned|shared|given|said|discussed)"
    r"|(?:haven't|have not|hasn't|has not) (?:told|mentioned|shared|given|said)"
    r"|(?:no|not any) (?:record|information|mention|memory|idea|details?)"
    r"|(?:not sure|unknown|not aware|cannot find|can't find|couldn't find|could not find|unable to find)"
    r"|(?:i can't|i cannot) (?:tell|say|recall)"
    r")\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\W_]+")

#: LoCoMo's category numbers and the names Modex reports them under.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
LOCOMO_NUMBERS = {name: number for number, name in LOCOMO_CATEGORIES.items()}


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text or "").casefold())


def says_unknown(answer: str) -> bool:
    return bool(ABSTENTION.search(unicodedata.normalize("NFKC", answer or "").replace("\u2019", "'")))


def contains(answer: str, value: str) -> bool:
    """``value``'s words as a run in ``answer``'s words (codes also without their punctuation)."""
    want, have = words(value), words(answer)
    if not want:
        return False
    n = len(want)
    if any(have[i : i + n] == want for i in range(len(have) - n + 1)):
        return True
    if any(ch.isdigit() for ch in value):
        # "B14" or "b 14" for "B-14", but not "AB-145": whole chunks between spaces, joined
        target = "".join(want)
        chunks = ["".join(words(chunk)) for chunk in (answer or "").split()]
        for start in range(len(chunks)):
            joined = ""
            for chunk in chunks[start:]:
                joined += chunk
                if joined == target:
                    return True
                if len(joined) >= len(target):
                    break
    return False


# -- dates -------------------------------------------------------------------------------------

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",),
            ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"),
            ("october", "oct"), ("november", "nov"), ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_DAY_MONTH = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def dates_in(text: str) -> list[tuple[int | None, int, int]]:
    """(year or None, month, day) of every date written out in ``text``."""
    found: list[tuple[int | None, int, int]] = []
    for m in _DAY_MONTH.finditer(text or ""):
        found.append((int(m.group(3)) if m.group(3) else None, _MONTHS[m.group(2).lower()], int(m.group(1))))
    for m in _MONTH_DAY.finditer(text or ""):
        found.append((int(m.group(3)) if m.group(3) else None, _MONTHS[m.group(1).lower()], int(m.group(2))))
    for m in _ISO.finditer(text or ""):
        found.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
    return found


def _one_date(text: str) -> date | None:
    found = dates_in(text)
    if len(found) != 1 or found[0][0] is None:
        return None
    year, month, day = found[0]
    try:
        return date(year, month, day)
    except ValueError:
        return None


def names_date(answer: str, wanted: date) -> bool:
    return any(
        (year is None or year == wanted.year) and month == wanted.month and day == wanted.day
        for year, month, day in dates_in(answer)
    )


# -- per dataset -------------------------------------------------------------------------------


def _names(answer: str, value: str, *, temporal: bool) -> bool:
    when = _one_date(value) if temporal else None
    if when is not None:
        return names_date(answer, when)
    return contains(answer, value)


def match_score(question: Question, answer: str) -> bool:
    """The generated dataset's score: True when ``answer`` is right (module doc)."""
    if question.answer is None:
        return says_unknown(answer)
    temporal = question.category == "temporal"
    if not any(_names(answer, value, temporal=temporal) for value in (question.answer, *question.accepted)):
        return False
    if question.stale and _names(answer, question.stale, temporal=temporal):
        return False
    return True


def score_answer(kind: str, question: Question, answer: str) -> float:
    """The judge-free score of ``answer``, 0..1, for a dataset of ``kind`` (module doc)."""
    if kind == "generated":
        return float(match_score(question, answer))
    if question.answer is None:
        return float(says_unknown(answer))
    if kind == "locomo":
        return locomo_f1(category=LOCOMO_NUMBERS[question.category], answer=answer, reference=question.answer)
    if kind == "longmemeval":
        return float(contains(answer, question.answer))
    raise ValueError(f"no scoring for datasets of kind {kind!r}")


#: What the judge-free score is called in the reports, per dataset kind.
SCORE_NAMES = {
    "generated": "match",
    "locomo": "F1",
    "longmemeval": "contains the answer (unofficial; the judge is LongMemEval's metric)",
}
