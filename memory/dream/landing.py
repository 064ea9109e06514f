"""Landing one chunk of a consolidation: its edits, proposals and reading point, in one commit.

``land`` applies the chunk's validated edits to USER.md and MEMORY.md on their current text (the
line ledger keeps an older statement from replacing a newer line or a person's removal), turns
SOUL.md edits into proposals for staff (SOUL.md is every user's), and moves the ``dream`` cursor
and the reading point (``dream.position``) past the chunk, never backwards. All of it is one
``KVStore.commit`` fenced by the run's lease: all of it lands or none. A file changed meanwhile
(the agent's own edit) is re-read and the edits re-applied; a lease taken over raises
``LeaseTakenOver`` and nothing is written.

Each line written gets its provenance in the file's line ledger: the conversation, the archive
document and the message it rests on (the edit's ``seq``, when the model named a message shown),
and when that was said. A SOUL.md proposal carries the same, for the line it becomes once
accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memory import core_proposals as proposals
from memory.core_lines import LineSource, normalize_line
from memory.core_memory import MEMORY, SOUL, USER, CoreMemory, CoreMemoryFull, Origin
from memory.dream.edits import ADD, REMOVE, UPDATE, CoreEdit, RejectedEdit, apply_edits
from memory.dream.reading import POSITION_KEY, Chunk, Position, stored_point
from memory.dream.values import ConsolidationFailed, ConsolidationMode, FailureKind
from memory.locks import Lease
from memory.scopes import Scope
from memory.stores.base import ConcurrentChange, CursorMove, FencedOut, KVWrite, MemoryStoreBundle

DREAM_CONSUMER = "dream"


class LeaseTakenOver(Exception):
    """The run's lease passed to another run: the chunk was not landed."""


@dataclass
class Run:
    """One consolidation's state while it runs (what it read, what it landed)."""

    id: str
    lease: Lease
    scope: Scope
    mode: ConsolidationMode
    cursor: int | None
    position: Position | None
    position_version: int
    documents: int = 0
    applied: list[CoreEdit] = field(default_factory=list)
    rejected: list[RejectedEdit] = field(default_factory=list)
    proposed: list[str] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=dict)
    repairs: int = 0
    pending: int = 0  # edits in hand, not landed yet (what a superseded run discards)

    @property
    def point(self) -> Position:
        return stored_point(self.cursor, self.position)


@dataclass(frozen=True, slots=True)
class Landed:
    applied: list[CoreEdit]
    skipped: list[RejectedEdit]
    proposed: list[str]


def land(
    *,
    bundle: MemoryStoreBundle,
    memory: CoreMemory,
    run: Run,
    chunk: Chunk,
    edits: Sequence[CoreEdit],
    clock: Callable[[], datetime],
    attempts: int,
) -> Landed:
    """Land ``chunk`` (see the module docstring); updates ``run``'s cursor, reading point and
    file versions. Raises LeaseTakenOver, or ConsolidationFailed when the files kept changing."""
    sessions = {piece.document.id: piece.document.session for piece in chunk.pieces}
    for _ in range(attempts):
        writes: list[KVWrite] = []
        staged = []
        applied: list[CoreEdit] = []
        skipped: list[RejectedEdit] = []
        for file in (USER, MEMORY):
            mine = [edit for edit in edits if edit.file == file]
            if not mine:
                continue
            state = memory.read(file=file)
            text, done, refused = apply_edits(state.text, mine, cap=state.cap, ledger=memory.ledger(file=file),
                                              written_at=state.updated_at)
            now = clock()
            sources = {normalize_line(e.text): LineSource("dream", now, e.said_at, sessions.get(e.source, ""),
                                                          e.source, e.seq) for e in done if e.text}
            try:
                change = memory.stage(state=state, text=text, source="dream", detail=_detail(done),
                                      line_sources=sources) if done else None
            except CoreMemoryFull as exc:
                skipped += [RejectedEdit(edit.to_json(), str(exc)) for edit in mine]
                continue
            if change is None and done:
                refused += [RejectedEdit(e.to_json(), "cancelled out by a later edit") for e in done]
                done = []
            if change is not None:
                staged.append(change)
                writes += change.writes
            applied += done
            skipped += refused
        proposed, refused = _proposals(bundle, memory, chunk, [e for e in edits if e.file == SOUL], clock)
        writes += [write for _, write in proposed]
        skipped += refused
        move, position_write = _advance(run, chunk)
        if position_write is not None:
            writes.append(position_write)
        try:
            items = bundle.kv.commit(writes, cursor=move, fence=run.lease.fence)
        except FencedOut as exc:
            raise LeaseTakenOver(str(exc)) from None
        except ConcurrentChange:
            cursor = bundle.cursors.get(run.scope, DREAM_CONSUMER)
            item = bundle.kv.get(run.scope, POSITION_KEY)
            if cursor != run.cursor or (item.version if item else 0) != run.position_version:
                raise LeaseTakenOver("the dream cursor moved under this run") from None
            continue  # a file changed meanwhile (the agent's own edit): re-read, re-apply
        by_key = {(i.scope.key(), i.key): i for i in items if i is not None}
        for change in staged:
            memory.published(change, [by_key.get((change.scope.key(), change.file))])
            run.files[change.file] = by_key[(change.scope.key(), change.file)].version
        if move is not None:
            run.cursor = move.position
        if position_write is not None:
            written = by_key.get((run.scope.key(), POSITION_KEY))
            run.position = chunk.end if chunk.end.inside else None
            run.position_version = written.version if written is not None else 0
        return Landed(applied, skipped, [proposal.describe() for proposal, _ in proposed])
    raise ConsolidationFailed(
        f"the memory files kept changing during consolidation ({attempts} attempts)", kind=FailureKind.CONFLICT
    )


