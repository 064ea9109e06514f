"""Load test of the chat socket: N users chat at once, over loopback, with the offline model.

    .venv/bin/python benchmarks/load_chat.py                  # one daphne process, N = 10, 50, 200
    .venv/bin/python benchmarks/load_chat.py --levels 10,100 --backend file
    .venv/bin/python benchmarks/load_chat.py --workers 2 --redis-url redis://127.0.0.1:6379/0
    .venv/bin/python benchmarks/load_chat.py --compare --start-redis   # 1 process vs 2 workers + Redis
    .venv/bin/python benchmarks/load_chat.py --url http://127.0.0.1:8000   # a running server

Without ``--url`` the script makes a throwaway workspace (migrated SQLite ``state.db``, or the
database of ``--database-url``), starts the server on a free loopback port with the built-in
offline model, and stops it at the end. The server is ``make serve``'s launcher
(scripts/serve.py): ``--workers`` daphne processes on one port (SO_REUSEPORT), the in-memory
channel layer, or the Redis one with ``--redis-url`` (``--start-redis`` runs a private
``redis-server`` on a free port for the duration). ``--compare`` runs one process with the
in-memory layer, then ``--workers`` (default 2) with Redis, and prints the two tables side by
side (``--out FILE`` also writes them as markdown). With ``--url`` it targets a running server
and must share its database (same ``MODEX_WORKSPACE`` / ``DATABASE_URL`` in the environment):
users, conversations and session cookies are made in-process through the ORM, never through
the login form.

For each level N it makes N users with one conversation each, opens N WebSockets at once, sends
one message on each (after one unreported warm-up chat) and reports: how many turns completed, first-token latency (message sent →
first streamed content fragment) p50/p99, whole-turn latency p50/p99, and errors (failed
handshakes, error fragments, timeouts). Loopback only; each level is bounded by ``--timeout``.
The WebSocket client is the scale-out tests' minimal RFC 6455 one (tests/scaleout/clients.py,
stdlib only), so nothing else is needed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(REPO))

from tests.scaleout.clients import WebSocket, free_port  # noqa: E402  (the one stdlib client)
from tests.scaleout.clients import wait_for_port as wait_listening  # noqa: E402

FIRST_TOKEN = "-content\">"  # a content chunk: <div hx-swap-oob="beforeend:#live-…-content">
TURN_DONE = 'data-state="idle"'
ERROR = 'class="notice error"'
MESSAGE = "Hello! Could you tell me, briefly, what you can do for me today?"


# -- set-up -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What serves the chats: how many daphne workers, and the channel layer's Redis (if any)."""

    workers: int = 1
    redis_url: str | None = None

    def describe(self, backend: str) -> str:
        layer = "Redis channel layer" if self.redis_url else "in-memory channel layer"
        database = "PostgreSQL" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "SQLite"
        return (f"{self.workers} daphne worker(s) on one port, {layer}, store backend={backend} on {database}, "
                "offline model (no delay), 127.0.0.1")


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
        DJANGO_SECURE="false",  # plain HTTP on loopback
        MODEX_PERSISTENCE_BACKEND=args.backend,
        MODEX_TASKS_BACKEND="dummy",  # background review tasks would only be recorded
        MODEX_LOG_LEVEL="WARNING",
    )
    if args.database_url:
        os.environ["DATABASE_URL"] = args.database_url
    else:
        os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ.pop("OPENAI_BASE_URL", None)
    return "127.0.0.1", free_port()


def wait_for_port(port: int, process: subprocess.Popen, log: Path, what: str) -> None:
    try:
        wait_listening(port, process=process)
    except AssertionError as exc:
        if process.poll() is None:
            process.terminate()
        raise SystemExit(f"{what}: {exc}; see {log}") from None


