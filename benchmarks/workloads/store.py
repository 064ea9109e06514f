"""Store append + tail read: 10k messages appended one per call, then the last 50 read back.

Contenders, each on its own fresh database file or directory in one temporary dir:

* Modex ``sqlite`` backend (``open_bundle("sqlite")``, the app's Django settings: WAL,
  ``synchronous=NORMAL``) and ``file`` backend (fsync of the segment + fdatasync of the head on
  every append);
* openai-agents ``SQLiteSession`` (``add_items([item])`` per message, ``get_items(limit=50)``):
  once with ``synchronous=NORMAL`` forced on its connections (equal to Modex sqlite), once as
  shipped (WAL, SQLite's default ``synchronous=FULL``: an fsync per commit, the file backend's
  class of durability);
* the limit: raw ``sqlite3``, WAL, the same JSON records, one commit per message
  (``synchronous=NORMAL`` and ``FULL``) and all 10k in one batched transaction.

Every contender stores the same record per message (``Message.to_record()`` as JSON). Each
first appends a warm-up session (not timed). Three rounds (one in BENCH_QUICK), each running every
contender on fresh files; the median round is reported. Reported: mean seconds per append (total ÷ count,
so WAL checkpoints and fsync outliers are in it), and the median of 200 tail reads.
Modex tail reads are also timed cold (the memo of decoded records emptied before each read).
Checks: the stored count, that the tail read returns exactly the last 50 ids in order, and that
a cold read returns the same messages as a warm one.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import (
    Row,
    Workload,
    check,
    log,
    measure,
    per_call,
    setup_django,
    sqlite_pragmas,
    sqlite_pragmas_of_django,
    temp_root,
    workload_main,
)
from benchmarks.histories import chat_history

WORKLOAD = "2. Store append + tail read"
TAIL = 50
PEER_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "openai_agents_session.py"
WARMUP = 200
READS = 200


def _modex(backend: str, root: Path, messages, warm, *, round_: int) -> tuple[list[float], object, list[str]]:
    from memory.scopes import SessionScope
    from memory.stores.registry import open_bundle

    bundle = open_bundle(backend, root=root / f"modex-{backend}")
    store = bundle.messages
    for m in warm:
        store.append(SessionScope(f"warm-{backend}-{round_}"), [m])
    scope = SessionScope(f"bench-{backend}-{round_}")
    samples = []
    for m in messages:
        started = time.perf_counter()
        store.append(scope, [m])
        samples.append(time.perf_counter() - started)
    check(store.head(scope).count == len(messages), f"Modex {backend}: stored count differs")
    timing, tail = measure(lambda: store.read(scope, last=TAIL), repeat=READS, warmup=5)
    # The same read with the decoded-record memo emptied first: every record parsed and checked.
    cold, cold_tail = measure(lambda: store.read(scope, last=TAIL), repeat=READS, warmup=5, before=_forget_decoded)
    check(cold_tail == tail, f"Modex {backend}: a cold tail read differs from a warm one")
    return samples, (timing, cold), [m.id for m in tail]


def _forget_decoded() -> None:
    from memory.stores.codec import MESSAGE_TEXTS
    from memory.stores.file_session import LINES

    MESSAGE_TEXTS.clear()
    LINES.clear()


def _sdk_session(root: Path, messages, warm, *, normal: bool):
    """openai-agents SQLiteSession in its own process (its package is also called ``agents``)."""
    mode = "normal" if normal else "shipped"
    source = root / f"sdk-{mode}-input.json"
    out = root / f"sdk-{mode}-output.json"
    source.write_text(json.dumps({"warm": [m.to_record() for m in warm], "items": [m.to_record() for m in messages]}))
    subprocess.run(
        [sys.executable, str(PEER_SCRIPT), "--input", str(source), "--db", str(root / f"sdk-{mode}.db"), "--mode", mode,
         "--tail", str(TAIL), "--reads", str(READS), "--out", str(out)],
        check=True,
        cwd=root,
        timeout=900,
    )
    data = json.loads(out.read_text())
    check("site-packages" in data["package"], f"the peer imported the wrong 'agents' package: {data['package']}")
    check(data["count"] == len(messages), "SQLiteSession: stored count differs")
    return data["append_s"], per_call(data["read_s"]), data["tail_ids"], data["pragmas"]


def _raw_connect(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, session TEXT NOT NULL, seq INTEGER NOT NULL, "
        "data TEXT NOT NULL, UNIQUE (session, seq))"
    )
    return conn


def _raw_one_per_commit(path: Path, messages, warm, synchronous: str):
    conn = _raw_connect(path, synchronous)
    insert = "INSERT INTO messages (session, seq, data) VALUES (?, ?, ?)"
    for seq, m in enumerate(warm, 1):
        conn.execute("BEGIN")
        conn.execute(insert, ("warm", seq, json.dumps(m.to_record())))
        conn.execute("COMMIT")
    samples = []
    for seq, m in enumerate(messages, 1):
        started = time.perf_counter()
        conn.execute("BEGIN")
        conn.execute(insert, ("bench", seq, json.dumps(m.to_record())))
        conn.execute("COMMIT")
        samples.append(time.perf_counter() - started)
    count = conn.execute("SELECT count(*) FROM messages WHERE session = 'bench'").fetchone()[0]
    check(count == len(messages), "raw sqlite3: stored count differs")

    def tail():
        rows = conn.execute(
            "SELECT data FROM messages WHERE session = 'bench' ORDER BY seq DESC LIMIT ?", (TAIL,)
        ).fetchall()
        return [json.loads(data) for (data,) in reversed(rows)]

    timing, rows = measure(tail, repeat=READS, warmup=5)
    pragmas = sqlite_pragmas(conn)
    conn.close()
    return samples, timing, [r["id"] for r in rows], pragmas


def _raw_batched(path: Path, messages, warm) -> tuple[float, dict]:
    conn = _raw_connect(path, "NORMAL")
    insert = "INSERT INTO messages (session, seq, data) VALUES (?, ?, ?)"
    conn.execute("BEGIN")
    conn.executemany(insert, [("warm", seq, json.dumps(m.to_record())) for seq, m in enumerate(warm, 1)])
    conn.execute("COMMIT")
    started = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany(insert, [("bench", seq, json.dumps(m.to_record())) for seq, m in enumerate(messages, 1)])
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    count = conn.execute("SELECT count(*) FROM messages WHERE session = 'bench'").fetchone()[0]
    check(count == len(messages), "raw sqlite3 batched: stored count differs")
    pragmas = sqlite_pragmas(conn)
    conn.close()
    return elapsed / len(messages), pragmas


def run(*, quick: bool) -> Workload:
    count = 2_000 if quick else 10_000
    rounds = 1 if quick else 3
    root = temp_root("store")
    setup_django(root / "workspace")
    result = Workload("store")
    messages = chat_history(count=count, seed=21, profile="small")
    warm = chat_history(count=WARMUP, seed=22, profile="small")
    expected_tail = [m.id for m in messages[-TAIL:]]

    # Each round runs every contender once on fresh files; contenders alternate within a round,
    # so a burst of load from elsewhere on the machine lands on all of them, not one.
    append_us: dict[str, list[float]] = {}
    read_us: dict[str, list[float]] = {}

    def keep(name: str, samples: list[float] | None = None, read=None, per_append: float | None = None) -> None:
        value = per_append if per_append is not None else sum(samples) / len(samples)
        append_us.setdefault(name, []).append(value * 1e6)
        if read is not None:
            read_us.setdefault(name, []).append(read.median * 1e6)

    for r in range(rounds):
        where = root / f"round{r}"
        where.mkdir()
        log(f"store: round {r + 1}/{rounds}: {count} appends per contender")
        mx, (read, cold), ids = _modex("sqlite", where, messages, warm, round_=r)
        check(ids == expected_tail, "Modex sqlite: tail read is not the last 50 in order")
        keep("modex_sqlite", mx, read)
        read_us.setdefault("modex_sqlite_cold", []).append(cold.median * 1e6)
        mx, (read, cold), ids = _modex("file", where, messages, warm, round_=r)
        check(ids == expected_tail, "Modex file: tail read is not the last 50 in order")
        keep("modex_file", mx, read)
        read_us.setdefault("modex_file_cold", []).append(cold.median * 1e6)
        sdk, read, ids, p = _sdk_session(where, messages, warm, normal=True)
        check(ids == expected_tail, "SQLiteSession: tail read is not the last 50 in order")
        check(p["synchronous"] == "NORMAL", f"SQLiteSession did not take synchronous=NORMAL ({p})")
        keep("sdk_normal", sdk, read)
        result.durability["SQLiteSession (equalised)"] = f"{p['journal_mode']}, synchronous={p['synchronous']} (forced)"
        sdk, _, ids, p = _sdk_session(where, messages, warm, normal=False)
        check(ids == expected_tail, "SQLiteSession as shipped: tail read is not the last 50 in order")
        keep("sdk_shipped", sdk)
        result.durability["SQLiteSession (as shipped)"] = f"{p['journal_mode']}, synchronous={p['synchronous']}"
        raw, read, ids, p = _raw_one_per_commit(where / "raw-normal.db", messages, warm, "NORMAL")
        check(ids == expected_tail, "raw sqlite3: tail read is not the last 50 in order")
        keep("raw_normal", raw, read)
        result.durability["raw sqlite3, one commit per message"] = f"{p['journal_mode']}, synchronous={p['synchronous']}"
        raw, _, ids, p = _raw_one_per_commit(where / "raw-full.db", messages, warm, "FULL")
        keep("raw_full", raw)
        result.durability["raw sqlite3, fsync per commit"] = f"{p['journal_mode']}, synchronous={p['synchronous']}"
        per_append, p = _raw_batched(where / "raw-batch.db", messages, warm)
        keep("raw_batch", per_append=per_append)
        result.durability["raw sqlite3, batched"] = f"{p['journal_mode']}, synchronous={p['synchronous']}, one transaction"
    result.durability["Modex sqlite"] = "WAL, synchronous={synchronous} (app settings, read back from the connection)".format(
        **sqlite_pragmas_of_django()
    )
    result.durability["Modex file"] = "fsync of the segment file + fdatasync of the head slot per append (durable=True)"

    def a(name: str) -> float:
        return statistics.median(append_us[name])

    def rd(name: str) -> float:
        return statistics.median(read_us[name])

    def detail(*names: str) -> dict:
        return {n: {"append_us_per_round": append_us[n], "read_us_per_round": read_us.get(n)} for n in names}

    of_rounds = f"median of {rounds} rounds" if rounds > 1 else "1 round"
    metric = f"append {count:,} messages one per call (mean per append; {of_rounds})"
    reads = f"read the last {TAIL} of {count:,} (median of {READS} reads; {of_rounds})"
    sql_note = "equal durability: WAL + synchronous=NORMAL on both"
    rows = [
        Row(WORKLOAD, metric + " · Modex sqlite", "µs", a("modex_sqlite"), "openai-agents SQLiteSession (NORMAL)",
            a("sdk_normal"), notes=sql_note + "; the SDK's add_items hops to a worker thread per call",
            detail=detail("modex_sqlite", "sdk_normal")),
        Row(WORKLOAD, metric + " · Modex sqlite", "µs", a("modex_sqlite"), "limit: raw sqlite3, one commit per message",
            a("raw_normal"), notes=sql_note, detail=detail("modex_sqlite", "raw_normal")),
        Row(WORKLOAD, metric + " · Modex sqlite", "µs", a("modex_sqlite"), "limit: raw sqlite3, all in one transaction",
            a("raw_batch"), notes="the floor: no per-call commit at all", detail=detail("modex_sqlite", "raw_batch")),
        Row(WORKLOAD, metric + " · Modex file", "µs", a("modex_file"), "openai-agents SQLiteSession as shipped (FULL)",
            a("sdk_shipped"), notes="both sync to disk on every append (file: 2 syncs; SQLite FULL: 1 WAL fsync)",
            detail=detail("modex_file", "sdk_shipped")),
        Row(WORKLOAD, metric + " · Modex file", "µs", a("modex_file"), "limit: raw sqlite3, fsync per commit (FULL)",
            a("raw_full"), notes="equal durability: an fsync before each append returns",
            detail=detail("modex_file", "raw_full")),
        Row(WORKLOAD, reads + " · Modex sqlite", "µs", rd("modex_sqlite"), "openai-agents SQLiteSession get_items(limit=50)",
            rd("sdk_normal"), notes="Modex returns validated Message values (each record decoded once and kept "
            "by its bytes, as every turn re-reads the tail); the SDK returns json.loads dicts",
            detail=detail("modex_sqlite", "sdk_normal")),
        Row(WORKLOAD, reads + ", cold · Modex sqlite", "µs", rd("modex_sqlite_cold"),
            "openai-agents SQLiteSession get_items(limit=50)", rd("sdk_normal"),
            notes="the decoded-record memo emptied before each read: all 50 parsed and checked",
            detail={"modex_sqlite_cold": read_us["modex_sqlite_cold"], "sdk_normal": read_us["sdk_normal"]}),
        Row(WORKLOAD, reads + ", cold · Modex file", "µs", rd("modex_file_cold"),
            "openai-agents SQLiteSession get_items(limit=50)", rd("sdk_normal"),
            notes="the decoded-record memo emptied before each read",
            detail={"modex_file_cold": read_us["modex_file_cold"], "sdk_normal": read_us["sdk_normal"]}),
        Row(WORKLOAD, reads + " · Modex file", "µs", rd("modex_file"), "openai-agents SQLiteSession get_items(limit=50)",
            rd("sdk_normal"), detail=detail("modex_file", "sdk_normal")),
        Row(WORKLOAD, reads + " · Modex sqlite", "µs", rd("modex_sqlite"), "limit: raw sqlite3 SELECT … LIMIT 50 + json.loads",
            rd("raw_normal"), detail=detail("modex_sqlite", "raw_normal")),
    ]
    result.rows.extend(rows)
    return result


if __name__ == "__main__":
    workload_main(run)
