"""Two versions of Modex side by side: their chat turns interleaved over one database.

    .venv-bench/bin/python -m benchmarks.ab_turns TREE_A TREE_B [--turns 50]

TREE_A and TREE_B are checkouts of Modex (``git worktree add /tmp/a <rev>``) whose migrations
the current one can run. One fake OpenAI-compatible server (the streaming workload's reply),
one SQLite workspace migrated by this checkout, and one daphne per tree, started from that
tree. Turn by turn, alternating which tree goes first, each tree gets one message on a new
conversation; after two warm-up rounds it prints, per tree, the median time to the first
content frame, the whole turn, and the relay rate. The machine's speed drifts by more than the
differences this is for, so the trees share every round. Nothing here is a ``make bench``
figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common import setup_django, temp_root
from benchmarks.workloads import streaming as workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs=2, type=Path)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.trees]
    root = temp_root("ab")
    fake = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.workloads.streaming", "--serve-fake", "8000"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    servers = []
    try:
        fake_url = fake.stdout.readline().strip()
        setup_django(
            root / "workspace", OPENAI_BASE_URL=fake_url, OPENAI_API_KEY="sk-bench-not-a-key", OPENAI_MODEL="fake-model",
            DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost", MODEX_PERSISTENCE_BACKEND="sqlite", MODEX_TASKS_BACKEND="dummy",
            DJANGO_SECURE="false",
        )
        from django.contrib.auth import get_user_model

        from agents.chat.service import main_agents
        from agents.models import Conversation

        user = get_user_model().objects.create_user(username="bench", password=workload.PASSWORD)
        agent = main_agents()[0].name
        contenders = []  # (tree, port, session cookie)
        for tree in trees:
            port = workload.free_port()
            log_path = root / f"daphne-{port}.log"
            daphne = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "modex_web.asgi:application"],
                cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL,
                stderr=open(log_path, "wb"),
            )
            servers.append(daphne)
            workload.wait_for_port(port, daphne, log_path)
            contenders.append((tree, port, workload.http_login(f"http://127.0.0.1:{port}", "bench")))
        rounds = [[Conversation.objects.create(owner=user, agent=agent).pk for _ in trees] for _ in range(args.turns + 2)]

        async def measure() -> dict:
            results: dict = {tree: [] for tree in trees}
            for i, conversations in enumerate(rounds):
                order = list(zip(contenders, conversations, strict=True))
                for (tree, port, cookie), conversation in order if i % 2 == 0 else reversed(order):
                    stats = await workload.ws_turn(port, conversation, cookie)
                    if i >= 2:
                        results[tree].append(stats)
            return results

        for tree, turns in asyncio.run(measure()).items():
            print(f"{tree}: first content frame {statistics.median(t.first for t in turns) * 1e3:.2f} ms, "
                  f"whole turn {statistics.median(t.total for t in turns) * 1e3:.1f} ms, "
                  f"relay {statistics.median(t.rate for t in turns):,.0f} deltas/s (median of {len(turns)})")
    finally:
        for daphne in servers:
            daphne.terminate()
        fake.stdin.close()
        fake.wait(timeout=10)


if __name__ == "__main__":
    main()
