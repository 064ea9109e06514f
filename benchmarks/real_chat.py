"""Chatting with a real small model the way a user does: the pieces the real-model benchmark
(``benchmarks.workloads.real_model``) and the long check (``python -m benchmarks.real_chat``)
share.

A deployment in one directory: the real settings (``modex_web.settings``) over a fresh
workspace, SQLite, the ``db`` task backend, ``OPENAI_BASE_URL`` at a llama-server running
SmolLM2-135M-Instruct (``scripts/llama_server.py``), and a declaration whose agent has every
memory layer on (archive, core memory, experience) with a small threshold, so a short
conversation compacts. Turns run through ``Runtime.run_turn`` in this process, as the chat
socket runs them; background memory work runs in a real ``manage.py db_worker`` process, as
``make run`` starts it, so the model-call gate works across processes for real.

    python -m benchmarks.real_chat --turns 30          # the long check: planted facts, recall
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.common import REPO, log, setup_django, temp_root

BOT_YML = """\
persistence:
  backend: sqlite
model:
  provider: openai
  name: smollm2-135m
  context_window: 8192
agents:
  default:
    description: Assistant with every memory layer on.
    instructions: |
      You are a helpful assistant. Answer briefly. Remember what the user tells you about themselves.
    tools: [core_memory, archive_search, pruned_lookup, todo]
    tool_supplements: [experience]
    memory:
      archive_enabled: true
      core_enabled: true
      compression_threshold: {threshold}
      keep_tokens: {keep}
