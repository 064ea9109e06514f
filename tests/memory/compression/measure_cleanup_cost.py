"""Measure what one cleanup costs as history grows (prints numbers; asserts nothing).

    .venv/bin/python -m tests.memory.compression.measure_cleanup_cost \\
        [--backend file|sqlite|both] [--sizes 10000,100000]

Two shapes per size N:

* history: N messages already compacted by earlier cleanups (a catalog of N entries in many
  files), then one more cleanup evicting about 200 messages. Its cost must not depend on N.
* live: one session of N live messages (never cleaned), then a cleanup evicting all but the
  kept tail. Its cost grows with N because all N are evicted (catalog, archive, summary input).

The summarizer is a trivial instant function. Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from memory.messages import Message

ROUNDS = 7


def _setup_django(workspace: Path) -> None:
    os.environ["MODEX_WORKSPACE"] = str(workspace)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings_test")
    os.environ.pop("DATABASE_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _messages(start: int, count: int) -> list[Message]:
    out = []
    for i in range(start, start + count):
        role = "user" if i % 2 == 0 else "assistant"
        reasoning = f"thinking about step {i}" if role == "assistant" else None
        text = f"message {i}: some ordinary text of a chat turn"
        out.append(Message(role=role, content=text, reasoning_content=reasoning, tokens=20))
    return out


def _summarizer(messages: list[dict[str, str]]) -> str:
    from memory.compression.summary import SECTIONS

    return "\n".join(f"## {name}\n- noted" for name in SECTIONS)


def _cleanup(bundle, session, catalog, config):  # type: ignore[no-untyped-def]
    from memory.compression.cleanup import run_cleanup
    from memory.hooks import MemoryHookDispatcher
    from memory.scopes import UserScope

    started = time.perf_counter()
    result = run_cleanup(
        bundle=bundle,
        session=session,
        config=config,
        summarizer=_summarizer,
        catalog=catalog,
        hooks=MemoryHookDispatcher(),
        archive_scope=UserScope("bench"),
    )
    return time.perf_counter() - started, result


def measure(backend: str, sizes: list[int], root: Path) -> None:
    from memory.compression.pruned import PrunedCatalog
    from memory.config import MemoryConfig
    from memory.scopes import SessionScope
    from memory.stores.registry import open_bundle

    bundle = open_bundle(backend, root=root / "store")
    catalog = PrunedCatalog(root / "pruned")
    # 200 messages of 20 tokens between cleanups; keep 100 of them.
    config = MemoryConfig(context_window=16384, compression_threshold=6000, keep_tokens=2000, archive_enabled=True)
    no_archive = MemoryConfig(context_window=16384, compression_threshold=6000, keep_tokens=2000)
    for size in sizes:
        session = SessionScope(f"hist{size}")
        step = 1000
        for start in range(0, size, step):
            bundle.messages.append(session, _messages(start, step))
            _cleanup(bundle, session, catalog, no_archive)
        # Several cleanups of ~300 messages each; the median smooths out fsync noise.
        timings = []
        for k in range(ROUNDS):
            bundle.messages.append(session, _messages(size + k * 300, 300))
            elapsed, result = _cleanup(bundle, session, catalog, config)
            timings.append(elapsed)
        print(
            f"{backend:6} history N={size:>7}: one cleanup evicting {result.evicted_count:>4} messages "
            f"took {statistics.median(timings) * 1000:8.1f} ms median of {ROUNDS} "
            f"(min {min(timings) * 1000:.1f}, max {max(timings) * 1000:.1f}; catalog {catalog.count(session)} entries, "
            f"{len(catalog.files(session))} files)"
        )
    for size in sizes:
        session = SessionScope(f"live{size}")
        for start in range(0, size, 5000):
            bundle.messages.append(session, _messages(start, min(5000, size - start)))
        elapsed, result = _cleanup(bundle, session, catalog, config)
        print(
            f"{backend:6} live    N={size:>7}: one cleanup evicting {result.evicted_count:>6} messages "
            f"took {elapsed * 1000:8.1f} ms "
            f"({elapsed / max(1, result.evicted_count) * 1e6:.0f} µs per evicted message)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="both", choices=["file", "sqlite", "both"])
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="modex-cleanup-cost-") as tmp:
        root = Path(tmp)
        backends = ["file", "sqlite"] if args.backend == "both" else [args.backend]
        if "sqlite" in backends:
            _setup_django(root / "workspace")
        for backend in backends:
            measure(backend, sizes, root / backend)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
