"""Workers killed mid-turn and mid-cleanup (SIGKILL, real processes sharing one database).

After the kill the conversation must stay legal and lose nothing (every message the dead
worker had stored is in the session or the pruned catalog), and another worker must serve the
next turn or finish the cleanup once the dead worker's lease has run out, not before and not
much later. Lease ttls are shortened through the settings the deployment uses
(MODEX_TURN_LEASE_TTL) or the cleanup's own argument.
"""

from __future__ import annotations

import time

import pytest

from memory.messages import Message
from memory.scopes import SessionScope
from memory.transcript import INTERRUPTED_RESULT, validate_transcript

TURN_TTL = 6.0


def stored_by(worker) -> list[dict]:
    return worker.markers("at", "stored")


def test_a_worker_killed_inside_a_tool_call_leaves_a_repairable_turn(shared, tmp_path):
    session = SessionScope("killed-mid-turn")
    env = {"MODEX_TURN_LEASE_TTL": str(TURN_TTL)}
    doomed = shared.spawn("turn", {"session": session.id, "text": "please ask your helper", "model": "hang_in_tool"}, **env)
    doomed.wait_for("at", "in_tool", timeout=90)  # the subagent's model call never returns
    before = stored_by(doomed)
    assert [m["role"] for m in before] == ["user", "assistant"], before
    # The successor boots before the kill and starts right after it (a loaded machine may take
    # longer than the ttl to start a process).
    go = tmp_path / "go"
    successor = shared.spawn("turn", {"session": session.id, "text": "are you there?", "retry_busy_for": 60,
                                      "go": str(go)}, **env)
    successor.wait_for("at", "ready", timeout=90)
    doomed.kill()
    killed_at = time.monotonic()
    go.touch()
    outcome = successor.result(timeout=120)
    waited = time.monotonic() - killed_at
    assert outcome["done"] == "finished", outcome
    assert outcome["attempts"] > 1, "the dead worker's turn lease should have made the next turn wait"
    assert waited <= TURN_TTL + 30, f"the next turn waited {waited:.0f} s"

    messages = shared.bundle.messages.read(session)
    validate_transcript(messages)
    ids = [m.id for m in messages]
    assert all(m["id"] in ids for m in before), "a message stored before the kill is gone"
    [call] = [m for m in messages if m.tool_calls][0].tool_calls
    [result] = [m for m in messages if m.role == "tool" and m.tool_call_id == call.id]
    assert result.content == INTERRUPTED_RESULT
    roles = [m.role for m in messages]
    assert roles[:3] == ["user", "assistant", "tool"] and roles[3] == "user" and messages[3].content == "are you there?"
    assert messages[-1].id == outcome["id"]


def test_a_turn_longer_than_the_lease_ttl_keeps_its_lease(shared, tmp_path):
    """The runtime renews the turn lease while the turn runs: a second worker waits it out."""
    session = SessionScope("long-turn")
    ttl = 2.0
    env = {"MODEX_TURN_LEASE_TTL": str(ttl)}
    # The second worker boots first and waits for "go", so that it tries while the long turn
    # streams however slowly a loaded machine starts processes.
    go = tmp_path / "go"
    other = shared.spawn("turn", {"session": session.id, "text": "me too", "retry_busy_for": 90, "go": str(go)}, **env)
    other.wait_for("at", "ready", timeout=90)
    long = shared.spawn("turn", {"session": session.id, "text": "tell me a long story", "model": "slow",
                                 "pieces": 16, "delay": 0.5}, **env)  # about 8 s: four ttls
    long.wait_for("at", "streaming", timeout=90)
    go.touch()
    first, second = long.result(timeout=120), other.result(timeout=150)
    assert first["done"] == "finished" and second["done"] == "finished", (first, second)
    assert second["attempts"] > 1
    messages = shared.bundle.messages.read(session)
    validate_transcript(messages)
    texts = [(m.role, m.content) for m in messages]
    assert texts[0] == ("user", "tell me a long story") and texts[1][0] == "assistant"
    assert texts[1][1].startswith("piece 0 ") and "piece 15" in texts[1][1]
    assert texts[2] == ("user", "me too"), "the second turn started inside the first one"


def filler(n: int) -> list[Message]:
    pairs = []
    for i in range(n):
        pairs.append(Message(role="user", content=f"question {i}: what should we pack for a week of coastal walking in May?"))
        pairs.append(Message(role="assistant", content=f"answer {i}: layers, a rain jacket, sturdy shoes and a map."))
    return pairs


@pytest.mark.parametrize("hang", ["summarize", "commit"])
def test_a_worker_killed_mid_cleanup_loses_nothing(shared, hang, tmp_path):
    session = SessionScope(f"killed-mid-cleanup-{hang}")
    bundle = shared.bundle
    written = bundle.messages.append(session, filler(20))  # about 1000 tokens; the threshold is 700
    ttl = 5.0
    go = tmp_path / "go"  # the successor boots first, then starts right after the kill
    successor = shared.spawn("cleanup", {"session": session.id, "lease_ttl": ttl, "retry_busy_for": 60, "go": str(go)})
    successor.wait_for("at", "ready", timeout=90)
    doomed = shared.spawn("cleanup", {"session": session.id, "hang": hang, "lease_ttl": ttl})
    doomed.wait_for("at", "summarizing" if hang == "summarize" else "committing", timeout=90)
    doomed.kill()
    # A turn goes on meanwhile: a message appended while the dead cleanup's lease still holds.
    late = bundle.messages.append(session, [Message(role="user", content="one more thing: the ferry times")])[0]
    go.touch()

    outcome = successor.result(timeout=120)
    assert outcome["done"] == "committed", outcome
    assert outcome["attempts"] > 1, "the dead cleanup's lease should have made the next one wait"
    assert outcome["resumed"] is (hang == "commit"), "a saved intent is finished, not planned anew"

    live = bundle.messages.read(session)
    validate_transcript(live)
    assert live[0].is_compact_summary and late.id in {m.id for m in live}
    catalogued = shared.catalog.entries(session)
    seqs = [e.seq for e in catalogued]
    assert seqs == sorted(set(seqs)), "a message was catalogued twice"
    where = {e.seq: e.message.content for e in catalogued} | {m.seq: m.content for m in live if not m.is_compact_summary}
    for message in [*written, late]:
        assert where.get(message.seq) == message.content, f"seq {message.seq} is neither in the session nor the catalog"
    assert set(seqs).isdisjoint(m.seq for m in live if not m.is_compact_summary)
    assert bundle.kv.get(session, "cleanup.pending") is None and bundle.kv.get(session, "lease.cleanup") is None