"""

#: (turn number, fact told, question asked later, the answer's key word)
FACTS = (
    (1, "My name is Ilse and I live in Ghent.", "What is my name?", "ilse"),
    (2, "I work as a glassblower.", "What is my job?", "glass"),
    (4, "My cat is called Pixel.", "What is my cat called?", "pixel"),
    (6, "I am allergic to peanuts.", "What am I allergic to?", "peanut"),
    (8, "My favourite colour is teal.", "What is my favourite colour?", "teal"),
)
FILLER = (
    "Tell me a short fact about the sea.",
    "Give me one tip for sleeping better.",
    "What is a good name for a small boat?",
    "Suggest a quick lunch.",
    "Say something kind about Mondays.",
    "How do I keep basil alive?",
    "Name a calm song.",
    "What should I read this weekend?",
)


def conversation(turns: int) -> list[tuple[str, str | None]]:
    """``turns`` user messages: facts early, filler between, the questions at the end. Each is
    (text, key word the reply should contain, or None)."""
    told = {n: fact for n, fact, _, _ in FACTS}
    questions = [(q, key) for n, _, q, key in FACTS if n <= max(1, turns - len(FACTS))]
    body = turns - len(questions)
    texts: list[tuple[str, str | None]] = []
    for n in range(1, body + 1):
        texts.append((told.get(n, FILLER[n % len(FILLER)]), None))
    return texts + questions


@dataclass
class TurnRecord:
    n: int
    text: str
    first_token_s: float | None
    turn_s: float
    failed: str | None = None
    cleanup: bool = False
    #: the turn's cleanup wrote the deterministic fallback summary, not the model's
    fallback_summary: bool | None = None
    reply: str = ""
    recalled: bool | None = None
    #: for a question: the parts of its first request that hold the key word (empty: the fact
    #: reached the model nowhere, so a miss is memory's, not the model's)
    key_in: list[str] | None = None
    #: the server's account of the turn's model calls (``server_tasks``): slot, prompt tokens it
    #: processed, prompt tokens it found in its cache, tokens generated
    calls: list[dict] = field(default_factory=list)
    #: where this turn's request first differs from the previous turn's (``first_change``)
    changed: str | None = None
    change: dict = field(default_factory=dict)
    #: the calls the server finished in the pause before this turn (background work)
    before: list[dict] = field(default_factory=list)
    #: a digest of the turn's first request (``request_segments``): equal digests, same request
    request: str = ""


@dataclass
class ChatRun:
    mode: str
    turns: list[TurnRecord] = field(default_factory=list)
    gate: dict = field(default_factory=dict)
    tasks: dict = field(default_factory=dict)
    ahead: dict = field(default_factory=dict)  # the cleanups ahead of need, by how they ended
    capabilities: str = ""

    def median(self, attr: str) -> float | None:
        values = [getattr(t, attr) for t in self.turns if getattr(t, attr) is not None]
        return statistics.median(values) if values else None


def prepare(*, base_url: str, model: str, threshold: int, keep: int) -> Path:
    """Configure Django over a fresh workspace for ``base_url``; returns the workspace."""
    workspace = temp_root("real-chat")
    bot = workspace / "bot.yml"
    bot.write_text(BOT_YML.format(threshold=threshold, keep=keep))
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_MODEL": model, "OPENAI_TIMEOUT": "120", "MODEX_SCOPES_FILE": str(bot),
           "MODEX_TASKS_BACKEND": "db", "MODEX_PERSISTENCE_BACKEND": "sqlite", "DJANGO_DEBUG": "false",
           "DJANGO_SECURE": "false"}
    setup_django(workspace, **env)
    return workspace


_TASK_LINE = re.compile(r"slot\s+(\w+).*?id\s+(\d+) \| task (\d+) \| (.*)")


def server_tasks(log_path: Path | None, offset: int) -> tuple[list[dict], int]:
    """The model calls llama-server finished since byte ``offset`` of its log, in order, as
    {slot, task, prompt_n (tokens it processed), cache_n (prompt tokens reused from the slot's
    cache), gen_n, prompt_ms}; and the new offset. Empty when there is no log."""
    if log_path is None or not log_path.exists():
        return [], offset
    with open(log_path, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1
    tasks: dict[int, dict] = {}
    for line in data[:end].decode(errors="replace").splitlines():
        match = _TASK_LINE.search(line)
        if match is None:
            continue
        slot, task, rest = int(match.group(2)), int(match.group(3)), match.group(4)
        entry = tasks.setdefault(task, {"slot": slot, "task": task})
        if m := re.search(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens", rest):
            entry["prompt_ms"], entry["prompt_n"] = float(m.group(1)), int(m.group(2))
        elif m := re.search(r"^\s*eval time =\s+[\d.]+ ms /\s+(\d+) tokens", rest):
            entry["gen_n"] = int(m.group(1))
        elif m := re.search(r"stop processing: n_tokens = (\d+)", rest):
            entry["n_tokens"] = int(m.group(1))
    done = []
    for entry in tasks.values():
        if "n_tokens" not in entry:
            continue
        if "prompt_n" in entry:
            entry["cache_n"] = max(0, entry["n_tokens"] - entry.get("gen_n", 0) - entry["prompt_n"])
        done.append(entry)
    return done, offset + end


def request_segments(context) -> list[tuple[str, str]]:
    """The request as (label, text) in the order the model reads it: instructions, each memory
    and supplement section as the system message holds it (without the recall sent with the
    latest message, ``MODEX_RECALL_PLACEMENT=message``), then each session message."""
    from memory.assembly.archive import RECALL_TAG

    first = context.messages[0] if context.messages else {}
    system = first.get("content", "") if first.get("role") == "system" else None
    segments = [("instructions", context.instructions)]
    for section in context.sections:
        text = section.text
        if system is not None and text not in system:
            text = "\n".join(part.text for part in section.parts if part.key != RECALL_TAG)
        segments.append((section.name, text))
    for i, message in enumerate(context.messages[1:], 1):
        segments.append((f"message {i} ({message.get('role')})", json.dumps(message, sort_keys=True)))
    return segments


def key_in(segments: list[tuple[str, str]], *, key: str, question: str) -> list[str]:
    """The labels of the request's parts (``request_segments``) that hold ``key``: a message by
    its text and its tool calls' arguments (not its JSON's names and escapes); the latest message
    (the question, with the recall sent at its head under ``MODEX_RECALL_PLACEMENT=message``)
    without the question's own words. Where the model was given the answer."""
    found = []
    for i, (label, part) in enumerate(segments):
        text = _message_text(part) if label.startswith("message ") else part
        if i == len(segments) - 1 and label.startswith("message "):
            text = text.replace(question, "")
        if key in text.lower():
            found.append(label)
    return found


