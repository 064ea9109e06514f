"""Streaming relay: model tokens through the runtime and the consumer to a real WebSocket client.

Four processes on loopback:

1. the fake OpenAI-compatible server (``tests.fakes.openai_server``, stdlib HTTP, SSE), in its
   own process, answering every chat request with the same reply: ``REPLY_CHARS`` characters
   streamed as 4-character content deltas, no delay between them (so rates are capacities);
2. ``daphne modex_web.asgi:application`` with ``OPENAI_BASE_URL`` pointing at it (the real
   settings, SQLite backend, in-memory channel layer, background tasks off, plain HTTP:
   ``DJANGO_SECURE=false``);
3. this process: it creates a user (with a password) and one conversation per turn beforehand,
   logs in over HTTP (login form, CSRF token, session cookie), opens
   ``/ws/chat/<id>/`` with the session cookie and an allowed Origin (``websockets``, no
   compression), sends one message and reads frames until the composer is idle again.

4. a second daphne serving ``benchmarks.workloads.bare_relay``: a WebSocket that forwards the
   model adapter's deltas from the same fake server and does nothing else, the floor any
   WebSocket relay of a model pays on this machine; this process drives it with the same client.

Measured per turn: time from sending the message to the first frame carrying content, and
content deltas relayed per second (the characters carried after the first content frame, in
deltas of ``CHUNK_CHARS``, ÷ the time from the first content frame to the last; the consumer
sends the deltas that queued up behind one another as one frame). The same
numbers for the raw SDK (``openai.AsyncOpenAI`` ``chat.completions.create(stream=True)``
against the same server) and for Modex's model adapter alone (``OpenAIChatModel.stream``), so
the overhead of runtime + consumer + socket is the ratio. The four are measured round by round,
one turn of each per round; one warm-up round, then the median of 15 (3 with ``--quick``).

Checks: the content fragments, unescaped and joined, are exactly the reply; between one frame
and one per delta over the socket (exactly one per delta for the SDK and the adapter); no error
fragment; the turn ends.
"""

from __future__ import annotations

import asyncio
import html
import http.cookiejar
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from benchmarks.common import HIGHER_IS_BETTER, REPO, Row, Workload, check, log, setup_django, temp_root, workload_main

WORKLOAD = "6. Streaming relay"
CHUNK_CHARS = 4
MESSAGE = "Please write me a long answer."
CONTENT_RE = re.compile(r'<div hx-swap-oob="beforeend:#live-[^"]+-content">([^<]*)</div>')
TURN_DONE = 'data-state="idle"'
ERROR = 'class="notice error"'
PASSWORD = "bench-password-0123456789"
TURN_TIMEOUT = 60.0


def reply_text(chars: int) -> str:
    rng = random.Random(61)
    words = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))))
    return " ".join(words)[:chars]


# -- the fake server process -------------------------------------------------------------------


