"""Real servers: two daphne workers sharing one database (and Redis), ``make serve``'s launcher,
and the Redis channel layer between processes.

The model is the OpenAI-compatible adapter talking to the fake server of tests/fakes (in this
process, on loopback), so a worker can be caught inside a tool call and killed there.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model

from memory.scopes import SessionScope
from memory.transcript import INTERRUPTED_RESULT, validate_transcript
from tests.fakes.openai_server import FAKE_API_KEY, FakeToolCall, Hang, Reply, start_fake_server
from tests.scaleout.clients import Browser, WebSocket, free_port, wait_for_port
from tests.scaleout.conftest import Worker

BUSY = "A reply is still being written"
TURN_TTL = 6.0


def make_user(shared, username: str = "ada", password: str = "ada-pw-for-scaleout-1"):
    """A user the servers can log in: hashed as production hashes (the tests' own hasher is MD5)."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user = get_user_model()(username=username)
    user.password = PBKDF2PasswordHasher().encode(password, PBKDF2PasswordHasher().salt(), iterations=1000)
    user.save(using=shared.alias)
    return username, password


def start_daphne(shared, port: int, **env: str) -> Worker:
    worker = Worker([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "-v", "0",
                     "modex_web.asgi:application"], env=shared.child_env(**env), log=shared.logs / f"daphne-{port}.log")
    shared.workers.append(worker)
    wait_for_port(port, process=worker.process)
    return worker


@pytest.fixture
def fake_model():
    server = start_fake_server()
    yield server
    server.stop()


def layer_env(redis: str | None) -> dict[str, str]:
    return {"REDIS_URL": redis} if redis else {}


@pytest.fixture
def redis_or_none():
    from django.conf import settings

    return settings.MODEX_TEST_REDIS_URL


@pytest.mark.slow
def test_a_daphne_worker_killed_mid_turn_and_the_other_serves_the_next_one(shared, fake_model, redis_or_none):
    fake_model.script(
        Reply(tool_calls=[FakeToolCall("call_sub_1", "spawn_subagent", '{"agent": "helper", "task": "dig"}')]),
        Hang(seconds=120),  # the subagent's model call: worker A is inside the tool when it dies
    )
    fake_model.responder = lambda request: Reply(content="All done here.")
    env = {"OPENAI_BASE_URL": fake_model.url, "OPENAI_MODEL": "fake-model", "OPENAI_API_KEY": FAKE_API_KEY,
           "OPENAI_MAX_RETRIES": "0", "MODEX_TURN_LEASE_TTL": str(TURN_TTL), **layer_env(redis_or_none)}
    port_a, port_b = free_port(), free_port()
    worker_a, worker_b = start_daphne(shared, port_a, **env), start_daphne(shared, port_b, **env)
    username, password = make_user(shared)
    browser = Browser(port_a)
    browser.login(username, password)
    conversation = browser.new_conversation("default")

    async def on_a() -> None:
        ws = await WebSocket.connect(port_a, f"/ws/chat/{conversation}/", cookie=browser.cookie_header)
        await ws.send_json({"message": "Please ask your helper to dig.", "HEADERS": {}})
        await ws.until("spawn_subagent", timeout=60)  # the tool card: the call is running

    async_to_sync(on_a)()
    deadline = time.monotonic() + 30
    while len(fake_model.chat_requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fake_model.chat_requests) == 2, "the subagent's model call never arrived"
    worker_a.kill()
    killed_at = time.monotonic()

    async def on_b() -> tuple[int, str]:
        ws = await WebSocket.connect(port_b, f"/ws/chat/{conversation}/", cookie=browser.cookie_header)
        refused = 0
        # A page opened while the dead worker's lease still holds is told a reply is under way,
        # with its composer shut, until the lease runs out and the conversation is re-rendered.
        try:
            opening = "".join(await ws.until("still being written or tidied up", timeout=3))
        except TimeoutError:
            opening = ""
        if opening:
            refused += 1
            await ws.until("has ended", timeout=TURN_TTL + 30)
        while time.monotonic() - killed_at < TURN_TTL + 30:
            frames = await ws.chat("Are you still there?")
            if BUSY not in frames:
                await ws.close()
                return refused, frames
            refused += 1
            await asyncio.sleep(0.5)
        raise AssertionError("worker B never got the conversation")

    refused, frames = async_to_sync(on_b)()
    assert refused >= 1, "the dead worker's turn lease should have held the conversation for a while"
    assert "All done here." in frames
    assert time.monotonic() - killed_at <= TURN_TTL + 30

    messages = shared.bundle.messages.read(SessionScope(conversation))
    validate_transcript(messages)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert messages[2].tool_call_id == "call_sub_1" and messages[2].content == INTERRUPTED_RESULT
    assert messages[-1].content == "All done here."
    # Worker B renders the whole conversation, the repaired chain included.
    status, _, page = browser.request("GET", f"/conversations/{conversation}/", port=port_b)
    assert status == 200 and "All done here." in page
    assert worker_b.process.poll() is None


def socket_fds(pid: int) -> int:
    try:
        return sum(1 for fd in os.listdir(f"/proc/{pid}/fd") if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))
    except FileNotFoundError:
        return 0


