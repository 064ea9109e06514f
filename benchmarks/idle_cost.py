"""What a pause between turns costs: a turn's way to its model request, back to back and after idling.

    .venv-bench/bin/python -m benchmarks.idle_cost [--turns 100] [--gaps 0,0.005,0.05]

One process, the real settings over a throwaway SQLite workspace, the offline model. For each
gap, ``--turns`` chat turns on new conversations of one user (holding ``--history`` messages
of a synthetic chat, cut to end on a whole turn), each started ``gap`` seconds after the last
one ended, as a person's turns are; then as many round trips to a store thread
(``memory.threads.run_blocking`` of a no-op), each ``gap`` seconds after the last. Per gap it
prints the median time from ``Runtime.run_turn`` to the step's ``ContextReady`` (the turn
lease, the stored message and the assembled context: the runtime's part before the model
request) and to the first content chunk, and the round trip's median.

The code run is the same at every gap; what changes is the machine's state when it starts
(processor caches, sleeping threads and processors woken up). The streaming workload's turns
are all of the paused kind: this says how much of its first frame that accounts for. Nothing
here is a benchmark figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from benchmarks.common import setup_django, temp_root

MESSAGE = "Please write me a long answer."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--gaps", default="0,0.005,0.05", help="seconds between turns, comma-separated")
    parser.add_argument("--history", type=int, default=0, help="messages each conversation holds before its turn")
    args = parser.parse_args()
    gaps = [float(gap) for gap in args.gaps.split(",")]
    setup_django(temp_root("idle") / "workspace", MODEX_PERSISTENCE_BACKEND="sqlite", MODEX_TASKS_BACKEND="dummy")
    from django.contrib.auth import get_user_model

    from agents.chat import service as chat
    from agents.models import Conversation
    from agents.runtime.events import ContentChunk, ContextReady
    from memory.threads import run_blocking

    user = get_user_model().objects.create_user(username="idle", password="idle-password-0123456789")
    agent = chat.main_agents()[0]
    runtime = chat.get_runtime()
    sessions = [
        chat.session_of(Conversation.objects.create(owner=user, agent=agent.name))
        for _ in range(args.turns * len(gaps) + 5)
    ]
    history = []
    if args.history:
        from benchmarks.histories import chat_history

        history = chat_history(count=args.history, seed=5, profile="small")
        if history[-1].role != "assistant" or history[-1].tool_calls:  # end on a whole turn
            history = history[: max((i for i, m in enumerate(history) if m.role == "user"), default=0)]
    if history:
        for session in sessions:
            runtime.services.bundle.messages.append(session, history)

    async def turn(session) -> tuple[float, float]:
        started = time.perf_counter()
        ready = first = None
        async for event in runtime.run_turn(agent=agent, user_id=str(user.pk), session=session, text=MESSAGE):
            if isinstance(event, ContextReady) and ready is None:
                ready = time.perf_counter() - started
            elif isinstance(event, ContentChunk) and first is None:
                first = time.perf_counter() - started
        return ready, first

    async def hop() -> float:
        started = time.perf_counter()
        await run_blocking(int)
        return time.perf_counter() - started

    async def measure() -> None:
        left = iter(sessions)
        for _ in range(5):  # warm-up
            await turn(next(left))
        print(f"{args.turns} turns per gap on conversations of {len(history)} messages, medians in ms "
              "(offline model, SQLite, one process)")
        print(f"{'gap ms':>8} {'to ContextReady':>16} {'to first content':>17} {'store round trip':>17}")
        for gap in gaps:
            ready, first, hops = [], [], []
            for _ in range(args.turns):
                await asyncio.sleep(gap)
                r, f = await turn(next(left))
                ready.append(r)
                first.append(f)
            for _ in range(args.turns):
                await asyncio.sleep(gap)
                hops.append(await hop())
            print(f"{gap * 1e3:8.1f} {statistics.median(ready) * 1e3:16.2f} {statistics.median(first) * 1e3:17.2f} "
                  f"{statistics.median(hops) * 1e3:17.3f}")

    asyncio.run(measure())


if __name__ == "__main__":
    main()
