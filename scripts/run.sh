#!/usr/bin/env bash
# Serve Modex for `make run`: the background task workers (manage.py db_worker: Dream Engine
# consolidation, experience review, cleanup ahead of need) beside the development server. The
# workers stop when the server does; Ctrl+C stops them all (each finishes the task it is running
# first). TASK_WORKERS workers (default 2: a cleanup ahead, which the next turn waits on,
# need not wait for a consolidation that is waiting for chat; each worker is a process of its
# own, about 200 MB). With MODEX_TASKS_BACKEND other than "db" no worker is needed and none is
# started.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
export DJANGO_DEBUG="${DJANGO_DEBUG:-true}"

WORKERS="${TASK_WORKERS:-2}"
case "$WORKERS" in
  ''|*[!0-9]*|0) echo "TASK_WORKERS must be a whole number of at least 1, got '$WORKERS'." >&2; exit 2 ;;
esac
worker_pids=()
reaper_pid=""
interrupted=0

stop_worker() {
  [ "${#worker_pids[@]}" -gt 0 ] || return 0
  if [ -n "$reaper_pid" ]; then
    kill -TERM "$reaper_pid" 2>/dev/null || true
    wait "$reaper_pid" 2>/dev/null || true
  fi
  if [ "$interrupted" = 1 ]; then
    # Ctrl+C reached the workers too: give them time to finish their tasks and exit by themselves.
    for _ in $(seq 1 100); do
      running=0
      for pid in "${worker_pids[@]}"; do
        kill -0 "$pid" 2>/dev/null && running=1
      done
      [ "$running" = 1 ] || break
      sleep 0.1
    done
  fi
  for pid in "${worker_pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for pid in "${worker_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  echo "Task workers stopped."
}
trap stop_worker EXIT
trap 'interrupted=1; exit 130' INT TERM

if [ "${MODEX_TASKS_BACKEND:-db}" = "db" ]; then
  # --no-reload: a reloading worker runs in a child process that a signal to this one would
  # orphan. Restart `make run` after changing task code.
  for _ in $(seq 1 "$WORKERS"); do
    "$PY" manage.py db_worker --no-reload --interval 1 &
    worker_pids+=("$!")
  done
  echo "Task workers started (pids ${worker_pids[*]})."
  # The reaper queues again (once) a task whose worker died mid-task (agents/task_reaper.py).
  "$PY" manage.py reap_tasks --every 60 &
  reaper_pid=$!
fi

"$PY" manage.py runserver "$HOST:$PORT"
