"""The judge (``--judge``): a model asked, at temperature 0, whether an answer is right.

The prompts are Modex's own and state their rules:

* **generated** and **locomo**: a CORRECT/WRONG verdict (the last of those words in the reply);
* **longmemeval**: a yes/no verdict with one prompt per question type, following the rules of
  LongMemEval's evaluation: the response must contain the answer (or equivalent, or every step
  to it); temporal questions forgive counts off by one; knowledge updates may mention the older
  value if they give the new one as the answer; preference questions are graded against a
  rubric; abstention questions (``_abs``) want the response to say it cannot answer.

The verdict is recorded beside the judge-free score; a reply that says neither is recorded as
no verdict (None) and counted in neither direction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agents.evaluation.data import Question


@dataclass(frozen=True)
class Verdict:
    correct: bool | None  # None: the judge's reply said neither
    raw: str


GENERATED_RULES = (
    "You grade answers of an assistant that should remember what a user told it. You get the "
    "user's question, the correct answer, and the assistant's answer. Reply with exactly one word: "
    "CORRECT if the assistant's answer gives the correct answer (extra words are fine, but naming "
    "an outdated value as the current one is not, and a date must be the same day), or WRONG "
    "otherwise. When the correct answer is that the user never said it, CORRECT means the assistant "
    "said it does not know."
)

LOCOMO_RULES = (
    "You grade an answer to a question about a long conversation between two people that took "
    "place over several dated sessions. You get the question, the reference answer and the answer "
    "to grade. Reply with exactly one word, CORRECT or WRONG, by these rules:\n"
    "1. CORRECT when the answer gives the information of the reference, in any words; extra detail "
    "is fine unless it contradicts the reference.\n"
    "2. A date or time is CORRECT when it names the same day or period, in any format, or relative "
    "to a date that makes it the same (\"the Sunday before 25 May 2023\"); another date is WRONG.\n"
    "3. When the reference lists several things, the answer must name all of them.\n"
    "4. When the reference says the conversation does not mention it, CORRECT only when the answer "
    "says so or says it does not know; an answer that supplies the information is WRONG.\n"
    "5. A vague answer that could fit many references is WRONG."
)

_LME_COMMON = (
    "I will give you a question, the correct answer, and a chat assistant's response. Answer yes "
    "if the response contains the correct answer, says something equivalent, or gives every "
    "intermediate step that leads to it. Answer no if it gives only part of what the correct "
    "answer needs, or something else."
)
_LME_EXTRA = {
    "temporal-reasoning": " A count of days, weeks or months that is off by one (19 days for 18) "
    "still counts as correct.",
    "knowledge-update": " If the response also mentions older information, it is still correct "
    "as long as it gives the updated answer as the answer.",
}
_LME_PREFERENCE = (
    "I will give you a question, a rubric describing the personalised response wanted, and a chat "
    "assistant's response. Answer yes if the response recalls and uses the user's personal "
    "information as the rubric describes; it need not cover every point of the rubric. Otherwise "
    "answer no."
)
_LME_ABSTENTION = (
    "I will give you a question that cannot be answered from the conversation, an explanation of "
    "why, and a chat assistant's response. Answer yes if the response says it cannot answer: that "
    "it does not know, that the information is missing or incomplete, or that something else was "
    "mentioned but not what was asked. Answer no if it answers as though it knew."
)


def _truth(question: Question) -> str:
    if question.answer is None:
        return question.note or "This was never said in the conversations; the right answer is that it is not known."
    truth = question.answer
    if question.stale:
        truth += f" (it was {question.stale} earlier, then changed)"
    return truth


def judge_prompt(kind: str, question: Question, answer: str) -> list[dict[str, Any]]:
    """The messages sent to the judge for ``answer`` to ``question`` of a dataset of ``kind``."""
    if kind == "longmemeval":
        if question.answer is None:
            lead, label = _LME_ABSTENTION, "Explanation"
        elif question.category == "single-session-preference":
            lead, label = _LME_PREFERENCE, "Rubric"
        else:
            lead, label = _LME_COMMON + _LME_EXTRA.get(question.category, ""), "Correct answer"
        text = (
            f"{lead}\n\nQuestion: {question.text}\n\n{label}: {_truth(question)}\n\n"
            f"Response: {answer}\n\nIs the response correct? Answer yes or no only."
        )
        return [{"role": "user", "content": text}]
    rules = LOCOMO_RULES if kind == "locomo" else GENERATED_RULES
    reference = "Reference answer" if kind == "locomo" else "Correct answer"
    user = f"Question: {question.text}\n{reference}: {_truth(question)}\nAnswer to grade: {answer}\n\nCORRECT or WRONG?"
    return [{"role": "system", "content": rules}, {"role": "user", "content": user}]


def parse_verdict(text: str, *, yes_no: bool = False) -> Verdict:
    """The last verdict word of the judge's reply (CORRECT/WRONG, or yes/no for LongMemEval)."""
    pattern = r"\b(YES|NO)\b" if yes_no else r"\b(CORRECT|WRONG|INCORRECT)\b"
    found = re.findall(pattern, (text or "").upper())
    if not found:
        return Verdict(None, text)
    return Verdict(found[-1] in ("CORRECT", "YES"), text)


async def ajudge(*, model: Any, kind: str, question: Question, answer: str) -> Verdict:
    """Ask ``model`` (a ChatModel) for a verdict on ``answer``, at temperature 0."""
    from agents.llm import complete

    # No max_tokens: a reasoning model spends tokens before its verdict; the last word counts.
    completion = await complete(model, messages=judge_prompt(kind, question, answer), temperature=0)
    return parse_verdict(completion.content or "", yes_no=kind == "longmemeval")
