"""The recall benchmark's dataset values, whatever the source (generated, LoCoMo, LongMemEval).

A ``Dataset`` holds ``History`` objects: one user's dated ``Session``s of ``Turn``s, and the
``Question``s asked about them afterwards. Every turn keeps the dataset's own id (LoCoMo's
``dia_id`` such as ``D1:3``, LongMemEval's session id and turn index, the generator's
``u0.s03.t05``); a question names its evidence by those ids.

Ingested into Modex, a turn becomes one ``memory.messages.Message`` whose id is
``message_id(turn.id)``: the turn id itself when it already satisfies the id rule
``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``, else the turn id with every other run of characters
replaced by ``-`` and a short hash of the original appended (``D1:3`` -> ``D1-3-<10 hex>``), so
distinct turn ids never share a message id. Scope ids are made the same way (``safe_id``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class DatasetError(ValueError):
    """A dataset file that cannot be read: the message names the file, the item and the field."""


def safe_id(raw: str) -> str:
    """``raw`` if it is a valid Modex id, else a readable, deterministic and collision-free one."""
    if _ID.fullmatch(raw) and raw not in (".", ".."):
        return raw
    cleaned = _UNSAFE.sub("-", raw).strip("-._")[:100] or "id"
    digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:10]
    return f"{cleaned}-{digest}"


def message_id(turn_id: str) -> str:
    """The id of the Modex message a dataset turn is ingested as."""
    return safe_id(turn_id)


@dataclass(frozen=True)
class Turn:
    """One thing said: ``role`` is ``user`` or ``assistant`` (Modex's side), ``speaker`` the
    dataset's name for who said it, ``text`` the message content as ingested."""

    id: str
    role: str
    speaker: str
    text: str

    @property
    def message_id(self) -> str:
        return message_id(self.id)


@dataclass(frozen=True)
class Session:
    """One conversation, dated (timezone-aware); its turns in the order they were said."""

    id: str
    date: datetime
    turns: tuple[Turn, ...]

    def stamp(self, index: int) -> datetime:
        """When the ``index``-th message of this session was said: the session's date, plus a
        second per message so that the order is kept."""
        return self.date + timedelta(seconds=index)


@dataclass(frozen=True)
class Question:
    """One question about a history.

    ``answer`` is the reference answer, None when the right answer is that it was never said
    (LoCoMo's category 5, LongMemEval's ``_abs`` questions, the generator's abstentions; the
    explanation, if the dataset gives one, is in ``note``). ``evidence`` names the turns that
    hold the answer. ``date`` is when it is asked. ``stale`` is a value the answer replaced
    (an answer naming it as current is wrong); ``accepted`` are other spellings of ``answer``.
    """

    id: str
    history: str
    category: str
    text: str
    answer: str | None
    evidence: tuple[str, ...]
    date: datetime
    stale: str | None = None
    accepted: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class History:
    """One user's sessions and the questions about them. ``id`` is the Modex user id."""

    id: str
    user_name: str
    assistant_name: str | None
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turn_count(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    def turns_by_id(self) -> dict[str, Turn]:
        return {t.id: t for s in self.sessions for t in s.turns}


@dataclass(frozen=True)
class Dataset:
    """What a run asks: ``kind`` is ``generated``, ``locomo`` or ``longmemeval`` (it decides the
    scoring); ``categories`` the question categories in table order; ``headline`` those in the
    headline figure ("all"); ``notes`` what the loader changed or left out, said in the report."""

    kind: str
    label: str
    source: str
    categories: tuple[str, ...]
    headline: tuple[str, ...]
    histories: tuple[History, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def questions(self) -> list[Question]:
        return [q for h in self.histories for q in h.questions]

    def fingerprint(self) -> str:
        """A short hash of everything asked and said: results resume only against the same data."""
        data = json.dumps([asdict(h) for h in self.histories], sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(data.encode()).hexdigest()[:12]

    def describe(self) -> dict[str, Any]:
        sessions = [len(h.sessions) for h in self.histories]
        return {
            "kind": self.kind,
            "label": self.label,
            "source": self.source,
            "fingerprint": self.fingerprint(),
            "histories": len(self.histories),
            "sessions": sum(sessions),
            "turns": sum(h.turn_count for h in self.histories),
            "questions": len(self.questions),
            "categories": list(self.categories),
            "headline": list(self.headline),
            "notes": list(self.notes),
        }

    def limited(self, histories: int | None) -> Dataset:
        """The first ``histories`` histories only (all when None)."""
        if histories is None or histories >= len(self.histories):
            return self
        kept = self.histories[:histories]
        note = f"the first {histories} of {len(self.histories)} histories"
        return Dataset(self.kind, self.label, self.source, self.categories, self.headline, kept, (*self.notes, note))
