"""Reading the public benchmarks' files: LoCoMo and LongMemEval. Nothing is downloaded: the
user passes the path (``--dataset locomo:PATH``, ``--dataset longmemeval:PATH``).

**LoCoMo** (snap-research/locomo, ``data/locomo10.json``): a list of samples, each with
``sample_id``, ``conversation`` (``speaker_a``, ``speaker_b``, ``session_N`` lists of turns with
``speaker``, ``dia_id``, ``text`` and, for a shared photo, ``blip_caption``, and
``session_N_date_time`` such as "1:56 pm on 8 May, 2023") and ``qa`` items (``question``,
``answer``, ``evidence`` dia_ids, ``category`` 1-5, ``adversarial_answer`` for category 5). One
history per sample: speaker A is the user, speaker B the assistant; a photo is appended to its
turn's text as "[shares a photo: caption]". Questions are asked a day after the last session.
Evidence entries are read as ``D<session>:<turn>`` ids (several in one entry are split; "D3:05"
is D3:5); an id that names no turn is left out, and the report says how many were.

**LongMemEval** (xiaowu0162/LongMemEval): a list of questions, each with its own history:
``question_id``, ``question_type``, ``question``, ``answer``, ``question_date``,
``haystack_session_ids``, ``haystack_dates`` ("2023/05/20 (Sat) 02:21"), ``haystack_sessions``
(lists of ``role``/``content`` turns, evidence marked ``has_answer``), ``answer_session_ids``. A
question id ending in ``_abs`` is an abstention question (category ``abstention``; its
``answer`` explains why it cannot be answered). Sessions are put in date order (the oracle split
is not sorted); turn ids are ``<session id>:<index from 0>``; a session id given twice gets
``#2`` on its second use.

A file that is not what it should be raises ``DatasetError`` naming the file, the item and the
field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agents.evaluation.data import Dataset, DatasetError, History, Question, Session, Turn, safe_id
from agents.evaluation.scoring import LOCOMO_CATEGORIES

LOCOMO_ORDER = ("single-hop", "multi-hop", "temporal", "open-domain", "adversarial")
LONGMEMEVAL_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
)
ABSTENTION = "abstention"


def _read(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path.name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path.name}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None


class _Item:
    """A JSON object of the file, with field access that says where a bad field is."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise DatasetError(f"{where}: must be an object, got {type(value).__name__}")
        self.value, self.where = value, where

    def get(self, key: str, kind: type | tuple[type, ...], *, required: bool = True, default: Any = None) -> Any:
        if key not in self.value or self.value[key] is None:
            if required:
                raise DatasetError(f"{self.where}: '{key}' is missing")
            return default
        value = self.value[key]
        if not isinstance(value, kind) or isinstance(value, bool) and bool not in _kinds(kind):
            names = " or ".join(k.__name__ for k in _kinds(kind))
            raise DatasetError(f"{self.where}: '{key}' must be {names}, got {type(value).__name__}")
        return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _date(text: str, where: str, parse: Callable[[str], datetime | None], example: str) -> datetime:
    value = parse(text.strip())
    if value is None:
        raise DatasetError(f"{where}: {text!r} is not a date like {example!r}")
    return value


# -- LoCoMo --------------------------------------------------------------------------------------

_LOCOMO_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]\.?m\.?)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.I)
_EVIDENCE = re.compile(r"D\s*(\d+)\s*:\s*(\d+)")


def parse_locomo_date(text: str) -> datetime | None:
    """"1:56 pm on 8 May, 2023" -> 2023-05-08 13:56 UTC."""
    m = _LOCOMO_DATE.fullmatch(text)
    if m is None:
        return None
    hour, minute, half, day, month, year = m.groups()
    try:
        moment = datetime.strptime(f"{day} {month[:3]} {year}", "%d %b %Y")
    except ValueError:
        return None
    hour_24 = int(hour) % 12 + (12 if half.lower().startswith("p") else 0)
    if int(hour) > 12 or int(minute) > 59:
        return None
    return moment.replace(hour=hour_24, minute=int(minute), tzinfo=UTC)


def load_locomo(path: Path) -> Dataset:
    data = _read(path)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise DatasetError(f"{path.name}: must be a list of LoCoMo samples (objects with 'conversation' and 'qa')")
    notes: list[str] = []
    histories = [_locomo_sample(item, index, path.name, notes) for index, item in enumerate(data)]
    ids = [h.id for h in histories]
    if len(set(ids)) != len(ids):
        raise DatasetError(f"{path.name}: two samples have the same 'sample_id'")
    return Dataset(
        kind="locomo",
        label=f"LoCoMo format: {path.name}",
        source=str(path),
        categories=LOCOMO_ORDER,
        headline=LOCOMO_ORDER[:4],
        histories=tuple(histories),
        notes=tuple(notes),
    )


