#!/usr/bin/env bash
# Serve Modex for `make run`: the background task worker (manage.py db_worker: Dream Engine
# consolidation, experience review) beside the development server. The worker stops when the
# server does; Ctrl+C stops both (the worker finishes the task it is running first).
# With MODEX_TASKS_BACKEND other than "db" no worker is needed and none is started.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
export DJANGO_DEBUG="${DJANGO_DEBUG:-true}"

worker_pid=""
reaper_pid=""
interrupted=0

stop_worker() {
  [ -n "$worker_pid" ] || return 0
  if [ -n "$reaper_pid" ]; then
    kill -TERM "$reaper_pid" 2>/dev/null || true
    wait "$reaper_pid" 2>/dev/null || true
  fi
  if [ "$interrupted" = 1 ]; then
    # Ctrl+C reached the worker too: give it time to finish its task and exit by itself.
    for _ in $(seq 1 100); do
      kill -0 "$worker_pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
  fi
  wait "$worker_pid" 2>/dev/null || true
  echo "Task worker stopped."
}
trap stop_worker EXIT
trap 'interrupted=1; exit 130' INT TERM

if [ "${MODEX_TASKS_BACKEND:-db}" = "db" ]; then
  # --no-reload: a reloading worker runs in a child process that a signal to this one would
  # orphan. Restart `make run` after changing task code.
  "$PY" manage.py db_worker --no-reload --interval 1 &
  worker_pid=$!
  echo "Task worker started (pid $worker_pid)."
  # The reaper queues again (once) a task whose worker died mid-task (agents/task_reaper.py).
  "$PY" manage.py reap_tasks --every 60 &
  reaper_pid=$!
fi

"$PY" manage.py runserver "$HOST:$PORT"
