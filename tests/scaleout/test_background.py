"""Background work picked up by two workers at once: the Dream Engine and experience review.

Two processes run the same task (the tasks' own code: consolidate_core_memory,
review_experience) at the same moment. Their model is the offline one, gated: the first call
reports ``in_model`` and waits until the test opens the gate, so the two runs are certain to
overlap. One must do the work, the other must find it taken (BUSY) and write nothing; the work
must be written once; a later run must find it done.
"""

from __future__ import annotations

import time

import pytest

from agents.experience.store import ExperienceStore
from agents.runtime.tools.history_tools import archive_scope_for
from memory.config import MemoryConfig
from memory.core_memory import CORE_FILES, CoreMemory
from memory.dream import DREAM_CONSUMER
from memory.messages import Message
from memory.stores.base import ArchiveDocument

FACTS = [
    "My name is Sam and I live in Lisbon.",
    "I prefer green tea in the morning.",
    "We decided to use SQLite for the store.",
]


def start_two(shared, job, args, tmp_path):
    go, gate = tmp_path / "go", tmp_path / "gate"
    workers = [shared.spawn(job, {**args, "go": str(go), "gate": str(gate)}) for _ in range(2)]
    shared.start_together(workers, go)
    return workers, gate


def one_busy_one_working(workers, gate) -> tuple[dict, dict]:
    """Wait until one worker reports BUSY and the other waits in its model; then open the gate."""
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline:
        for worker in workers:
            if worker.pid in seen:
                continue
            if worker.markers("at", "in_model"):
                seen[worker.pid] = "in_model"
            elif worker.markers("done"):
                seen[worker.pid] = worker.markers("done")[0]["done"]
        time.sleep(0.05)
    assert sorted(seen.values()) == ["busy", "in_model"], seen
    gate.touch()
    [busy] = [w for w in workers if seen[w.pid] == "busy"]
    [working] = [w for w in workers if seen[w.pid] == "in_model"]
    return busy.result(), working.result()


@pytest.mark.slow
def test_two_workers_consolidating_the_same_archive_write_it_once(shared, tmp_path):
    scope = archive_scope_for(agent="default", user_id="7")
    bundle = shared.bundle
    docs = [bundle.archive.put(scope, ArchiveDocument(session="session:lt", title=f"part {i}", summary=text,
                                                      messages=(Message(role="user", content=text),)))
            for i, text in enumerate(FACTS)]
    workers, gate = start_two(shared, "consolidate", {"agent": "default", "user": "7"}, tmp_path)
    busy, working = one_busy_one_working(workers, gate)
    assert busy["done"] == "busy"
    assert working["done"] == "consolidated" and working["result"]["documents"] == len(docs), working
    assert working["result"]["edits"], "the offline model should have found facts to keep"
    assert bundle.cursors.get(scope, DREAM_CONSUMER) == docs[-1].seq

    core = CoreMemory(kv=bundle.kv, config=MemoryConfig(archive_enabled=True, core_enabled=True), agent="default", user="7")
    writes = {file: [c for c in core.history(file=file) if c.source == "dream"] for file in CORE_FILES}
    assert any(writes.values()) and all(len(w) <= 1 for w in writes.values()), writes
    assert "Sam" in core.read(file="USER.md").text

    again = shared.spawn("consolidate", {"agent": "default", "user": "7"}).result()
    assert again["done"] == "up_to_date"
    assert {file: [c for c in core.history(file=file) if c.source == "dream"] for file in CORE_FILES} == writes


@pytest.mark.slow
def test_two_workers_reviewing_the_same_run_record_one_lesson(shared, tmp_path):
    session = "experienced"
    turn = shared.spawn("turn", {"session": session, "text": "Look up pruned message 99", "user": "7"}).result()
    assert turn["done"] == "finished"  # the offline model's pruned_lookup failed: a lesson to learn
    args = {"agent": "default", "user": "7", "session": f"session:{session}", "final_id": turn["id"],
            "final_seq": turn["seq"]}
    workers, gate = start_two(shared, "review", args, tmp_path)
    busy, working = one_busy_one_working(workers, gate)
    assert busy["done"] == "busy" and working["done"] == "reviewed", (busy, working)
    assert working["result"]["created"] == ["calling-pruned-lookup"]

    [lesson] = ExperienceStore(kv=shared.bundle.kv, agent="default", user="7").list()
    assert lesson.version == 1
    again = shared.spawn("review", args).result()
    assert again["done"] == "already_reviewed"
    [same] = ExperienceStore(kv=shared.bundle.kv, agent="default", user="7").list()
    assert same.version == 1