def _message_text(part: str) -> str:
    try:
        message = json.loads(part)
    except ValueError:
        return part
    content = message.get("content")
    texts = [content if isinstance(content, str) else json.dumps(content or "", ensure_ascii=False)]
    texts += [str((call.get("function") or {}).get("arguments", "")) for call in message.get("tool_calls") or []]
    return "\n".join(texts)


def first_change(before: list[tuple[str, str]] | None, after: list[tuple[str, str]]) -> tuple[str, dict]:
    """Where ``after`` first differs from ``before`` (a section's name, or "message N"): all
    the prompt from there on is new to the server's cache; and the two texts there (cut to 600
    characters each), to read what changed."""
    if before is None:
        return "first request", {}
    for (label_a, text_a), (label_b, text_b) in zip(before, after, strict=False):
        if label_a != label_b:
            return f"{label_b} (was {label_a})", {"before": text_a[:600], "after": text_b[:600]}
        if text_a != text_b:
            return label_b, {"before": text_a[:600], "after": text_b[:600]}
    return "appended only", {}


#: Task workers, as ``make run`` starts them (``TASK_WORKERS``).
WORKERS = 2


def start_worker() -> list[subprocess.Popen]:
    """``manage.py db_worker`` processes over the same settings and workspace (as ``make run``
    starts them), logging to the workspace's worker.log."""
    log_file = open(Path(os.environ["MODEX_WORKSPACE"]) / "worker.log", "ab")  # noqa: SIM115 (the workers hold it)
    queues = ["ahead"] + ["*"] * (WORKERS - 1)  # as make run: the cleanups ahead have a worker of their own
    return [subprocess.Popen([sys.executable, "manage.py", "db_worker", "--no-reload", "--interval", "0.5",
                              "--queue-name", queue], cwd=REPO, env={**os.environ, "MODEX_LOG_LEVEL": "INFO"},
                             stdout=subprocess.DEVNULL, stderr=log_file)
            for queue in queues]


def stop_worker(workers: list[subprocess.Popen]) -> None:
    """SIGTERM lets each worker finish its task, which may be waiting at the gate: a minute, then kill."""
    for worker in workers:
        worker.terminate()
    deadline = time.monotonic() + 60
    for worker in workers:
        try:
            worker.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)


def task_outcomes() -> dict:
    from django_tasks_db.models import DBTaskResult

    counts: dict[str, int] = {}
    for path, status in DBTaskResult.objects.values_list("task_path", "status"):
        key = f"{path.rsplit('.', 1)[-1]}:{status}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def ahead_outcomes() -> dict:
    """How the cleanups ahead of need ended (their return value's status: committed, aborted
    when the model was taken back for chat, not_due ...), by status."""
    from django_tasks_db.models import DBTaskResult

    counts: dict[str, int] = {}
    for path, value in DBTaskResult.objects.values_list("task_path", "return_value"):
        if path.endswith(".cleanup_ahead"):
            key = value.get("status", "?") if isinstance(value, dict) else "not finished"
            counts[key] = counts.get(key, 0) + 1
    return counts


def worker_preemptions(to: str = "chat") -> int:
    """Background calls the workers gave up to a turn (``to="chat"``) or to a cleanup ahead
    (``"urgent memory work"``): their log says so each time."""
    path = Path(os.environ["MODEX_WORKSPACE"]) / "worker.log"
    return path.read_text(errors="replace").count(f"gave the model up to {to}") if path.exists() else 0


