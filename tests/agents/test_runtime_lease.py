"""The turn lease of agents/runtime/loop.py: renewed while a turn runs, released at its end, and a turn
whose lease was taken over stops at its next event. (Across real processes:
tests/scaleout/test_faults.py.)"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from agents.declarations import load_declaration
from agents.runtime.events import TurnFailed, TurnFinished
from agents.llm import ContentDelta, Finish
from agents.runtime.loop import Runtime
from agents.runtime.outcomes import KIND_TURN_STOPPED
from agents.runtime.services import build_services
from memory.scopes import SessionScope
from memory.transcript import validate_transcript

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ["file", pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True))]
LEASE_KEY = "lease.turn"


class SlowModel:
    """Streams ``pieces`` chunks ``delay`` seconds apart."""

    name = "slow"

    def __init__(self, pieces: int, delay: float) -> None:
        self.pieces, self.delay = pieces, delay

    def describe(self) -> str:
        return "a slow scripted model"

    async def stream(self, *, messages, tools=None, **options):
        for i in range(self.pieces):
            yield ContentDelta(f"piece {i} ")
            await asyncio.sleep(self.delay)
        yield Finish("stop")


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def lease_expiry(kv, session) -> datetime | None:
    item = kv.get(session, LEASE_KEY)
    return datetime.fromisoformat(json.loads(item.value)["expires_at"]) if item else None


async def test_a_turn_longer_than_its_ttl_renews_its_lease_and_releases_it(tmp_path, backend):
    services = build_services(backend=backend, workspace=tmp_path, model=SlowModel(pieces=12, delay=0.1))
    runtime = Runtime(services=services, lease_ttl=0.3)
    agent = load_declaration(REPO / "config" / "scopes" / "bot.yml").find("default")
    session = SessionScope("long")
    expiries = set()
    async for event in runtime.run_turn(agent=agent, user_id="7", session=session, text="a long story please"):
        expiries.add(await sync_to_async(lease_expiry)(services.bundle.kv, session))
        assert not isinstance(event, TurnFailed), event
    assert len(expiries - {None}) >= 3, "the lease should have been renewed several times over 1.2 s"
    assert await sync_to_async(services.bundle.kv.get)(session, LEASE_KEY) is None, "released at the end"


async def test_a_turn_whose_lease_was_taken_over_stops_at_its_next_event(tmp_path, backend):
    services = build_services(backend=backend, workspace=tmp_path, model=SlowModel(pieces=30, delay=0.1))
    runtime = Runtime(services=services, lease_ttl=0.6)
    agent = load_declaration(REPO / "config" / "scopes" / "bot.yml").find("default")
    session = SessionScope("stolen")
    kv = services.bundle.kv
    events = []
    async for event in runtime.run_turn(agent=agent, user_id="7", session=session, text="a long story please"):
        events.append(event)
        if len(events) == 4:  # another worker takes the conversation over (as after a stall)
            other = json.dumps({"holder": "elsewhere", "acquired_at": "2000-01-01T00:00:00+00:00",
                                "expires_at": "2999-01-01T00:00:00+00:00"})
            await sync_to_async(kv.put)(session, LEASE_KEY, other)
    assert isinstance(events[-1], TurnFailed) and events[-1].kind == "LeaseLost"
    assert not any(isinstance(e, TurnFinished) for e in events)
    assert len(events) < 30, "the turn should have stopped within about one renewal interval"
    validate_transcript(await sync_to_async(services.bundle.messages.read)(session))
    held = await sync_to_async(kv.get)(session, LEASE_KEY)
    assert json.loads(held.value)["holder"] == "elsewhere", "the new holder's lease must be left alone"


async def test_a_turn_cancelled_while_its_first_write_runs_answers_and_gives_its_lease_back(tmp_path, backend, monkeypatch):
    """The lease and the user's message are written in one trip to a store thread (Runtime._begin).
    A cancel that lands during it cannot stop the thread: the trip finishes, then the stored
    message gets its marked answer and the lease is released, instead of blocking the
    conversation until the lease's ttl."""
    services = build_services(backend=backend, workspace=tmp_path, model=SlowModel(pieces=1, delay=0))
    runtime = Runtime(services=services, lease_ttl=300)
    agent = load_declaration(REPO / "config" / "scopes" / "bot.yml").find("default")
    session = SessionScope("cut-short")
    messages = services.bundle.messages
    append, writing = messages.append, threading.Event()

    def slow_append(*args, **kwargs):
        writing.set()
        time.sleep(0.3)
        return append(*args, **kwargs)

    monkeypatch.setattr(messages, "append", slow_append)
    events = runtime.run_turn(agent=agent, user_id="7", session=session, text="hello")
    first = asyncio.ensure_future(events.__anext__())
    await asyncio.get_running_loop().run_in_executor(None, writing.wait, 5)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    for _ in range(100):  # the trip ends about 0.3 s after it started, then the lease goes
        if await sync_to_async(services.bundle.kv.get)(session, LEASE_KEY) is None:
            break
        await asyncio.sleep(0.02)
    assert await sync_to_async(services.bundle.kv.get)(session, LEASE_KEY) is None, "the lease was left behind"
    stored = await sync_to_async(messages.read)(session)
    assert [(m.role, m.kind) for m in stored] == [("user", "message"), ("assistant", KIND_TURN_STOPPED)]
    monkeypatch.setattr(messages, "append", append)
    kinds = [type(e).__name__ async for e in runtime.run_turn(agent=agent, user_id="7", session=session, text="again")]
    assert kinds[-1] == "TurnFinished", kinds
    validate_transcript(await sync_to_async(messages.read)(session))


async def test_a_turn_closed_at_its_first_event_answers_the_stored_message(tmp_path, backend):
    """The user's message is stored before the turn's first event (TurnStarted). A stop that
    closes the turn there (the consumer closes it at its next event) still leaves the message
    answered, as a stopped turn, and the lease released."""
    services = build_services(backend=backend, workspace=tmp_path, model=SlowModel(pieces=1, delay=0))
    runtime = Runtime(services=services, lease_ttl=300)
    agent = load_declaration(REPO / "config" / "scopes" / "bot.yml").find("default")
    session = SessionScope("stopped-early")
    for closed_after in (1, 2):  # at TurnStarted, then at the user's MessageStored
        events = runtime.run_turn(agent=agent, user_id="7", session=session, text=f"hello {closed_after}")
        kinds = [type(await events.__anext__()).__name__ for _ in range(closed_after)]
        assert kinds == ["TurnStarted", "MessageStored"][:closed_after]
        await events.aclose()
        assert await sync_to_async(services.bundle.kv.get)(session, LEASE_KEY) is None
    stored = await sync_to_async(services.bundle.messages.read)(session)
    assert [(m.role, m.kind) for m in stored] == [("user", "message"), ("assistant", KIND_TURN_STOPPED)] * 2
    validate_transcript(stored)