def _locomo_sample(raw: Any, index: int, name: str, notes: list[str]) -> History:
    sample = _Item(raw, f"{name}: sample {index}")
    sample_id = str(sample.get("sample_id", (str, int), required=False, default=f"sample-{index}"))
    where = f"{name}: sample {index} ({sample_id})"
    sample.where = where
    conversation = _Item(sample.get("conversation", dict), f"{where}: conversation")
    speaker_a = conversation.get("speaker_a", str)
    speaker_b = conversation.get("speaker_b", str)
    numbers = sorted(
        int(m.group(1)) for key in conversation.value if (m := re.fullmatch(r"session_(\d+)", key))
    )
    sessions: list[Session] = []
    for number in numbers:
        key = f"session_{number}"
        turns_raw = conversation.get(key, list)
        if not turns_raw:
            continue
        stamp = conversation.get(f"{key}_date_time", str)
        date = _date(stamp, f"{where}: conversation.{key}_date_time", parse_locomo_date, "1:56 pm on 8 May, 2023")
        turns = []
        for position, turn_raw in enumerate(turns_raw):
            turn = _Item(turn_raw, f"{where}: conversation.{key}[{position}]")
            speaker = turn.get("speaker", str)
            if speaker not in (speaker_a, speaker_b):
                raise DatasetError(f"{turn.where}: 'speaker' is {speaker!r}, neither speaker_a nor speaker_b")
            text = turn.get("text", str, required=False, default="")
            caption = turn.get("blip_caption", str, required=False)
            if caption:
                text = f"{text} [shares a photo: {caption}]".strip()
            if not text.strip():
                raise DatasetError(f"{turn.where}: 'text' is empty and there is no 'blip_caption'")
            role = "user" if speaker == speaker_a else "assistant"
            turns.append(Turn(id=turn.get("dia_id", str), role=role, speaker=speaker, text=text))
        sessions.append(Session(id=key, date=date, turns=tuple(turns)))
    if not sessions:
        raise DatasetError(f"{where}: conversation has no session_N with turns")
    if any(later.date < earlier.date for earlier, later in zip(sessions, sessions[1:])):
        notes.append(f"{sample_id}: session dates are not in order; sessions are kept in their numbered order")
    known = {t.id for s in sessions for t in s.turns}
    if len(known) != sum(len(s.turns) for s in sessions):
        raise DatasetError(f"{where}: two turns have the same 'dia_id'")
    history_id = safe_id(sample_id)
    asked = max(s.date for s in sessions) + timedelta(days=1)
    questions = []
    dropped = 0
    for position, qa_raw in enumerate(sample.get("qa", list)):
        qa = _Item(qa_raw, f"{where}: qa[{position}]")
        category = qa.get("category", int)
        if category not in LOCOMO_CATEGORIES:
            raise DatasetError(f"{qa.where}: 'category' must be 1-5, got {category}")
        answer = None
        note = None
        if category == 5:
            adversarial = qa.get("adversarial_answer", (str, int, float), required=False)
            note = "The conversation does not mention this" + (f" (a wrong answer would be: {adversarial})." if adversarial else ".")
        else:
            answer = str(qa.get("answer", (str, int, float)))
        evidence, lost = _evidence(qa.get("evidence", list, required=False, default=[]), known, qa.where)
        dropped += lost
        questions.append(
            Question(
                id=f"{history_id}.q{position + 1:03d}",
                history=history_id,
                category=LOCOMO_CATEGORIES[category],
                text=qa.get("question", str),
                answer=answer,
                evidence=evidence,
                date=asked,
                note=note,
            )
        )
    if dropped:
        notes.append(f"{sample_id}: {dropped} evidence id(s) name no turn of the conversation and were left out")
    return History(
        id=history_id, user_name=speaker_a, assistant_name=speaker_b, sessions=tuple(sessions), questions=tuple(questions)
    )


def _evidence(entries: list[Any], known: set[str], where: str) -> tuple[tuple[str, ...], int]:
    found: list[str] = []
    lost = 0
    for entry in entries:
        if not isinstance(entry, str):
            raise DatasetError(f"{where}: 'evidence' must list dia_id strings, got {type(entry).__name__}")
        ids = [f"D{int(a)}:{int(b)}" for a, b in _EVIDENCE.findall(entry)] or [entry.strip()]
        for turn_id in ids:
            if turn_id in known:
                if turn_id not in found:
                    found.append(turn_id)
            else:
                lost += 1
    return tuple(found), lost


