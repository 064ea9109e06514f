"""Cleanup cost: one cleanup at 10k and 100k messages of history, on both backends.

(Supersedes ``tests/memory/compression/measure_cleanup_cost.py``, same two shapes, now with
checks and ratios.) The summarizer is an instant function: this measures the pipeline (boundary,
summary input, catalog, archive, commit), not a model. Config: window 16,384, threshold 6,000,
keep 2,000 tokens, archive on.

* history: a session whose N earlier messages were already compacted by earlier cleanups (a
  catalog of N entries in ~N/1000 files), then 300 more messages and one cleanup evicting about
  that many. Its cost must not depend on N: the ratio 100k ÷ 10k should be about 1.
* live: a session of N live messages, never cleaned, then one cleanup evicting all but the kept
  tail. Its cost scales with what it evicts (catalog, archive, summary input of N messages).

Checks: every timed cleanup commits and evicts something; afterwards the live session is a
legal transcript, and every message ever appended is exactly once in the session or the
pruned catalog (seqs compared), with the archive holding one document per cleanup.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.common import (
    SCALING,
    Row,
    Workload,
    check,
    log,
    setup_django,
    sqlite_pragmas_of_django,
    temp_root,
    workload_main,
)
from benchmarks.histories import chat_history

WORKLOAD = "5. Cleanup cost"
STEP = 1_000
ROUND = 300


def _summarizer(messages):
    from memory.compression.summary_input import SECTIONS

    return "\n".join(f"## {name}\n- noted" for name in SECTIONS)


def _unit_end(pool, index: int) -> int:
    """The first index >= ``index`` that starts a unit (a slice ending there closes its chains)."""
    while index < len(pool) and pool[index].role == "tool":
        index += 1
    return index


class _Bench:
    def __init__(self, backend: str, root: Path, pool) -> None:
        from memory.compression.pruned import PrunedCatalog
        from memory.config import MemoryConfig
        from memory.scopes import UserScope
        from memory.stores.registry import open_bundle

        self.backend = backend
        self.bundle = open_bundle(backend, root=root / f"store-{backend}")
        self.catalog = PrunedCatalog(root / f"pruned-{backend}")
        self.archive_scope = UserScope(f"bench-{backend}")
        self.config = MemoryConfig(context_window=16384, compression_threshold=6000, keep_tokens=2000, archive_enabled=True)
        self.no_archive = MemoryConfig(context_window=16384, compression_threshold=6000, keep_tokens=2000)
        self.pool = pool
        self.used = 0
        self.appended: dict[str, int] = {}
        self.archived = 0  # cleanups that wrote an archive document

    def append(self, session, count: int) -> None:
        end = _unit_end(self.pool, self.used + count)
        check(end <= len(self.pool), "the message pool is too small")
        batch = self.pool[self.used : end]
        for start in range(0, len(batch), 5000):
            self.bundle.messages.append(session, batch[start : start + 5000])
        self.used = end
        self.appended[session.id] = self.appended.get(session.id, 0) + len(batch)

    def cleanup(self, session, *, archive: bool = True):
        from memory.compression.cleanup import run_cleanup
        from memory.hooks import MemoryHookDispatcher

        started = time.perf_counter()
        result = run_cleanup(
            bundle=self.bundle,
            session=session,
            config=self.config if archive else self.no_archive,
            summarizer=_summarizer,
            catalog=self.catalog,
            hooks=MemoryHookDispatcher(),
            archive_scope=self.archive_scope if archive else None,
        )
        return time.perf_counter() - started, result

    def timed(self, session):
        from memory.compression.cleanup import CleanupStatus

        elapsed, result = self.cleanup(session)
        check(result.status == CleanupStatus.COMMITTED, f"{self.backend}: cleanup did not commit ({result.reason})")
        check(result.evicted_count > 0, f"{self.backend}: cleanup evicted nothing")
        check(result.archive_document_id is not None, f"{self.backend}: cleanup wrote no archive document")
        self.archived += 1
        return elapsed, result

    def verify_archive(self) -> None:
        documents = self.bundle.archive.list(self.archive_scope)
        check(
            len(documents) == self.archived,
            f"{self.backend}: {len(documents)} archive documents for {self.archived} cleanups",
        )

    def verify(self, session) -> None:
        from memory.transcript import is_legal

        live = self.bundle.messages.read(session)
        check(is_legal(live), f"{self.backend}: the session is not legal after cleanup")
        live_seqs = [m.seq for m in live if not m.is_compact_summary]
        catalog_seqs = [e.seq for e in self.catalog.entries(session)]
        total = self.appended[session.id]
        check(len(catalog_seqs) == len(set(catalog_seqs)), f"{self.backend}: a message is catalogued twice")
        check(not set(live_seqs) & set(catalog_seqs), f"{self.backend}: a message is both live and catalogued")
        check(sorted(live_seqs + catalog_seqs) == list(range(1, total + 1)), f"{self.backend}: a message was lost")


def _history_shape(bench: _Bench, size: int, rounds: int) -> list[tuple[float, int]]:
    from memory.scopes import SessionScope

    session = SessionScope(f"hist{size}")
    while bench.appended.get(session.id, 0) < size:
        bench.append(session, STEP)
        bench.cleanup(session, archive=False)
    samples = []
    for _ in range(rounds):
        bench.append(session, ROUND)
        elapsed, result = bench.timed(session)
        samples.append((elapsed, result.evicted_count))
    bench.verify(session)
    log(
        f"cleanup: {bench.backend} history N={size}: median {statistics.median(s for s, _ in samples) * 1e3:.0f} ms, "
        f"catalog {bench.catalog.count(session)} entries in {len(bench.catalog.files(session))} files"
    )
    return samples


def _live_shape(bench: _Bench, size: int, rounds: int) -> list[tuple[float, int]]:
    from memory.scopes import SessionScope

    samples = []
    for r in range(rounds):
        session = SessionScope(f"live{size}-{r}")
        bench.append(session, size)
        elapsed, result = bench.timed(session)
        bench.verify(session)
        samples.append((elapsed, result.evicted_count))
    log(f"cleanup: {bench.backend} live N={size}: median {statistics.median(s for s, _ in samples) * 1e3:.0f} ms")
    return samples


def run(*, quick: bool) -> Workload:
    small, large = (2_000, 20_000) if quick else (10_000, 100_000)
    rounds = 3 if quick else 7
    root = temp_root("cleanup")
    setup_django(root / "workspace")
    result = Workload("cleanup")
    result.durability["Modex sqlite"] = "WAL, synchronous={synchronous} (app settings)".format(**sqlite_pragmas_of_django())
    result.durability["Modex file"] = "fsync per write; pruned catalog files: temp file + fsync + rename + dir fsync"
    per_backend = small + large + 2 * (rounds + 1) * ROUND + 3 * small + large + 10_000
    pool = chat_history(count=per_backend, seed=51, profile="small")
    for backend in ("sqlite", "file"):
        bench = _Bench(backend, root, pool)
        hist = {n: _history_shape(bench, n, rounds) for n in (small, large)}
        live = {small: _live_shape(bench, small, 3), large: _live_shape(bench, large, 1)}
        bench.verify_archive()

        def med(samples):
            return statistics.median(s for s, _ in samples)

        def evicted(samples):
            return statistics.median(e for _, e in samples)

        result.rows.append(
            Row(WORKLOAD, f"one cleanup after {large:,} compacted messages · Modex {backend}", "ms", med(hist[large]) * 1e3,
                f"the same cleanup after {small:,}", med(hist[small]) * 1e3,
                better=SCALING, expect="≈1× (flat in the history)",
                notes=f"evicts ~{evicted(hist[large]):.0f} messages each; median of {rounds}",
                detail={"modex_s": [s for s, _ in hist[large]], "peer_s": [s for s, _ in hist[small]]}))
        result.rows.append(
            Row(WORKLOAD, f"one cleanup evicting {large:,} live messages · Modex {backend}", "ms", med(live[large]) * 1e3,
                f"one cleanup evicting {small:,}", med(live[small]) * 1e3, better=SCALING,
                expect=f"≈{large // small}× (linear in the evicted part)",
                notes=f"scales with the evicted part ({large // small}× more evicted); "
                f"{med(live[large]) / evicted(live[large]) * 1e6:.0f} vs {med(live[small]) / evicted(live[small]) * 1e6:.0f} "
                f"µs per evicted message; 1 run at {large:,}, median of 3 at {small:,}",
                detail={"modex_s": [s for s, _ in live[large]], "peer_s": [s for s, _ in live[small]]}))
        result.rows.append(
            Row(WORKLOAD, f"cleanup after {large:,} compacted vs evicting {large:,} at once · Modex {backend}", "ms",
                med(hist[large]) * 1e3, f"one cleanup evicting {large:,} live", med(live[large]) * 1e3, better=SCALING,
                expect="≪1×", notes="the cost follows the evicted part, not the history behind it"))
    return result


if __name__ == "__main__":
    workload_main(run)
