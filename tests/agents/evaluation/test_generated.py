"""The generated dataset: reproducible from its seed, shaped like real conversations (many short
dated sessions), and every question's evidence is where it says and nowhere else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.evaluation.generated import CATEGORIES, SIZES, Size, generate
from agents.evaluation.generated_text import RELATIONS
from agents.evaluation.pipeline import session_messages
from agents.evaluation.scoring import contains, names_date
from memory.tokens import compute_message_tokens


def test_the_same_seed_gives_the_same_dataset_and_another_seed_another():
    assert generate(size="small").fingerprint() == generate(size="small").fingerprint()
    assert generate(size="small", seed=18).fingerprint() != generate(size="small").fingerprint()
    assert generate(size="medium").fingerprint() != generate(size="small").fingerprint()


@pytest.mark.parametrize("size", sorted(SIZES))
def test_many_short_dated_sessions_most_under_the_cleanup_threshold(size):
    dataset = generate(size=size)
    spec = SIZES[size]
    assert len(dataset.histories) == spec.users
    tokens = []
    for history in dataset.histories:
        assert len(history.sessions) == spec.sessions
        dates = [s.date for s in history.sessions]
        assert dates == sorted(dates) and len(set(d.date() for d in dates)) == len(dates)
        assert all(q.date > dates[-1] for q in history.questions)
        for session in history.sessions:
            tokens.append(sum(compute_message_tokens(m) for m in session_messages(session)))
            assert session.turns[0].role == "user" and {t.role for t in session.turns} == {"user", "assistant"}
    assert min(tokens) >= 250 and max(tokens) <= 1700
    assert sum(t > 1500 for t in tokens) <= len(tokens) // 10  # the default threshold is 1,500 tokens


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_answer_is_said_in_its_evidence_and_nowhere_else(size):
    for history in generate(size=size).histories:
        turns = history.turns_by_id()
        assert sorted(q.category for q in history.questions) == sorted(CATEGORIES * SIZES[size].per_category)
        for question in history.questions:
            if question.category == "abstention":
                assert question.answer is None and question.evidence == ()
                relation = relation_in(question.text)
                assert any(f"my {relation} " in t.text.lower() for t in turns.values()), "asks about someone who was mentioned"
                continue
            evidence = [turns[e] for e in question.evidence]
            if question.category == "temporal":
                assert len(evidence) == 1
                continue  # said as "last Saturday": the day is the session's, worked out
            where = [t.id for t in turns.values() if contains(t.text, question.answer)]
            assert where == [question.evidence[-1]], (question, where)
            if question.category == "assistant":
                assert evidence[0].role == "assistant"
            if question.category == "multi_hop":
                first, second = (e.split(".")[1] for e in question.evidence)
                assert first < second, "two conversations, in order"
                relation = relation_in(question.text)
                assert f"my {relation} " in evidence[0].text.lower() and relation not in evidence[1].text.lower()
            if question.category == "update":
                stale = [t.id for t in turns.values() if contains(t.text, question.stale)]
                assert len(stale) == 1 and stale[0].split(".")[1] < question.evidence[0].split(".")[1]


def relation_in(text: str) -> str:
    return max((r for r, _ in RELATIONS if f"my {r}" in text), key=len)


def test_a_temporal_answer_is_the_day_the_conversation_implies():
    checked = 0
    for history in generate(size="full").histories:
        turns = history.turns_by_id()
        sessions = {s.id: s for s in history.sessions}
        for question in (q for q in history.questions if q.category == "temporal"):
            turn = turns[question.evidence[0]]
            said = sessions[turn.id.rsplit(".", 1)[0]].date
            answer = datetime.strptime(question.answer, "%d %B %Y").replace(tzinfo=UTC)
            assert names_date(f"It was {answer:%B} {answer.day}, {answer.year}.", answer.date())
            back = (said.date() - answer.date()).days
            if "married on" in turn.text:
                assert -70 <= back <= -20 and f"{answer:%A} {answer.day} {answer:%B}" in turn.text
            elif "this morning" in turn.text:
                assert back == 0
            elif (days := {"yesterday": 1, "two days ago": 2, "three days ago": 3}) and any(k in turn.text for k in days):
                assert back == next(v for k, v in days.items() if k in turn.text)
            else:
                weekday = next(d for d in ("Friday", "Saturday", "Sunday") if f"last {d}" in turn.text)
                assert 1 <= back <= 7 and f"{answer:%A}" == weekday
            checked += 1
    assert checked == SIZES["full"].users * SIZES["full"].per_category


def test_a_size_too_small_or_too_large_is_refused():
    with pytest.raises(ValueError, match="at least 1 user, 3 sessions"):
        Size("tiny", users=1, sessions=2)
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        generate(size="huge")
    with pytest.raises(ValueError, match="more distinct facts"):
        generate(size=Size("wide", users=1, sessions=10, per_category=7))
