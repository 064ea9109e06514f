"""What the Dream Engine reads next: archive documents in chunks that fit its budget.

Every message of a document is read, in order, by both speakers (what the assistant says is half
of a conversation between two people), each with the time it was said; none is cut short. A
document larger than the budget is split across chunks, and one message larger than the budget
across chunks too, so the reading point can lie inside a document::

    Position(seq=7, message=12, offset=0)      # document 7, from its 13th message
    Position(seq=7, message=12, offset=3100)   # ... from character 3100 of that message

The dream cursor (``CursorStore``, consumer ``dream``) keeps the seq of the last document read
to its end, as it always has; a reading point inside the next document is kept beside it in the
KV (``dream.position`` in the archive scope). Both move in the commit that applies the chunk's
edits, so a crash or a failed model call resumes exactly where the last applied chunk ended.

Shown: user and assistant messages with text (not tool calls and results, not reasoning, not a
stored compact summary); a document's summary on its first piece. Dates come from the messages
themselves (``created_at``), so they are right for documents of any age.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memory.messages import KIND_COMPACT_SUMMARY, Message
from memory.stores.base import ArchiveDocument, ArchiveStore
from memory.scopes import Scope
from memory.tokens import count_text, encoding, truncate_text

POSITION_KEY = "dream.position"
#: The share of a chunk a document's summary may take (on the document's first piece).
SUMMARY_SHARE = 0.25
SUMMARY_MAX_TOKENS = 600
_END = 1 << 62  # a message index past any document's end


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A reading point: document ``seq``, message index ``message`` (into ``document.messages``),
    character ``offset`` into that message's text. Ordered as reading goes."""

    seq: int
    message: int = 0
    offset: int = 0

    @classmethod
    def after(cls, seq: int) -> Position:
        """The point just past the end of document ``seq``."""
        return cls(seq, _END, 0)

    @property
    def inside(self) -> bool:
        """Whether the point lies inside document ``seq`` (not past its end)."""
        return self.message < _END

    def to_json(self) -> str:
        return json.dumps({"seq": self.seq, "message": self.message, "offset": self.offset})

    @classmethod
    def from_json(cls, raw: str | None) -> Position | None:
        try:
            data = json.loads(raw or "")
            position = cls(int(data["seq"]), int(data["message"]), int(data["offset"]))
        except (ValueError, KeyError, TypeError):
            return None  # damaged: the document is read again from its start (edits are idempotent)
        return position if min(position.seq, position.message, position.offset) >= 0 else None


def stored_point(cursor: int | None, position: Position | None) -> Position:
    """The reading point the stored cursor and position describe."""
    done = cursor or 0
    if position is not None and position.seq > done and position.inside:
        return position
    return Position.after(done)


def shown(message: Message) -> bool:
    """Whether the Dream Engine reads ``message`` (see the module docstring)."""
    return message.role in ("user", "assistant") and message.kind != KIND_COMPACT_SUMMARY and bool(
        (message.content or "").strip())


@dataclass(frozen=True, slots=True)
class Said:
    """One message, or a part of one, as shown: ``text`` is ``content[start:end]``."""

    message: Message
    index: int
    start: int
    end: int

    @property
    def text(self) -> str:
        return (self.message.content or "")[self.start : self.end]

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == len(self.message.content or "")


