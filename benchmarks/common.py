"""What every workload shares: rows, timing, Django set-up, and the workload entry point.

A workload module defines ``run(*, quick: bool) -> Workload`` and ends with
``if __name__ == "__main__": workload_main(run)``. ``benchmarks.run`` starts each one in its own
process (fresh caches, its own temporary workspace and Django settings) and collects the JSON it
writes. Ratios are always Modex ÷ the peer or limit, both measured in the same process, on the
same data, in the same run.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

LOWER_IS_BETTER = "lower"
HIGHER_IS_BETTER = "higher"
SCALING = "scaling"  # Modex against itself at another size: read against Row.expect, no verdict


class CheckFailed(AssertionError):
    """A workload's own correctness check failed: its numbers must not be reported."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# -- rows ----------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the results table.

    ``modex`` and ``peer`` are numbers in ``unit``; ``ratio`` is modex ÷ peer; ``better`` says
    which direction is good for Modex (``lower``: a cost; ``higher``: a rate or a share;
    ``scaling``: Modex against itself at another size, read against ``expect``).
    A row whose check failed has ``status`` "FAILED: ..." and no numbers in the table.
    """

    workload: str
    metric: str
    unit: str
    modex: float | None
    peer_name: str
    peer: float | None
    better: str = LOWER_IS_BETTER
    show_ratio: bool = True  # False for counts where a quotient means nothing (0 vs 97 broken tails)
    expect: str = ""  # for SCALING rows: what the ratio should be, e.g. "≈1× (flat)"
    status: str = "ok"
    subject: str = "Modex"  # what the row measures, for its reading ("the bare relay 1.3× costlier")
    notes: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if not self.show_ratio or self.modex is None or self.peer in (None, 0):
            return None
        return self.modex / self.peer

    def failed(self, reason: str) -> Row:
        self.status = f"FAILED: {reason}"
        return self

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        return data


@dataclass
class Workload:
    """What one workload reports: its rows, the durability settings it ran with, free notes."""

    name: str
    rows: list[Row] = field(default_factory=list)
    durability: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": [r.to_json() for r in self.rows],
            "durability": self.durability,
            "notes": self.notes,
            "seconds": self.seconds,
        }


# -- timing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median of ``samples`` (warm-up calls are not in them)."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)

    def summary(self) -> dict[str, float | int]:
        return {"median_s": self.median, "mean_s": self.mean, "min_s": self.low, "max_s": self.high, "n": len(self.samples)}


def measure(
    fn: Callable[[], Any],
    *,
    repeat: int,
    warmup: int = 1,
    before: Callable[[], Any] | None = None,
) -> tuple[Timing, Any]:
    """Call ``fn`` ``warmup`` times untimed, then ``repeat`` times timed; return the timing and
    the last result. ``before`` runs untimed ahead of every call (e.g. clearing a cache)."""
    result = None
    for _ in range(warmup):
        if before is not None:
            before()
        result = fn()
    samples = []
    gc.collect()  # once: a collection before every call would cost more than a fast call itself
    for _ in range(repeat):
        if before is not None:
            before()
        started = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - started)
    return Timing(tuple(samples)), result


def per_call(samples: list[float]) -> Timing:
    return Timing(tuple(samples))


def quick_mode() -> bool:
    return os.environ.get("BENCH_QUICK", "").strip().lower() in {"1", "true", "yes", "on"}


# -- Django ------------------------------------------------------------------------------------


def temp_root(prefix: str) -> Path:
    """A fresh temporary directory (on the same disk as the system temp dir), removed at exit."""
    path = Path(tempfile.mkdtemp(prefix=f"modex-bench-{prefix}-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def setup_django(workspace: Path, **extra_env: str) -> None:
    """Configure the real settings (modex_web.settings) over a throwaway workspace and migrate.

    The SQLite database is the workspace's state.db with the app's own connection options
    (WAL, synchronous=NORMAL, busy timeout, IMMEDIATE transactions).
    """
    workspace.mkdir(parents=True, exist_ok=True)
    os.environ["DJANGO_SETTINGS_MODULE"] = "modex_web.settings"
    os.environ["MODEX_WORKSPACE"] = str(workspace)
    os.environ["DJANGO_SECRET_KEY"] = "modex-bench-secret-key-not-for-production-0123456789"
    os.environ.setdefault("MODEX_LOG_LEVEL", "WARNING")
    os.environ.pop("DATABASE_URL", None)
    os.environ.update(extra_env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def sqlite_pragmas_of_django() -> dict[str, str]:
    """journal_mode and synchronous as the app's own default connection reports them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        journal = cursor.fetchone()[0]
        cursor.execute("PRAGMA synchronous")
        sync = cursor.fetchone()[0]
    return {"journal_mode": str(journal), "synchronous": SYNCHRONOUS_NAMES.get(sync, str(sync))}


SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def sqlite_pragmas(conn: Any) -> dict[str, str]:
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": str(journal), "synchronous": SYNCHRONOUS_NAMES.get(sync, str(sync))}


# -- formatting helpers ------------------------------------------------------------------------


_T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"   [{time.perf_counter() - _T0:6.1f} s] {message}", file=sys.stderr, flush=True)


# -- entry point -------------------------------------------------------------------------------


def workload_main(run: Callable[..., Workload]) -> None:
    """Run one workload and write its JSON to ``--out`` (exit 1 if any row failed)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    name = Path(sys.modules["__main__"].__file__ or "workload").stem
    try:
        result = run(quick=quick_mode())
    except CheckFailed as exc:
        # No numbers from a workload whose own check failed: one FAILED row says why.
        traceback.print_exc()
        result = Workload(name, rows=[Row(name, "(check)", "", None, "", None).failed(str(exc))])
    except Exception:
        traceback.print_exc()
        raise SystemExit(2) from None
    result.seconds = time.perf_counter() - started
    args.out.write_text(json.dumps(result.to_json(), indent=2))
    if any(row.status != "ok" for row in result.rows):
        raise SystemExit(1)
