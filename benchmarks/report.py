"""The machine the run was on, and the results as markdown (latest.md) and JSON (latest.json)."""

from __future__ import annotations

import math
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.common import HIGHER_IS_BETTER, LOWER_IS_BETTER, REPO

PACKAGES = (
    "Django", "channels", "daphne", "openai", "tiktoken", "langchain-core", "openai-agents", "langgraph",
    "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "websockets", "bm25s", "PyStemmer", "numpy", "wordllama",
)


def _first_line(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip() if ":" in line else line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def _filesystem(path: Path) -> str:
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    except OSError:
        pass
    return f"{kind} ({best or '?'})"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def environment(*, quick: bool, load_at_start: str) -> dict[str, Any]:
    memory_kb = _first_line("/proc/meminfo", "MemTotal")
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    tmp = Path(tempfile.gettempdir())
    return {
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _first_line("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory": memory_kb or "unknown",
        "os": _first_line("/etc/os-release", "PRETTY_NAME") or platform.platform(),
        "kernel": platform.release(),
        "python": sys.version.split()[0] + f" ({sys.executable})",
        "sqlite": sqlite3.sqlite_version,
        "temp_dir": f"{tmp} on {_filesystem(tmp)}",
        "load_average_1_5_15min": f"start {load_at_start}; end {load_average()}",
        "quick": quick,
        "git_head": f"{_commit()} (the working tree may hold uncommitted changes)",
        "packages": versions,
    }


# -- formatting --------------------------------------------------------------------------------


def fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if unit == "tails":
        return f"{value:.0f}"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "×":
        return f"{value:.2f}×"
    if unit in ("frames/s", "deltas/s"):
        return f"{value:,.0f} {unit}"
    if unit == "ms" and value >= 1000:
        return f"{value / 1000:.2f} s"
    if unit == "µs" and value >= 1000:
        return f"{value / 1000:.2f} ms"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    if value >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.3g} {unit}"


def reading(row: dict[str, Any]) -> str:
    ratio = row["ratio"]
    if row["status"] != "ok":
        return ""
    if ratio is None:
        return "" if row["peer"] is not None or row["modex"] is None else "peer not measured"
    better = row["better"]
    if better not in (LOWER_IS_BETTER, HIGHER_IS_BETTER):
        return f"expected {row.get('expect') or '≈1×'}"
    if 0.95 <= ratio <= 1.05:
        return "on par (within 5 %)"
    subject = row.get("subject") or "Modex"
    if better == LOWER_IS_BETTER:
        return f"{subject} {_times(1 / ratio)} cheaper" if ratio < 1 else f"{subject} {_times(ratio)} costlier"
    return f"{subject} {_times(ratio)} higher" if ratio > 1 else f"{subject} {_times(1 / ratio)} lower"


def _times(x: float) -> str:
    return f"{x:,.0f}×" if x >= 100 else f"{x:.1f}×" if x >= 2 else f"{x:.2f}×"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(*, env: dict[str, Any], workloads: list[dict[str, Any]], elapsed: float, failed: bool) -> str:
    rows = [(f"{i}.{j}", row) for i, w in enumerate(workloads, 1) for j, row in enumerate(w["rows"], 1)]
    lines = [
        "# Modex benchmarks",
        "",
        f"Run {env['date_utc']} on {env['cpu_count']} CPUs ({env['cpu']}), {env['os']}, Python {env['python'].split()[0]}, "
        f"SQLite {env['sqlite']}; git HEAD {env['git_head'].split()[0]}{' · BENCH_QUICK (smaller sizes)' if env['quick'] else ''}. "
        f"The run took {elapsed / 60:.1f} min (venv set-up not included). "
        f"{'**Some checks FAILED.**' if failed else 'Every check passed.'}",
        "",
        "Ratio = Modex ÷ peer (or limit), both measured in this run on the same data. For costs lower is better,",
        "for rates and shares higher is better; \"expected\" rows compare Modex with itself at another size.",
        "Other processes on the machine are not controlled: see the load averages under Environment.",
        "",
        "| # | workload | metric | Modex | peer or limit | peer value | ratio | reading | check |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, row in rows:
        ok = row["status"] == "ok"
        modex = fmt(row["modex"], row["unit"]) if ok else "—"
        peer = fmt(row["peer"], row["unit"]) if ok else "—"
        ratio = f"{row['ratio']:.3g}×" if ok and row["ratio"] is not None else "—"
        lines.append(
            f"| {number} | {_cell(row['workload'])} | {_cell(row['metric'])} | {modex} | {_cell(row['peer_name'])} | "
            f"{peer} | {ratio} | {reading(row)} | {'ok' if ok else _cell(row['status'])} |"
        )
    lines += ["", "## Notes per row", ""]
    for number, row in rows:
        if row["notes"]:
            lines.append(f"- **{number}** {row['notes']}")
    notes = [n for w in workloads for n in w.get("notes", [])]
    if notes:
        lines += ["", "## Workload notes", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Durability settings", "", "| workload | store | setting |", "| --- | --- | --- |"]
    for w in workloads:
        for store, setting in w.get("durability", {}).items():
            lines.append(f"| {w['name']} | {_cell(store)} | {_cell(setting)} |")
    lines += ["", "## Environment", "", "| | |", "| --- | --- |"]
    for key, value in env.items():
        if key != "packages":
            lines.append(f"| {key} | {_cell(str(value))} |")
    lines.append("| packages | " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()) + " |")
    lines += ["", "Per-workload seconds: " + ", ".join(f"{w['name']} {w.get('seconds', 0):.0f} s" for w in workloads), ""]
    return "\n".join(lines)
