"""Profile one turn's context assembly (the set-up of workloads/assembly.py) with cProfile.

    .venv/bin/python -m benchmarks.profile_assembly [--backend sqlite|file] [--size 1000] [--top 25]

Builds the same agent state as the assembly workload (core memory, archive documents, a
cleaned-up session of ``--size`` live messages), warms up, then profiles ``--calls`` assemblies
and prints the top functions by cumulative and by own time. Nothing here is a benchmark figure:
it says where the time goes (the un-profiled median it prints first is only a guide).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

from benchmarks.common import setup_django, temp_root
from benchmarks.histories import chat_history
from benchmarks.workloads import assembly as workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "file"), default="sqlite")
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    root = temp_root("profile")
    setup_django(root / "workspace")
    from memory.assembly.assembler import ContextAssembler, default_pipeline
    from memory.compression.pruned import PrunedCatalog
    from memory.config import MemoryConfig
    from memory.stores.registry import open_bundle
    from memory.tokens import _counter as text_cache

    pool = chat_history(count=args.size + workload.PRUNED_PART, seed=43, profile="small")
    bundle = open_bundle(args.backend, root=root / f"memory-{args.backend}")
    catalog = PrunedCatalog(root / f"pruned-{args.backend}")
    config = MemoryConfig(archive_enabled=True, core_enabled=True)
    archive_scope = workload._populate_long_term(bundle, config)
    session, _ = workload._build_session(bundle, catalog, config, archive_scope, args.size, pool, 0)
    assembler = ContextAssembler(stores=bundle, pipeline=default_pipeline(catalog=catalog))

    def assemble():
        return assembler.assemble(
            session=session, config=config, agent=workload.AGENT, user=workload.USER,
            instructions=workload.INSTRUCTIONS, tools=workload.TOOLS, archive_scope=archive_scope,
        )

    for _ in range(3):
        text_cache.clear()
        assemble()
    timed = []
    for _ in range(args.calls):
        text_cache.clear()
        started = time.perf_counter()
        assemble()
        timed.append(time.perf_counter() - started)
    print(f"== {args.backend} N={args.size}: median {statistics.median(timed) * 1e3:.2f} ms per assembly "
          f"(min {min(timed) * 1e3:.2f} ms, {args.calls} calls, no profiler)")
    profiler = cProfile.Profile()
    for _ in range(args.calls):
        text_cache.clear()  # as the workload does before every timed call
        profiler.enable()
        assemble()
        profiler.disable()
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order)
        stats.print_stats(args.top)
        print(f"== {args.backend} N={args.size}, {args.calls} assemblies, sorted by {order}")
        print(out.getvalue())


if __name__ == "__main__":
    main()