@dataclass(frozen=True, slots=True)
class Piece:
    """A document, or the part of it a chunk shows: its summary (first piece only) and messages."""

    document: ArchiveDocument
    said: tuple[Said, ...]
    summary: str = ""
    part: int = 1
    last: bool = True  # the piece reaches the document's end

    @property
    def times(self) -> dict[int, datetime]:
        """Message seq -> when it was said, for the messages shown."""
        return {s.message.seq: s.message.created_at for s in self.said if s.message.seq is not None}

    @property
    def newest(self) -> datetime | None:
        times = [s.message.created_at for s in self.said]
        return max(times) if times else None


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one model call reads, and where reading stands after it."""

    pieces: tuple[Piece, ...]
    end: Position
    documents: int  # documents read to their end in this chunk
    tokens: int
    done_through: int | None = None  # the seq of the last document read to its end
    skipped: tuple[int, ...] = field(default=())  # documents with nothing to show

    @property
    def empty(self) -> bool:
        return not self.pieces and self.done_through is None


def _render_cost(text: str, attrs_cost: int = 24) -> int:
    return count_text(text) + attrs_cost


def _prefix_within(text: str, tokens: int) -> int:
    """The length of the longest prefix of ``text`` within ``tokens`` tokens, cut at a space
    when one is near (at least one character, so reading always moves on)."""
    if tokens <= 0:
        return 1
    ids = encoding().encode_ordinary(text)
    if len(ids) <= tokens:
        return len(text)
    prefix = encoding().decode(ids[:tokens])
    while prefix and not text.startswith(prefix):  # a cut inside a multi-byte character
        tokens -= 1
        prefix = encoding().decode(ids[:tokens])
    cut = len(prefix)
    space = text.rfind(" ", 0, cut)
    if space > cut * 0.8:
        cut = space + 1
    return max(1, cut)


def read_chunk(
    *, archive: ArchiveStore, scope: Scope, start: Position, budget: int, batch_documents: int
) -> Chunk:
    """The next chunk from ``start`` within ``budget`` tokens (at least some of one message).

    ``start`` is a point past document ``start.seq``'s end or inside it. Documents after it are
    listed ``batch_documents`` at a time; a document with nothing to show is passed over.
    """
    after = start.seq if not start.inside else start.seq - 1
    documents = archive.list(scope, after_seq=after, limit=batch_documents)
    pieces: list[Piece] = []
    used = 0
    done_through: int | None = None
    completed = 0
    skipped: list[int] = []
    end = start
    for document in documents:
        seq = document.seq or 0
        resume = start if start.inside and seq == start.seq else Position(seq)
        piece, used, point = _fill(document, resume, budget=budget, used=used, first=not pieces)
        if piece is not None:
            pieces.append(piece)
        end = point
        if point.inside:  # the budget ran out inside this document
            break
        done_through = seq
        completed += 1
        if piece is None:
            skipped.append(seq)
        if used >= budget:
            break
    return Chunk(tuple(pieces), end, completed, used, done_through, tuple(skipped))


def _fill(
    document: ArchiveDocument, resume: Position, *, budget: int, used: int, first: bool
) -> tuple[Piece | None, int, Position]:
    """As much of ``document`` from ``resume`` as fits; the piece, the tokens used, the point
    reached. ``first``: nothing else is in the chunk yet, so something must be taken."""
    seq = document.seq or 0
    said: list[Said] = []
    summary = ""
    spent = 0
    at_start = resume.message == 0 and resume.offset == 0
    if at_start and (document.summary or "").strip():
        share = min(SUMMARY_MAX_TOKENS, max(32, int(budget * SUMMARY_SHARE)))
        candidate = truncate_text(document.summary.strip(), share, marker=" […]")
        cost = _render_cost(candidate)
        if used + cost <= budget or first:
            summary, spent = candidate, cost
    messages = document.messages
    index, offset = resume.message, resume.offset
    while index < len(messages):
        message = messages[index]
        content = message.content or ""
        if not shown(message) or offset >= len(content):
            index, offset = index + 1, 0
            continue
        rest = content[offset:]
        cost = _render_cost(rest)
        room = budget - used - spent
        if cost <= room:
            said.append(Said(message, index, offset, len(content)))
            spent += cost
            index, offset = index + 1, 0
            continue
        empty = first and not said
        if not empty and (cost <= budget or room - _render_cost("") < 64):
            break  # whole in the next chunk (or too little room for a useful part)
        # Larger than what is left, and either alone in the chunk or larger than any chunk:
        # this message is read in parts, the reading point inside it.
        take = _prefix_within(rest, max(room - _render_cost(""), 64))
        said.append(Said(message, index, offset, offset + take))
        spent += _render_cost(rest[:take])
        offset += take
        if offset >= len(content):
            index, offset = index + 1, 0
        break
    point = Position(seq, index, offset) if index < len(messages) else Position.after(seq)
    if point.inside and not said:
        # Nothing of the messages fits after what the chunk holds: the document starts afresh
        # (with its summary) in the next chunk.
        return None, used, resume
    if not said and not summary:
        return None, used, point  # nothing to show in the whole document
    piece = Piece(document, tuple(said), summary, 1 if at_start else 2, last=not point.inside)
    return piece, used + spent, point


def message_times(pieces: Sequence[Piece]) -> dict[str, dict[int, datetime]]:
    """Per document id: message seq -> when it was said, for what ``pieces`` show."""
    out: dict[str, dict[int, datetime]] = {}
    for piece in pieces:
        out.setdefault(piece.document.id, {}).update(piece.times)
    return out


__all__ = [
    "POSITION_KEY",
    "Chunk",
    "Piece",
    "Position",
    "Said",
    "message_times",
    "read_chunk",
    "shown",
    "stored_point",
]
