"""Reading LoCoMo and LongMemEval files: the samples of tests/agents/evaluation/fixtures (written
for these tests in each format), and files that are not what they should be."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.evaluation.data import DatasetError
from agents.evaluation.datasets import load_dataset
from agents.evaluation.loaders import load_locomo, load_longmemeval, parse_locomo_date, parse_longmemeval_date

FIXTURES = Path(__file__).parent / "fixtures"
LOCOMO = FIXTURES / "locomo_sample.json"
LONGMEMEVAL = FIXTURES / "longmemeval_sample.json"


def raw(path):
    return json.loads(path.read_text())


def write(tmp_path, data, name="data.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# -- LoCoMo ----------------------------------------------------------------------------------------


def test_the_locomo_sample_reads_as_two_users_with_dated_sessions():
    dataset = load_locomo(LOCOMO)
    assert dataset.kind == "locomo" and dataset.notes == ()
    assert dataset.categories == ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
    assert dataset.headline == dataset.categories[:4]
    nadia, omar = dataset.histories
    assert (nadia.user_name, nadia.assistant_name) == ("Nadia", "Felix")
    assert len(nadia.sessions) == 9 and all(10 <= len(s.turns) <= 25 for h in dataset.histories for s in h.sessions)
    first = nadia.sessions[0]
    assert first.id == "session_1" and first.date == datetime(2023, 3, 7, 13, 14, tzinfo=UTC)
    assert [s.date for s in nadia.sessions] == sorted(s.date for s in nadia.sessions)
    turn = first.turns[0]
    assert (turn.id, turn.role, turn.speaker) == ("D1:1", "user", "Nadia")
    assert first.turns[1].role == "assistant" and first.turns[1].speaker == "Felix"
    photo = next(t for t in first.turns if "[shares a photo" in t.text)
    assert photo.text == "Will do. Here's the hull frame so far. [shares a photo: a wooden boat frame on sawhorses in a workshop]"
    counts = {c: sum(q.category == c for q in dataset.questions) for c in dataset.categories}
    assert counts == {"single-hop": 16, "multi-hop": 8, "temporal": 11, "open-domain": 6, "adversarial": 8}
    for history in dataset.histories:
        turns = history.turns_by_id()
        for question in history.questions:
            assert question.evidence and all(e in turns for e in question.evidence)
            assert question.date == history.sessions[-1].date + timedelta(days=1)
            assert (question.answer is None) == (question.category == "adversarial")
    engaged = next(q for q in nadia.questions if q.text == "When did Lena get engaged?")
    assert engaged.answer == "19 March 2023" and turns_text(nadia, engaged) == [
        "Finally over, I'm back on days. And guess what, my sister Lena got engaged on Sunday!"
    ]
    adversarial = next(q for q in nadia.questions if q.category == "adversarial")
    assert "a wrong answer would be: Pepper" in adversarial.note


def turns_text(history, question):
    turns = history.turns_by_id()
    return [turns[e].text for e in question.evidence]


def test_locomo_dates_read_as_the_dataset_writes_them():
    assert parse_locomo_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_locomo_date("12:09 am on 13 August, 2023") == datetime(2023, 8, 13, 0, 9, tzinfo=UTC)
    assert parse_locomo_date("10:37 am on 27 June, 2023") == datetime(2023, 6, 27, 10, 37, tzinfo=UTC)
    assert parse_locomo_date("8 May 2023") is None and parse_locomo_date("13:56 pm on 8 May, 2023") is None


def test_evidence_ids_are_read_leniently_and_unknown_ones_are_left_out_with_a_note(tmp_path):
    data = raw(LOCOMO)[:1]
    qa = data[0]["qa"]
    qa[0]["evidence"] = ["D1:07"]  # D1:7 written with a leading zero
    qa[1]["evidence"] = ["D4:6; D5:3"]  # two ids in one entry
    qa[2]["evidence"] = ["D99:1", "D2:4"]  # a session that does not exist
    dataset = load_locomo(write(tmp_path, data))
    first, second, third = dataset.histories[0].questions[:3]
    assert first.evidence == ("D1:7",) and second.evidence == ("D4:6", "D5:3") and third.evidence == ("D2:4",)
    assert dataset.notes == ("conv-nf: 1 evidence id(s) name no turn of the conversation and were left out",)


def break_locomo(change):
    data = raw(LOCOMO)
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d[0].pop("conversation"), r"sample 0 \(conv-nf\): 'conversation' is missing"),
        (lambda d: d[0]["conversation"].pop("speaker_b"), r"conversation: 'speaker_b' is missing"),
        (lambda d: d[0]["conversation"]["session_2"][3].pop("dia_id"), r"conversation.session_2\[3\]: 'dia_id' is missing"),
        (lambda d: d[0]["conversation"]["session_1"][0].update(speaker="Mallory"),
         r"session_1\[0\]: 'speaker' is 'Mallory', neither speaker_a nor speaker_b"),
        (lambda d: d[1]["conversation"].update(session_3_date_time="yesterday"),
         r"sample 1 \(conv-og\): conversation.session_3_date_time: 'yesterday' is not a date like '1:56 pm on 8 May, 2023'"),
        (lambda d: d[1]["conversation"].pop("session_4_date_time"), r"'session_4_date_time' is missing"),
        (lambda d: d[0]["qa"][5].update(category=7), r"qa\[5\]: 'category' must be 1-5, got 7"),
        (lambda d: d[0]["qa"][5].pop("answer"), r"qa\[5\]: 'answer' is missing"),
        (lambda d: d[0]["qa"][5].update(question=["a list"]), r"qa\[5\]: 'question' must be str, got list"),
        (lambda d: d[0]["qa"][5].update(category=True), r"qa\[5\]: 'category' must be int, got bool"),
        (lambda d: d[0]["conversation"]["session_1"][1].update(dia_id="D1:1"), r"two turns have the same 'dia_id'"),
        (lambda d: d[0].update(conversation={"speaker_a": "A", "speaker_b": "B"}), r"has no session_N with turns"),
    ],
)
def test_a_malformed_locomo_file_names_the_field(tmp_path, change, message):
    with pytest.raises(DatasetError, match=message):
        load_locomo(write(tmp_path, break_locomo(change)))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{\"not\": json", r"data.json: not valid JSON: .* line 1, column 9"),
        ("[]", r"must be a list of LoCoMo samples"),
        ("[1]", r"sample 0: must be an object, got int"),
    ],
)
def test_a_file_that_is_not_locomo_at_all(tmp_path, content, message):
    with pytest.raises(DatasetError, match=message):
        load_locomo(write(tmp_path, content))


# -- LongMemEval -----------------------------------------------------------------------------------


def test_the_longmemeval_sample_reads_as_one_history_per_question():
    dataset = load_longmemeval(LONGMEMEVAL)
    assert dataset.kind == "longmemeval" and len(dataset.histories) == 7
    categories = {q.category for q in dataset.questions}
    assert categories == {
        "single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
        "knowledge-update", "temporal-reasoning", "abstention",
    }
    by_id = {h.id: h for h in dataset.histories}
    puppy = by_id["e47becba"]
    [question] = puppy.questions
    assert question.answer == "a Bernese mountain dog" and question.date == datetime(2023, 5, 30, 10, 12, tzinfo=UTC)
    assert question.evidence == ("answer_7f1e2a01:0",)
    assert puppy.turns_by_id()["answer_7f1e2a01:0"].text.startswith("I just brought home my Bernese")
    assistant = by_id["0a99d3c5"].questions[0]
    assert by_id["0a99d3c5"].turns_by_id()[assistant.evidence[0]].role == "assistant"
    books = by_id["9c3ef1b2"].questions[0]
    assert len(books.evidence) == 3 and len({e.split(":")[0] for e in books.evidence}) == 3
    sofa = by_id["tr_sofa_9e"]  # given newest first, as LongMemEval's oracle split does: read in date order
    assert [s.id for s in sofa.sessions] == ["answer_sofa", "answer_sister"]
    abstention = by_id["e47becba_abs"].questions[0]
    assert abstention.category == "abstention" and abstention.answer is None and abstention.evidence == ()
    assert abstention.note == "The user mentioned a Bernese mountain dog puppy but never a cat."


def test_longmemeval_dates_read_with_or_without_the_time():
    assert parse_longmemeval_date("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21, tzinfo=UTC)
    assert parse_longmemeval_date("2023/5/2") == datetime(2023, 5, 2, tzinfo=UTC)
    assert parse_longmemeval_date("20 May 2023") is None and parse_longmemeval_date("2023/13/01") is None


def test_a_session_given_twice_in_one_history_gets_its_own_ids(tmp_path):
    item = copy.deepcopy(raw(LONGMEMEVAL)[0])
    for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
        item[key].append(item[key][0])
    item["haystack_dates"][-1] = "2023/05/28 (Sun) 10:00"
    history = load_longmemeval(write(tmp_path, [item])).histories[0]
    assert [s.id for s in history.sessions] == ["sharegpt_f1", "answer_7f1e2a01", "ultrachat_f2", "sharegpt_f1#2"]
    assert len(history.turns_by_id()) == history.turn_count


def break_longmemeval(change):
    data = raw(LONGMEMEVAL)
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d[0].pop("question"), r"item 0 \(e47becba\): 'question' is missing"),
        (lambda d: d[1].update(question_type="trivia"), r"item 1 \(0a99d3c5\): 'question_type' 'trivia' is not one of"),
        (lambda d: d[0]["haystack_dates"].pop(), r"must have the same length \(got 3, 2 and 3\)"),
        (lambda d: d[0].update(question_date="soon"), r"question_date: 'soon' is not a date like '2023/05/20 \(Sat\) 02:21'"),
        (lambda d: d[0]["haystack_sessions"][1][0].update(role="system"), r"haystack_sessions\[1\]\[0\]: 'role' must be user or assistant"),
        (lambda d: d[0]["haystack_sessions"][1][0].pop("content"), r"haystack_sessions\[1\]\[0\]: 'content' is missing"),
        (lambda d: d[0]["haystack_sessions"][1][0].update(has_answer="yes"), r"'has_answer' must be bool, got str"),
        (lambda d: d[1].update(question_id="e47becba"), r"two questions have the same 'question_id'"),
    ],
)
def test_a_malformed_longmemeval_file_names_the_field(tmp_path, change, message):
    with pytest.raises(DatasetError, match=message):
        load_longmemeval(write(tmp_path, break_longmemeval(change)))


def test_the_dataset_option_names_a_kind_and_a_path(tmp_path):
    assert load_dataset(f"locomo:{LOCOMO}").kind == "locomo"
    assert load_dataset("generated", size="small").kind == "generated"
    assert len(load_dataset(f"longmemeval:{LONGMEMEVAL}").limited(2).histories) == 2
    with pytest.raises(DatasetError, match="no such file"):
        load_dataset(f"locomo:{tmp_path / 'missing.json'}")
    with pytest.raises(ValueError, match="needs the path"):
        load_dataset("locomo")
    with pytest.raises(ValueError, match="unknown dataset 'squad:x'"):
        load_dataset("squad:x")
