"""Scoring an answer without a judge model, and the optional judge.

Default (no judge): a normalized match on the planted value. Text is NFKC-folded, lowercased
and cut into words at anything that is not a letter or digit; the value matches when its words
occur as a run in the answer's words, or, for values holding a digit ("B-14", "PX481223"), when
its letters and digits are those of whole space-separated chunks of the answer ("B14" and
"b 14" match "B-14", "B-145" does not).

* ``updated_fact``: the new value must be there and the replaced one must not (an answer naming
  both does not say which one holds);
* ``not_told``: the answer must say it does not know (``ABSTENTION``).

The judge (``--judge``) asks a model, through the same OpenAI-compatible settings, whether the
answer is right, and records its verdict next to the match score; the table shows both.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from agents.evaluation.dataset import Question

ABSTENTION = re.compile(
    r"\b(?:(?:do not|don't|dont|did not|didn't) (?:know|have|recall|remember|see)"
    r"|(?:not|never) (?:been )?(?:told|mentioned|shared|given|said)"
    r"|(?:haven't|have not|hasn't|has not) (?:told|mentioned|shared|given|said)"
    r"|(?:no|not any) (?:record|information|mention|memory|idea|details?)"
    r"|(?:not sure|unknown|not aware|cannot find|can't find|couldn't find|could not find|unable to find)"
    r"|(?:i can't|i cannot) (?:tell|say|recall)"
    r")\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[^\W_]+")


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text or "").casefold())


def _contains(answer: str, value: str) -> bool:
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


def says_unknown(answer: str) -> bool:
    return bool(ABSTENTION.search(unicodedata.normalize("NFKC", answer or "").replace("\u2019", "'")))


def match_score(question: Question, answer: str) -> bool:
    """True when ``answer`` is right for ``question`` by the normalized match (module doc)."""
    if question.kind == "not_told" or question.expected is None:
        return says_unknown(answer)
    if not _contains(answer, question.expected):
        return False
    if question.stale and _contains(answer, question.stale):
        return False
    return True


# -- the optional judge ------------------------------------------------------------------------

JUDGE_INSTRUCTIONS = (
    "You grade answers of an assistant that should remember what a user told it. You get the "
    "user's question, the correct answer, and the assistant's answer. Reply with exactly one word: "
    "CORRECT if the assistant's answer gives the correct answer (extra words are fine, but naming "
    "an outdated value as the current one is not), or WRONG otherwise. When the correct answer is "
    "that the user never told it, CORRECT means the assistant said it does not know."
)


@dataclass(frozen=True)
class Verdict:
    correct: bool | None  # None: the judge's reply said neither
    raw: str


def judge_prompt(question: Question, answer: str) -> list[dict[str, Any]]:
    if question.expected is None:
        truth = "The user never told the assistant this; the right answer is that it does not know."
    else:
        truth = question.expected
        if question.stale:
            truth += f" (it was {question.stale} earlier, then changed)"
    user = f"Question: {question.text}\nCorrect answer: {truth}\nAssistant's answer: {answer}\n\nCORRECT or WRONG?"
    return [{"role": "system", "content": JUDGE_INSTRUCTIONS}, {"role": "user", "content": user}]


def parse_verdict(text: str) -> Verdict:
    found = re.findall(r"\b(CORRECT|WRONG|INCORRECT)\b", (text or "").upper())
    if not found:
        return Verdict(None, text)
    return Verdict(found[-1] == "CORRECT", text)


async def ajudge(*, model: Any, question: Question, answer: str) -> Verdict:
    """Ask ``model`` (a ChatModel) for a verdict on ``answer``."""
    from agents.llm import complete

    # No max_tokens: a reasoning model spends tokens before its verdict; the last word counts.
    completion = await complete(model, messages=judge_prompt(question, answer))
    return parse_verdict(completion.content or "")
