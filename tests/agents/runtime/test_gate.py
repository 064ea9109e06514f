"""The model-call gate: chat first, background work deferred and preempted, timeouts from the
request, dead holders forgotten; over real stores (every backend), the real HTTP fake server,
and across processes."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agents.llm import ModelUnavailable, complete
from agents.llm.capabilities import Capabilities
from agents.llm.openai import OpenAIChatModel
from agents.runtime.gate import BACKGROUND, FOREGROUND, ModelGate, endpoint_id
from agents.runtime.gated import GaveWay
from agents.runtime.gated import calls as gated_calls
from memory.locks import acquire_lease
from memory.scopes import GlobalScope, SessionScope
from memory.stores.base import StorageUnavailable
from memory.stores.registry import open_bundle
from memory.threads import run_blocking
from tests.fakes.openai_server import FAKE_API_KEY, Pause, RawStream, Reply, chunk

USER = [{"role": "user", "content": "hi"}]
REPO = Path(__file__).resolve().parents[3]


def model_for(server, **options):
    options.setdefault("timeout", 5)
    return OpenAIChatModel(base_url=server.url, api_key=FAKE_API_KEY, model="fake-model", max_retries=0, **options)


def gate_for(bundle, **options):
    options.setdefault("poll", 0.02)
    options.setdefault("background_poll", 0.05)
    return ModelGate(kv=bundle.kv, **options)


async def mark(gate, model):
    return await run_blocking(gate.mark_turn, model)


async def hold_turn(gate, model, seconds):
    mark_ = await mark(gate, model)
    kept = gate.keep(mark_, name="test-turn")
    await asyncio.sleep(seconds)
    await kept.end()


# -- which endpoints are gated, and how many calls at once --------------------------------------


def test_the_limit_is_auto_for_local_servers_and_the_setting_wins(threaded_bundle, fake_openai):
    local = model_for(fake_openai)
    remote = OpenAIChatModel(base_url="https://api.example.com/v1", api_key="k", model="m")
    gate = gate_for(threaded_bundle)
    assert gate.limit(local) == 1 and gate.limit(remote) is None
    local._detected = Capabilities(server="llama.cpp", model="m", slots=4)
    assert gate.limit(local) == 1  # parallel slots on a local CPU share its cores: still one at a time
    assert gate_for(threaded_bundle, concurrency=2).limit(remote) == 2
    from agents.llm import OfflineChatModel

    offline = OfflineChatModel()
    assert endpoint_id(offline) is None and gated_calls(gate, offline) is offline


# -- chat calls --------------------------------------------------------------------------------


async def test_a_chat_call_waits_for_the_slot_and_its_timeout_starts_when_it_is_sent(threaded_bundle, fake_openai):
    fake_openai.script(Reply(content="first", delay=0.3, chunk_chars=2), Reply(content="second"))
    gate = gate_for(threaded_bundle)
    one = gated_calls(gate, model_for(fake_openai), priority=FOREGROUND)
    # Its timeout (0.5 s) is shorter than its wait at the gate behind the first call (about 1 s):
    # counted from the request, it never fires.
    two = gated_calls(gate, model_for(fake_openai, timeout=0.5), priority=FOREGROUND)
    first = asyncio.create_task(complete(one, messages=USER))
    while not fake_openai.chat_requests:  # the first call holds the slot
        await asyncio.sleep(0.01)
    second = await complete(two, messages=USER)
    assert (await first).content == "first" and second.content == "second"
    assert gate.stats.chat_calls == 2 and gate.stats.chat_max_wait > 0.5


# -- background calls --------------------------------------------------------------------------


async def test_background_work_waits_while_a_turn_runs(threaded_bundle, fake_openai):
    fake_openai.script(Reply(content="dreamt"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle)
    turn = asyncio.create_task(hold_turn(gate, model, 0.6))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    dream = asyncio.create_task(complete(gated_calls(gate, model, priority=BACKGROUND, label="dream"), messages=USER))
    await asyncio.sleep(0.3)
    state = await asyncio.to_thread(gate.state, model)
    assert state.turns == 1 and state.queued == ("dream",) and state.describe_queued() == "1 queued (dream)"
    assert fake_openai.chat_requests == []  # nothing sent while the turn runs
    assert (await dream).content == "dreamt"
    assert time.monotonic() - started >= 0.5
    await turn
    assert (await asyncio.to_thread(gate.state, model)).queued == ()


async def test_background_work_waits_a_little_longer_after_a_turn(threaded_bundle, fake_openai):
    fake_openai.script(Reply(content="dreamt"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle, after_turn=0.6)
    kept = gate.keep(await mark(gate, model), name="t")
    await gate.end_turn(kept)
    ended = time.monotonic()
    assert (await complete(gated_calls(gate, model, priority=BACKGROUND), messages=USER)).content == "dreamt"
    assert time.monotonic() - ended >= 0.5


async def test_a_turn_preempts_a_running_background_call_which_asks_again_without_repeating(threaded_bundle, fake_openai):
    # Five seconds of dribbling text: the server notices a closed connection at its next write.
    slow = RawStream([chunk({"content": "half "})] + [Pause(0.1), chunk({"content": "."})] * 50)
    fake_openai.script(slow, Reply(content="chat answer"), Reply(content="whole dream"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle)
    dream = asyncio.create_task(complete(gated_calls(gate, model, priority=BACKGROUND, label="dream"), messages=USER))
    while not fake_openai.chat_requests:
        await asyncio.sleep(0.02)
    held = await mark(gate, model)
    started = time.monotonic()
    answer = await complete(gated_calls(gate, model, priority=FOREGROUND), messages=USER)
    waited = time.monotonic() - started
    assert answer.content == "chat answer" and waited < 2  # not behind the 5 s background stream
    assert fake_openai.wait_for_disconnect(2)  # the background stream was closed: the server is free
    await gate.keep(held, name="t").end()
    assert (await dream).content == "whole dream"  # asked again from the start, delivered once
    assert gate.stats.preempted == 1 and len(fake_openai.chat_requests) == 3


async def test_urgent_work_takes_the_model_from_other_background_work_until_it_is_done(threaded_bundle, fake_openai):
    """The cleanup ahead of need (urgent) starts while a consolidation streams and a review
    waits: the consolidation gives its slot up, the cleanup's calls run next, one after the other
    with nothing slipping in between, before the review; the consolidation is asked again from
    the start and delivered once."""
    asked: list[str] = []

    def answer(request):
        who = request.json["messages"][-1]["content"]
        asked.append(who)
        if who == "dream" and asked.count("dream") == 1:  # five seconds of dribbling text
            return RawStream([chunk({"content": "half "})] + [Pause(0.1), chunk({"content": "."})] * 50)
        return Reply(content=f"{who} done")

    fake_openai.responder = answer
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle)

    def call(label: str, **options):
        return complete(gated_calls(gate, model, priority=BACKGROUND, label=label, **options),
                        messages=[{"role": "user", "content": label}])

    dream = asyncio.create_task(call("dream"))
    while not asked:
        await asyncio.sleep(0.02)
    review = asyncio.create_task(call("review"))
    while "review" not in (await run_blocking(gate.state, model)).queued:
        await asyncio.sleep(0.02)
    started = time.monotonic()
    async with gate.hold_urgent(model, label="cleanup ahead"):
        assert (await call("ahead 1", urgent=True)).content == "ahead 1 done"
        assert time.monotonic() - started < 3  # not behind the 5 s stream
        await asyncio.sleep(2 * gate.background_poll)  # between its calls: the others still wait
        assert (await call("ahead 2", urgent=True)).content == "ahead 2 done"
    assert fake_openai.wait_for_disconnect(2)
    assert (await review).content == "review done" and (await dream).content == "dream done"
    assert asked[:3] == ["dream", "ahead 1", "ahead 2"] and sorted(asked[3:]) == ["dream", "review"]
    assert gate.stats.yielded_to_urgent == 1 and gate.stats.preempted == 0


async def test_a_background_call_stops_for_good_when_its_check_says_so(threaded_bundle, fake_openai):
    slow = RawStream([chunk({"content": "half "})] + [Pause(0.1), chunk({"content": "."})] * 50)
    fake_openai.script(slow, Reply(content="chat answer"), Reply(content="never asked"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle, background_max_wait=30)
    urgent = {"now": False}
    view = gated_calls(gate, model, priority=BACKGROUND, label="cleanup ahead", stop_when=lambda: urgent["now"])
    ahead = asyncio.create_task(complete(view, messages=USER))
    while not fake_openai.chat_requests:
        await asyncio.sleep(0.02)
    urgent["now"] = True
    held = await mark(gate, model)
    assert (await complete(gated_calls(gate, model, priority=FOREGROUND), messages=USER)).content == "chat answer"
    with pytest.raises(GaveWay, match="cleanup ahead gave the model .* up to chat and stopped"):
        await ahead  # preempted, and not asked again after the turn
    # Waiting for a turn, it stops as soon as the check says so (not after its longest wait).
    started = time.monotonic()
    with pytest.raises(GaveWay):
        await complete(view, messages=USER)
    assert time.monotonic() - started < 2 and len(fake_openai.chat_requests) == 2
    await gate.keep(held, name="t").end()


async def test_the_longest_wait_counts_waiting_not_the_time_a_preempted_call_ran(threaded_bundle, fake_openai):
    """A consolidation streams for longer than the longest wait before a turn preempts it: it waits
    for that turn (a short wait) and is asked again, rather than giving up at once as if it had
    waited all the time it ran."""
    slow = RawStream([chunk({"content": "half "})] + [Pause(0.1), chunk({"content": "."})] * 50)
    fake_openai.script(slow, Reply(content="chat answer"), Reply(content="whole dream"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle, background_max_wait=2.0)
    dream = asyncio.create_task(complete(gated_calls(gate, model, priority=BACKGROUND, label="dream"), messages=USER))
    while not fake_openai.chat_requests:
        await asyncio.sleep(0.02)
    await asyncio.sleep(2.3)  # the call has run past its longest wait (its stream lasts 5 s)
    held = await mark(gate, model)
    assert (await complete(gated_calls(gate, model, priority=FOREGROUND), messages=USER)).content == "chat answer"
    await asyncio.sleep(0.3)  # the preempted call waits for the turn (about 0.4 s of its 2 s)
    await gate.keep(held, name="t").end()
    assert (await dream).content == "whole dream"
    assert gate.stats.preempted == 1 and gate.stats.gave_up == 0


async def test_the_waits_of_one_call_add_up_to_its_longest_wait(threaded_bundle, fake_openai):
    """A review waits 0.9 s of its 1.5 s behind a turn, runs, and is preempted by the next turn:
    it has 0.6 s left to wait, not 1.5 s again, so a turn held 1.5 s makes it give up."""
    slow = RawStream([chunk({"content": "half "})] + [Pause(0.1), chunk({"content": "."})] * 50)
    fake_openai.script(slow, Reply(content="whole review"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle, background_max_wait=1.5)
    held = await mark(gate, model)
    review = asyncio.create_task(complete(gated_calls(gate, model, priority=BACKGROUND, label="review"), messages=USER))
    await asyncio.sleep(0.9)
    await gate.keep(held, name="t").end()
    while not fake_openai.chat_requests:
        await asyncio.sleep(0.02)
    held = await mark(gate, model)  # the next turn: the review gives the model up and waits again
    with pytest.raises(ModelUnavailable, match="busy with chat"):
        await asyncio.wait_for(review, 1.5)
    assert gate.stats.preempted == 1 and gate.stats.gave_up == 1 and len(fake_openai.chat_requests) == 1
    await gate.keep(held, name="t").end()


async def test_a_background_call_gives_up_after_its_longest_wait(threaded_bundle, fake_openai):
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle, background_max_wait=0.3)
    held = await mark(gate, model)
    with pytest.raises(ModelUnavailable, match="busy with chat.*MODEX_BACKGROUND_MAX_WAIT"):
        await complete(gated_calls(gate, model, priority=BACKGROUND, label="review"), messages=USER)
    assert fake_openai.chat_requests == [] and gate.stats.gave_up == 1
    await gate.keep(held, name="t").end()


async def test_a_dead_holders_slot_and_mark_block_only_until_they_expire(threaded_bundle, fake_openai):
    fake_openai.script(Reply(content="after"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle, hold_ttl=0.4)
    ep = endpoint_id(model)
    for name, holder in ((f"gate.{ep}.slot.0", "chat|x|dead"), (f"gate.{ep}.turn.dead", "turn|dead")):
        await run_blocking(acquire_lease, kv=threaded_bundle.kv, scope=GlobalScope(), name=name, ttl=0.4, holder=holder)
    started = time.monotonic()
    assert (await complete(gated_calls(gate, model, priority=BACKGROUND), messages=USER)).content == "after"
    assert 0.3 < time.monotonic() - started < 3
    assert await run_blocking(threaded_bundle.kv.list, GlobalScope(), prefix=f"lease.gate.{ep}.") == []  # tidied up


# -- a user typing ----------------------------------------------------------------------------


async def test_a_user_typing_holds_background_work_back_until_the_mark_runs_out(threaded_bundle, fake_openai):
    fake_openai.script(Reply(content="dreamt"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle)
    assert await run_blocking(gate.mark_typing, model, session=SessionScope("typing1"), hold=0.6)
    started = time.monotonic()
    dream = asyncio.create_task(complete(gated_calls(gate, model, priority=BACKGROUND, label="dream"), messages=USER))
    await asyncio.sleep(0.3)
    assert (await asyncio.to_thread(gate.state, model)).turns == 1 and fake_openai.chat_requests == []
    assert (await dream).content == "dreamt"  # nothing renewed the mark: it ran out by itself
    assert time.monotonic() - started >= 0.5
    remote = OpenAIChatModel(base_url="https://api.example.com/v1", api_key="k", model="m")
    assert not await run_blocking(gate.mark_typing, remote, session=SessionScope("typing1"))  # not gated: no mark


async def test_typing_cuts_a_running_background_call_and_the_turn_takes_the_marks_place(threaded_bundle, fake_openai):
    slow = RawStream([chunk({"content": "half "})] + [Pause(0.1), chunk({"content": "."})] * 50)
    fake_openai.script(slow, Reply(content="whole dream"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle)
    typing, elsewhere = SessionScope("typing2"), SessionScope("typing3")
    dream = asyncio.create_task(complete(gated_calls(gate, model, priority=BACKGROUND, label="dream"), messages=USER))
    while not fake_openai.chat_requests:
        await asyncio.sleep(0.02)
    for session in (typing, typing, elsewhere):  # a second signal extends the same mark
        await run_blocking(gate.mark_typing, model, session=session, hold=30)
    assert await asyncio.to_thread(fake_openai.wait_for_disconnect, 2)  # cut while the message is written
    assert (await asyncio.to_thread(gate.state, model)).turns == 2

    ep = endpoint_id(model)
    listed = lambda: sorted(i.key for i in threaded_bundle.kv.list(GlobalScope(), prefix=f"lease.gate.{ep}.turn."))
    before = await asyncio.to_thread(listed)
    held = await run_blocking(gate.mark_turn, model, session=typing)  # the message is sent
    after = await asyncio.to_thread(listed)
    assert len(after) == 2 and held.key in after and set(before) - set(after) == {
        k for k in before if k.endswith(hashlib.sha1(typing.key().encode()).hexdigest()[:16])}
    await asyncio.sleep(0.3)  # several background polls
    assert not dream.done()  # the turn runs
    await gate.keep(held, name="t").end()
    await asyncio.sleep(0.3)
    assert not dream.done() and len(fake_openai.chat_requests) == 1  # the other conversation's user still types
    for item in await asyncio.to_thread(threaded_bundle.kv.list, GlobalScope(), prefix=f"lease.gate.{ep}.turn."):
        await asyncio.to_thread(threaded_bundle.kv.delete, GlobalScope(), item.key)  # that user stops typing
    assert (await dream).content == "whole dream" and gate.stats.preempted == 1


async def test_a_turn_goes_on_when_its_typing_mark_cannot_be_dropped(threaded_bundle, fake_openai, caplog):
    """The store fails while the turn drops the typing mark: the turn keeps its own mark (and
    gives it back as always), the typing mark runs out by itself."""
    model = model_for(fake_openai)
    typing = SessionScope("typing4")

    class DropFails:  # the store seam: its first delete of a typing mark fails
        def __init__(self, kv):
            self.kv, self.failed = kv, False

        def __getattr__(self, name):
            return getattr(self.kv, name)

        def delete(self, scope, key, **kwargs):
            if ".turn.typing-" in key and not self.failed:
                self.failed = True
                raise StorageUnavailable("database is locked")
            return self.kv.delete(scope, key, **kwargs)

    gate = ModelGate(kv=DropFails(threaded_bundle.kv), poll=0.02, background_poll=0.05)
    await run_blocking(gate.mark_typing, model, session=typing, hold=0.5)
    held = await run_blocking(gate.mark_turn, model, session=typing)
    assert held is not None and "could not drop the typing mark" in caplog.text
    assert (await asyncio.to_thread(gate.state, model)).turns == 2
    await gate.keep(held, name="t").end()
    await asyncio.sleep(0.6)
    assert (await asyncio.to_thread(gate.state, model)).turns == 0  # nothing left behind


# -- across processes --------------------------------------------------------------------------


def test_a_turn_in_another_process_defers_background_work_here(tmp_path, fake_openai):
    """Chat runs in daphne, background work in the task worker: the gate lives in the shared
    stores (here the file backend's directory), so a turn mark taken by another process holds
    this process's background call back until that turn ends."""
    root = tmp_path / "memory"
    fake_openai.script(Reply(content="dreamt"))
    model = model_for(fake_openai)
    holder = textwrap.dedent(f"""
        import asyncio, sys, django, os
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings_test")
        django.setup()
        from agents.llm.openai import OpenAIChatModel
        from agents.runtime.gate import ModelGate
        from memory.stores.registry import open_bundle
        async def main():
            gate = ModelGate(kv=open_bundle("file", root={str(root)!r}).kv, hold_ttl=1.0)
            model = OpenAIChatModel(base_url={fake_openai.url!r}, api_key="k", model="fake-model")
            kept = gate.keep(gate.mark_turn(model), name="other-process-turn")
            print("marked", flush=True)
            await asyncio.sleep(2.0)  # longer than the mark's ttl: it is renewed meanwhile
            await kept.end()
        asyncio.run(main())
    """)
    process = subprocess.Popen([sys.executable, "-c", holder], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "marked"
        started = time.monotonic()
        gate = gate_for(open_bundle("file", root=root))
        text = asyncio.run(_background(gate, model))
        waited = time.monotonic() - started
    finally:
        process.wait(timeout=30)
    assert text == "dreamt" and waited >= 1.5


async def _background(gate, model):
    try:
        return (await complete(gated_calls(gate, model, priority=BACKGROUND, label="dream"), messages=USER)).content
    finally:
        await model.aclose()


async def test_background_calls_take_the_last_slot_of_a_llamacpp_server_with_several(threaded_bundle, fake_openai):
    fake_openai.props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 2}
    fake_openai.script(Reply(content="chat"), Reply(content="dream"))
    model = model_for(fake_openai)
    gate = gate_for(threaded_bundle)
    await complete(gated_calls(gate, model, priority=FOREGROUND), messages=USER)
    await complete(gated_calls(gate, model, priority=BACKGROUND), messages=USER)
    chat, dream = (r.json for r in fake_openai.chat_requests)
    assert (chat["id_slot"], dream["id_slot"]) == (0, 1)  # the chat's cached prompt keeps its slot
