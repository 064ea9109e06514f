"""Load test of the chat socket: N users chat at once, over loopback, with the offline model.

    .venv/bin/python benchmarks/load_chat.py                  # starts daphne on 127.0.0.1, N = 10, 50, 200
    .venv/bin/python benchmarks/load_chat.py --levels 10,100 --backend file
    .venv/bin/python benchmarks/load_chat.py --url http://127.0.0.1:8000   # a running server

Without ``--url`` the script makes a throwaway workspace (migrated SQLite ``state.db``), starts
``daphne modex_web.asgi:application`` on a free loopback port with the built-in offline model,
and stops it at the end. With ``--url`` it targets a running server and must share its database
(same ``MODEX_WORKSPACE`` / ``DATABASE_URL`` in the environment): users, conversations and
session cookies are made in-process through the ORM, never through the login form.

For each level N it makes N users with one conversation each, opens N WebSockets at once, sends
one message on each (after one unreported warm-up chat) and reports: how many turns completed, first-token latency (message sent →
first streamed content fragment) p50/p99, whole-turn latency p50/p99, and errors (failed
handshakes, error fragments, timeouts). Loopback only; each level is bounded by ``--timeout``.
The WebSocket client is a minimal RFC 6455 one (stdlib only), so nothing else is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
FIRST_TOKEN = "-content\">"  # a content chunk: <div hx-swap-oob="beforeend:#live-…-content">
TURN_DONE = 'data-state="idle"'
ERROR = 'class="notice error"'
MESSAGE = "Hello! Could you tell me, briefly, what you can do for me today?"


# -- a minimal WebSocket client ---------------------------------------------------------------


class WebSocket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int, path: str, *, cookie: str, origin: str) -> WebSocket:
        reader, writer = await asyncio.open_connection(host, port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {origin}\r\nCookie: {cookie}\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        status = await reader.readline()
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin1").partition(":")
            headers[name.strip().lower()] = value.strip()
        expected = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        if b" 101 " not in status or headers.get("sec-websocket-accept") != expected:
            writer.close()
            raise ConnectionError(f"handshake refused: {status.decode('latin1').strip()}")
        return cls(reader, writer)

    async def send_text(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        size = len(payload)
        head = bytes([0x81])
        if size < 126:
            head += bytes([0x80 | size])
        elif size < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", size)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", size)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(head + mask + masked)
        await self.writer.drain()

    async def receive(self) -> str | None:
        """The next text message (None when the server closed the socket)."""
        parts: list[bytes] = []
        while True:
            first, second = await self.reader.readexactly(2)
            opcode, size = first & 0x0F, second & 0x7F
            if size == 126:
                size = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            data = await self.reader.readexactly(size)
            if opcode == 0x8:
                return None
            if opcode == 0x9:  # ping → pong
                self.writer.write(bytes([0x8A, 0x80 | len(data)]) + b"\0\0\0\0" + data)
                continue
            if opcode in (0x1, 0x0):
                parts.append(data)
                if first & 0x80:
                    return b"".join(parts).decode()

    async def close(self) -> None:
        try:
            self.writer.write(bytes([0x88, 0x82]) + b"\0\0\0\0" + struct.pack("!H", 1000))
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
            pass
        self.writer.close()


# -- set-up -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def configure_environment(args: argparse.Namespace) -> tuple[str, int]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings")
    if args.url:
        parts = urlsplit(args.url)
        return parts.hostname or "127.0.0.1", parts.port or 80
    workspace = Path(tempfile.mkdtemp(prefix="modex-load-"))
    os.environ.update(
        MODEX_WORKSPACE=str(workspace),
        DJANGO_SECRET_KEY="modex-load-test-secret-key-not-for-production-0000",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        MODEX_PERSISTENCE_BACKEND=args.backend,
        MODEX_LOG_LEVEL="WARNING",
    )
    os.environ.pop("OPENAI_BASE_URL", None)
    return "127.0.0.1", free_port()


def start_server(port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "modex_web.asgi:application"],
        cwd=REPO,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=open(Path(os.environ["MODEX_WORKSPACE"]) / "daphne.log", "wb"),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"daphne exited with {server.returncode}; see {os.environ['MODEX_WORKSPACE']}/daphne.log")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit("daphne did not start within 30 s")


def make_users(n: int, run: str) -> list[tuple[str, str]]:
    """N users, one conversation each; returns (conversation id, session cookie) pairs."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from agents.chat import main_agents
    from agents.models import Conversation

    User = get_user_model()
    users = [User(username=f"load-{run}-{i}") for i in range(n)]
    for user in users:
        user.set_unusable_password()
    users = User.objects.bulk_create(users)
    agent = main_agents()[0].name
    pairs = []
    for user in users:
        conversation = Conversation.objects.create(owner=user, agent=agent, title="load test")
        client = Client()
        client.force_login(user)
        pairs.append((conversation.pk, f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"))
    return pairs


# -- one level ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    first_token: float | None = None
    turn: float | None = None
    error: str | None = None


@dataclass
class Level:
    n: int
    outcomes: list[Outcome] = field(default_factory=list)
    wall: float = 0.0


async def one_chat(host: str, port: int, conversation_id: str, cookie: str, start: asyncio.Event, timeout: float) -> Outcome:
    outcome = Outcome()
    try:
        ws = await asyncio.wait_for(
            WebSocket.connect(host, port, f"/ws/chat/{conversation_id}/", cookie=cookie, origin=f"http://{host}:{port}"),
            timeout,
        )
    except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
        outcome.error = f"connect: {type(exc).__name__}: {exc}"[:120]
        return outcome
    try:
        await start.wait()
        sent = time.perf_counter()
        await ws.send_text(json.dumps({"message": MESSAGE, "HEADERS": {"HX-Request": "true"}}))

        async def read_turn() -> None:
            while True:
                frame = await ws.receive()
                if frame is None:
                    outcome.error = "closed by the server"
                    return
                if ERROR in frame:
                    outcome.error = "error fragment"
                if outcome.first_token is None and FIRST_TOKEN in frame:
                    outcome.first_token = time.perf_counter() - sent
                if TURN_DONE in frame:
                    outcome.turn = time.perf_counter() - sent
                    return

        await asyncio.wait_for(read_turn(), timeout)
    except asyncio.TimeoutError:
        outcome.error = "timeout"
    except (OSError, asyncio.IncompleteReadError) as exc:
        outcome.error = f"{type(exc).__name__}"
    finally:
        await ws.close()
    return outcome


async def run_level(host: str, port: int, pairs: list[tuple[str, str]], timeout: float) -> Level:
    level = Level(len(pairs))
    start = asyncio.Event()
    began = time.perf_counter()
    tasks = [asyncio.create_task(one_chat(host, port, cid, cookie, start, timeout)) for cid, cookie in pairs]
    await asyncio.sleep(0.5)  # let the handshakes happen first: the level measures chatting
    start.set()
    level.outcomes = list(await asyncio.gather(*tasks))
    level.wall = time.perf_counter() - began
    return level


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def report(levels: list[Level], backend: str) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.0f}"

    lines = [
        f"backend={backend} model=offline (no delay) host=127.0.0.1 daphne (1 process)",
        f"{'N':>5} {'completed':>10} {'first p50':>10} {'first p99':>10} {'turn p50':>9} {'turn p99':>9} {'errors':>7} {'wall s':>7}",
    ]
    for level in levels:
        firsts = [o.first_token for o in level.outcomes if o.first_token is not None]
        turns = [o.turn for o in level.outcomes if o.turn is not None and o.error is None]
        errors = [o.error for o in level.outcomes if o.error]
        lines.append(
            f"{level.n:>5} {len(turns):>5}/{level.n:<4} {ms(percentile(firsts, 0.5)):>10} {ms(percentile(firsts, 0.99)):>10} "
            f"{ms(percentile(turns, 0.5)):>9} {ms(percentile(turns, 0.99)):>9} {len(errors):>7} {level.wall:>7.1f}"
        )
        kinds = sorted({e for e in errors})
        if kinds:
            lines.append(f"      errors: {', '.join(f'{k} ×{errors.count(k)}' for k in kinds)}")
    lines.append("latencies in ms; first = message sent → first streamed content fragment; turn = → composer re-enabled")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="target a running server (sharing its database) instead of starting one")
    parser.add_argument("--levels", default="10,50,200", help="comma-separated numbers of concurrent chats")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "file"], help="store backend of the started server")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per chat before it counts as a timeout")
    args = parser.parse_args()
    levels = [int(n) for n in args.levels.split(",") if n.strip()]
    if not levels or min(levels) < 1 or max(levels) > 1000:
        raise SystemExit("--levels: 1 to 1000 chats per level")

    host, port = configure_environment(args)
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("loopback only: --url must point at 127.0.0.1 or localhost")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    server = None
    if not args.url:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        server = start_server(port)
    try:
        # One chat first, not reported: the server's first turn pays for imports and caches.
        asyncio.run(run_level(host, port, make_users(1, "warm" + uuid.uuid4().hex[:4]), args.timeout))
        results = []
        for n in levels:
            pairs = make_users(n, uuid.uuid4().hex[:6])
            results.append(asyncio.run(run_level(host, port, pairs, args.timeout)))
            print(f"N={n}: done in {results[-1].wall:.1f} s", file=sys.stderr)
        print(report(results, args.backend if not args.url else "(server's)"))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