async def chat(*, mode: str, texts: list[tuple[str, str | None]], background: bool, pause: float,
               session_id: str, server_log: Path | None = None, typing: float = 0.0) -> ChatRun:
    """One conversation; ``background`` off leaves out the hooks that queue memory work (the
    review, the Dream Engine's binding), cleanup inside the turns stays on either way. The last
    ``typing`` seconds of each pause, the user types, and the runtime hears so as the chat page
    tells it (``chat.user_typing``: a signal every 2 s while typing)."""
    from agents.declarations import get_declaration
    from agents.runtime import cleanup
    from agents.runtime.events import (
        CleanupDone,
        CleanupStarted,
        ContentChunk,
        ContextReady,
        ReasoningChunk,
        TurnFailed,
        TurnFinished,
    )
    from agents.runtime.loop import Runtime
    from agents.runtime.services import get_services
    from memory.scopes import SessionScope

    services = get_services()
    installers = None if background else [("agents.runtime.cleanup.install", cleanup.install)]
    runtime = Runtime(services=services, installers=installers)
    agent = get_declaration().find("default")
    run = ChatRun(mode=mode)
    session = SessionScope(session_id)
    offset = server_log.stat().st_size if server_log is not None and server_log.exists() else 0
    previous = None
    for n, (text, key) in enumerate(texts, 1):
        before, offset = server_tasks(server_log, offset)  # what ran in the pause: background work
        started = time.perf_counter()
        first = None
        record = TurnRecord(n=n, text=text, first_token_s=None, turn_s=0.0, before=before)
        async for event in runtime.run_turn(agent=agent, user_id="1", session=session, text=text):
            if first is None and isinstance(event, ContentChunk | ReasoningChunk):
                first = time.perf_counter() - started
            if isinstance(event, ContextReady) and event.context is not None and event.step == 1:
                segments = request_segments(event.context)
                record.changed, record.change = first_change(previous, segments)
                record.request = hashlib.sha1(json.dumps(segments).encode("utf-8", "surrogatepass")).hexdigest()
                previous = segments
                if key is not None:
                    record.key_in = key_in(segments, key=key, question=text)
            if isinstance(event, CleanupStarted):
                record.cleanup = True
            elif isinstance(event, CleanupDone) and event.committed:
                record.fallback_summary = event.fallback_summary
            elif isinstance(event, TurnFailed):
                record.failed = f"{event.kind}: {event.error}"[:300]
            elif isinstance(event, TurnFinished) and event.message is not None:
                record.reply = (event.message.content or "")[:400]
        record.first_token_s, record.turn_s = first, time.perf_counter() - started
        if key is not None:
            record.recalled = key in record.reply.lower()
        if server_log is not None:
            await asyncio.sleep(0.3)  # the server logs a call's end just after its last chunk
            record.calls, offset = server_tasks(server_log, offset)
        run.turns.append(record)
        calls = ", ".join(f"slot {c['slot']}: {c.get('prompt_n')} new/{c.get('cache_n')} cached" for c in record.calls)
        log(f"  [{mode}] turn {n}: first token {first if first is None else round(first, 2)} s, "
            f"turn {record.turn_s:.1f} s{' (cleanup)' if record.cleanup else ''}{' FAILED' if record.failed else ''}"
            f"; changed from: {record.changed}; server: {calls}"
            + (f"; the fact in: {', '.join(record.key_in) or 'nothing sent'}, reply {'has' if record.recalled else 'lacks'} it"
               if record.key_in is not None else ""))
        await _pause(services, session, pause, typing if n < len(texts) else 0.0)  # the last reply is only read
    stats = services.gate.stats if services.gate is not None else None
    if stats is not None:
        run.gate = {"chat_calls": stats.chat_calls, "chat_max_wait_s": round(stats.chat_max_wait, 3),
                    "chat_waited_s": round(stats.chat_waited, 3), "preempted_here": stats.preempted}
    run.capabilities = services.model.capabilities.describe()
    return run


