"""Real small model: a short chat with SmolLM2-135M-Instruct on llama-server, background memory
work on versus off.

The same conversation twice in one deployment (``benchmarks.real_chat``: real settings, SQLite,
every memory layer on, a small threshold so it compacts): first with the hooks that queue
background memory work left out (no experience review, no Dream Engine), then with them and a
real ``manage.py db_worker`` process running the reviews and consolidations while the user
"types" (a pause between turns). Through the model-call gate, the background calls wait while a
turn runs and give the model up when one starts, so a turn should not be slower with memory work
on; the goal is "on" within 1.2x of "off", for the first token and for the whole turn. The model
runs with one thread and two slots of 8192 tokens (``-t 1 -np 2 -c 16384``; the gate still sends
one request at a time), the chat reply capped at 256 tokens and the
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
PAUSE = 8.0  # longer than MODEX_BACKGROUND_AFTER_TURN (5 s): background work starts between turns


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
    with serve(template="own", slots=2, context=16384) as server:
        real_chat.prepare(base_url=server.url, model=server.model, threshold=1500, keep=500)
        off = asyncio.run(real_chat.chat(mode="off", texts=texts, background=False, pause=PAUSE, session_id="bench-off",
                                   server_log=server.log_path))
        worker = real_chat.start_worker()
        try:
            on = asyncio.run(real_chat.chat(mode="on", texts=texts, background=True, pause=PAUSE, session_id="bench-on",
                                      server_log=server.log_path))
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
    rows = [
        Row(WORKLOAD, "first token, memory work on vs off (median)", "s", on.median("first_token_s"), "memory work off",
            off.median("first_token_s"), notes="goal: at most 1.2×", detail=detail),
        Row(WORKLOAD, "first token, turns where no memory section changed (median)", "s",
            statistics.median(on_grown) if on_grown else None, "memory work off, same turns",
            statistics.median(off_grown) if off_grown else None,
            notes=f"{len(grown)} of {turns} turns; the others showed what background work wrote: "
                  f"{'; '.join(resent) or 'none'}"),
        Row(WORKLOAD, "turn time, memory work on vs off (median)", "s", on.median("turn_s"), "memory work off",
            off.median("turn_s"), notes="goal: at most 1.2× (replies vary in length: read with the first token)"),
        Row(WORKLOAD, "longest wait of a chat call at the gate (on)", "s", on.gate.get("chat_max_wait_s"), "",
            None, show_ratio=False, notes=f"{preempted} background call(s) gave the model up to a turn; "
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
    workload.notes.append(f"7. Real small model: {on.capabilities}; {turns} turns each, {PAUSE:g} s between turns; "
                          f"reply cap 256, summary cap 512 tokens; llama-server -t 1 -np 2 -c 16384")
    return workload


if __name__ == "__main__":
    workload_main(run)
