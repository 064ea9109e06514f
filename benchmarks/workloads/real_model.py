"""Real small model: a short chat with SmolLM2-135M-Instruct on llama-server, background memory
work on versus off.

The same conversation twice in one deployment (``benchmarks.real_chat``: real settings, SQLite,
every memory layer on, a small threshold so it compacts): first with the hooks that queue
background memory work left out (no experience review, no Dream Engine), then with them and a
real ``manage.py db_worker`` process running the reviews and consolidations while the user
reads and types (a pause between turns, the last seconds of it typing, signalled as the chat page
does). Through the model-call gate, the background calls wait while a turn runs and give the model
up when the user starts typing (or when a turn starts), so a turn should not be slower with memory
work on; the goal is "on" within 1.2x of "off", for the first token and for the whole turn. The model
runs with one thread and two slots of 8192 tokens (``-t 1 -np 2 -c 16384``; the gate still sends
one request at a time), greedy (``--temp 0``: both runs get the same replies, so their turns read
contexts of the same length), the chat reply capped at 256 tokens and the
compact summary at 512 (``MODEX_MAX_TOKENS_*``), to keep the run within minutes.

Checks: no turn failed in either run; in the "on" run the background work really ran (tasks
finished in the worker) and no chat call waited at the gate longer than a second.

Skipped, with a line saying so, when no llama-server is found (``LLAMA_SERVER``, the PATH, or
the build ``make smoke-real`` leaves in ``.cache/real-model/``): it is never built here.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from benchmarks.common import REPO, CheckFailed, Row, Workload, check, log, workload_main

WORKLOAD = "7. Real small model"
#: Between turns the user reads for 9 s, then types for 3 (a short message; the chat page tells
#: the server, and background work gives the model up then): background work, which starts once
#: chat has been quiet MODEX_BACKGROUND_AFTER_TURN (5 s), runs for 4 s of each pause.
PAUSE = 12.0
TYPING = 3.0


def run(*, quick: bool) -> Workload:
    import os
    import sys

    sys.path.insert(0, str(REPO))
    from scripts.llama_server import find_server, serve

    workload = Workload(name="real_model")
    if find_server() is None:
        workload.notes.append("7. Real small model: skipped, no llama-server found (make smoke-real builds one, "
                              "or set LLAMA_SERVER)")
        log("no llama-server: the real-model rows are skipped")
        return workload
    os.environ.update({"MODEX_MAX_TOKENS_REPLY": "256", "MODEX_MAX_TOKENS_SUMMARY": "512"})
    from benchmarks import real_chat

    turns = 4 if quick else 6
    texts = real_chat.conversation(turns + len(real_chat.FACTS))[:turns]
    # Two slots, one call at a time (the gate's default for a local server): the chat's prompt stays
    # cached in its slot while background work uses the other (README "Local model servers").
    # Greedy replies (temperature 0): the same request gets the same reply, so "off" and "on" hold
    # conversations of the same length and a turn's first token compares like with like (sampled,
    # one run's replies were twice the other's and its turns read a longer context).
    with serve(template="own", slots=2, context=16384, greedy=True) as server:
        real_chat.prepare(base_url=server.url, model=server.model, threshold=1500, keep=500)
        off = asyncio.run(real_chat.chat(mode="off", texts=texts, background=False, pause=PAUSE, session_id="bench-off",
                                   server_log=server.log_path, typing=TYPING))
        worker = real_chat.start_worker()
        try:
            on = asyncio.run(real_chat.chat(mode="on", texts=texts, background=True, pause=PAUSE, session_id="bench-on",
                                      server_log=server.log_path, typing=TYPING))
            time.sleep(2)
        finally:
            real_chat.stop_worker(worker)
        tasks = real_chat.task_outcomes()
    preempted = real_chat.worker_preemptions()
    done = sum(n for key, n in tasks.items() if key.endswith(":SUCCESSFUL") or key.endswith(":FAILED"))
    failures = [t.failed for r in (off, on) for t in r.turns if t.failed]
    detail = {"off": [t.__dict__ for t in off.turns], "on": [t.__dict__ for t in on.turns], "tasks": tasks,
              "gate_on": on.gate, "preempted_in_worker": preempted, "capabilities": on.capabilities}
    # Turns whose request only grew (no memory section changed since the turn before): what the
    # background work costs a turn besides showing what it wrote, against the same turns "off".
    grown = {t.n for t in on.turns if t.changed == "appended only" and t.first_token_s is not None}
    on_grown = [t.first_token_s for t in on.turns if t.n in grown]
    off_grown = [t.first_token_s for t in off.turns if t.n in grown and t.first_token_s is not None]
    resent = [f"turn {t.n}: {t.changed}, {sum(c.get('prompt_n') or 0 for c in t.calls if c['slot'] == 0)} tokens re-read"
              for t in on.turns if t.changed not in ("appended only", "first request")]
    # Turn 1 is left out: "off" runs first and reads the system prompt cold, "on" then finds the
    # same prompt cached (0.1 s against 0.8-1.4 s), which would flatter "on" in every median.
    def later(run, attr: str) -> float | None:
        values = [getattr(t, attr) for t in run.turns[1:] if getattr(t, attr) is not None]
        return statistics.median(values) if values else None

    # Greedy replies: a turn whose request is the same in both runs (digests of every section and
    # message equal) compares like with like.
    paired = [(a.first_token_s, b.first_token_s) for a, b in zip(on.turns[1:], off.turns[1:])
              if a.request and a.request == b.request and a.first_token_s is not None and b.first_token_s is not None]
    rows = [
        Row(WORKLOAD, "first token, memory work on vs off (median of turns 2+)", "s", later(on, "first_token_s"),
            "memory work off", later(off, "first_token_s"), notes="goal: at most 1.2×", detail=detail),
        Row(WORKLOAD, "first token, the same request on vs off (sum)", "s",
            sum(a for a, _ in paired) if paired else None, "memory work off, same requests",
            sum(b for _, b in paired) if paired else None,
            notes=f"{len(paired)} turn(s) sent the same request in both runs (greedy replies)"),
        Row(WORKLOAD, "first token, turns where no memory section changed (median)", "s",
            statistics.median(on_grown) if on_grown else None, "memory work off, same turns",
            statistics.median(off_grown) if off_grown else None,
            notes=f"{len(grown)} of {turns} turns; the others showed what background work wrote: "
                  f"{'; '.join(resent) or 'none'}"),
        Row(WORKLOAD, "turn time, memory work on vs off (median of turns 2+)", "s", later(on, "turn_s"),
            "memory work off", later(off, "turn_s"), notes="goal: at most 1.2× (greedy: the same replies in both runs)"),
        Row(WORKLOAD, "longest wait of a chat call at the gate (on)", "s", on.gate.get("chat_max_wait_s"), "",
            None, show_ratio=False, notes=f"{preempted} background call(s) gave the model up to chat "
                                          f"(a user typing or a turn); "
                                          f"{done} background task(s) finished during the run"),
    ]
    try:
        check(not failures, f"turns failed: {failures}")
        check(done > 0, f"no background work ran in the 'on' run: {tasks}")
        check((on.gate.get("chat_max_wait_s") or 0) < 1.0, f"a chat call waited at the gate: {on.gate}")
    except CheckFailed as exc:
        for row in rows:
            row.failed(str(exc))
    workload.rows = rows
    workload.notes.append(f"7. Real small model: {on.capabilities}; {turns} turns each, {PAUSE:g} s between turns, "
                          f"the last {TYPING:g} of them typing; "
                          f"reply cap 256, summary cap 512 tokens; llama-server -t 1 -np 2 -c 16384 --temp 0")
    return workload


if __name__ == "__main__":
    workload_main(run)
