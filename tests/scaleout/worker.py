"""One worker process of the scale-out tests: does one job against the shared database, then exits.

    python -m tests.scaleout.worker JOB '{"json": "arguments"}'

The tests start it (tests/scaleout/conftest.py, ``Shared.spawn``) with the production settings
(``modex_web.settings``) and DATABASE_URL, MODEX_WORKSPACE and MODEX_SCOPES_FILE pointing at what
the test shares with its other workers. It prints JSON lines on stdout: progress markers
(``{"at": "in_tool"}``) the test waits for before it kills the process, and one last
``{"done": ...}`` with the outcome. Everything it runs is the application's own code (runtime,
cleanup, Dream Engine and experience tasks, leases); only the model is scripted where a test
needs a worker to stop at a known point.

A job with ``"go"`` (a file path) prints ``{"at": "ready"}`` and waits for that file to exist
before it starts, so that several workers start their work at the same moment.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import django

BLOCK_SECONDS = 3600.0  # "forever": the test kills the process long before
#: Makes each writer's turn long enough that its conversation crosses the threshold (700 tokens).
ROUND_FILLER = " ".join(["We walked along the coast from the harbour to the lighthouse and back again."] * 6)


def emit(**fields: Any) -> None:
    print(json.dumps(fields, default=str), flush=True)


def wait_for_go(args: dict[str, Any]) -> None:
    if not args.get("go"):
        return
    emit(at="ready", pid=os.getpid())
    deadline = time.monotonic() + 120
    while not Path(args["go"]).exists():
        if time.monotonic() > deadline:
            raise SystemExit("the go file never appeared")
        time.sleep(0.01)


async def await_file(path: str | None, marker: str) -> None:
    """Report ``marker``, then block until ``path`` exists (forever without a path)."""
    emit(at=marker)
    if not path:
        await asyncio.sleep(BLOCK_SECONDS)
        return
    while not Path(path).exists():
        await asyncio.sleep(0.01)


# -- scripted models --------------------------------------------------------------------------


class ScriptedModel:
    """A ChatModel that stops where a test wants it (the seam every model goes through).

    ``hang_in_tool``: the main agent calls spawn_subagent, and the subagent's model call never
    returns (the parent's tool call stays open). ``slow``: streams ``pieces`` content chunks
    ``delay`` seconds apart. ``gated``: streams half a reply, reports ``in_model`` and waits for the
    ``gate`` file, then ends the reply. Anything else (and every later step) answers like the offline model.
    """

    name = "scripted"

    def __init__(self, mode: str, *, pieces: int = 10, delay: float = 0.5, gate: str | None = None) -> None:
        from agents.llm import OfflineChatModel

        self.mode, self.pieces, self.delay, self.gate = mode, pieces, delay, gate
        self.offline = OfflineChatModel()

    def describe(self) -> str:
        return f"the scale-out tests' scripted model ({self.mode})"

    async def stream(self, *, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **options: Any):
        from agents.llm import ContentDelta, Finish, ToolCallReady
        from memory.messages import ToolCall

        names = {t["function"]["name"] for t in tools or []}
        if self.mode == "hang_in_tool" and "spawn_subagent" in names and messages[-1]["role"] == "user":
            arguments = json.dumps({"agent": "helper", "task": "look into it"})
            yield ToolCallReady(ToolCall("call-hang-1", "spawn_subagent", arguments))
            yield Finish("tool_calls")
            return
        if self.mode == "hang_in_tool" and "spawn_subagent" not in names:
            await await_file(None, "in_tool")  # the subagent: the parent's tool never finishes
        if self.mode == "gated" and messages[-1]["role"] == "user":
            # Half a reply, then a wait (the test SIGSTOPs the process here), then the end of the
            # reply at once: the runtime's next act is to store it, under the lease it took.
            yield ContentDelta("A's half-written answer")
            await await_file(self.gate, "in_model")
            yield Finish("stop")
            return
        if self.mode == "slow" and messages[-1]["role"] == "user":
            for i in range(self.pieces):
                emit(at="streaming", piece=i)
                yield ContentDelta(f"piece {i} ")
                await asyncio.sleep(self.delay)
            yield Finish("stop")
            return
        async for event in self.offline.stream(messages=messages, tools=tools, **options):
            yield event


class GatedModel:
    """The offline model, except that its first call reports ``in_model`` and waits for a file."""

    def __init__(self, gate: str | None) -> None:
        from agents.llm import OfflineChatModel

        self.inner = OfflineChatModel()
        self.name = self.inner.name
        self.gate = gate
        self.opened = gate is None

    def describe(self) -> str:
        return self.inner.describe()

    async def stream(self, *, messages, tools=None, **options):
        if not self.opened:
            self.opened = True
            await await_file(self.gate, "in_model")
        async for event in self.inner.stream(messages=messages, tools=tools, **options):
            yield event


# -- jobs -------------------------------------------------------------------------------------


def services(model=None, backend: str = "sqlite"):
    from django.conf import settings

    from agents.runtime.services import build_services

    return build_services(backend=backend, workspace=Path(settings.MODEX_WORKSPACE), model=model)


def job_lease(args: dict[str, Any]) -> None:
    """Take a lease and hold it for ``hold`` seconds (then release), or report it busy."""
    from memory.locks import LeaseBusy, acquire_lease, release_lease
    from memory.scopes import Scope
    from memory.stores.registry import open_bundle

    kv = open_bundle("sqlite").kv
    scope = Scope.parse(args["scope"])
    wait_for_go(args)
    deadline = time.monotonic() + args.get("retry_busy_for", 0)
    attempts = 0
    while True:
        attempts += 1
        try:
            lease = acquire_lease(kv=kv, scope=scope, name=args["name"], ttl=args["ttl"])
            break
        except LeaseBusy as exc:
            if time.monotonic() >= deadline:
                emit(done="busy", holder=exc.holder, attempts=attempts)
                return
            time.sleep(0.1)
    emit(at="acquired", holder=lease.holder, pid=os.getpid(), time=time.time(), attempts=attempts)
    time.sleep(args.get("hold", 0))
    emit(done="released" if release_lease(kv=kv, lease=lease) else "lost")


def job_turn(args: dict[str, Any]) -> None:
    """One chat turn through the Runtime; ``retry_busy_for`` seconds of retries while busy."""
    from asgiref.sync import async_to_sync

    from agents.declarations import get_declaration
    from agents.runtime.events import MessageStored, TurnFailed, TurnFinished
    from agents.runtime.loop import Runtime, TurnBusy
    from memory.scopes import SessionScope

    mode = args.get("model", "offline")
    model = None if mode == "offline" else ScriptedModel(
        mode, pieces=args.get("pieces", 10), delay=args.get("delay", 0.5), gate=args.get("gate"))
    runtime = Runtime(services=services(model, backend=args.get("backend", "sqlite")))
    agent = get_declaration().find(args.get("agent", "default"))
    session = SessionScope(args["session"])
    wait_for_go(args)

    async def run() -> dict[str, Any]:
        started = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            try:
                async for event in runtime.run_turn(agent=agent, user_id=args.get("user", "1"), session=session,
                                                    text=args["text"]):
                    if isinstance(event, MessageStored):
                        emit(at="stored", id=event.message.id, seq=event.message.seq, role=event.message.role)
                    elif isinstance(event, TurnFinished):
                        return {"done": "finished", "id": event.message.id, "seq": event.message.seq, "attempts": attempts,
                                "elapsed": time.monotonic() - started}
                    elif isinstance(event, TurnFailed):
                        return {"done": "failed", "error": event.error, "kind": event.kind, "attempts": attempts}
                return {"done": "ended", "attempts": attempts}
            except TurnBusy as exc:
                if time.monotonic() - started >= args.get("retry_busy_for", 0):
                    return {"done": "busy", "error": str(exc), "attempts": attempts}
                await asyncio.sleep(0.1)

    emit(**async_to_sync(run)())


def job_cleanup(args: dict[str, Any]) -> None:
    """One cleanup of ``session``; ``hang`` stops it in the summarizer or at the commit."""
    from asgiref.sync import async_to_sync

    from memory.compression import steps
    from memory.compression.cleanup import CleanupStatus, arun_cleanup
    from memory.config import MemoryConfig
    from memory.scopes import SessionScope

    svc = services()
    hang = args.get("hang")

    async def summarizer(prompt) -> str:
        if hang == "summarize":
            await await_file(None, "summarizing")
        return "## Goal\nThe user is planning a trip.\n## Progress\nThe assistant answered every question."

    if hang == "commit":
        async def blocked_commit(**kwargs):
            await await_file(None, "committing")

        steps.commit = blocked_commit
    config = MemoryConfig(context_window=4096, compression_threshold=args.get("threshold", 700),
                          keep_tokens=args.get("keep", 250))
    session = SessionScope(args["session"])
    wait_for_go(args)

    async def run() -> dict[str, Any]:
        started = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            result = await arun_cleanup(bundle=svc.bundle, session=session, config=config, summarizer=summarizer,
                                        catalog=svc.catalog, hooks=svc.hooks, lease_ttl=args["lease_ttl"])
            if result.status is not CleanupStatus.BUSY or time.monotonic() - started >= args.get("retry_busy_for", 0):
                return {"done": result.status.value, "resumed": result.resumed, "through_seq": result.through_seq,
                        "evicted": result.evicted_count, "attempts": attempts, "reason": result.reason}
            await asyncio.sleep(0.1)

    emit(**async_to_sync(run)())


def job_writer(args: dict[str, Any]) -> None:
    """``rounds`` times: append to the shared session, bump a shared counter (compare-and-set),
    run one chat turn in a session of its own. Every error is reported, none is retried."""
    from asgiref.sync import async_to_sync

    from agents.declarations import get_declaration
    from agents.runtime.events import TurnFailed
    from agents.runtime.loop import Runtime
    from memory.messages import Message
    from memory.scopes import SessionScope
    from memory.stores.base import VersionConflict

    svc = services()
    runtime = Runtime(services=svc)
    agent = get_declaration().find("default")
    shared, own, name = SessionScope(args["shared"]), SessionScope(args["own"]), args["name"]
    errors: list[str] = []

    async def turn(text: str) -> None:
        async for event in runtime.run_turn(agent=agent, user_id=name, session=own, text=text):
            if isinstance(event, TurnFailed):
                errors.append(f"turn failed: {event.kind}: {event.error}")

    wait_for_go(args)
    started = time.monotonic()
    conflicts = 0
    for i in range(args["rounds"]):
        try:
            svc.bundle.messages.append(shared, [Message(role="user", content=f"{name} m{i}")])
            while True:
                item = svc.bundle.kv.get(shared, "counter")
                try:
                    svc.bundle.kv.put(shared, "counter", str(int(item.value) + 1 if item else 1),
                                      expected_version=item.version if item else 0)
                    break
                except VersionConflict:
                    conflicts += 1
            async_to_sync(turn)(f"{name} says: this is round {i} of our long conversation. {ROUND_FILLER}")
        except Exception as exc:  # noqa: BLE001 - the test asserts there are none
            errors.append(f"{type(exc).__name__}: {exc}")
    emit(done="ok" if not errors else "errors", errors=errors, conflicts=conflicts, elapsed=time.monotonic() - started)


def _task_environment(gate: str | None):
    from agents.declarations import get_declaration
    from agents.tasks import TaskEnvironment

    return TaskEnvironment(services=services(GatedModel(gate)), find_agent=lambda name: get_declaration().find(name))


def job_consolidate(args: dict[str, Any]) -> None:
    """The consolidate_core_memory task, its model gated on ``gate``."""
    from agents.tasks import consolidate_core_memory, task_environment

    with task_environment(_task_environment(args.get("gate"))):
        wait_for_go(args)
        result = consolidate_core_memory.call(agent=args["agent"], user=args["user"])
    emit(done=result["status"], result=result)


def job_review(args: dict[str, Any]) -> None:
    """The review_experience task for one finished run, its model gated on ``gate``."""
    from agents.tasks import review_experience, task_environment

    with task_environment(_task_environment(args.get("gate"))):
        wait_for_go(args)
        result = review_experience.call(agent=args["agent"], user=args["user"], session=args["session"],
                                        final_id=args["final_id"], final_seq=args["final_seq"])
    emit(done=result["status"], result=result)


def job_db_worker(args: dict[str, Any]) -> None:
    """``manage.py db_worker --batch`` (the real task worker) with the tasks' model gated on ``gate``."""
    from django.core.management import call_command

    from agents.tasks import task_environment

    with task_environment(_task_environment(args.get("gate"))):
        emit(at="working")
        call_command("db_worker", "--batch", "--no-startup-delay", "--no-reload", "--interval", "0.2")
    emit(done="drained")


def job_channel(args: dict[str, Any]) -> None:
    """Join a group on the configured channel layer and report the first message it gets."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()

    async def run() -> dict[str, Any]:
        channel = await layer.new_channel()
        await layer.group_add(args["group"], channel)
        emit(at="listening", layer=type(layer).__name__, channel=channel)
        message = await asyncio.wait_for(layer.receive(channel), timeout=args.get("timeout", 30))
        await layer.group_discard(args["group"], channel)
        return {"done": "received", "message": message}

    emit(**async_to_sync(run)())


JOBS = {
    "lease": job_lease,
    "turn": job_turn,
    "cleanup": job_cleanup,
    "writer": job_writer,
    "consolidate": job_consolidate,
    "review": job_review,
    "channel": job_channel,
    "db_worker": job_db_worker,
}


def main() -> None:
    job, raw = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "{}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings")
    django.setup()
    JOBS[job](json.loads(raw))


if __name__ == "__main__":
    main()