def children_of(pid: int, name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and name in cmdline:
            found.append(int(entry))
    return sorted(found)


@pytest.mark.slow
def test_make_serve_runs_several_workers_on_one_port(shared, tmp_path, redis_or_none):
    """scripts/serve.sh as `make serve` runs it: deploy check, migrate, collectstatic, two
    workers on one port (SO_REUSEPORT) and two task workers (one for the cleanups ahead of need);
    a killed worker comes back."""
    port = free_port()
    env = shared.child_env(HOST="127.0.0.1", PORT=str(port), WORKERS="2", MODEX_TASKS_BACKEND="db",
                           DJANGO_STATIC_ROOT=str(tmp_path / "static"), **layer_env(redis_or_none))
    server = Worker(["bash", "scripts/serve.sh"], env=env, log=shared.logs / "serve.log")
    shared.workers.append(server)
    banner = ""
    while not banner.startswith("Modex serving"):  # migrate and collectstatic talk first
        banner = server.wait_for("noise", timeout=180)["noise"]
    assert banner.startswith(f"Modex serving on http://127.0.0.1:{port}/ with 2 web worker(s)"), banner
    wait_for_port(port, process=server.process)
    web = children_of(server.pid, "daphne")
    assert len(web) == 2 and len(children_of(server.pid, "db_worker")) == 2  # TASK_WORKERS' default
    assert len(children_of(server.pid, "--queue-name ahead")) == 1  # one for the cleanups ahead of need
    assert len(children_of(server.pid, "reap_tasks")) == 1  # requeues tasks of a worker that died

    browser = Browser(port)
    status, headers, page = browser.request("GET", "/accounts/login/")
    assert status == 200 and "script-src 'self'" in headers["content-security-policy"]
    stylesheet = re.search(r'href="(/static/css/modex\.[0-9a-f]{12}\.css)"', page)
    assert stylesheet, "collectstatic with the manifest should give hashed names"
    status, headers, css = browser.request("GET", stylesheet.group(1))
    assert status == 200 and "immutable" in headers["cache-control"] and ".seg" in css

    # Connections spread over both workers (the kernel picks a socket per connection).
    before = {pid: socket_fds(pid) for pid in web}
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(24)]
    deadline = time.monotonic() + 10
    while sum(socket_fds(pid) - before[pid] for pid in web) < len(held) and time.monotonic() < deadline:
        time.sleep(0.1)
    gained = {pid: socket_fds(pid) - before[pid] for pid in web}
    for sock in held:
        sock.close()
    assert all(n >= 1 for n in gained.values()), f"one worker accepted every connection: {gained}"

    os.kill(web[0], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(children_of(server.pid, "daphne")) < 2 or web[0] in children_of(server.pid, "daphne")):
        time.sleep(0.2)
    replaced = children_of(server.pid, "daphne")
    assert len(replaced) == 2 and web[0] not in replaced and web[1] in replaced
    assert all(browser.request("GET", "/accounts/login/")[0] == 200 for _ in range(10))

    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    assert "Modex stopped." in [line.get("noise") for line in server.markers("noise")]
    assert not [pid for pid in replaced + web if Path(f"/proc/{pid}").exists() and "daphne" in Path(
        f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]


def test_the_redis_channel_layer_reaches_another_process(shared, redis_url):
    from channels_redis.core import RedisChannelLayer

    listener = shared.spawn("channel", {"group": "scaleout-test"}, REDIS_URL=redis_url)
    ready = listener.wait_for("at", "listening", timeout=60)
    assert ready["layer"] == "RedisChannelLayer"
    layer = RedisChannelLayer(hosts=[redis_url])
    async_to_sync(layer.group_send)("scaleout-test", {"type": "chat.note", "text": "from another process"})
    assert listener.result()["message"] == {"type": "chat.note", "text": "from another process"}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("shared", ["sqlite"], indirect=True)
def test_an_idle_chat_socket_survives_on_the_redis_layer(shared, redis_url):
    """An idle consumer waits in BZPOPMIN for 5 s at a time: the connection's read timeout must be
    longer (redis-py 8 defaults to 5 s, which killed every socket idle for about 5 s)."""
    port = free_port()
    start_daphne(shared, port, REDIS_URL=redis_url)
    username, password = make_user(shared)
    browser = Browser(port)
    browser.login(username, password)
    conversation = browser.new_conversation("default")

    async def chat_after_a_pause() -> str:
        ws = await WebSocket.connect(port, f"/ws/chat/{conversation}/", cookie=browser.cookie_header)
        await asyncio.sleep(12)  # two blocking receives and more
        frames = await ws.chat("hello after a pause")
        await ws.close()
        return frames

    assert "hello after a pause" in async_to_sync(chat_after_a_pause)()
    assert "Timeout reading" not in (shared.logs / f"daphne-{port}.log").read_text()
