"""LoCoMo's answer score: token F1 after its normalization, with its per-category rules.

Normalization (as LoCoMo's ``task_eval/evaluation.py`` does it): commas removed, lower-cased,
ASCII punctuation removed, the words ``a``, ``an``, ``the`` and ``and`` removed, whitespace
collapsed; then every word is stemmed (``agents.evaluation.porter``, NLTK's default Porter
variant). F1 counts the stems the answer and the reference share (as multisets).

Per category (LoCoMo's numbering):

* 1, multi-hop: answer and reference are split on commas; each reference part takes its best F1
  against any answer part, and the score is the mean over the reference parts;
* 2, temporal and 4, single-hop: plain F1;
* 3, open-domain: plain F1 against the reference up to its first ``;`` (the rest explains it);
* 5, adversarial: 1 when the answer says the thing was not mentioned, else 0. LoCoMo's own
  script accepts only "no information available" and "not mentioned" (after a multiple-choice
  prompt); Modex asks the question as a user would, so any plain abstention counts
  (``agents.evaluation.scoring.says_unknown``, which includes those two phrases).
"""

from __future__ import annotations

import re
import string
from collections import Counter

from agents.evaluation.porter import stem

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize(text: str) -> str:
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def stems(text: str) -> list[str]:
    return [stem(word) for word in normalize(text).split()]


def token_f1(answer: str, reference: str) -> float:
    """F1 of the stemmed, normalized tokens of ``answer`` against ``reference``."""
    predicted, expected = stems(answer), stems(reference)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision = common / len(predicted)
    recall = common / len(expected)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(answer: str, reference: str) -> float:
    """Category 1: each comma-separated reference part against its best answer part, averaged."""
    parts = [p.strip() for p in answer.split(",")]
    wanted = [r.strip() for r in reference.split(",")]
    return sum(max(token_f1(p, r) for p in parts) for r in wanted) / len(wanted)


def locomo_f1(*, category: int, answer: str, reference: str) -> float:
    """The score of ``answer`` for a question of LoCoMo ``category`` 1-4 (see the module doc)."""
    if category == 1:
        return multi_answer_f1(answer, reference)
    if category == 3:
        reference = reference.split(";")[0].strip()
    if category in (2, 3, 4):
        return token_f1(answer, reference)
    raise ValueError(f"LoCoMo category {category} has no F1 (category 5 is scored as an abstention)")
