#!/usr/bin/env bash
# Create .venv-bench (Python 3.12) with the app's pinned stack plus the benchmark peers.
# Kept apart from .venv on purpose: the peers (langchain-core, openai-agents, langgraph) must
# never leak into the app's environment. Both files are resolved in one pip run, so a peer pin
# that clashes with an app pin stops the install. Re-runs pip only when a file is newer than
# the install stamp.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-bench
APP_REQS=requirements.txt
BENCH_REQS=benchmarks/requirements.txt

source scripts/find_python.sh

if [ ! -x "$VENV/bin/python" ]; then
  if ! PY="$(find_python)"; then
    echo "make bench needs Python 3.12 or newer. Install it (e.g. 'pyenv install 3.12') and retry." >&2
    exit 1
  fi
  echo "Creating $VENV with $("$PY" --version)"
  "$PY" -m venv "$VENV"
fi

STAMP="$VENV/.installed-bench"
if [ ! -f "$STAMP" ] || [ "$APP_REQS" -nt "$STAMP" ] || [ "$BENCH_REQS" -nt "$STAMP" ]; then
  echo "Installing $APP_REQS + $BENCH_REQS into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$APP_REQS" -r "$BENCH_REQS"
  "$VENV/bin/python" -m pip check --disable-pip-version-check
  touch "$STAMP"
fi