def start_server(port: int, setup: Setup) -> subprocess.Popen:
    """``make serve``'s launcher with ``setup.workers`` daphne workers and no task worker."""
    env = os.environ.copy()
    if setup.redis_url:
        env["REDIS_URL"] = setup.redis_url
    log = Path(os.environ["MODEX_WORKSPACE"]) / f"serve-{setup.workers}-{port}.log"
    server = subprocess.Popen(
        [sys.executable, "scripts/serve.py", "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(setup.workers), "--task-workers", "0"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
    )
    wait_for_port(port, server, log, "the server")
    return server


def stop_server(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def start_redis() -> tuple[str, subprocess.Popen]:
    """A private redis-server on a free loopback port, no persistence (``--start-redis``)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("--start-redis: redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    log = Path(os.environ["MODEX_WORKSPACE"]) / "redis.log"
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )
    wait_for_port(port, process, log, "redis-server")
    return f"redis://127.0.0.1:{port}/0", process


def make_users(n: int, run: str) -> list[tuple[str, str]]:
    """N users, one conversation each; returns (conversation id, session cookie) pairs."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from agents.chat.service import main_agents
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
    chatting: float = 0.0  # from the moment every socket may send to the last turn's end


async def one_chat(host: str, port: int, conversation_id: str, cookie: str, start: asyncio.Event, timeout: float) -> Outcome:
    outcome = Outcome()
    try:
        ws = await asyncio.wait_for(
            WebSocket.connect(port, f"/ws/chat/{conversation_id}/", cookie=cookie, host=host),
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
    chatting = time.perf_counter()
    level.outcomes = list(await asyncio.gather(*tasks))
    level.wall = time.perf_counter() - began
    level.chatting = time.perf_counter() - chatting
    return level


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def summarize(level: Level) -> dict[str, object]:
    firsts = [o.first_token for o in level.outcomes if o.first_token is not None]
    turns = [o.turn for o in level.outcomes if o.turn is not None and o.error is None]
    errors = [o.error for o in level.outcomes if o.error]
    return {
        "n": level.n, "completed": len(turns), "first_p50": percentile(firsts, 0.5), "first_p99": percentile(firsts, 0.99),
        "turn_p50": percentile(turns, 0.5), "turn_p99": percentile(turns, 0.99), "errors": errors, "wall": level.wall,
        "turns_per_s": len(turns) / level.chatting if level.chatting else 0.0,
    }


def report(levels: list[Level], title: str) -> str:
    lines = [
        title,
        f"{'N':>5} {'completed':>10} {'first p50':>10} {'first p99':>10} {'turn p50':>9} {'turn p99':>9} "
        f"{'errors':>7} {'wall s':>7} {'turns/s':>8}",
    ]
    for level in levels:
        row = summarize(level)
        errors = row["errors"]
        lines.append(
            f"{level.n:>5} {row['completed']:>5}/{level.n:<4} {_ms(row['first_p50']):>10} {_ms(row['first_p99']):>10} "
            f"{_ms(row['turn_p50']):>9} {_ms(row['turn_p99']):>9} {len(errors):>7} {level.wall:>7.1f} "
            f"{row['turns_per_s']:>8.1f}"
        )
        kinds = sorted(set(errors))
        if kinds:
            lines.append(f"      errors: {', '.join(f'{k} ×{errors.count(k)}' for k in kinds)}")
    lines.append("latencies in ms; first = message sent → first streamed content fragment; turn = → composer re-enabled;")
    lines.append("turns/s = completed turns / seconds from the start signal to the last turn's end")
    return "\n".join(lines)


def markdown(results: list[tuple[str, list[Level]]]) -> str:
    """The setups side by side, one row per level and setup."""
    lines = [
        "| N | setup | completed | first p50 ms | first p99 ms | turn p50 ms | turn p99 ms | errors | wall s | turns/s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    levels = sorted({level.n for _, run in results for level in run})
    for n in levels:
        for name, run in results:
            for level in (lv for lv in run if lv.n == n):
                row = summarize(level)
                lines.append(
                    f"| {n} | {name} | {row['completed']}/{n} | {_ms(row['first_p50'])} | {_ms(row['first_p99'])} | "
                    f"{_ms(row['turn_p50'])} | {_ms(row['turn_p99'])} | {len(row['errors'])} | {level.wall:.1f} | "
                    f"{row['turns_per_s']:.1f} |"
                )
    return "\n".join(lines)


def run_levels(host: str, port: int, levels: list[int], timeout: float, *, warm: int) -> list[Level]:
    # A few chats first, not reported: each worker's first turn pays for imports and caches
    # (with several workers, the kernel picks the worker, so warm several times over).
    asyncio.run(run_level(host, port, make_users(warm, "warm" + uuid.uuid4().hex[:4]), timeout))
    results = []
    for n in levels:
        pairs = make_users(n, uuid.uuid4().hex[:6])
        results.append(asyncio.run(run_level(host, port, pairs, timeout)))
        print(f"N={n}: done in {results[-1].wall:.1f} s", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="target a running server (sharing its database) instead of starting one")
    parser.add_argument("--levels", default="10,50,200", help="comma-separated numbers of concurrent chats")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "file"], help="store backend of the started server")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per chat before it counts as a timeout")
    parser.add_argument("--workers", type=int, default=None,
                        help="daphne workers of the started server (default 1; with --compare, 2)")
    parser.add_argument("--redis-url", help="Redis channel layer for the started server (loopback)")
    parser.add_argument("--start-redis", action="store_true", help="run a private redis-server for the duration")
    parser.add_argument("--database-url", help="the started server's DATABASE_URL (default: SQLite in a temp workspace)")
    parser.add_argument("--compare", action="store_true",
                        help="1 worker + in-memory layer, then --workers (2) + Redis; the tables side by side")
    parser.add_argument("--out", type=Path, help="also write the results as markdown to this file")
    args = parser.parse_args()
    levels = [int(n) for n in args.levels.split(",") if n.strip()]
    if not levels or min(levels) < 1 or max(levels) > 1000:
        raise SystemExit("--levels: 1 to 1000 chats per level")
    for url in (args.redis_url, args.database_url):
        if url and urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit(f"loopback only: {url} is not on 127.0.0.1 or localhost")
    if args.url and (args.compare or args.workers or args.redis_url or args.start_redis or args.database_url):
        raise SystemExit("--url targets a running server: --compare, --workers, --redis-url, --start-redis and "
                         "--database-url only apply to a server this script starts")
    if args.compare and not (args.redis_url or args.start_redis):
        raise SystemExit("--compare needs Redis: --redis-url URL or --start-redis")

    host, port = configure_environment(args)
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("loopback only: --url must point at 127.0.0.1 or localhost")
    import django

    django.setup()
    if args.url:
        print(report(run_levels(host, port, levels, args.timeout, warm=4), f"a running server at {args.url}"))
        return
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    redis = None
    try:
        redis_url = args.redis_url
        if args.start_redis:
            redis_url, redis = start_redis()
        if args.compare:
            setups = [Setup(1, None), Setup(args.workers or 2, redis_url)]
        else:
            setups = [Setup(args.workers or 1, redis_url)]
        results: list[tuple[str, list[Level]]] = []
        for setup in setups:
            port = free_port()
            server = start_server(port, setup)
            try:
                run = run_levels(host, port, levels, args.timeout, warm=4 * setup.workers)
            finally:
                stop_server(server)
            name = f"{setup.workers} worker{'s' if setup.workers > 1 else ''}, {'Redis' if setup.redis_url else 'in-memory'}"
            results.append((name, run))
            print(report(run, setup.describe(args.backend)))
            print()
        if len(results) > 1:
            print(markdown(results))
        if args.out:
            title = setups[-1].describe(args.backend).split(", ", 2)[2]
            args.out.write_text(f"Chat load over loopback ({title}; `{' '.join(sys.argv[1:])}`)\n\n"
                                f"{markdown(results)}\n")
    finally:
        if redis is not None:
            redis.terminate()
            redis.wait(timeout=10)


if __name__ == "__main__":
    main()
