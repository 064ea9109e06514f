"""The recall dataset: reproducible from its seed, and each question answerable only from
where its fact was planted."""

from __future__ import annotations

import pytest

from agents.evaluation.dataset import KINDS, NOTE_TOOL, SIZES, Size, generate
from agents.evaluation.scoring import words


def texts(session, *, tools: bool):
    for turn in session.turns:
        yield turn.user
        yield turn.assistant
        if tools and turn.tool is not None:
            yield turn.tool.result


def mentions(text: str, value: str) -> bool:
    want, have = words(value), words(text)
    return any(have[i : i + len(want)] == want for i in range(len(have) - len(want) + 1))


def test_the_same_seed_gives_the_same_dataset_and_another_seed_another():
    assert generate(size="small").fingerprint() == generate(size="small").fingerprint()
    assert generate(size="small", seed=18).fingerprint() != generate(size="small").fingerprint()
    assert generate(size="medium").fingerprint() != generate(size="small").fingerprint()


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_question_kind_is_asked_and_every_fact_sits_where_it_says(size):
    dataset = generate(size=size)
    spec = SIZES[size]
    assert len(dataset.users) == spec.users
    for user in dataset.users:
        assert [len(s.turns) for s in user.sessions] == [spec.turns] * spec.sessions
        assert sorted(q.kind for q in user.questions) == sorted(KINDS * spec.per_kind)
        assert len({q.text for q in user.questions}) == len(user.questions)  # one question per attribute
        for question in user.questions:
            for session in user.sessions:
                said = " ".join(texts(session, tools=False))
                noted = " ".join(t.tool.result for t in session.turns if t.tool is not None)
                if question.kind == "not_told":
                    attribute = question.text.removeprefix("What is my ").removesuffix("?")
                    assert attribute not in said and attribute not in noted
                    continue
                where = noted if question.kind == "tool_result" else said
                told = question.told_in[-1:] if question.kind == "updated_fact" else question.told_in
                assert mentions(where, question.expected) == (session.index in told), question
                if question.kind == "tool_result":
                    assert not mentions(said, question.expected)  # never typed, only in the note
            if question.kind == "updated_fact":
                first, later = question.told_in
                assert first == 0 and later > 0 and question.stale != question.expected
                for session in user.sessions:
                    assert mentions(" ".join(texts(session, tools=True)), question.stale) == (session.index == 0)
            if question.kind in ("single_fact",):
                assert question.told_in == (spec.sessions - 1,)
            if question.kind == "multi_session":
                assert question.told_in[0] < spec.sessions - 1


def test_facts_are_planted_in_the_first_half_so_filler_buries_them():
    for user in generate(size="medium").users:
        for session in user.sessions:
            for position, turn in enumerate(session.turns):
                if turn.tool is not None or "my " in turn.user.lower():
                    assert position < len(session.turns) // 2, (session.index, position, turn.user)
                if turn.tool is not None:
                    assert turn.tool.name == NOTE_TOOL


def test_a_size_too_small_to_hold_the_questions_is_refused():
    with pytest.raises(ValueError, match="at least 1 user, 2 sessions"):
        Size("tiny", users=1, sessions=1, turns=10)
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        generate(size="huge")
    with pytest.raises(ValueError, match="more distinct facts"):
        generate(size=Size("wide", users=1, sessions=2, turns=40, per_kind=5))
