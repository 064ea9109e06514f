"""Leases across processes: one holder at a time, and a dead holder blocks only until its ttl."""

from __future__ import annotations

import time

TTL = 8.0  # longer than a worker takes to boot, so the next one surely meets the dead lease


def test_one_holder_among_racing_processes_and_a_takeover_after_a_kill(shared, tmp_path):
    go = tmp_path / "go"
    args = {"scope": "session:contested", "name": "turn", "ttl": TTL}
    racers = [shared.spawn("lease", {**args, "hold": 120, "go": str(go)}) for _ in range(4)]
    shared.start_together(racers, go)
    outcomes: dict[int, dict] = {}
    deadline = time.monotonic() + 30
    while len(outcomes) < len(racers) and time.monotonic() < deadline:
        for worker in racers:
            found = worker.markers("at", "acquired") + worker.markers("done", "busy")
            if found and worker.pid not in outcomes:
                outcomes[worker.pid] = found[0]
        time.sleep(0.05)
    winners = [w for w in racers if outcomes.get(w.pid, {}).get("at") == "acquired"]
    assert len(outcomes) == len(racers) and len(winners) == 1, outcomes
    [winner] = winners

    successor_go = tmp_path / "successor-go"  # booted before the kill, started right after it
    successor = shared.spawn("lease", {**args, "retry_busy_for": TTL + 30, "go": str(successor_go)})
    successor.wait_for("at", "ready", timeout=90)
    winner.kill()  # while holding: it never releases
    successor_go.touch()
    taken = successor.wait_for("at", "acquired", timeout=TTL + 40)
    assert taken["attempts"] > 1, "the successor should have met the dead holder's lease first"
    blocked_for = taken["time"] - outcomes[winner.pid]["time"]
    assert TTL - 0.5 <= blocked_for <= TTL + 5, f"taken over {blocked_for:.1f} s after the dead holder took it"
    assert successor.result()["done"] == "released"
