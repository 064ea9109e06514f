"""A Dream Engine run that stalls past its lease, while another run takes over and finishes,
changes nothing when it wakes up: its edits are discarded (logged with its run id), the newer
facts stay. Parametrized over where it stalls; every backend (committed data: the runs use the
store threads).

The stalled run's model answers with a fact the other run never learns ("Decided: use MySQL"),
so a stale write that slipped through would show in MEMORY.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async

from memory import core_proposals as proposals
from memory.config import MemoryConfig
from memory.core_memory import MEMORY, USER, CoreMemory
from memory.dream import (
    DREAM_CONSUMER,
    LAST_RUN_KEY,
    ConsolidationStatus,
    DreamEngine,
    DreamOptions,
    default_archive_scope,
)
from memory.messages import Message
from memory.stores.base import ArchiveDocument

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

ON = MemoryConfig(archive_enabled=True, core_enabled=True)
SCOPE = default_archive_scope(agent="default", user="42")
BERLIN = datetime(2024, 1, 5, 10, 0, tzinfo=UTC)
PORTO = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)
STALLS = ["model_call", "repair_call", "before_commit"]


def put(bundle, text: str, when: datetime, session: str) -> ArchiveDocument:
    message = Message(role="user", content=text, created_at=when, seq=1)
    return bundle.archive.put(SCOPE, ArchiveDocument(session=session, summary="", messages=(message,)))


def ids(prompt) -> list[str]:
    return re.findall(r'<archive_document id="([^"]+)"', prompt[1]["content"])


def edits_for(prompt) -> str:
    """The honest consolidation of what the prompt shows (what the second run answers)."""
    found = []
    for document, text in zip(ids(prompt), re.findall(r'<message role="user"[^>]*>([^<]*)</message>',
                                                      prompt[1]["content"]), strict=True):
        place = re.search(r"(?:live in|moved to) (\w+)", text)
        if place:
            found.append({"file": "USER.md", "action": "add", "text": f"Lives in {place.group(1)}",
                          "source": document, "seq": 1})
    return json.dumps({"edits": found})


class Stalled:
    """The first run's model: it answers with a fact only it would write; at ``stall`` it waits
    for ``release`` (an asyncio Event)."""

    def __init__(self, stall: str) -> None:
        self.stall = stall
        self.release = asyncio.Event()
        self.stalled = asyncio.Event()
        self.calls = 0

    async def __call__(self, prompt):
        self.calls += 1
        if self.stall == "repair_call" and self.calls == 1:
            return "Sure, here are my thoughts about the user."  # not JSON: a repair follows
        if self.stall in ("model_call", "repair_call"):
            self.stalled.set()
            await self.release.wait()
        [document] = ids(prompt)
        return json.dumps({"edits": [
            {"file": "MEMORY.md", "action": "add", "text": "Decided: use MySQL", "source": document, "seq": 1},
            {"file": "USER.md", "action": "add", "text": "Lives in Berlin", "source": document, "seq": 1},
            {"file": "SOUL.md", "action": "add", "text": "Name: Stale", "source": document, "about": "identity"},
        ]})


class StallsBeforeCommit(DreamEngine):
    """Stops (on its store thread) after the model answered and the lease was renewed, before
    its commit lands: the stall the fence, not the renewal, has to catch."""

    def __init__(self, *, gate: threading.Event, reached: threading.Event, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gate, self.reached = gate, reached

    def _commit(self, **kwargs):
        self.reached.set()
        assert self.gate.wait(timeout=30)
        return super()._commit(**kwargs)


def core(bundle) -> CoreMemory:
    return CoreMemory(kv=bundle.kv, config=ON, agent="default", user="42")


@pytest.mark.parametrize("stall", STALLS)
async def test_a_run_that_stalls_past_its_lease_changes_nothing_after_another_took_over(
    threaded_bundle, stall, caplog
):
    bundle = threaded_bundle
    io = sync_to_async
    await io(put)(bundle, "I live in Berlin.", BERLIN, "session:c1")
    model = Stalled(stall)
    gate, reached = threading.Event(), threading.Event()
    options = DreamOptions(lease_ttl=0.4)
    if stall == "before_commit":
        first = StallsBeforeCommit(bundle=bundle, model=model, options=options, gate=gate, reached=reached)
    else:
        first = DreamEngine(bundle=bundle, model=model, options=options)
    caplog.set_level(logging.WARNING, logger="memory.dream")

    stale = asyncio.create_task(first.aconsolidate(agent="default", user="42", config=ON))
    if stall == "before_commit":
        await asyncio.to_thread(reached.wait, 30)
    else:
        await asyncio.wait_for(model.stalled.wait(), 30)

    # Meanwhile the user said something newer, it was archived, and the stalled run's lease ran out.
    newer = await io(put)(bundle, "I moved to Porto.", PORTO, "session:c2")
    await asyncio.sleep(0.6)

    async def honest(prompt):
        return edits_for(prompt)

    second = DreamEngine(bundle=bundle, model=honest, options=DreamOptions(lease_ttl=60))
    done = await second.aconsolidate(agent="default", user="42", config=ON)
    assert done.status is ConsolidationStatus.CONSOLIDATED and done.cursor == newer.seq
    files = await io(lambda: {f: core(bundle).read(file=f) for f in (USER, MEMORY)})()
    assert files[USER].text == "Lives in Porto\n"

    # The stalled run wakes up and carries on.
    model.release.set()
    gate.set()
    result = await asyncio.wait_for(stale, 30)

    assert result.status is ConsolidationStatus.SUPERSEDED and result.edits == 0
    assert "taken over" in result.error
    after = await io(lambda: {f: core(bundle).read(file=f) for f in (USER, MEMORY)})()
    assert after == files  # not one byte: no "Decided: use MySQL", Porto kept
    assert await io(bundle.cursors.get)(SCOPE, DREAM_CONSUMER) == newer.seq  # not moved back
    assert await io(proposals.list_proposals)(kv=bundle.kv, agent="default") == []
    history = await io(core(bundle).history)(file=USER)
    assert [c.source for c in history] == ["dream"] and "Porto" in history[-1].text
    record = json.loads(await io(bundle.kv.get_value)(SCOPE, LAST_RUN_KEY))
    assert record["run_id"] == done.run_id  # the record is the run that finished
    assert any(result.run_id in r.getMessage() and "discarded" in r.getMessage() for r in caplog.records)
