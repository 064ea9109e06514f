"""openai-agents SQLiteSession, driven on its own (a script, not a module of the repo).

The SDK's top-level package is called ``agents``, like Modex's own Django app, so the two cannot
be imported in one process. ``benchmarks.workloads.store`` runs this file as a script (its
directory, not the repo, is ``sys.path[0]``), hands it the same JSON records Modex stores, and
reads back its timings::

    python benchmarks/peers/openai_agents_session.py --input in.json --db x.db --mode normal --out out.json

``--mode normal`` forces ``synchronous=NORMAL`` on every connection the session opens (equal
durability with Modex's sqlite backend); ``shipped`` leaves the SDK's own settings (WAL, SQLite's
default synchronous=FULL). Items are added one per ``add_items`` call, then ``get_items(limit=N)``
is timed ``--reads`` times after 5 untimed calls.
"""

import argparse
import asyncio
import json
import sqlite3
import time
from pathlib import Path

import agents
from agents.memory import SQLiteSession

SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class NormalSyncSession(SQLiteSession):
    # Relies on the SDK's own per-connection hook (it runs for every thread-local connection).
    @staticmethod
    def _configure_connection(conn: sqlite3.Connection) -> None:
        SQLiteSession._configure_connection(conn)
        conn.execute("PRAGMA synchronous=NORMAL")


def pragmas(conn: sqlite3.Connection) -> dict:
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {
        "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
        "synchronous": SYNCHRONOUS_NAMES.get(sync, str(sync)),
    }


async def main_async(args: argparse.Namespace) -> dict:
    data = json.loads(Path(args.input).read_text())
    cls = NormalSyncSession if args.mode == "normal" else SQLiteSession
    warm = cls("warm", db_path=args.db)
    for item in data["warm"]:
        await warm.add_items([item])
    session = cls("bench", db_path=args.db)
    settings = await asyncio.to_thread(lambda: pragmas(session._get_connection()))
    samples = []
    for item in data["items"]:
        started = time.perf_counter()
        await session.add_items([item])
        samples.append(time.perf_counter() - started)
    count = len(await session.get_items())
    for _ in range(5):
        await session.get_items(limit=args.tail)
    reads = []
    tail = []
    for _ in range(args.reads):
        started = time.perf_counter()
        tail = await session.get_items(limit=args.tail)
        reads.append(time.perf_counter() - started)
    warm.close()
    session.close()
    return {
        "append_s": samples,
        "read_s": reads,
        "count": count,
        "tail_ids": [item["id"] for item in tail],
        "pragmas": settings,
        "package": str(Path(agents.__file__).parent),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--mode", choices=["normal", "shipped"], required=True)
    parser.add_argument("--tail", type=int, default=50)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    Path(args.out).write_text(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
