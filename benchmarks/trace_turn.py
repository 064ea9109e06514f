"""Where one chat turn's time goes before its first token: the streaming workload, traced.

    .venv-bench/bin/python -m benchmarks.trace_turn [--quick]

Runs ``workloads/streaming.py`` (fake OpenAI-compatible server, daphne, a WebSocket client)
with daphne started through this module, which wraps a few functions of the running app to
write a timestamp each time they are reached: the consumer receiving the message, the turn
lease, the turn's first write (tail repair check and user message), each later session
append, the context assembly, each runtime event, the model request (the HTTP round trip to
the response headers, the first streamed event) and each frame sent and written to daphne's
socket. It prints the streaming rows, then the median time of each step's first occurrence
after the message arrived (warm-up turn excluded), with the processor time daphne's process
(all its threads) had used by then: where the two columns keep pace, some thread of daphne's
was running the whole time, with no wait between; then how long the message took from the
client's send to the consumer, and how long each kind of frame took from the consumer's send
to the client's read. Nothing here is a benchmark figure: the wrappers cost a little
themselves; it says where the time goes.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

TRACE_ENV = "MODEX_TRACE_LOG"


def _kind(text: str) -> str:
    return "content" if '-content">' in text else "meter" if 'id="meter"' in text else text.strip()[:24]


# -- inside daphne -----------------------------------------------------------------------------


def _serve_traced(argv: list[str]) -> None:
    log = open(os.environ[TRACE_ENV], "a", buffering=1)
    start = [0.0, 0.0]  # wall clock, this process's processor time

    def mark(what: str) -> None:
        at = [(time.perf_counter() - start[0]) * 1e3, (time.process_time() - start[1]) * 1e3]
        log.write(json.dumps([what, *at]) + "\n")

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings")
    django.setup()
    import httpx2

    from agents.chat import consumer
    from agents.llm import openai as adapter
    from agents.runtime import loop

    def around(owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        async def wrapped(*args, **kwargs):
            mark(f"{label} start")
            result = await inner(*args, **kwargs)
            mark(f"{label} done")
            return result

        setattr(owner, name, wrapped)

    def around_sync(owner, name: str, label: str) -> None:  # for work on a store thread
        inner = getattr(owner, name)

        def wrapped(*args, **kwargs):
            mark(f"{label} start")
            result = inner(*args, **kwargs)
            mark(f"{label} done")
            return result

        setattr(owner, name, wrapped)

    receive = consumer.ChatConsumer.receive

    async def traced_receive(self, text_data=None, bytes_data=None):
        if text_data and '"message"' in text_data:
            start[:] = time.perf_counter(), time.process_time()
            log.write(json.dumps(["@received", start[0]]) + "\n")
            mark("message received")
        return await receive(self, text_data, bytes_data)

    send = consumer.ChatConsumer.send

    async def traced_send(self, text_data=None, bytes_data=None, close=False):
        mark(f"frame sent: {_kind(text_data or '')}")
        return await send(self, text_data=text_data, bytes_data=bytes_data, close=close)

    run_turn = loop.Runtime.run_turn

    async def traced_run_turn(self, **kwargs):
        async for event in run_turn(self, **kwargs):
            mark(f"event {type(event).__name__}")
            yield event

    stream = adapter.OpenAIChatModel.stream

    async def traced_stream(self, **kwargs):
        mark("model request")
        first = True
        async for event in stream(self, **kwargs):
            if first:
                mark("model first event")
                first = False
            yield event

    acquire = loop.acquire_lease

    def traced_acquire(*args, **kwargs):
        mark("lease start")
        lease = acquire(*args, **kwargs)
        mark("lease done")
        return lease

    from twisted.internet import tcp

    write_some = tcp.Connection.writeSomeData

    def traced_write_some(self, data):  # the frame reaching daphne's socket (header bytes skipped)
        text = bytes(data[:4000]).decode("utf-8", "replace")
        mark(f"socket write: {_kind(text[max(0, text.find('<')):])}")
        return write_some(self, data)

    tcp.Connection.writeSomeData = traced_write_some
    consumer.ChatConsumer.receive = traced_receive
    consumer.ChatConsumer.send = traced_send
    loop.Runtime.run_turn = traced_run_turn
    adapter.OpenAIChatModel.stream = traced_stream
    loop.acquire_lease = traced_acquire
    from agents.runtime.writes import SessionWrites

    around(SessionWrites, "append", "append")
    around(SessionWrites, "append_reading_head", "step write")
    around(loop.Runtime, "_begin", "the turn's first trip (lease, tail repair, user message)")
    around_sync(SessionWrites, "open", "tail repair check and user message stored")
    around(loop.Runtime, "_assemble", "assembly")
    from memory.assembly.assembler import ContextAssembler

    around(ContextAssembler, "aassemble", "assembler")
    around(httpx2.AsyncClient, "send", "HTTP to response headers")

    from daphne.cli import CommandLineInterface

    sys.argv = ["daphne", *argv]
    CommandLineInterface.entrypoint()


# -- the driver --------------------------------------------------------------------------------


def main() -> None:
    import tempfile

    from websockets.asyncio.client import ClientConnection

    from benchmarks.workloads import streaming

    with tempfile.NamedTemporaryFile(prefix="modex-trace-", suffix=".log", delete=False) as created:
        log_path = created.name
    os.environ[TRACE_ENV] = log_path
    popen = streaming.subprocess.Popen

    def traced_popen(args, **kwargs):
        # [python, -m, daphne, ...] -> [python, -m, benchmarks.trace_turn, --daphne, ...]; the bare
        # relay's daphne (the workload's floor) runs untraced.
        if "daphne" in args and "modex_web.asgi:application" in args:
            at = args.index("daphne")
            args = [*args[:at], "benchmarks.trace_turn", "--daphne", *args[at + 1 :]]
        return popen(args, **kwargs)

    sends: list[float] = []
    client_send = ClientConnection.send

    reads: list[list[tuple[str, float]]] = []  # per turn: (kind, when) of each frame read
    client_recv = ClientConnection.recv

    def modex(connection) -> bool:  # not the bare relay's socket (the workload's floor)
        return "/bare/" not in connection.request.path

    async def traced_client_send(self, message, *args, **kwargs):
        if modex(self):
            sends.append(time.perf_counter())  # CLOCK_MONOTONIC: comparable across processes here
            reads.append([])
        return await client_send(self, message, *args, **kwargs)

    async def traced_client_recv(self, *args, **kwargs):
        frame = await client_recv(self, *args, **kwargs)
        if isinstance(frame, str) and reads and modex(self):
            reads[-1].append((_kind(frame), time.perf_counter()))
        return frame

    streaming.subprocess.Popen = traced_popen
    ClientConnection.send = traced_client_send
    ClientConnection.recv = traced_client_recv
    result = streaming.run(quick="--quick" in sys.argv)
    for row in result.rows[:5]:
        print(f"{row.metric}: {row.modex:,.2f} {row.unit}; {row.peer_name}: {row.peer:,.2f} {row.unit}")

    turns: list[dict[str, float]] = []
    cpu: list[dict[str, float]] = []
    received: list[float] = []
    with open(log_path) as lines:
        for line in lines:
            what, value, *processor = json.loads(line)
            if what == "@received":
                received.append(value)
                turns.append({})
                cpu.append({})
            elif turns and what not in turns[-1]:
                turns[-1][what] = value
                cpu[-1][what] = processor[0]
    os.unlink(log_path)
    steps: dict[str, list[float]] = {}
    used: dict[str, list[float]] = {}
    for turn, spent in zip(turns[1:], cpu[1:], strict=True):  # the first is the warm-up
        for what, at in turn.items():
            steps.setdefault(what, []).append(at)
            used.setdefault(what, []).append(spent[what])
    print(f"\nmedian of {len(turns) - 1} turns after the consumer received the message (first occurrence):")
    print("  wall ms   daphne's processor ms (all its threads)")
    for what, ats in sorted(steps.items(), key=lambda item: statistics.median(item[1])):
        if statistics.median(ats) < 200:
            print(f"  {statistics.median(ats):8.2f}  {statistics.median(used[what]):8.2f}  {what}")
    inbound = [(r - s) * 1e3 for s, r in zip(sends[1:], received[1:], strict=False)]
    if inbound:
        print(f"client send -> consumer receive: median {statistics.median(inbound):.2f} ms")
    outbound: dict[str, list[float]] = {}  # each kind's first frame of a turn: consumer send -> client read
    for frames, r, turn in zip(reads[1:], received[1:], turns[1:], strict=False):
        seen = set()
        for kind, at in frames:
            if kind not in seen and f"frame sent: {kind}" in turn:
                seen.add(kind)
                outbound.setdefault(kind, []).append((at - r) * 1e3 - turn[f"frame sent: {kind}"])
    for kind, delays in outbound.items():
        print(f"frame sent -> read by the client ({kind}): median {statistics.median(delays):.2f} ms")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--daphne":
        _serve_traced(sys.argv[2:])
    else:
        main()
