"""Twenty writer processes at once on one database: nothing lost, no "database is locked".

Each writer, in rounds: appends to one shared session, bumps a shared counter with
compare-and-set, and runs a whole chat turn (the offline model; the agent's tiny threshold makes
cleanups happen too) in a conversation of its own. On SQLite this is what WAL, the busy timeout
and IMMEDIATE transactions (modex_web/env.py) are for: writers queue for the write lock instead
of failing, and no error reaches a user.
"""

from __future__ import annotations

import pytest

from memory.scopes import SessionScope
from memory.transcript import validate_transcript
from tests.scaleout.worker import ROUND_FILLER

WRITERS = 20
ROUNDS = 6


@pytest.mark.slow
def test_twenty_concurrent_writers_lose_nothing_and_never_see_a_locked_database(shared, tmp_path):
    go = tmp_path / "go"
    shared_session = SessionScope("everyone")
    writers = [
        shared.spawn("writer", {"shared": shared_session.id, "own": f"writer-{i}", "name": f"w{i}", "rounds": ROUNDS,
                                "go": str(go)})
        for i in range(WRITERS)
    ]
    shared.start_together(writers, go, timeout=180)
    outcomes = [w.result(timeout=300) for w in writers]
    assert [o["errors"] for o in outcomes] == [[]] * WRITERS
    for worker in writers:
        assert "database is locked" not in worker.stderr() and "Traceback" not in worker.stderr(), worker.stderr()[-2000:]

    bundle = shared.bundle
    messages = bundle.messages.read(shared_session)
    assert [m.seq for m in messages] == list(range(1, WRITERS * ROUNDS + 1))
    for i in range(WRITERS):  # each writer's own order is kept
        assert [m.content for m in messages if m.content.startswith(f"w{i} ")] == [f"w{i} m{r}" for r in range(ROUNDS)]
    assert bundle.kv.get(shared_session, "counter").value == str(WRITERS * ROUNDS)
    cleaned = [i for i in range(WRITERS) if shared.catalog.count(SessionScope(f"writer-{i}"))]
    assert len(cleaned) == WRITERS, "every conversation should have crossed its threshold and been cleaned up"
    for i in range(WRITERS):
        own = SessionScope(f"writer-{i}")
        live = bundle.messages.read(own)
        validate_transcript(live)
        asked = [e.message.content for e in shared.catalog.entries(own) if e.message.role == "user"]
        asked += [m.content for m in live if m.role == "user" and not m.is_compact_summary]
        assert asked == [f"w{i} says: this is round {r} of our long conversation. {ROUND_FILLER}" for r in range(ROUNDS)]
