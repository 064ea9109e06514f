"""Run every benchmark workload and write benchmarks/results/latest.md and latest.json.

    make bench                       # creates .venv-bench (app pins + benchmarks/requirements.txt), runs all
    BENCH_QUICK=1 make bench         # smaller sizes, a few minutes
    .venv-bench/bin/python -m benchmarks.run --only trim,store

Each workload runs in its own process (``python -m benchmarks.workloads.<name>``): fresh caches,
its own temporary workspace and Django settings, and a crash or a failed check in one does not
take the others down. A workload whose own correctness check fails reports a FAILED row instead
of numbers; the run then exits 1. Progress goes to stderr; the table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, Row, quick_mode
from benchmarks.report import environment, load_average, markdown

RESULTS = Path(__file__).resolve().parent / "results"

#: name -> title, in run order.
WORKLOADS = {
    "trim": "1. Trim/boundary",
    "store": "2. Store append + tail read",
    "growth": "3. Long-thread growth",
    "assembly": "4. Per-turn assembly",
    "cleanup": "5. Cleanup cost",
    "streaming": "6. Streaming relay",
    "real_model": "7. Real small model",
    "recall": "8. Archive recall",
}
#: Workloads that talk to a real model need longer than the rest (seconds; skipped quickly
#: when there is no llama-server).
TIMEOUTS = {"real_model": 2400.0, "recall": 1800.0}


def run_workload(name: str, *, timeout: float, scratch: Path) -> dict:
    out = scratch / f"{name}.json"
    started = time.perf_counter()
    print(f"== {WORKLOADS[name]} ({name})", file=sys.stderr, flush=True)
    try:
        process = subprocess.run(
            [sys.executable, "-m", f"benchmarks.workloads.{name}", "--out", str(out)],
            cwd=REPO,
            env={**os.environ, "TMPDIR": str(scratch)},  # whatever a workload leaves behind goes with scratch
            timeout=timeout,
        )
        code = process.returncode
    except subprocess.TimeoutExpired:
        code = None
    seconds = time.perf_counter() - started
    if out.exists():
        data = json.loads(out.read_text())
        for row in data["rows"]:
            row["workload"] = WORKLOADS[name] if row["workload"] == name else row["workload"]
    else:
        reason = f"timed out after {timeout:.0f} s" if code is None else f"crashed (exit {code}; traceback above)"
        failed = Row(WORKLOADS[name], "(workload did not finish)", "", None, "", None).failed(reason)
        data = {"name": name, "rows": [failed.to_json()], "durability": {}, "notes": []}
    data["seconds"] = seconds
    print(f"   {name}: {seconds:.0f} s", file=sys.stderr, flush=True)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated workload names (default: all)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where latest.md/latest.json go")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",")] if args.only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    quick = quick_mode()
    timeout = 300.0 if quick else 600.0
    started = time.perf_counter()
    load_at_start = load_average()
    with tempfile.TemporaryDirectory(prefix="modex-bench-run-") as scratch:
        workloads = [run_workload(name, timeout=TIMEOUTS.get(name, timeout), scratch=Path(scratch)) for name in names]
    elapsed = time.perf_counter() - started
    failed = any(row["status"] != "ok" for w in workloads for row in w["rows"])
    env = environment(quick=quick, load_at_start=load_at_start)
    args.results.mkdir(parents=True, exist_ok=True)
    report = markdown(env=env, workloads=workloads, elapsed=elapsed, failed=failed)
    (args.results / "latest.md").write_text(report)
    (args.results / "latest.json").write_text(
        json.dumps({"environment": env, "elapsed_s": elapsed, "failed": failed, "workloads": workloads}, indent=2)
    )
    print(report)
    print(f"\nwrote {args.results / 'latest.md'} and latest.json in {elapsed / 60:.1f} min", file=sys.stderr)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
