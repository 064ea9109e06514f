"""Long-thread growth: what one more message costs when the thread already holds N.

Modex (``sqlite`` and ``file`` backends): one session is built up to N = 1k, 10k, 100k with
batched appends (5,000 per call, untimed), and at each size 200 single-message appends are
timed (median: fsync times on a shared disk have outliers). The per-message cost must stay
flat: the store writes the message and a small head, never the history.

LangGraph (``StateGraph(MessagesState)`` + ``SqliteSaver``, WAL, ``synchronous=NORMAL`` set on
its connection for equal durability): the thread is built to each size in one batched
``invoke`` (untimed), then single messages are appended with ``update_state`` (the cheapest
append: one checkpoint, no node runs). Every checkpoint serialises the whole message list, so
each append costs O(N) and growing a thread costs O(N²). Sizes it cannot reach within the time
cap (projected from the previous size, linearly) are reported as not reached.

Checks: the session/thread holds exactly the messages appended (count and the last ids).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from benchmarks.common import (
    Row,
    Workload,
    check,
    log,
    per_call,
    setup_django,
    sqlite_pragmas,
    sqlite_pragmas_of_django,
    temp_root,
    workload_main,
)
from benchmarks.histories import chat_history, to_langchain

WORKLOAD = "3. Long-thread growth"
BATCH = 5_000


def _modex(backend: str, root: Path, sizes: list[int], appends: int, pool) -> dict[int, list[float]]:
    from memory.scopes import SessionScope
    from memory.stores.registry import open_bundle

    store = open_bundle(backend, root=root / f"modex-{backend}").messages
    scope = SessionScope(f"growth-{backend}")
    used = 0
    results: dict[int, list[float]] = {}
    for size in sizes:
        while store.head(scope).count < size:
            need = min(BATCH, size - store.head(scope).count)
            store.append(scope, pool[used : used + need])
            used += need
        samples = []
        for m in pool[used : used + appends]:
            started = time.perf_counter()
            store.append(scope, [m])
            samples.append(time.perf_counter() - started)
        used += appends
        head = store.head(scope)
        check(head.count == used, f"Modex {backend}: {head.count} messages stored, {used} appended")
        check([m.id for m in store.read(scope, last=3)] == [m.id for m in pool[used - 3 : used]], "last ids differ")
        results[size] = samples
        log(f"growth: Modex {backend} N={size}: {per_call(samples).median * 1e6:.0f} µs per append (median)")
    return results


def _langgraph(root: Path, sizes: list[int], appends: dict[int, int], cap_s: float, pool) -> tuple[dict, dict, dict]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    path = root / "langgraph.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(conn)
    graph = StateGraph(MessagesState)
    graph.add_node("noop", lambda state: {})
    graph.add_edge(START, "noop")
    graph.add_edge("noop", END)
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "growth"}}
    lc_pool = to_langchain(pool)
    used = 0
    results: dict[int, list[float]] = {}
    skipped: dict[int, str] = {}
    disk: dict[int, int] = {}
    previous: tuple[int, float] | None = None
    for size in sizes:
        k = appends[size]
        if previous is not None:
            projected = previous[1] * size / previous[0]
            if projected * k > cap_s:
                skipped[size] = f"projected {projected:.1f} s per append × {k} > cap {cap_s:.0f} s"
                log(f"growth: LangGraph N={size}: skipped ({skipped[size]})")
                continue
        if size > used:
            app.invoke({"messages": lc_pool[used:size]}, config)
            used = size
        samples = []
        for m in lc_pool[used : used + k]:
            started = time.perf_counter()
            app.update_state(config, {"messages": [m]})
            samples.append(time.perf_counter() - started)
        used += k
        state = app.get_state(config).values["messages"]
        check(len(state) == used, f"LangGraph thread holds {len(state)} messages, {used} appended")
        check([m.id for m in state[-3:]] == [m.id for m in lc_pool[used - 3 : used]], "LangGraph last ids differ")
        results[size] = samples
        disk[size] = sum(os.path.getsize(p) for p in root.glob("langgraph.db*"))
        previous = (size, per_call(samples).median)
        log(f"growth: LangGraph N={size}: {previous[1] * 1e3:.1f} ms per append")
    pragmas = sqlite_pragmas(conn)
    conn.close()
    return results, skipped, {"disk": disk, "pragmas": pragmas}


def run(*, quick: bool) -> Workload:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    appends = 50 if quick else 200
    lg_appends = {1_000: 20, 10_000: 5, 100_000: 3}
    cap = 20.0 if quick else 45.0
    root = temp_root("growth")
    setup_django(root / "workspace")
    result = Workload("growth")
    pool = chat_history(count=sizes[-1] + appends * len(sizes) + 10, seed=31, profile="small")

    modex = {backend: _modex(backend, root, sizes, appends, pool) for backend in ("sqlite", "file")}
    result.durability["Modex sqlite"] = "WAL, synchronous={synchronous} (app settings)".format(**sqlite_pragmas_of_django())
    result.durability["Modex file"] = "fsync + fdatasync per append"
    lg, skipped, extra = _langgraph(root, sizes, lg_appends, cap, pool)
    result.durability["LangGraph SqliteSaver"] = (
        f"{extra['pragmas']['journal_mode']}, synchronous={extra['pragmas']['synchronous']} (set on its connection)"
    )
    result.notes.append(
        "LangGraph database size after each size: "
        + ", ".join(f"N={n:,}: {b / 1e6:.0f} MB" for n, b in extra["disk"].items())
    )

    first = sizes[0]
    for size in sizes:
        for backend in ("sqlite", "file"):
            mx = per_call(modex[backend][size])
            if size in lg:
                peer = per_call(lg[size])
                result.rows.append(
                    Row(WORKLOAD, f"cost of one more message at N={size:,} · Modex {backend}", "ms", mx.median * 1e3,
                        "LangGraph SqliteSaver, update_state", peer.median * 1e3,
                        notes=f"median of {appends} (Modex) and {len(lg[size])} (LangGraph) single appends",
                        detail={"modex": mx.summary(), "peer": peer.summary()}))
            else:
                result.rows.append(
                    Row(WORKLOAD, f"cost of one more message at N={size:,} · Modex {backend}", "ms", mx.median * 1e3,
                        "LangGraph SqliteSaver, update_state", None,
                        notes=f"LangGraph not reached: {skipped.get(size, 'not run')}", detail={"modex": mx.summary()}))
    last = sizes[-1]
    lg_last = max(lg) if lg else None
    for backend in ("sqlite", "file"):
        growth = per_call(modex[backend][last]).median / per_call(modex[backend][first]).median
        peer_growth = per_call(lg[lg_last]).median / per_call(lg[first]).median if lg_last and first in lg else None
        result.rows.append(
            Row(WORKLOAD, f"growth: cost at N={last:,} ÷ cost at N={first:,} · Modex {backend}", "×", growth,
                f"LangGraph (N={lg_last:,} ÷ N={first:,})" if lg_last else "LangGraph", peer_growth,
                notes="flat is 1×; LangGraph's per-append cost is linear in N (quadratic growth of a thread)"))
    return result


if __name__ == "__main__":
    workload_main(run)
