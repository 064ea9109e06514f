"""A worker stalled past its turn lease cannot write after another took over (fencing, issue 16).

Worker A starts a turn and, halfway through the model's reply, is stopped with SIGSTOP (a
stalled process: a long GC pause, a frozen VM). Its lease runs out; worker B takes the
conversation over and finishes a turn. A is continued with SIGCONT and goes on to store its
reply under the lease it held: the store refuses it (FencedOut), A's turn ends with LeaseLost,
and B's transcript is legal and complete, with nothing lost or duplicated. On the SQL backend
(SQLite, PostgreSQL when configured) and on the file backend, in real processes.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from memory.scopes import SessionScope
from memory.stores.registry import open_bundle
from memory.transcript import validate_transcript

TURN_TTL = 3.0


@pytest.mark.parametrize("store", ["sql", "file"])
def test_a_stalled_worker_is_fenced_out_after_a_takeover(shared, tmp_path, store):
    if store == "file" and shared.backend == "postgres":
        pytest.skip("the file store keeps nothing in the database: its case runs once, with SQLite")
    backend = "file" if store == "file" else "sqlite"
    bundle = open_bundle("file", root=shared.workspace / "memory") if store == "file" else shared.bundle
    session = SessionScope(f"fenced-{store}")
    env = {"MODEX_TURN_LEASE_TTL": str(TURN_TTL)}
    gate = tmp_path / "gate"

    a = shared.spawn("turn", {"session": session.id, "text": "question from A", "model": "gated", "gate": str(gate),
                              "backend": backend}, **env)
    a.wait_for("at", "in_model", timeout=90)  # A holds the lease and is halfway through its reply
    a.process.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        [a_user] = a.markers("at", "stored")
        b = shared.spawn("turn", {"session": session.id, "text": "question from B", "retry_busy_for": 60,
                                  "backend": backend}, **env)
        b_outcome = b.result(timeout=120)
        assert b_outcome["done"] == "finished", b_outcome
        assert time.monotonic() - stopped_at >= TURN_TTL  # B could only start once A's lease expired
        gate.touch()  # A's reply ends as soon as it runs again
    finally:
        a.process.send_signal(signal.SIGCONT)
    a_outcome = a.result(timeout=60)

    assert a_outcome["done"] == "failed" and a_outcome["kind"] == "LeaseLost", a_outcome
    assert "taken over by another worker" in a_outcome["error"]
    assert "an append to session:" + session.id + " refused: the lease.turn lease" in a.stderr()
    assert "nothing was written" in a.stderr()

    stored = bundle.messages.read(session)
    validate_transcript(stored)
    b_stored = [m["id"] for m in b.markers("at", "stored")]
    assert [m.id for m in stored] == [a_user["id"], *b_stored]  # A's question once, then all of B's turn
    assert [m.role for m in stored][:3] == ["user", "user", "assistant"] and stored[-1].id == b_outcome["id"]
    assert not any("half-written" in (m.content or "") for m in stored)  # A's refused reply is nowhere
    assert len({m.id for m in stored}) == len(stored) and [m.seq for m in stored] == list(range(1, len(stored) + 1))
    # A's release neither removed nor overwrote the lease it had lost (the test's B worker exits
    # without closing its turn generator, so its own lease is still there, to expire).
    left = bundle.kv.get(session, "lease.turn")
    assert left is None or (f":{b.pid}:" in left.value and '"generation": 2' in left.value), left