# -- LongMemEval --------------------------------------------------------------------------------

_LME_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([A-Za-z]{3}\))?(?:\s+(\d{1,2}):(\d{2}))?")


def parse_longmemeval_date(text: str) -> datetime | None:
    """"2023/05/20 (Sat) 02:21" (or "2023/05/20") -> 2023-05-20 02:21 UTC."""
    m = _LME_DATE.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute = m.groups()
    try:
        return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), tzinfo=UTC)
    except ValueError:
        return None


def load_longmemeval(path: Path) -> Dataset:
    data = _read(path)
    if not isinstance(data, list) or not data:
        raise DatasetError(f"{path.name}: must be a list of LongMemEval questions")
    histories = [_longmemeval_item(item, index, path.name) for index, item in enumerate(data)]
    if len({h.id for h in histories}) != len(histories):
        raise DatasetError(f"{path.name}: two questions have the same 'question_id'")
    return Dataset(
        kind="longmemeval",
        label=f"LongMemEval format: {path.name}",
        source=str(path),
        categories=(*LONGMEMEVAL_TYPES, ABSTENTION),
        headline=(*LONGMEMEVAL_TYPES, ABSTENTION),
        histories=tuple(histories),
    )


def _longmemeval_item(raw: Any, index: int, name: str) -> History:
    item = _Item(raw, f"{name}: item {index}")
    qid = item.get("question_id", str)
    where = f"{name}: item {index} ({qid})"
    item.where = where
    qtype = item.get("question_type", str)
    if qtype not in LONGMEMEVAL_TYPES:
        raise DatasetError(f"{where}: 'question_type' {qtype!r} is not one of {', '.join(LONGMEMEVAL_TYPES)}")
    ids = item.get("haystack_session_ids", list)
    dates = item.get("haystack_dates", list)
    sessions_raw = item.get("haystack_sessions", list)
    if not (len(ids) == len(dates) == len(sessions_raw)):
        raise DatasetError(
            f"{where}: 'haystack_session_ids', 'haystack_dates' and 'haystack_sessions' must have the same "
            f"length (got {len(ids)}, {len(dates)} and {len(sessions_raw)})"
        )
    abstention = qid.endswith("_abs")
    seen: dict[str, int] = {}
    sessions: list[Session] = []
    evidence: list[str] = []
    for position, (session_id, stamp, turns_raw) in enumerate(zip(ids, dates, sessions_raw, strict=True)):
        field = f"{where}: haystack_sessions[{position}]"
        if not isinstance(session_id, str) or not isinstance(stamp, str):
            raise DatasetError(f"{where}: haystack_session_ids[{position}] and haystack_dates[{position}] must be strings")
        if not isinstance(turns_raw, list):
            raise DatasetError(f"{field}: must be a list of turns")
        seen[session_id] = seen.get(session_id, 0) + 1
        unique = session_id if seen[session_id] == 1 else f"{session_id}#{seen[session_id]}"
        date = _date(stamp, f"{where}: haystack_dates[{position}]", parse_longmemeval_date, "2023/05/20 (Sat) 02:21")
        turns = []
        for t, turn_raw in enumerate(turns_raw):
            turn = _Item(turn_raw, f"{field}[{t}]")
            role = turn.get("role", str)
            if role not in ("user", "assistant"):
                raise DatasetError(f"{turn.where}: 'role' must be user or assistant, got {role!r}")
            text = turn.get("content", str)
            turn_id = f"{unique}:{t}"
            turns.append(Turn(id=turn_id, role=role, speaker=role, text=text))
            if turn.get("has_answer", bool, required=False, default=False) and not abstention:
                evidence.append(turn_id)
        sessions.append(Session(id=unique, date=date, turns=tuple(t for t in turns if t.text.strip())))
    sessions.sort(key=lambda s: s.date)  # stable: sessions of the same moment keep their order
    asked = _date(item.get("question_date", str), f"{where}: question_date", parse_longmemeval_date, "2023/05/20 (Sat) 02:21")
    history_id = safe_id(qid)
    answer = item.get("answer", (str, int, float))
    question = Question(
        id=history_id,
        history=history_id,
        category=ABSTENTION if abstention else qtype,
        text=item.get("question", str),
        answer=None if abstention else str(answer),
        evidence=tuple(e for e in evidence if any(t.id == e and t.text.strip() for s in sessions for t in s.turns)),
        date=asked,
        note=str(answer) if abstention else None,
    )
    return History(id=history_id, user_name="user", assistant_name=None, sessions=tuple(sessions), questions=(question,))