async def _pause(services, session, pause: float, typing: float) -> None:
    """The user reads the reply (background work may start meanwhile), then types the next
    message for ``typing`` seconds, signalled as the chat page does."""
    await asyncio.sleep(max(0.0, pause - typing))
    typed = 0.0
    while typed < typing:
        if services.gate is not None:
            await asyncio.to_thread(services.gate.mark_typing, services.model, session=session)
        step = min(2.0, typing - typed)
        await asyncio.sleep(step)
        typed += step


def after_cleanup(run: ChatRun) -> dict:
    """The turns after the first cleanup (their context holds archived history to recall):
    median first token, and the prompt tokens the server read anew against those it found cached
    in the turns' own calls."""
    first = next((t.n for t in run.turns if t.cleanup), None)
    later = [t for t in run.turns if first is not None and t.n > first]
    firsts = [t.first_token_s for t in later if t.first_token_s is not None]
    return {
        "turns": len(later),
        "first_token_median_s": statistics.median(firsts) if firsts else None,
        "prompt_tokens_read": sum(c.get("prompt_n", 0) for t in later for c in t.calls),
        "prompt_tokens_cached": sum(c.get("cache_n", 0) for t in later for c in t.calls),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="A long chat with SmolLM2 on llama-server, memory on")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--pause", type=float, default=8.0, help="seconds between turns (the user reading and typing)")
    parser.add_argument("--typing", type=float, default=0.0, help="of which the last seconds typing (signalled)")
    parser.add_argument("--slots", type=int, default=2, help="llama-server slots (-np; the window of each is 8192)")
    parser.add_argument("--threshold", type=int, default=1500)
    parser.add_argument("--keep", type=int, default=500)
    parser.add_argument("--template", default="own", help="own | tools | strict (scripts/llama_server.py)")
    parser.add_argument("--greedy", action="store_true", help="temperature 0: the same prompt, the same reply")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "real_chat.json")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from scripts.llama_server import serve

    with serve(template=args.template, slots=args.slots, context=8192 * args.slots, greedy=args.greedy) as server:
        prepare(base_url=server.url, model=server.model, threshold=args.threshold, keep=args.keep)
        worker = start_worker()
        try:
            run = asyncio.run(chat(mode="on", texts=conversation(args.turns), background=True, pause=args.pause,
                                   session_id="long-chat", typing=args.typing, server_log=server.log_path))
            time.sleep(30)  # the worker catches up on the memory work the chat kept waiting
        finally:
            stop_worker(worker)
        run.tasks = task_outcomes()
        run.ahead = ahead_outcomes()
        run.gate["preempted_in_worker"] = worker_preemptions()
        run.gate["yielded_to_cleanup_ahead_in_worker"] = worker_preemptions("urgent memory work")
    args.out.write_text(json.dumps(asdict(run), indent=2))
    from django.conf import settings

    failed = [t for t in run.turns if t.failed]
    recalled = [t for t in run.turns if t.recalled is not None]
    print(json.dumps({
        "turns": len(run.turns), "failed": len(failed), "cleanups": sum(t.cleanup for t in run.turns),
        "cleanup_turns_s": [round(t.turn_s, 1) for t in run.turns if t.cleanup], "cleanups_ahead": run.ahead,
        "summaries_by_the_model": sum(t.fallback_summary is False for t in run.turns),
        "fallback_summaries": sum(t.fallback_summary is True for t in run.turns),
        "first_token_median_s": run.median("first_token_s"), "turn_median_s": run.median("turn_s"),
        "recalled": f"{sum(bool(t.recalled) for t in recalled)}/{len(recalled)}",
        "facts_sent": f"{sum(bool(t.key_in) for t in recalled)}/{len(recalled)}", "gate": run.gate, "tasks": run.tasks,
        "recall_placement": settings.MODEX_RECALL_PLACEMENT,
        "after_the_first_cleanup": after_cleanup(run),
        "capabilities": run.capabilities,
    }, indent=2))


if __name__ == "__main__":
    main()