def _advance(run: Run, chunk: Chunk) -> tuple[CursorMove | None, KVWrite | None]:
    """The cursor move and reading-point write past ``chunk`` (never backwards: a full re-run
    moves them only once it reads past where they stand)."""
    if chunk.end <= run.point:
        return None, None
    move = None
    if chunk.done_through is not None and chunk.done_through > (run.cursor or 0):
        move = CursorMove(run.scope, DREAM_CONSUMER, chunk.done_through, expected=run.cursor)
    if chunk.end.inside:
        write = KVWrite(run.scope, POSITION_KEY, chunk.end.to_json(), expected_version=run.position_version)
    elif run.position_version:
        write = KVWrite(run.scope, POSITION_KEY, None, expected_version=run.position_version)
    else:
        write = None
    return move, write


def _proposals(
    bundle: MemoryStoreBundle, memory: CoreMemory, chunk: Chunk, edits: Sequence[CoreEdit],
    clock: Callable[[], datetime],
) -> tuple[list[tuple[proposals.Proposal, KVWrite]], list[RejectedEdit]]:
    """SOUL.md edits as proposals for staff (new ones only; SOUL.md is not written)."""
    if not edits:
        return [], []
    soul = memory.read(file=SOUL)
    ledger = memory.ledger(file=SOUL)
    out: list[tuple[proposals.Proposal, KVWrite]] = []
    refused: list[RejectedEdit] = []
    said = {(piece.document.id, s.message.seq): s.message.content or "" for piece in chunk.pieces
            for s in piece.said}
    documents = {piece.document.id: piece.document for piece in chunk.pieces}
    for edit in edits:
        _, done, skipped = apply_edits(soul.text, [edit], cap=soul.cap, ledger=ledger, written_at=soul.updated_at)
        if not done:
            refused += skipped
            continue
        action = {ADD: "append", UPDATE: "replace", REMOVE: "remove"}[edit.action]
        document = documents[edit.source]
        evidence = said.get((edit.source, edit.seq)) or next(
            (m.content or "" for m in reversed(document.messages) if m.role == "user" and m.content), "")
        origin = Origin(session=document.session, document=edit.source, said_at=edit.said_at, evidence=evidence,
                        seq=edit.seq)
        draft = proposals.draft(agent=memory.agent, user=memory.user, file=SOUL, action=action, text=edit.text,
                                old=edit.old, source="dream", origin=origin, base_version=soul.version, now=clock())
        try:
            proposal, write = proposals.staged_write(kv=bundle.kv, proposal=draft)
        except proposals.ProposalLimit as exc:
            refused.append(RejectedEdit(edit.to_json(), str(exc)))
            continue
        if write is None:
            refused.append(RejectedEdit(edit.to_json(), f"already proposed to staff ({proposal.status})"))
            continue
        out.append((proposal, write))
    return out, refused


def _detail(edits: Sequence[CoreEdit]) -> str:
    return "; ".join(edit.describe() for edit in edits)


__all__ = ["DREAM_CONSUMER", "Landed", "LeaseTakenOver", "Run", "land"]