def serve_fake(chars: int) -> None:
    """Run the fake server until stdin closes; print its URL first."""
    from tests.fakes.openai_server import Reply, start_fake_server

    server = start_fake_server()
    text = reply_text(chars)
    server.responder = lambda request: Reply(content=text, chunk_chars=CHUNK_CHARS)
    print(server.url, flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()


# -- helpers -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, log_path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited ({process.returncode}): {log_path.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("daphne did not start within 30 s")


def http_login(base: str, username: str) -> str:
    """Log in through the form; return the Cookie header (session + CSRF cookies)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    response = opener.open(f"{base}/accounts/login/", timeout=10)
    check(response.geturl().startswith(base), f"the login page redirected away from loopback HTTP: {response.geturl()}")
    page = response.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    check(token is not None, "no CSRF token on the login page")
    form = urllib.parse.urlencode(
        {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token.group(1)}
    ).encode()
    request = urllib.request.Request(
        f"{base}/accounts/login/", data=form, headers={"Origin": base, "Referer": f"{base}/accounts/login/"}
    )
    response = opener.open(request, timeout=10)
    check(response.geturl().startswith(base), f"the login redirected away from loopback HTTP: {response.geturl()}")
    response.read()
    cookies = {c.name: c.value for c in jar}
    check("sessionid" in cookies, "the login did not set a session cookie")
    return "; ".join(f"{k}={v}" for k, v in cookies.items())


class TurnStats:
    """One turn: ``first``/``last`` content frame times, content ``frames`` (a frame may carry
    several deltas: the consumer merges the deltas that queued up behind one another),
    ``total`` time and the ``text`` they carried, ``later`` of it after the first frame."""

    def __init__(self, first: float, last: float, frames: int, total: float, text: str, later: int) -> None:
        self.first, self.last, self.frames, self.total, self.text, self.later = first, last, frames, total, text, later

    @property
    def rate(self) -> float:
        """Deltas relayed per second after the first frame (model deltas carry CHUNK_CHARS each)."""
        return self.later / CHUNK_CHARS / (self.last - self.first) if self.last > self.first else float("nan")


async def ws_turn(port: int, conversation_id: str, cookie: str) -> TurnStats:
    from websockets.asyncio.client import connect

    origin = f"http://127.0.0.1:{port}"
    async with connect(
        f"ws://127.0.0.1:{port}/ws/chat/{conversation_id}/",
        additional_headers={"Cookie": cookie},
        origin=origin,
        compression=None,
        max_size=None,
        open_timeout=10,
    ) as ws:
        sent = time.perf_counter()
        await ws.send(json.dumps({"message": MESSAGE, "HEADERS": {"HX-Request": "true"}}))
        first = last = None
        frames = 0
        parts: list[str] = []

        async def read() -> None:
            nonlocal first, last, frames
            async for frame in ws:
                now = time.perf_counter()
                check(ERROR not in frame, f"an error fragment arrived: {frame[:300]}")
                found = CONTENT_RE.findall(frame)
                if found:
                    frames += 1
                    first = first or now
                    last = now
                    parts.append("".join(html.unescape(p) for p in found))
                if TURN_DONE in frame:
                    return

        await asyncio.wait_for(read(), TURN_TIMEOUT)
        total = time.perf_counter() - sent
    check(first is not None, "no content frame arrived")
    return TurnStats(first - sent, last - sent, frames, total, "".join(parts), sum(map(len, parts[1:])))


async def sdk_turn(client) -> TurnStats:
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": MESSAGE}], stream=True,
        stream_options={"include_usage": True},
    )
    first = last = None
    frames = 0
    parts = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            now = time.perf_counter()
            frames += 1
            first = first or now
            last = now
            parts.append(chunk.choices[0].delta.content)
    total = time.perf_counter() - started
    return TurnStats(first - started, last - started, frames, total, "".join(parts), sum(map(len, parts[1:])))


async def adapter_turn(model) -> TurnStats:
    from agents.llm import ContentDelta

    started = time.perf_counter()
    first = last = None
    frames = 0
    parts = []
    async for event in model.stream(messages=[{"role": "user", "content": MESSAGE}], tools=None):
        if isinstance(event, ContentDelta) and event.text:
            now = time.perf_counter()
            frames += 1
            first = first or now
            last = now
            parts.append(event.text)
    total = time.perf_counter() - started
    return TurnStats(first - started, last - started, frames, total, "".join(parts), sum(map(len, parts[1:])))


# -- the workload ------------------------------------------------------------------------------


def run(*, quick: bool) -> Workload:
    chars = 3_200 if quick else 8_000
    turns = 3 if quick else 15
    text = reply_text(chars)
    deltas = -(-chars // CHUNK_CHARS)
    root = temp_root("stream")
    result = Workload("streaming")
    fake = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.workloads.streaming", "--serve-fake", str(chars)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    daphne = bare = None
    try:
        fake_url = fake.stdout.readline().strip()
        check(fake_url.startswith("http://127.0.0.1:"), f"the fake server did not start ({fake_url!r})")
        env = {
            "OPENAI_BASE_URL": fake_url,
            "OPENAI_API_KEY": "sk-bench-not-a-key",
            "OPENAI_MODEL": "fake-model",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "MODEX_PERSISTENCE_BACKEND": "sqlite",
            "MODEX_TASKS_BACKEND": "dummy",
            "DJANGO_SECURE": "false",  # plain HTTP on loopback (no HTTPS redirect, no secure-only cookies)
        }
        setup_django(root / "workspace", **env)
        from django.contrib.auth import get_user_model

        from agents.chat.service import main_agents
        from agents.models import Conversation

        user = get_user_model().objects.create_user(username="bench", password=PASSWORD)
        agent = main_agents()[0].name
        conversations = [Conversation.objects.create(owner=user, agent=agent).pk for _ in range(turns + 1)]

        port = free_port()
        log_path = root / "daphne.log"
        daphne = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "modex_web.asgi:application"],
            cwd=REPO, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"),
        )
        wait_for_port(port, daphne, log_path)
        bare_port = free_port()
        bare_log = root / "bare-relay.log"
        bare = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(bare_port),
             "benchmarks.workloads.bare_relay:application"],
            cwd=REPO, env={**os.environ, "BARE_RELAY_MODEL_URL": fake_url},
            stdout=subprocess.DEVNULL, stderr=open(bare_log, "wb"),
        )
        wait_for_port(bare_port, bare, bare_log)
        base = f"http://127.0.0.1:{port}"
        cookie = http_login(base, "bench")
        log(f"streaming: daphne on {base}, logged in; fake model at {fake_url}")

        def checked(stats: TurnStats, what: str, *, merged: bool = False) -> TurnStats:
            check(stats.text == text, f"{what}: the streamed text differs from the reply")
            if merged:  # a frame carries one delta or several that queued up
                check(1 <= stats.frames <= deltas, f"{what}: {stats.frames} content frames for {deltas} deltas")
            else:
                check(stats.frames == deltas, f"{what}: {stats.frames} content frames for {deltas} deltas")
            return stats

        async def measure_all():
            import openai

            from agents.llm.openai import OpenAIChatModel

            client = openai.AsyncOpenAI(base_url=fake_url, api_key="sk-bench-not-a-key", max_retries=0)
            model = OpenAIChatModel(base_url=fake_url, api_key="sk-bench-not-a-key", model="fake-model")
            ws, relayed, sdk, adapter = [], [], [], []
            # Round by round, one turn of each: the machine's speed drifts over a run by more than
            # the differences measured here, so the four see the same conditions.
            for cid in conversations:
                ws.append(checked(await ws_turn(port, cid, cookie), "WebSocket", merged=True))
                relayed.append(checked(await ws_turn(bare_port, "bare", ""), "bare relay"))
                sdk.append(checked(await sdk_turn(client), "raw SDK"))
                adapter.append(checked(await adapter_turn(model), "OpenAIChatModel"))
            log(f"streaming: {len(ws)} rounds, Modex's first content after {ws[-1].first * 1e3:.0f} ms")
            await client.close()
            await model.aclose()
            return ws[1:], relayed[1:], sdk[1:], adapter[1:]  # the first round is the warm-up

        ws, relayed, sdk, adapter = asyncio.run(measure_all())
    finally:
        for server in (daphne, bare):
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
        fake.stdin.close()
        fake.wait(timeout=10)

    def med(values) -> float:
        return statistics.median(values)

    result.durability["Modex sqlite (daphne)"] = "WAL, synchronous=NORMAL (app settings); every message persisted as it completes"
    shape = f"{chars:,} characters in {deltas:,} deltas of {CHUNK_CHARS}, no delay between deltas; median of {turns} turns"
    result.notes.append(f"streaming reply: {shape}")
    raw = "raw SDK: AsyncOpenAI chat.completions.create(stream=True)"
    result.rows += [
        Row(WORKLOAD, "time to first content frame · Modex over WebSocket", "ms", med(t.first for t in ws) * 1e3, raw,
            med(t.first for t in sdk) * 1e3,
            notes="Modex: message sent → first content fragment (lease, user message stored, context assembled, "
            "meter rendered, model request, relay); SDK: create() → first content delta",
            detail={"modex_s": [t.first for t in ws], "peer_s": [t.first for t in sdk]}),
        Row(WORKLOAD, "content deltas relayed per second · Modex over WebSocket", "deltas/s", med(t.rate for t in ws),
            raw, med(t.rate for t in sdk), better=HIGHER_IS_BETTER,
            notes=f"deltas that queue up while a frame goes out share the next frame (content + meter fragments); "
            f"median {med(t.frames for t in ws):,.0f} frames for {deltas:,} deltas; {shape}",
            detail={"modex": [t.rate for t in ws], "peer": [t.rate for t in sdk], "frames": [t.frames for t in ws]}),
        Row(WORKLOAD, "whole turn (send → composer idle) · Modex over WebSocket", "ms", med(t.total for t in ws) * 1e3,
            raw + ", whole stream", med(t.total for t in sdk) * 1e3,
            notes="includes persisting the reply and the final re-render",
            detail={"modex_s": [t.total for t in ws], "peer_s": [t.total for t in sdk]}),
        Row(WORKLOAD, "time to first content frame · bare WebSocket relay (daphne + the model adapter, nothing else)", "ms",
            med(t.first for t in relayed) * 1e3, raw, med(t.first for t in sdk) * 1e3,
            notes="the floor under the first row: benchmarks/workloads/bare_relay.py forwards each of the adapter's deltas as a "
            "frame, with no login, storage, assembly or rendering",
            subject="the bare relay", detail={"modex_s": [t.first for t in relayed], "peer_s": [t.first for t in sdk]}),
        Row(WORKLOAD, "time to first content frame · Modex over WebSocket vs the bare relay", "ms",
            med(t.first for t in ws) * 1e3, "bare WebSocket relay (row above)", med(t.first for t in relayed) * 1e3,
            notes="Modex's own part of its first frame: the lease, the stored message, the assembled context, "
            "the opening frames"),
        Row(WORKLOAD, "time to first content delta · Modex model adapter (OpenAIChatModel.stream)", "ms",
            med(t.first for t in adapter) * 1e3, raw, med(t.first for t in sdk) * 1e3,
            notes="breakdown: the adapter alone, in the client process", detail={"modex_s": [t.first for t in adapter]}),
        Row(WORKLOAD, "content deltas per second · Modex model adapter (OpenAIChatModel.stream)", "deltas/s",
            med(t.rate for t in adapter), raw, med(t.rate for t in sdk), better=HIGHER_IS_BETTER,
            notes="breakdown: the adapter alone", detail={"modex": [t.rate for t in adapter]}),
    ]
    return result


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-fake":
        serve_fake(int(sys.argv[2]))
    else:
        workload_main(run)
